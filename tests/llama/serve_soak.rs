//! Issue #20: `validate --serve` against the real `llama-server` of the server recipe
//! (recipes/mrope-server.toml, llama.cpp b7698): unpatched-asan as control and patched-asan as
//! live, installed into a root of the test's own, in router mode with two presets of the tiny
//! M-RoPE model; `--cache-ram 0` as the workaround; a child killed mid-stream; `--endpoint`
//! against a server the test started. After every run: no router or child of the run is alive
//! and its port is not listening (/proc/net/tcp).

use crate::{
    assert_no_server_of, assert_not_listening, code, llama_ws, pinforge, pinforge_cmd, stderr,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `pinforge build recipes/mrope-server.toml --variant V` in the shared workspace, once per
/// variant; its manifest. None (said as a skip) without the pin's tarball or npm to fetch it.
fn served_build(variant: &str) -> Option<String> {
    // The shared server builds of the run (crate::server_build): built once, reused here.
    crate::server_build(variant)?;
    Some(
        llama_ws()
            .join(format!("build/mrope-server/{variant}/manifest.json"))
            .display()
            .to_string(),
    )
}

/// Both ASan server builds installed as control and live, and a workspace for the runs.
struct Arms {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    root: PathBuf,
}

fn installed_arms() -> Option<Arms> {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).expect("ws");
    let root = dir.path().join("root");
    for (variant, layer) in [("unpatched-asan", "control"), ("patched-asan", "live")] {
        let m = served_build(variant)?;
        let o = pinforge(
            &ws,
            &[
                "install",
                &m,
                "--layer",
                layer,
                "--root",
                root.to_str().expect("utf8"),
            ],
        );
        assert_eq!(code(&o), 0, "install {variant}: {}", stderr(&o));
    }
    Some(Arms {
        _dir: dir,
        ws,
        root,
    })
}

const SCHEMA: &str = r#"{"type":"object","properties":{"answer":{"type":"string"},"n":{"type":"integer"}},"required":["answer","n"]}"#;

impl Arms {
    fn serve(&self, extra: &[&str], env: &[(&str, &str)]) -> (i32, serde_json::Value) {
        self.judge(self.serve_output(extra, env), extra)
    }

    /// The run's document, checked against its schema, with no router left behind.
    fn judge(&self, o: std::process::Output, extra: &[&str]) -> (i32, serde_json::Value) {
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "validate --serve {extra:?}: not JSON ({e}): {}\n{}",
                String::from_utf8_lossy(&o.stdout),
                stderr(&o)
            )
        });
        crate::schemas::validate(&j);
        for a in j["arms"].as_array().expect("arms") {
            assert_not_listening(a["url"].as_str().expect("url"));
        }
        assert_no_server_of(&self.root);
        (code(&o), j)
    }
}

fn arm<'a>(j: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    j["arms"]
        .as_array()
        .expect("arms")
        .iter()
        .find(|a| a["name"] == name)
        .unwrap_or_else(|| panic!("no arm {name} in {j}"))
}

fn count(a: &serde_json::Value, class: &str) -> u64 {
    a["counts"][class]
        .as_u64()
        .unwrap_or_else(|| panic!("no count {class} in {a}"))
}

