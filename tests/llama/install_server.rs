//! Issue #20: `install --smoke` of a build whose outputs include `bin/llama-server` also starts
//! that server (the recorded bytes) on 127.0.0.1 over the smoke's tiny model and requires one
//! chat completion before the swap. For real on the server recipe's `patched-asan` build (its
//! JSON `server` part validated, nothing left running or listening, a SIGKILL of pinforge
//! mid-check leaving no server behind), and refused for stand-in servers (a program named
//! `llama-server` recorded in a manifest beside the default recipe's real libraries, so the
//! shim smoke passes and the server check is what decides): one that exits, never answers
//! `/health`, answers 500, answers something that is no completion, dies during the request,
//! or prints a sanitizer report; a binary changed after its build; Ctrl-C during the check.
//!
//! Every run gets a TMPDIR of its own: the server's temp folder (its working folder and log)
//! is under it, so "nothing left running" is "no process runs in or from it".

use crate::{code, json, llama_ws, pinforge_cmd, running_under, stderr, stdout};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn sha_hex(bytes: &[u8]) -> String {
    crate::sha2_like::digest_hex(bytes)
}

/// A test's folders: a TMPDIR for pinforge, an install root, and room for a build.
struct Fx {
    dir: tempfile::TempDir,
    tmp: PathBuf,
    root: PathBuf,
}

impl Fx {
    fn new() -> Fx {
        let dir = tempfile::tempdir().expect("tempdir");
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(&tmp).expect("mkdir");
        let root = dir.path().join("root");
        Fx { dir, tmp, root }
    }

