//! Issue #20, served runs as evidence, against a crafted OpenAI-style server written here (std
//! TcpListener on 127.0.0.1; fast, beside the real `llama-server` soaks of serve_soak.rs):
//! `verify` of a served run and what it names when the folder was tampered with, the run
//! folder as one transaction (a kill at each step leaves a folder `verify` calls incomplete and
//! `--resume` finishes with the classes of a run never interrupted), and a hostile endpoint
//! (huge, non-UTF-8, mistyped or deeply nested answers, path-like preset names, a redirect, a
//! server that never answers): a clear error naming the URL, never a hang, nothing written
//! outside the run folder.

use crate::{code, pinforge_cmd, stderr, stdout};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the fake answers to one request: raw response bytes, or nothing ever.
/// A handler that writes its response to the connection itself.
pub(crate) type Writer = Box<dyn FnOnce(&mut dyn Write) + Send>;

pub(crate) enum Reply {
    Raw(Vec<u8>),
    Hang,
    /// The handler writes the response itself (a huge or slow one), to the open connection.
    Stream(Writer),
}

pub(crate) fn http(status: u16, extra: &str, body: &[u8]) -> Reply {
    let mut r = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    Reply::Raw(r)
}

pub(crate) fn json_reply(v: serde_json::Value) -> Reply {
    http(200, "", v.to_string().as_bytes())
}

pub(crate) type Handler = dyn Fn(&str, &str, &[u8]) -> Reply + Send + Sync;