#[test]
fn served_control_crashes_from_an_onset_with_the_router_healthy_and_live_stays_clean() {
    let Some(arms) = installed_arms() else { return };
    // The served default schema and budget (issue #35: rows that can succeed), so the verdict
    // rests on ok rows as well as on crashes.
    let (c, j) = arms.judge(arms.serve_output_plain(&["--rows", "200"], &[]), &[]);
    assert_eq!(j["mode"], "serve");
    let control = arm(&j, "control");
    let live = arm(&j, "live");
    assert_eq!(c, 0, "the candidate passed: {j}");
    assert!(count(control, "crash") > 0, "control crashes: {control}");
    assert!(control["onset_row"].as_u64().is_some(), "{control}");
    let sigs = control["signatures"].as_object().expect("signatures");
    assert!(
        sigs.keys().any(|s| s.starts_with("heap-buffer-overflow")),
        "the router log's sanitizer report: {sigs:?}"
    );
    // The router's /health answered 200 after every row, crashes included.
    for a in [control, live] {
        let h = a["health"].as_object().expect("health");
        assert_eq!(h.keys().collect::<Vec<_>>(), ["200"], "{a}");
        assert_eq!(a["rows"], 200);
        assert!(count(a, "ok") > 0, "rows that succeed: {a}");
    }
    assert_eq!(count(live, "crash"), 0, "{live}");
    // Live's verdict states its share of ok rows (measured: 200 of 200).
    assert!(
        j["verdict"]
            .as_str()
            .is_some_and(|v| v.starts_with("live passed") && v.contains("rows ok")),
        "{j}"
    );
    // The arms run the same llama-server bytes; what they map tells them apart.
    let (ic, il) = (&control["identity_after"], &live["identity_after"]);
    assert_eq!(ic["exe"]["router"], il["exe"]["router"], "{ic} {il}");
    let llama = |id: &serde_json::Value| -> (String, String) {
        id["mapped"]
            .as_object()
            .expect("mapped")
            .iter()
            .find(|(k, _)| k.contains("libllama"))
            .map(|(k, v)| (k.clone(), v.as_str().expect("sha").to_string()))
            .unwrap_or_else(|| panic!("no libllama mapped: {id}"))
    };
    let (lc, ll) = (llama(ic), llama(il));
    assert_eq!(lc.0, ll.0, "the same library name in both entries");
    assert_ne!(lc.1, ll.1, "the mapped libllama differs between the arms");
    assert!(!lc.1.contains("!=") && lc.1.len() == 64, "{lc:?}");
    // The crash rows carry their evidence: the class rule and the report's lines.
    let rows = std::fs::read_to_string(
        Path::new(j["run_dir"].as_str().expect("run_dir")).join("serve-rows.jsonl"),
    )
    .expect("rows");
    let crash: Vec<serde_json::Value> = rows
        .lines()
        .map(|l| serde_json::from_str(l).expect("row"))
        .filter(|r: &serde_json::Value| r["arm"] == "control" && r["class"] == "crash")
        .collect();
    assert!(
        crash
            .iter()
            .any(|r| r["sanitizer"].as_array().is_some_and(|l| l
                .iter()
                .any(|x| x.as_str().unwrap_or("").contains("AddressSanitizer")))),
        "{crash:?}"
    );
    // Issue #35: a crash is a death with evidence. The control router's log holds one
    // AddressSanitizer report per child that died of the over-read; a crash row beyond those
    // (and beyond children that exited non-zero) would count a death no one saw. Rows the
    // router cut by stopping its own fresh child are `router-stop`, each with the router's
    // stop lines and no report.
    let dir = PathBuf::from(j["run_dir"].as_str().expect("run_dir"));
    let log = std::fs::read_to_string(dir.join("router-control.log")).expect("router log");
    let reports = log.matches("ERROR: AddressSanitizer:").count();
    // The router served the run's two presets and no third (`default`, from a preset-file
    // key outside every section, before #35).
    let listed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("load_models:   "))
        .collect();
    assert!(
        !listed.is_empty() && listed.iter().all(|l| l.contains("tiny-")),
        "{listed:?}"
    );
    // Each crash row carries its death's evidence: a report, or a child's non-zero exit.
    for r in &crash {
        let has_report = r["sanitizer"].as_array().is_some_and(|l| !l.is_empty());
        let nonzero = r["child_exit"].as_i64().is_some_and(|x| x != 0);
        assert!(has_report || nonzero, "a crash row without a death: {r}");
    }
    let all: Vec<serde_json::Value> = rows
        .lines()
        .map(|l| serde_json::from_str(l).expect("row"))
        .collect();
    let nonzero_exit = crash
        .iter()
        .filter(|r| r["child_exit"].as_i64().is_some_and(|x| x != 0))
        .count();
    assert!(
        crash.len() <= reports + nonzero_exit,
        "{} crash rows but {reports} sanitizer reports and {nonzero_exit} non-zero exits",
        crash.len()
    );
    let stops: Vec<&serde_json::Value> =
        all.iter().filter(|r| r["class"] == "router-stop").collect();
    for r in &stops {
        let lines = r["router_stop"].as_array().expect("router_stop lines");
        assert!(
            lines.iter().any(|l| l
                .as_str()
                .unwrap_or("")
                .contains("stopping model instance name=")),
            "{r}"
        );
        assert_eq!(r["sanitizer"], serde_json::json!([]), "{r}");
        // A child the router marked failed counts only when it took the exit command.
        let acked = lines
            .iter()
            .any(|l| l.as_str().unwrap_or("").contains("exit command received"));
        assert!(r["child_failed"] != true || acked, "{r}");
    }
    for r in crash.iter().chain(stops.iter().copied()) {
        eprintln!(
            "row {} {} {}: report lines {}, failed {}, exit {}, rule {}, router {}",
            r["row"],
            r["preset"],
            r["class"],
            r["sanitizer"].as_array().map_or(0, Vec::len),
            r["child_failed"],
            r["child_exit"],
            r["rule"],
            r["router_stop"]
        );
    }
    eprintln!(
        "control: {} crash rows, {reports} sanitizer reports, {} router-stop rows",
        crash.len(),
        stops.len()
    );
    assert_eq!(
        count(control, "router-stop"),
        stops.len() as u64,
        "{control}"
    );
    // The sharper rows: /models is polled after a crash until the preset shows failed, and a
    // crash row's report is taken whole (its SUMMARY line).
    let with_report = crash
        .iter()
        .filter(|r| {
            r["sanitizer"].as_array().is_some_and(|l| {
                l.iter()
                    .any(|x| x.as_str().unwrap_or("").contains("SUMMARY:"))
            })
        })
        .count();
    // `/models` shows the preset failed only on some crash rows, by how the poll meets the
    // router's reaping (measured: 1 to 2 of 10 at load under 1 with a 2 s or a 10 s poll, 0 of
    // 11 once under the whole suite's load): counted and shown, not required. Where it is set,
    // it is on a crash row, or on a router-stop row whose child took the exit command.
    let failed = crash.iter().filter(|r| r["child_failed"] == true).count();
    assert!(
        rows.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("row"))
            .filter(|r| r["child_failed"] == true)
            .all(|r| r["class"] == "crash"
                || r["class"] == "follow-on"
                || r["class"] == "router-stop"),
        "child_failed only on crash rows"
    );
    for s in sigs.keys() {
        assert!(!s.contains('/'), "a signature is path-free: {s}");
    }
    let dir = PathBuf::from(j["run_dir"].as_str().expect("run_dir"));
    let t0 = std::time::Instant::now();
    let (vc, v) = arms.verify(&dir);
    let verify_s = t0.elapsed().as_secs_f64();
    assert_eq!(vc, 0, "{v}");
    assert!(
        v["checked"].as_array().is_some_and(|c| c
            .iter()
            .any(|x| x.as_str().is_some_and(|x| x.contains("router logs")))),
        "the signatures are recomputed from the logs: {v}"
    );
    // The page of this run (issue #35 item 4): every row a mark, each crash row with its
    // router-log lines, the router-stop rows apart, loaded in a real browser.
    {
        let page = arms.ws.join("served-report.html");
        let o = crate::pinforge(
            &arms.ws,
            &[
                "report",
                dir.to_str().expect("utf8"),
                "-o",
                page.to_str().expect("utf8"),
            ],
        );
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let html = std::fs::read_to_string(&page).expect("page");
        assert_eq!(
            html.matches("<details class=\"crash\">").count(),
            crash.len(),
            "one evidence block per crash row"
        );
        assert_eq!(
            html.matches("<details class=\"router-stop\">").count(),
            stops.len()
        );
        assert!(html.contains("AddressSanitizer"), "the report's lines");
        assert!(
            html.contains("<td>mapped "),
            "identity per round: the mapped libraries"
        );
        let shots = tempfile::tempdir().expect("shots");
        if Path::new(crate::common::report::CHROMIUM).exists() {
            crate::common::report::check_in_chromium(
                &page,
                shots.path(),
                400,
                &shots.path().join("served.png"),
            );
        } else {
            crate::skip("chromium is not installed: the served page was not loaded");
        }
    }
    // The summary's signatures must be what the router log shows: one report fewer, with the
    // summary re-hashed into the evidence, is named.
    {
        let scratch = tempfile::tempdir().expect("scratch");
        let d = scratch.path().join(dir.file_name().expect("id"));
        std::fs::create_dir(&d).expect("mkdir");
        for e in std::fs::read_dir(&dir).expect("ls").flatten() {
            std::fs::copy(e.path(), d.join(e.file_name())).expect("copy");
        }
        let p = d.join("serve-summary.json");
        let mut sm: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&p).expect("summary")).expect("json");
        let arm = sm["arms"]
            .as_array_mut()
            .expect("arms")
            .iter_mut()
            .find(|a| a["name"] == control["name"])
            .expect("control arm");
        let (k, n) = arm["signatures"]
            .as_object()
            .and_then(|m| m.iter().next())
            .map(|(k, n)| (k.clone(), n.as_u64().unwrap_or(0)))
            .expect("a signature");
        arm["signatures"][k.as_str()] = (n - 1).into();
        let bytes = serde_json::to_vec(&sm).expect("json");
        std::fs::write(&p, &bytes).expect("write");
        let ep = d.join("serve-evidence.json");
        let mut ev: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&ep).expect("ev")).expect("json");
        ev["files"]["serve-summary.json"] = crate::smoke_trust::sha_hex(&bytes).into();
        std::fs::write(&ep, serde_json::to_vec(&ev).expect("json")).expect("write");
        let (c, v) = arms.verify(&d);
        assert_eq!(c, 1, "{v}");
        assert!(
            v["mismatches"]
                .as_array()
                .is_some_and(|m| m.iter().any(|x| x["role"] == "summary signatures")),
            "{v}"
        );
    }
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("ls")
        .flatten()
        .map(|e| e.path())
        .collect();
    let t0 = std::time::Instant::now();
    let st = Command::new("sha256sum")
        .args(&files)
        .stdout(Stdio::null())
        .status()
        .expect("sha256sum");
    let sha_s = t0.elapsed().as_secs_f64();
    assert!(st.success());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!(
        "MEASURED 200 rows: control {:.2} rows/s, live {:.2} rows/s; control crash {} (with the \
         report's SUMMARY {with_report}, child_failed {failed}), follow-on {}, token-budget {}; \
         live crash {}, ok {}; signatures {sigs:?}; verify {verify_s:.3}s vs sha256sum \
         {sha_s:.3}s over {} files; loadavg {}",
        control["rows_per_second"].as_f64().unwrap_or(0.0),
        live["rows_per_second"].as_f64().unwrap_or(0.0),
        count(control, "crash"),
        count(control, "follow-on"),
        count(control, "token-budget"),
        count(live, "crash"),
        count(live, "ok"),
        files.len(),
        load.trim()
    );
}