    /// `pinforge ARGS` in the shared llama workspace (its builds and its shim cache), with
    /// this test's TMPDIR.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = pinforge_cmd(llama_ws());
        c.args(args).env("TMPDIR", &self.tmp);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run pinforge")
    }

    /// `install MANIFEST --layer LAYER --smoke --root ROOT` plus `extra`.
    fn install(&self, manifest: &str, layer: &str, extra: &[&str]) -> Output {
        let root = self.root.to_str().expect("utf8");
        let mut args = vec![
            "install", manifest, "--layer", layer, "--smoke", "--root", root,
        ];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    fn status(&self) -> String {
        let o = self.run(&[
            "status",
            "--json",
            "--root",
            self.root.to_str().expect("utf8"),
        ]);
        stdout(&o)
    }

    /// The server folders pinforge left in this test's TMPDIR.
    fn kept(&self) -> Vec<PathBuf> {
        std::fs::read_dir(&self.tmp)
            .expect("tmp")
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("pinforge-server-"))
            })
            .collect()
    }

    /// Nothing runs in or from this test's folders, within a few seconds (a process killed
    /// by its parent's death is gone a moment later).
    fn assert_nothing_running(&self) {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let left = running_under(self.dir.path());
            if left.is_empty() {
                return;
            }
            assert!(Instant::now() < until, "left running: {left:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A copy of the default recipe's `patched` build (real libllama and headers, so the shim
/// smoke is ok) with `bin/llama-server` = `server` (a script), and a manifest that records
/// it: `fx/build/manifest.json`.
fn stand_in_build(fx: &Fx, server: &str) -> String {
    let real = crate::llama_build("patched");
    let mpath = PathBuf::from(real["manifest"].as_str().expect("manifest"));
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&mpath).expect("read")).expect("json");
    let rel = m["predicate"]["buildDefinition"]["internalParameters"]["artifact_root"]
        .as_str()
        .expect("artifact_root")
        .to_string();
    let from = mpath.parent().expect("parent").join(&rel);
    let base = fx.dir.path().join("build");
    let out = base.join("out");
    std::fs::create_dir_all(&base).expect("mkdir");
    let cp = Command::new("cp")
        .arg("-a")
        .arg(&from)
        .arg(&out)
        .status()
        .expect("cp");
    assert!(cp.success(), "copy {}", from.display());
    std::fs::create_dir_all(out.join("bin")).expect("mkdir bin");
    let bin = out.join("bin/llama-server");
    std::fs::write(&bin, server).expect("write server");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    m["predicate"]["buildDefinition"]["internalParameters"]["artifact_root"] = "out".into();
    let subjects = m["subject"].as_array_mut().expect("subjects");
    subjects.push(serde_json::json!({
        "name": "bin/llama-server",
        "digest": {"sha256": sha_hex(server.as_bytes())},
        "annotations": {"size": server.len()},
    }));
    subjects.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let path = base.join("manifest.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&m).expect("json")).expect("write");
    path.display().to_string()
}

fn python() -> Option<PathBuf> {
    let p = crate::which("python3");
    if p.is_none() {
        crate::skip("python3 is not installed (the stand-in servers are Python scripts)");
    }
    p
}

/// A stand-in `llama-server` in Python: `/health` 200 on the `--port` it is given, and a
/// chat completion answered as `mode` says.
fn py_server(python: &Path, mode: &str) -> String {
    format!(
        r#"#!{py}
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
MODE = "{mode}"
OK = {{"object": "chat.completion", "choices": [{{"index": 0, "finish_reason": "length",
      "message": {{"role": "assistant", "content": "hi"}}}}],
      "usage": {{"prompt_tokens": 5, "completion_tokens": 8, "total_tokens": 13}}}}
class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def send(self, code, obj):
        b = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def do_GET(self):
        if self.path == "/health":
            self.send(200, {{"status": "ok"}})
        else:
            self.send(200, {{"build_info": "stand-in"}})
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if MODE == "500":
            self.send(500, {{"error": {{"code": 500, "message": "stand-in failure"}}}})
        elif MODE == "malformed":
            self.send(200, {{"hello": "world"}})
        elif MODE == "die":
            sys.stderr.write("stand-in: dying mid-request\n")
            sys.stderr.flush()
            os._exit(7)
        elif MODE == "hang":
            time.sleep(600)
        elif MODE == "asan":
            sys.stderr.write("==42==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x6020\n"
                "    #0 0x1 in llama_kv_cache::apply_ubatch /src/llama-kv-cache.cpp:1\n"
                "SUMMARY: AddressSanitizer: heap-buffer-overflow /src/llama-kv-cache.cpp:1\n")
            sys.stderr.flush()
            self.send(200, OK)
        else:
            self.send(200, OK)
port = int(sys.argv[sys.argv.index("--port") + 1])
print("stand-in listening on", port, flush=True)
HTTPServer(("127.0.0.1", port), H).serve_forever()
"#,
        py = python.display()
    )
}

/// The refusal every failing check must be: exit 1, the binary named, `want` said, the root
/// as it was, nothing running, the server's log kept (when it ran; removed here after). The
/// refusal's text.
fn assert_refused(fx: &Fx, manifest: &str, extra: &[&str], want: &str, log_kept: bool) -> String {
    let before = fx.status();
    let o = fx.install(manifest, "control", extra);
    let err = stderr(&o);
    assert_eq!(code(&o), 1, "{want}: {err}");
    assert!(err.contains("bin/llama-server"), "names the binary: {err}");
    assert!(err.contains(want), "{want}: {err}");
    assert_eq!(fx.status(), before, "{want}: the root is unchanged");
    fx.assert_nothing_running();
    let kept = fx.kept();
    if log_kept {
        assert_eq!(kept.len(), 1, "{want}: {kept:?}");
        let log = kept[0].join("server.log");
        assert!(err.contains(&log.display().to_string()), "{err}");
        for k in kept {
            std::fs::remove_dir_all(k).expect("rm");
        }
    } else {
        assert!(kept.is_empty(), "{want}: {kept:?}");
    }
    std::fs::remove_dir_all(fx.dir.path().join("build")).expect("rm build");
    err
}

/// A root with one layer in it, so "unchanged" is a real state, not an absent root.
fn populated(fx: &Fx) {
    let m = crate::llama_build("patched");
    let o = fx.run(&[
        "install",
        m["manifest"].as_str().expect("manifest"),
        "--layer",
        "live",
        "--root",
        fx.root.to_str().expect("utf8"),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn stand_in_servers_that_fail_the_check_refuse_the_swap() {
    let Some(py) = python() else { return };
    let fx = Fx::new();
    populated(&fx);
    let quick = ["--smoke-server-timeout", "3"];
    let exits = stand_in_build(
        &fx,
        "#!/bin/sh\necho 'stand-in: cannot load the model' >&2\nexit 1\n",
    );
    let err = assert_refused(&fx, &exits, &quick, "exited (exit status: 1)", true);
    // The log's last lines are in the refusal.
    assert!(err.contains("stand-in: cannot load the model"), "{err}");

    let cases = [
        ("500", "answered HTTP 500"),
        ("malformed", "not a chat completion"),
        ("die", "the server died (exit status: 7)"),
        ("hang", "no complete answer"),
        ("asan", "sanitizer report: heap-buffer-overflow"),
    ];
    for (mode, want) in cases {
        let m = stand_in_build(&fx, &py_server(&py, mode));
        assert_refused(&fx, &m, &quick, want, true);
    }
    // One that never listens: the wait ends at the timeout, and it is stopped.
    let silent = stand_in_build(&fx, "#!/bin/sh\nsleep 300\n");
    let t = Instant::now();
    assert_refused(
        &fx,
        &silent,
        &["--smoke-server-timeout", "2"],
        "/health did not answer 200 within 2s",
        true,
    );
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
}

#[test]
fn a_stand_in_that_answers_passes_and_the_json_carries_the_server_part() {
    let Some(py) = python() else { return };
    let fx = Fx::new();
    let m = stand_in_build(&fx, &py_server(&py, "ok"));
    let o = fx.install(&m, "live", &["--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    crate::schemas::validate(&j);
    let s = &j["server"];
    assert_eq!(s["binary"], "bin/llama-server", "{j}");
    assert_eq!(s["answer"]["status"], 200);
    assert_eq!(s["answer"]["finish_reason"], "length");
    assert_eq!(s["answer"]["content"], "hi");
    assert_eq!(s["build_info"], "stand-in");
    assert_eq!(s["stopped"], true);
    let script = py_server(&py, "ok");
    assert_eq!(s["sha256"], sha_hex(script.as_bytes()).as_str());
    assert_eq!(j["smoke"]["verdict"], "ok");
    crate::assert_not_listening(&format!("http://127.0.0.1:{}", s["port"]));
    fx.assert_nothing_running();
    assert!(fx.kept().is_empty(), "the temp folder is removed");
    // The text rendering says what was started and what answered.
    let o = fx.install(&m, "live", &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("server bin/llama-server (sha256 "), "{text}");
    assert!(
        text.contains("one chat completion: HTTP 200, finish_reason length, 8 tokens"),
        "{text}"
    );
    assert!(text.contains("unchanged: live already shows"), "{text}");
}

#[test]
fn a_server_binary_changed_after_the_build_is_refused_before_it_starts() {
    let fx = Fx::new();
    populated(&fx);
    let m = stand_in_build(&fx, "#!/bin/sh\nexec sleep 300\n");
    let marker = fx.dir.path().join("started");
    std::fs::write(
        fx.dir.path().join("build/out/bin/llama-server"),
        format!("#!/bin/sh\ntouch {}\nexec sleep 300\n", marker.display()),
    )
    .expect("tamper");
    assert_refused(&fx, &m, &[], "is not the recorded", false);
    assert!(!marker.exists(), "nothing was started");
}

#[test]
fn ctrl_c_during_the_check_stops_the_server() {
    let Some(py) = python() else { return };
    let fx = Fx::new();
    populated(&fx);
    let before = fx.status();
    let m = stand_in_build(&fx, &py_server(&py, "hang"));
    let root = fx.root.to_str().expect("utf8").to_string();
    let child = fx
        .cmd(&[
            "install", &m, "--layer", "control", "--smoke", "--root", &root,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // Wait until the stand-in is up (its log says so), then for the request to be in flight.
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let up = fx.kept().iter().any(|k| {
            std::fs::read_to_string(k.join("server.log"))
                .is_ok_and(|l| l.contains("stand-in listening"))
        });
        if up {
            break;
        }
        assert!(Instant::now() < until, "the stand-in never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    let o = child.wait_with_output().expect("wait");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("interrupted"), "{}", stderr(&o));
    assert_eq!(fx.status(), before);
    fx.assert_nothing_running();
}

// ---------------------------------------------------------------------------------------------
// The real server of the server recipe.

fn server_manifest() -> Option<serde_json::Value> {
    crate::server_build("patched-asan")
}

/// `install recipes/mrope-server.toml --variant patched-asan --layer LAYER --smoke` into the
/// test's root.
fn real_install(fx: &Fx, layer: &str) -> Command {
    let recipe = crate::server_recipe();
    let root = fx.root.to_str().expect("utf8").to_string();
    fx.cmd(&[
        "install",
        recipe.to_str().expect("utf8"),
        "--variant",
        "patched-asan",
        "--layer",
        layer,
        "--smoke",
        "--root",
        &root,
    ])
}

#[test]
fn the_real_server_build_answers_before_the_swap_and_nothing_is_left_running() {
    let Some(b) = server_manifest() else { return };
    let fx = Fx::new();
    let t = Instant::now();
    let o = real_install(&fx, "live")
        .arg("--json")
        .output()
        .expect("run");
    let wall = t.elapsed();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    crate::schemas::validate(&j);
    let s = &j["server"];
    let recorded = crate::artifacts(&b)
        .into_iter()
        .find(|(p, _)| p == "bin/llama-server")
        .map(|(_, d)| d)
        .expect("bin/llama-server");
    assert_eq!(s["sha256"].as_str(), Some(recorded.as_str()), "{s}");
    assert_eq!(s["answer"]["status"], 200, "{s}");
    assert!(
        matches!(
            s["answer"]["finish_reason"].as_str(),
            Some("stop" | "length")
        ),
        "{s}"
    );
    assert!(
        s["build_info"].as_str().is_some_and(|b| b.contains("7698")),
        "{s}"
    );
    assert_eq!(s["stopped"], true);
    crate::assert_not_listening(&format!("http://127.0.0.1:{}", s["port"]));
    fx.assert_nothing_running();
    assert!(fx.kept().is_empty(), "the temp folder is removed");
    eprintln!(
        "install --smoke of patched-asan: {:.1} s in all; server check {:.0} ms \
         (hash {:.0}, start {:.0}, request {:.0}, stop {:.0})",
        wall.as_secs_f64(),
        s["timings"]["total_ms"].as_f64().unwrap_or(0.0),
        s["timings"]["hash_ms"].as_f64().unwrap_or(0.0),
        s["timings"]["start_ms"].as_f64().unwrap_or(0.0),
        s["timings"]["request_ms"].as_f64().unwrap_or(0.0),
        s["timings"]["stop_ms"].as_f64().unwrap_or(0.0),
    );
}

#[test]
fn a_sigkill_of_pinforge_during_the_check_takes_the_server_with_it() {
    let Some(_) = server_manifest() else { return };
    let fx = Fx::new();
    // A first install, so the root has a state to keep.
    let o = real_install(&fx, "live").output().expect("run");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let before = fx.status();
    // Killed once the server answered, before it was stopped.
    let o = real_install(&fx, "control")
        .env("PINFORGE_CRASH_AT", "install-server:answered")
        .output()
        .expect("run");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(9), "{}", stderr(&o));
    // The server was up: its kept log says where it listened.
    let kept = fx.kept();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let log = std::fs::read_to_string(kept[0].join("server.log")).expect("log");
    let port = log
        .split("http://127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .unwrap_or_else(|| panic!("no listening line in the log:\n{log}"))
        .to_string();
    // It dies with pinforge (PR_SET_PDEATHSIG), within moments.
    fx.assert_nothing_running();
    crate::wait_not_listening(&format!("http://127.0.0.1:{port}"), 10);
    assert_eq!(
        fx.status(),
        before,
        "the root is as the first install left it"
    );
    // And a later install works.
    let o = real_install(&fx, "control").output().expect("run");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("installed into control"),
        "{}",
        stdout(&o)
    );
}