/// A server on 127.0.0.1 answering every request with `handler(method, path, body)`, each
/// connection in its own thread; stopped (and its port closed) on drop.
pub(crate) struct Fake {
    pub(crate) url: String,
    stop: Arc<AtomicBool>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl Fake {
    pub(crate) fn start(handler: Arc<Handler>) -> Fake {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.set_nonblocking(true).expect("nonblocking");
        let url = format!("http://{}", l.local_addr().expect("addr"));
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let accept = std::thread::spawn(move || {
            while !stop2.load(Ordering::SeqCst) {
                match l.accept() {
                    Ok((s, _)) => {
                        let (h, st) = (handler.clone(), stop2.clone());
                        std::thread::spawn(move || serve_one(s, &*h, &st));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Fake {
            url,
            stop,
            accept: Some(accept),
        }
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
    }
}

fn serve_one(mut s: TcpStream, h: &Handler, stop: &AtomicBool) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let mut first = head.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    match h(method, path, &buf[head_end..head_end + len]) {
        Reply::Raw(b) => {
            let _ = s.write_all(&b);
        }
        Reply::Stream(f) => f(&mut s),
        Reply::Hang => {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// A well-behaved fake llama-server: one model, answers by the prompt (so a row's class is a
/// function of the row): one prompt in five dies like a child whose proxy lost it (HTTP 500
/// `Failed to read connection`), and the request after such a death finds the child not back
/// (`Could not establish connection`: a follow-on); an odd prompt length stops at the budget.
fn good_server() -> Fake {
    let dead = Arc::new(AtomicBool::new(false));
    let requests = Arc::new(AtomicU64::new(0));
    Fake::start(Arc::new(move |method, path, body| {
        match (method, path.split('?').next().unwrap_or("")) {
            ("GET", "/health") => json_reply(serde_json::json!({"status": "ok"})),
            ("GET", "/models") => json_reply(serde_json::json!({
                "data": [{"id": "fake-a", "status": {"value": "loaded"}}]
            })),
            ("GET", "/props") => json_reply(serde_json::json!({
                "build_info": "b1-fake",
                "default_generation_settings": {"n_ctx": 256}
            })),
            ("POST", "/v1/chat/completions") => {
                requests.fetch_add(1, Ordering::SeqCst);
                let req: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
                let prompt = req["messages"][0]["content"].as_str().unwrap_or("");
                let max = req["max_tokens"].as_u64().unwrap_or(8);
                if dead.swap(false, Ordering::SeqCst) {
                    return http(
                        500,
                        "",
                        br#"{"error":{"message":"proxy error: Could not establish connection"}}"#,
                    );
                }
                let h = prompt
                    .bytes()
                    .fold(7u64, |a, b| a.wrapping_mul(31).wrapping_add(b as u64));
                if h % 5 == 0 {
                    dead.store(true, Ordering::SeqCst);
                    return http(
                        500,
                        "",
                        br#"{"error":{"message":"proxy error: Failed to read connection"}}"#,
                    );
                }
                let (finish, content, n) = if prompt.len() % 2 == 1 {
                    ("length", "{\"answer\":\"".to_string(), max)
                } else {
                    (
                        "stop",
                        format!("{{\"answer\":\"{}\",\"n\":1}}", prompt.len()),
                        5,
                    )
                };
                json_reply(serde_json::json!({
                    "choices": [{"finish_reason": finish, "message": {"content": content}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": n},
                    "timings": {"predicted_ms": 1.0}
                }))
            }
            _ => http(404, "", b"{}"),
        }
    }))
}

/// A workspace for served runs, and the files of the temp root before a run (to show that
/// nothing was written outside the run folder).
pub(crate) struct Ws {
    _dir: tempfile::TempDir,
    root: PathBuf,
    pub(crate) ws: PathBuf,
}

pub(crate) fn ws() -> Ws {
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path().to_path_buf();
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).expect("ws");
    Ws {
        _dir: dir,
        root,
        ws,
    }
}

fn files_under(p: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![p.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let ft = e.file_type().expect("type");
            if ft.is_dir() {
                todo.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

impl Ws {
    pub(crate) fn endpoint(
        &self,
        url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> std::process::Output {
        let mut c = pinforge_cmd(&self.ws);
        c.args([
            "validate",
            "--endpoint",
            url,
            "--rows",
            "12",
            "--budget",
            "8",
            "--json",
        ])
        .args(extra)
        .env("PINFORGE_ENDPOINT_API_KEY", "");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().expect("run pinforge")
    }

    /// The one run folder under validate/.
    pub(crate) fn run_dir(&self) -> PathBuf {
        let runs: Vec<PathBuf> = std::fs::read_dir(self.ws.join("validate"))
            .expect("validate/")
            .flatten()
            .map(|e| e.path())
            .collect();
        assert_eq!(runs.len(), 1, "{runs:?}");
        runs[0].clone()
    }

    fn verify(&self, dir: &Path) -> (i32, serde_json::Value, String) {
        let o = pinforge_cmd(&self.ws)
            .args(["verify", dir.to_str().expect("utf8"), "--json"])
            .output()
            .expect("verify");
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        (code(&o), j, stderr(&o))
    }
}

/// The classes of every row, per arm and row (timings aside).
fn classes(dir: &Path) -> Vec<(String, u64, String, Option<u64>)> {
    std::fs::read_to_string(dir.join("serve-rows.jsonl"))
        .expect("rows")
        .lines()
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).expect("row");
            (
                r["arm"].as_str().expect("arm").to_string(),
                r["row"].as_u64().expect("row"),
                r["class"].as_str().expect("class").to_string(),
                r["follow_on"].as_u64(),
            )
        })
        .collect()
}

fn named(j: &serde_json::Value, file: &str) -> bool {
    j["mismatches"].as_array().is_some_and(|m| {
        m.iter()
            .any(|x| x["path"].as_str().is_some_and(|p| p.ends_with(file)))
    })
}

/// A copy of a run folder to tamper with.
fn copy_run(dir: &Path, to: &Path) -> PathBuf {
    let d = to.join(dir.file_name().expect("name"));
    std::fs::create_dir_all(&d).expect("mkdir");
    for e in std::fs::read_dir(dir).expect("ls").flatten() {
        std::fs::copy(e.path(), d.join(e.file_name())).expect("copy");
    }
    d
}

fn rehash_evidence(d: &Path, file: &str) {
    let p = d.join("serve-evidence.json");
    let mut ev: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).expect("ev")).expect("json");
    ev["files"][file] =
        serde_json::Value::String(sha2_hex::of(&std::fs::read(d.join(file)).expect("read")));
    std::fs::write(&p, serde_json::to_string_pretty(&ev).expect("json")).expect("write");
}

/// sha256 through the system's `sha256sum` (the tests' other hashes come from pinforge itself).
mod sha2_hex {
    pub(super) fn of(bytes: &[u8]) -> String {
        use std::io::Write;
        let mut c = std::process::Command::new("sha256sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sha256sum");
        c.stdin
            .take()
            .expect("stdin")
            .write_all(bytes)
            .expect("write");
        let o = c.wait_with_output().expect("sha256sum");
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .next()
            .expect("hex")
            .to_string()
    }
}

#[test]
fn a_served_run_verifies_and_each_change_to_its_folder_is_named() {
    let w = ws();
    let fake = good_server();
    let o = w.endpoint(&fake.url, &[], &[]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", stderr(&o)));
    crate::schemas::validate(&j);
    let a = &j["arms"][0];
    assert_eq!(a["rows"], 12, "{j}");
    assert!(
        a["counts"]["crash"].as_u64() > Some(0),
        "the fake's deaths: {a}"
    );
    assert_eq!(
        a["counts"]["follow-on"], a["counts"]["crash"],
        "one follow-on per death: {a}"
    );
    let dir = w.run_dir();
    let (c, v, e) = w.verify(&dir);
    crate::schemas::validate(&v);
    assert_eq!(
        (c, &v["ok"]),
        (0, &serde_json::Value::Bool(true)),
        "{v} {e}"
    );
    let checked = v["checked"].as_array().expect("checked");
    assert!(
        checked.iter().any(|x| x
            .as_str()
            .is_some_and(|p| p.ends_with("serve-arm-endpoint.json"))),
        "{v}"
    );
    let scratch = tempfile::tempdir().expect("scratch");
    let mut n = 0;
    let mut case = |what: &str, file: &str, tamper: &dyn Fn(&Path)| {
        n += 1;
        let d = copy_run(&dir, &scratch.path().join(n.to_string()));
        tamper(&d);
        let t0 = Instant::now();
        let (c, v, e) = w.verify(&d);
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{what}: verify hung"
        );
        assert_eq!(c, 1, "{what}: {v} {e}");
        assert!(named(&v, file), "{what} names {file}: {v}");
        crate::schemas::validate(&v);
    };
    case("a changed row", "serve-rows.jsonl", &|d| {
        let p = d.join("serve-rows.jsonl");
        let t = std::fs::read_to_string(&p).expect("rows").replacen(
            "\"preset\":\"fake-a\"",
            "\"preset\":\"fake-b\"",
            1,
        );
        std::fs::write(&p, t).expect("write");
    });
    case("a changed arm record", "serve-arm-endpoint.json", &|d| {
        let p = d.join("serve-arm-endpoint.json");
        let t = std::fs::read_to_string(&p)
            .expect("rec")
            .replace("b1-fake", "b2-fake");
        std::fs::write(&p, t).expect("write");
    });
    case("a deleted file", "prompts.jsonl", &|d| {
        std::fs::remove_file(d.join("prompts.jsonl")).expect("rm");
    });
    case("an added file", "extra.txt", &|d| {
        std::fs::write(d.join("extra.txt"), b"x").expect("add");
    });
    case(
        "a summary whose counts disagree with the rows",
        "serve-summary.json",
        &|d| {
            let p = d.join("serve-summary.json");
            let mut s: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&p).expect("s")).expect("json");
            let c = s["arms"][0]["counts"]["crash"].as_u64().expect("crash");
            s["arms"][0]["counts"]["crash"] = (c + 1).into();
            std::fs::write(&p, serde_json::to_string_pretty(&s).expect("json")).expect("write");
            rehash_evidence(d, "serve-summary.json");
        },
    );
    case(
        "a row whose class its facts do not give, re-hashed",
        "serve-rows.jsonl",
        &|d| {
            let p = d.join("serve-rows.jsonl");
            let t = std::fs::read_to_string(&p).expect("rows").replacen(
                "\"class\":\"follow-on\"",
                "\"class\":\"crash\"",
                1,
            );
            std::fs::write(&p, t).expect("write");
            rehash_evidence(d, "serve-rows.jsonl");
        },
    );
    // Fewer rows than the run asked for, everything else consistent and re-hashed (as a run
    // cut short and its summary recomputed would be): verify names the rows file.
    case(
        "an arm with fewer rows than its settings ask for",
        "serve-rows.jsonl",
        &|d| {
            let p = d.join("settings.json");
            let mut s: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&p).expect("s")).expect("json");
            assert_eq!(s["rows"], 12, "{s}");
            s["rows"] = 13.into();
            std::fs::write(&p, serde_json::to_string(&s).expect("json")).expect("write");
            rehash_evidence(d, "settings.json");
        },
    );
    // Files removed from the folder and from the evidence alike: a run without its rows and
    // summary is no finished run.
    case(
        "the rows and the summary gone, and gone from the evidence",
        "serve-rows.jsonl",
        &|d| {
            for f in ["serve-rows.jsonl", "serve-summary.json"] {
                std::fs::remove_file(d.join(f)).expect("rm");
            }
            let p = d.join("serve-evidence.json");
            let mut ev: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&p).expect("ev")).expect("json");
            let files = ev["files"].as_object_mut().expect("files");
            files.remove("serve-rows.jsonl");
            files.remove("serve-summary.json");
            std::fs::write(&p, serde_json::to_string(&ev).expect("json")).expect("write");
        },
    );
    // The prompts swapped for others and re-hashed: settings.json still names the run's.
    case(
        "other prompts, re-hashed into the evidence",
        "prompts.jsonl",
        &|d| {
            let p = d.join("prompts.jsonl");
            let t = std::fs::read_to_string(&p).expect("prompts");
            std::fs::write(&p, format!("{t}{{\"prompt\":\"one more\"}}\n")).expect("write");
            rehash_evidence(d, "prompts.jsonl");
        },
    );
    case("a symlinked member", "settings.json", &|d| {
        let p = d.join("settings.json");
        std::fs::remove_file(&p).expect("rm");
        std::os::unix::fs::symlink(dir.join("settings.json"), &p).expect("link");
    });
    case("a FIFO member", "prompts.jsonl", &|d| {
        let p = d.join("prompts.jsonl");
        std::fs::remove_file(&p).expect("rm");
        let st = std::process::Command::new("mkfifo")
            .arg(&p)
            .status()
            .expect("mkfifo");
        assert!(st.success());
    });
    // An evidence that names a path out of the folder is refused (exit 2), nothing read there.
    let d = copy_run(&dir, &scratch.path().join("escape"));
    let p = d.join("serve-evidence.json");
    let t = std::fs::read_to_string(&p)
        .expect("ev")
        .replace("\"prompts.jsonl\"", "\"../../prompts.jsonl\"");
    std::fs::write(&p, t).expect("write");
    let (c, _, e) = w.verify(&d);
    assert_eq!(c, 2, "{e}");
    assert!(e.contains("not a file of a served run folder"), "{e}");
}

#[test]
fn a_served_run_killed_at_each_step_is_incomplete_and_resumes_to_the_classes_of_one_never_interrupted(
) {
    // One fake per run (a kill and its resume share one): its state (a child not back yet)
    // belongs to the run.
    let whole = ws();
    let o = whole.endpoint(&good_server().url, &[], &[]);
    assert_eq!(
        code(&o),
        1,
        "the fake's crashes fail the candidate: {}",
        stderr(&o)
    );
    let want = classes(&whole.run_dir());
    for at in [
        "serve:settings",
        "serve:row:endpoint:0",
        "serve:row:endpoint:6",
        "serve:summary",
        "serve:evidence",
    ] {
        let fake = good_server();
        let w = ws();
        let before = files_under(&w.root);
        let o = w.endpoint(&fake.url, &[], &[("PINFORGE_CRASH_AT", at)]);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(o.status.signal(), Some(9), "{at}: {}", stderr(&o));
        let dir = w.run_dir();
        let (c, v, e) = w.verify(&dir);
        assert_eq!(c, 1, "{at}: {v} {e}");
        let why = v["mismatches"][0]["actual"].as_str().unwrap_or("");
        assert!(
            why.contains("no serve-evidence.json: the run did not finish"),
            "{at}: {v}"
        );
        let id = dir
            .file_name()
            .expect("id")
            .to_str()
            .expect("utf8")
            .to_string();
        let o = w.endpoint(&fake.url, &["--resume", &id], &[]);
        assert_eq!(code(&o), 1, "{at}: resumed to the end: {}", stderr(&o));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        crate::schemas::validate(&j);
        assert!(
            j["notes"].as_array().is_some_and(|n| !n.is_empty()),
            "{at}: {j}"
        );
        assert_eq!(
            classes(&dir),
            want,
            "{at}: the classes of a run never interrupted"
        );
        let (c, v, e) = w.verify(&dir);
        assert_eq!(c, 0, "{at}: {v} {e}");
        // Nothing outside the run folder.
        let after: Vec<PathBuf> = files_under(&w.root)
            .into_iter()
            .filter(|p| !before.contains(p) && !p.starts_with(&dir))
            .collect();
        assert!(
            after.iter().all(|p| p.starts_with(w.ws.join(".pinforge"))),
            "{at}: {after:?}"
        );
        // A finished run is refused.
        let o = w.endpoint(&fake.url, &["--resume", &id], &[]);
        assert_eq!(code(&o), 2, "{at}");
        assert!(
            stderr(&o).contains("already complete"),
            "{at}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn a_resume_refuses_a_run_another_pinforge_holds_and_drops_a_killed_writes_temp_file() {
    let fake = good_server();
    let w = ws();
    let o = w.endpoint(
        &fake.url,
        &[],
        &[("PINFORGE_CRASH_AT", "serve:row:endpoint:6")],
    );
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(9), "{}", stderr(&o));
    let dir = w.run_dir();
    let id = dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("id")
        .to_string();
    // What a SIGKILL inside an atomic write leaves: its staged temp file.
    let tmp = dir.join(".pinforge-tmp-Ab12Cd");
    std::fs::write(&tmp, b"{\"half\": ").expect("plant");
    // A run another pinforge works in (its folder locked, as the run's own command holds it):
    // refused at once, exit 2, and nothing in the folder changes.
    {
        use fs4::fs_std::FileExt;
        let held = std::fs::File::open(&dir).expect("open run folder");
        assert!(
            held.try_lock_exclusive().expect("lock"),
            "the folder is free"
        );
        let before = files_under(&dir);
        let sizes: Vec<u64> = before
            .iter()
            .map(|p| std::fs::metadata(p).expect("stat").len())
            .collect();
        let t = Instant::now();
        let o = w.endpoint(&fake.url, &["--resume", &id], &[]);
        assert_eq!(code(&o), 2, "{}", stderr(&o));
        assert!(
            stderr(&o).contains("another pinforge is writing this run now"),
            "{}",
            stderr(&o)
        );
        assert!(t.elapsed() < Duration::from_secs(20), "refused, not waited");
        assert_eq!(files_under(&dir), before);
        let after: Vec<u64> = before
            .iter()
            .map(|p| std::fs::metadata(p).expect("stat").len())
            .collect();
        assert_eq!(after, sizes, "no file of the run was written");
    }
    // Free again: the resume finishes, the temp file is gone, and the run verifies.
    let o = w.endpoint(&fake.url, &["--resume", &id], &[]);
    assert_eq!(code(&o), 1, "resumed to the end: {}", stderr(&o));
    assert!(!tmp.exists(), "the dead writer's temp file was removed");
    let (c, v, e) = w.verify(&dir);
    assert_eq!(c, 0, "{v} {e}");
}

#[test]
fn a_resume_of_no_run_is_refused_and_writes_nothing() {
    let fake = good_server();
    let w = ws();
    let o = w.endpoint(&fake.url, &["--resume", "nosuch"], &[]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("no run here"), "{}", stderr(&o));
    // A folder that is no run (no settings.json) is refused the same way, and left as it was.
    let empty = w.ws.join("validate/empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let o = w.endpoint(&fake.url, &["--resume", "empty"], &[]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("no run here"), "{}", stderr(&o));
    assert!(files_under(&empty).is_empty());
}

#[test]
fn a_partial_last_row_is_dropped_on_resume_and_other_settings_are_refused() {
    let fake = good_server();
    let w = ws();
    let o = w.endpoint(
        &fake.url,
        &[],
        &[("PINFORGE_CRASH_AT", "serve:row:endpoint:4")],
    );
    assert_eq!(code(&o), -1, "{}", stderr(&o));
    let dir = w.run_dir();
    let rows = dir.join("serve-rows.jsonl");
    let mut t = std::fs::read(&rows).expect("rows");
    t.extend_from_slice(b"{\"arm\":\"endpoint\",\"row\":5,\"cla");
    std::fs::write(&rows, &t).expect("write");
    let id = dir
        .file_name()
        .expect("id")
        .to_str()
        .expect("utf8")
        .to_string();
    let o = w.endpoint(&fake.url, &["--resume", &id, "--switch-every", "2"], &[]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("switch_every"), "{}", stderr(&o));
    let o = w.endpoint(&fake.url, &["--resume", &id, "--budget", "9"], &[]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("budget"), "{}", stderr(&o));
    let o = w.endpoint(&fake.url, &["--resume", &id], &[]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let notes = j["notes"].to_string();
    assert!(notes.contains("dropped the partial last line"), "{j}");
    assert_eq!(j["arms"][0]["rows"], 12);
    assert_eq!(w.verify(&dir).0, 0);
}

/// A crafted answer.
type Bad = Arc<dyn Fn() -> Reply + Send + Sync>;

/// A fake whose `/models` (or `/props`) answers `bad`, the rest as the good one.
fn hostile(path: &'static str, bad: Bad) -> Fake {
    Fake::start(Arc::new(move |_, p, _| {
        let p = p.split('?').next().unwrap_or("");
        if p == path {
            return bad();
        }
        match p {
            "/health" => json_reply(serde_json::json!({"status": "ok"})),
            "/models" => json_reply(serde_json::json!({"data": [{"id": "m"}]})),
            "/props" => json_reply(serde_json::json!({"build_info": "b1"})),
            _ => http(404, "", b"{}"),
        }
    }))
}

#[test]
fn a_hostile_endpoint_is_a_clear_error_naming_the_url_never_a_hang() {
    let deep = "[".repeat(100_000) + &"]".repeat(100_000);
    let huge = vec![b' '; 9 << 20];
    let cases: Vec<(&str, &'static str, Bad, i32, &str)> = vec![
        (
            "a huge /models body",
            "/models",
            Arc::new(move || http(200, "", &huge)),
            2,
            "too large",
        ),
        (
            "non-UTF-8 /models",
            "/models",
            Arc::new(|| http(200, "", b"{\"data\":[{\"id\":\"\xff\xfe\"}]}")),
            2,
            "not UTF-8",
        ),
        (
            "data not an array",
            "/models",
            Arc::new(|| json_reply(serde_json::json!({"data": {"id": "m"}}))),
            2,
            "field data is not an array",
        ),
        (
            "an id not a string",
            "/models",
            Arc::new(|| json_reply(serde_json::json!({"data": [{"id": 7}]}))),
            2,
            "data[0].id",
        ),
        (
            "failed not a boolean",
            "/models",
            Arc::new(|| {
                json_reply(serde_json::json!({"data": [{"id": "m", "status": {"failed": "yes"}}]}))
            }),
            2,
            "status.failed",
        ),
        (
            "deeply nested JSON",
            "/models",
            Arc::new(move || http(200, "", deep.as_bytes())),
            2,
            "not JSON",
        ),
        (
            "a preset name with ../",
            "/models",
            Arc::new(|| json_reply(serde_json::json!({"data": [{"id": "../../etc/x"}]}))),
            2,
            "not a plain model name",
        ),
        (
            "a preset name with control characters",
            "/models",
            Arc::new(|| json_reply(serde_json::json!({"data": [{"id": "m\u{1b}[2J"}]}))),
            2,
            "not a plain model name",
        ),
        (
            "a redirect",
            "/models",
            Arc::new(|| http(302, "Location: http://127.0.0.1:1/models\r\n", b"")),
            2,
            "redirects",
        ),
        (
            "build_info of the wrong type",
            "/props",
            Arc::new(|| json_reply(serde_json::json!({"build_info": {"x": 1}}))),
            2,
            "build_info",
        ),
        (
            "a /models that never answers",
            "/models",
            Arc::new(|| Reply::Hang),
            1,
            "/models",
        ),
    ];
    for (what, path, bad, want, says) in cases {
        let fake = hostile(path, bad);
        let w = ws();
        let before = files_under(&w.root);
        let t0 = Instant::now();
        let o = w.endpoint(&fake.url, &["--row-timeout", "2"], &[]);
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{what}: took {:?}",
            t0.elapsed()
        );
        assert_eq!(code(&o), want, "{what}: {}{}", stdout(&o), stderr(&o));
        let e = stderr(&o);
        assert!(e.contains(&fake.url) && e.contains(says), "{what}: {e}");
        assert!(
            !e.contains('\u{1b}'),
            "{what}: a control character reached the terminal: {e:?}"
        );
        // Only the run folder's files were written.
        for p in files_under(&w.root)
            .into_iter()
            .filter(|p| !before.contains(p))
        {
            let in_run = p
                .strip_prefix(w.ws.join("validate"))
                .is_ok_and(|r| r.components().count() == 2);
            assert!(
                in_run || p.starts_with(w.ws.join(".pinforge")),
                "{what}: wrote {}",
                p.display()
            );
        }
        // The run folder has no evidence: it is not a finished run.
        if let Ok(rd) = std::fs::read_dir(w.ws.join("validate")) {
            for r in rd.flatten() {
                assert!(!r.path().join("serve-evidence.json").exists(), "{what}");
            }
        }
    }
}

#[test]
fn a_model_outside_the_run_folder_is_re_hashed_by_verify() {
    let fake = good_server();
    let w = ws();
    let model = w.ws.join("tiny.gguf");
    let o = crate::pinforge(
        &w.ws,
        &[
            "model",
            "tiny",
            "--arch",
            "qwen2vl",
            "-o",
            model.to_str().expect("utf8"),
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = w.endpoint(&fake.url, &["--model", model.to_str().expect("utf8")], &[]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let dir = w.run_dir();
    assert!(!dir.join("model.gguf").exists());
    let (c, v, _) = w.verify(&dir);
    assert_eq!(c, 0, "{v}");
    assert!(named_checked(&v, "tiny.gguf"), "{v}");
    let mut b = std::fs::read(&model).expect("model");
    let last = b.len() - 1;
    b[last] ^= 1;
    std::fs::write(&model, b).expect("write");
    let (c, v, _) = w.verify(&dir);
    assert_eq!(c, 1, "{v}");
    assert!(named(&v, "tiny.gguf"), "{v}");
}

fn named_checked(j: &serde_json::Value, file: &str) -> bool {
    j["checked"].as_array().is_some_and(|m| {
        m.iter()
            .any(|x| x.as_str().is_some_and(|p| p.ends_with(file)))
    })
}

#[test]
fn a_served_resume_of_an_in_process_run_folder_is_refused_and_writes_nothing_there() {
    let fake = good_server();
    let w = ws();
    let run = w.ws.join("validate/r1");
    std::fs::create_dir_all(&run).expect("mkdir");
    for f in ["settings.json", "rows.jsonl"] {
        std::fs::write(run.join(f), b"{}\n").expect("write");
    }
    let o = w.endpoint(&fake.url, &["--resume", "r1"], &[]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("in-process validate run"),
        "{}",
        stderr(&o)
    );
    let left: Vec<_> = std::fs::read_dir(&run)
        .expect("ls")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
}