#[test]
fn served_default_schema_gives_ok_rows_and_the_verdict_states_their_share() {
    let Some(arms) = installed_arms() else { return };
    let (c, j) = arms.judge(
        arms.serve_output_plain(&["--rows", "16", "--cache-ram", "0"], &[]),
        &[],
    );
    assert_eq!(c, 0, "{j}");
    assert_eq!(j["min_ok"], 0.5);
    for name in ["control", "live"] {
        let a = arm(&j, name);
        assert!(count(a, "ok") > 0, "ok rows with the default schema: {a}");
    }
    let v = j["verdict"].as_str().expect("verdict");
    assert!(v.starts_with("live passed") && v.contains("rows ok"), "{v}");
    // The same rows, a share no build reaches: the candidate fails, saying why.
    let (c, j) = arms.judge(
        arms.serve_output_plain(&["--rows", "16", "--cache-ram", "0", "--min-ok", "1"], &[]),
        &[],
    );
    let live = arm(&j, "live");
    if count(live, "ok") < 16 {
        assert_eq!(c, 1, "{j}");
        assert!(
            j["verdict"]
                .as_str()
                .is_some_and(|v| v.contains("but only")),
            "{j}"
        );
    } else {
        assert_eq!(c, 0, "{j}");
    }
}

#[test]
fn served_control_with_cache_ram_0_does_not_crash() {
    let Some(arms) = installed_arms() else { return };
    let (c, j) = arms.serve(
        &["--rows", "200", "--budget", "12", "--cache-ram", "0"],
        &[],
    );
    assert_eq!(c, 0, "{j}");
    assert_eq!(count(arm(&j, "control"), "crash"), 0, "the workaround: {j}");
    assert_eq!(count(arm(&j, "live"), "crash"), 0, "{j}");
}

#[test]
fn a_child_killed_mid_stream_is_a_crash_never_a_token_budget_stop() {
    let Some(arms) = installed_arms() else { return };
    let (c, j) = arms.serve(
        &[
            "--rows",
            "6",
            "--budget",
            "48",
            "--stream",
            "--cache-ram",
            "0",
        ],
        &[("PINFORGE_SERVE_KILL_CHILD_AT", "2")],
    );
    assert_eq!(j["stream"], true);
    assert_eq!(c, 1, "the candidate's child was killed: {j}");
    let rows = std::fs::read_to_string(
        Path::new(j["run_dir"].as_str().expect("run_dir")).join("serve-rows.jsonl"),
    )
    .expect("rows");
    for r in rows
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("row"))
    {
        if r["row"] == 2 {
            assert_eq!(r["class"], "crash", "{r}");
        }
    }
    // The next row respawned the child cold.
    assert!(count(arm(&j, "live"), "crash") >= 1);
    assert!(count(arm(&j, "live"), "crash") < 6, "{j}");
}

#[test]
fn endpoint_mode_runs_against_a_server_the_test_started_and_says_so() {
    let Some(arms) = installed_arms() else { return };
    let bin = std::fs::canonicalize(arms.root.join("live"))
        .expect("live")
        .join("bin/llama-server");
    let model = arms.ws.join("tiny.gguf");
    let o = pinforge(
        &arms.ws,
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
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let mut server = Command::new(&bin)
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "-m"])
        .arg(&model)
        .args(["-c", "256", "-np", "1"])
        .env("ASAN_OPTIONS", "detect_leaks=0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start llama-server");
    let url = format!("http://127.0.0.1:{port}");
    let o = pinforge_cmd(&arms.ws)
        .args(["validate", "--endpoint", &url, "--rows", "8", "--json"])
        .env("PINFORGE_ENDPOINT_API_KEY", "")
        .output()
        .expect("run pinforge");
    let _ = server.kill();
    let _ = server.wait();
    let j: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", stderr(&o)));
    crate::schemas::validate(&j);
    assert_eq!(code(&o), 0, "{j}");
    assert_eq!(j["mode"], "endpoint");
    let a = arm(&j, "endpoint");
    assert_eq!(a["mode"], "endpoint");
    assert_eq!(a["url"], url);
    assert_eq!(a["rows"], 8);
    // The served default schema at the default budget: the real server completes rows.
    assert!(count(a, "ok") > 0, "{a}");
    assert_eq!(count(a, "crash"), 0, "{a}");
    assert!(a["identity_before"]["exe"]
        .as_object()
        .is_some_and(|m| m.is_empty()));
    assert_not_listening(&url);
}

impl Arms {
    /// `validate --serve` of both arms with the test schema (which the tiny model never
    /// finishes, as the incident's label/score rows: every row ends `token-budget`, so
    /// `--min-ok 0` lets crashes alone decide), as the process ended.
    fn serve_output(&self, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
        let schema = self.ws.join("schema.json");
        std::fs::write(&schema, SCHEMA).expect("schema");
        let mut args = vec!["--schema", schema.to_str().expect("utf8"), "--min-ok", "0"];
        args.extend(extra);
        self.serve_output_plain(&args, env)
    }

    /// `validate --serve` of both arms with only `extra` (no schema: the served default).
    fn serve_output_plain(&self, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
        let mut cmd = pinforge_cmd(&self.ws);
        cmd.args([
            "validate",
            "--serve",
            "--installed",
            "control,live",
            "--root",
            self.root.to_str().expect("utf8"),
            "--json",
        ])
        .args(extra);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run pinforge")
    }

    fn verify(&self, dir: &Path) -> (i32, serde_json::Value) {
        let o = pinforge(&self.ws, &["verify", dir.to_str().expect("utf8"), "--json"]);
        let j: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("verify: not JSON ({e}): {}", stderr(&o)));
        crate::schemas::validate(&j);
        (code(&o), j)
    }
}

/// Every row's (arm, row, class), timings aside.
fn classes_of(dir: &Path) -> Vec<(String, u64, String)> {
    std::fs::read_to_string(dir.join("serve-rows.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).expect("row");
            (
                r["arm"].as_str().expect("arm").to_string(),
                r["row"].as_u64().expect("row"),
                r["class"].as_str().expect("class").to_string(),
            )
        })
        .collect()
}

/// The ports the arms' routers had (from their records in the run folder).
fn arm_urls(dir: &Path) -> Vec<String> {
    ["control", "live"]
        .iter()
        .filter_map(|a| std::fs::read_to_string(dir.join(format!("serve-arm-{a}.json"))).ok())
        .map(|t| {
            let j: serde_json::Value = serde_json::from_str(&t).expect("record");
            j["url"].as_str().expect("url").to_string()
        })
        .collect()
}

#[test]
fn a_served_run_killed_at_each_step_leaves_no_server_and_resumes_to_the_uninterrupted_classes() {
    let Some(arms) = installed_arms() else { return };
    // Without the prompt cache the rows are deterministic (no crash), so a resumed run must
    // give the classes of one never interrupted.
    let args = ["--rows", "8", "--budget", "12", "--cache-ram", "0"];
    let (c, whole) = arms.serve(&args, &[]);
    assert_eq!(c, 0, "{whole}");
    let whole_dir = PathBuf::from(whole["run_dir"].as_str().expect("run_dir"));
    let want = classes_of(&whole_dir);
    assert_eq!(want.len(), 16);
    assert_eq!(arms.verify(&whole_dir).0, 0);
    for at in [
        "serve:settings",
        "serve:row:control:3",
        "serve:row:live:0",
        "serve:summary",
        "serve:evidence",
    ] {
        let o = arms.serve_output(&args, &[("PINFORGE_CRASH_AT", at)]);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(o.status.signal(), Some(9), "{at}: {}", stderr(&o));
        let runs: Vec<PathBuf> = std::fs::read_dir(arms.ws.join("validate"))
            .expect("validate/")
            .flatten()
            .map(|e| e.path())
            .filter(|p| !p.join("serve-evidence.json").exists())
            .collect();
        assert_eq!(runs.len(), 1, "{at}: {runs:?}");
        let dir = &runs[0];
        // PR_SET_PDEATHSIG: the routers (and their children) died with pinforge.
        let t0 = std::time::Instant::now();
        loop {
            let left = crate::running_under(&arms.root);
            if left.is_empty() {
                break;
            }
            assert!(t0.elapsed().as_secs() < 10, "{at}: left running: {left:?}");
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        for url in arm_urls(dir) {
            assert_not_listening(&url);
        }
        let (c, v) = arms.verify(dir);
        assert_eq!(c, 1, "{at}: {v}");
        assert!(
            v["mismatches"][0]["actual"]
                .as_str()
                .is_some_and(|a| a.contains("no serve-evidence.json: the run did not finish")),
            "{at}: {v}"
        );
        let id = dir.file_name().expect("id").to_str().expect("utf8");
        let mut resumed: Vec<&str> = args.to_vec();
        resumed.extend(["--resume", id]);
        let (c, j) = arms.serve(&resumed, &[]);
        assert_eq!(c, 0, "{at}: {j}");
        assert_eq!(
            classes_of(dir),
            want,
            "{at}: classes of the uninterrupted run"
        );
        let (c, v) = arms.verify(dir);
        assert_eq!(c, 0, "{at}: {v}");
    }
}
