//! Issue #38 item 3: the fleet scripts of the sharded-soak guide, run as they are written. The
//! Slurm array and `afterok` merge of `docs/guide/slurm/` go through a real one-node Slurm
//! (munged, slurmctld and slurmd started here as root, every file of theirs in a temp folder)
//! on verified stub engines; the Kubernetes Indexed Job of `docs/guide/k8s/` is checked against
//! the Job schema, since no cluster can be started here. `tests/docs.rs` holds the pages'
//! copies of these files to the files.

use crate::common::shard::row_facts;
use crate::smoke_trust::{report, stub_build, Fx, STUB_ENGINE_OK_C};
use crate::{code, in_test_env, listing, pinforge_exe, repo_root, skip, stderr, stdout};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The programs of Debian's `slurm-wlm` and `munge` the test runs.
const TOOLS: &[&str] = &[
    "munged",
    "slurmctld",
    "slurmd",
    "sbatch",
    "scontrol",
    "sinfo",
    "scancel",
];

/// Longest wait for a daemon to come up, and for the soak's jobs (about 5 s here).
const START: Duration = Duration::from_secs(30);
const JOBS: Duration = Duration::from_secs(180);

/// Where `name` is: PATH first, then the sbin folders, where Debian puts the daemons and which
/// a non-login shell's PATH may lack.
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A port on 127.0.0.1 that nothing listened on a moment ago.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// The last `n` lines of a file (a daemon's log), or why there are none.
fn tail(path: &Path, n: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("({e})"),
    }
}

/// A private one-node Slurm cluster: its configuration, munge key, state, spool and logs in
/// one temp folder, its daemons children of this test, ended in `Drop` (also on a panic).
struct Slurm {
    dir: tempfile::TempDir,
    conf: PathBuf,
    tools: BTreeMap<&'static str, PathBuf>,
    daemons: Vec<(&'static str, Child)>,
}

impl Slurm {
    /// munged, then slurmctld, then slurmd; returns once the node is idle.
    fn start(tools: BTreeMap<&'static str, PathBuf>) -> Slurm {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().to_path_buf();
        for sub in ["munge", "state", "spool", "log"] {
            std::fs::create_dir(d.join(sub)).expect("mkdir");
        }
        let mut s = Slurm {
            conf: d.join("slurm.conf"),
            dir,
            tools,
            daemons: Vec::new(),
        };
        // munged refuses a key others can read, and runs as root only with --force.
        use std::io::Read;
        use std::os::unix::fs::PermissionsExt;
        let mut key = vec![0u8; 1024];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut key))
            .expect("random key");
        let key_file = d.join("munge/munge.key");
        std::fs::write(&key_file, &key).expect("key");
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o400)).expect("chmod");
        let socket = d.join("munge/munge.socket");
        let munged = s.tool("munged");
        s.spawn(
            "munged",
            Command::new(munged).args([
                "--foreground".to_string(),
                "--force".to_string(),
                format!("--socket={}", socket.display()),
                format!("--key-file={}", key_file.display()),
                format!("--pid-file={}", d.join("munge/munged.pid").display()),
                format!("--log-file={}", d.join("log/munged.log").display()),
                format!("--seed-file={}", d.join("munge/munged.seed").display()),
            ]),
        );
        s.wait_for("munged's socket", || socket.exists());

        // The node as slurmd sees this machine (its name is `hostname -s`); only its CPUs are
        // configured, so that a node with less memory than a guess is never drained.
        let probe = Command::new(s.tool("slurmd"))
            .arg("-C")
            .output()
            .expect("slurmd -C");
        let probe = String::from_utf8_lossy(&probe.stdout).into_owned();
        let field = |k: &str| {
            probe
                .split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .map(str::to_string)
                .unwrap_or_else(|| panic!("slurmd -C names no {k}: {probe}"))
        };
        let (node, cpus) = (field("NodeName="), field("CPUs="));
        std::fs::write(d.join("plugstack.conf"), "").expect("plugstack");
        let conf = format!(
            "# A one-node cluster of the fleet test: no accounting, no cgroups, root daemons.
ClusterName=pinforge-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket}
PlugStackConfig={dir}/plugstack.conf
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes={node} Default=YES MaxTime=INFINITE State=UP
",
            ctld_port = free_port(),
            d_port = free_port(),
            socket = socket.display(),
            dir = d.display(),
        );
        std::fs::write(&s.conf, conf).expect("slurm.conf");
        let conf_arg = s.conf.display().to_string();
        let ctld = s.tool("slurmctld");
        s.spawn(
            "slurmctld",
            Command::new(ctld).args(["-D", "-f", &conf_arg]),
        );
        let slurmd = s.tool("slurmd");
        s.spawn(
            "slurmd",
            Command::new(slurmd).args(["-D", "-N", &node, "-f", &conf_arg]),
        );
        s.wait_for("the node to be idle", || {
            let o = s.run(s.cmd("sinfo", d.as_path()).args(["-h", "-N", "-o", "%T"]));
            stdout(&o).trim() == "idle"
        });
        s
    }

    fn tool(&self, name: &str) -> PathBuf {
        self.tools
            .get(name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} was looked up"))
    }

    /// Start a daemon in the foreground, its output in `log/NAME.out`.
    fn spawn(&mut self, name: &'static str, c: &mut Command) {
        let out = std::fs::File::create(self.dir.path().join(format!("log/{name}.out")))
            .expect("log file");
        let err = out.try_clone().expect("log file");
        let child = c
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        self.daemons.push((name, child));
    }

    /// A Slurm client (or a script that runs them) in `cwd`, in the environment pinforge runs
    /// in, plus this cluster's configuration and the folders of its programs on PATH.
    fn cmd(&self, tool: &str, cwd: &Path) -> Command {
        let program = self
            .tools
            .get(tool)
            .cloned()
            .unwrap_or_else(|| PathBuf::from(tool));
        let mut c = in_test_env(program.to_str().expect("utf8"), cwd);
        let mut path: Vec<PathBuf> = self
            .tools
            .values()
            .filter_map(|p| p.parent().map(Path::to_path_buf))
            .collect();
        path.sort();
        path.dedup();
        path.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        c.env("PATH", std::env::join_paths(path).expect("PATH"))
            .env("SLURM_CONF", &self.conf);
        c
    }

    fn run(&self, c: &mut Command) -> Output {
        c.stdin(Stdio::null()).output().expect("run a Slurm client")
    }

    /// Poll `ready` until it holds; past [`START`], fail with the daemons' logs.
    fn wait_for(&self, what: &str, mut ready: impl FnMut() -> bool) {
        let t = Instant::now();
        while !ready() {
            assert!(
                t.elapsed() < START,
                "waited {START:?} for {what}\n{}",
                self.logs(&[])
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `scontrol show job` of `id` until it has ended; its final state. A job whose
    /// dependency can never be met (a shard that failed) ends the wait at once.
    fn wait_job(&self, id: &str, soak: &Path) -> String {
        let t = Instant::now();
        loop {
            let o = self.run(self.cmd("scontrol", soak).args(["show", "job", "-o", id]));
            let text = stdout(&o);
            let state = text
                .split_whitespace()
                .find_map(|w| w.strip_prefix("JobState="))
                .unwrap_or("")
                .to_string();
            let ended = !matches!(
                state.as_str(),
                "" | "PENDING" | "CONFIGURING" | "RUNNING" | "COMPLETING"
            );
            if ended || text.contains("DependencyNeverSatisfied") || t.elapsed() > JOBS {
                return format!("{state}\n{text}{}", stderr(&o));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The daemons' logs and the given files (the jobs' output), for a failure message.
    fn logs(&self, files: &[PathBuf]) -> String {
        let d = self.dir.path();
        let mut out = String::new();
        for name in [
            "munged.out",
            "slurmctld.out",
            "slurmctld.log",
            "slurmd.out",
            "slurmd.log",
        ] {
            out.push_str(&format!(
                "--- {name}\n{}\n",
                tail(&d.join("log").join(name), 40)
            ));
        }
        for f in files {
            out.push_str(&format!("--- {}\n{}\n", f.display(), tail(f, 40)));
        }
        out
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        // Jobs still running first (their slurmstepd is slurmd's child, not this test's): this
        // cluster's only, through its own configuration.
        if self.daemons.len() == 3 {
            let dir = self.dir.path().to_path_buf();
            let _ = self.run(self.cmd("scancel", &dir).args(["--user", "root"]));
        }
        // Then each daemon this test started, by its pid: SIGTERM, a few seconds to exit
        // (slurmctld saves its state), then SIGKILL; always reaped.
        for (_, child) in self.daemons.iter_mut().rev() {
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            let t = Instant::now();
            while matches!(child.try_wait(), Ok(None)) && t.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The guide's Slurm files (`docs/guide/slurm/`) submitted as they are to a real Slurm: four
/// array tasks run `validate --shard /4` with SLURM_ARRAY_TASK_ID, the `afterok` merge joins
/// their documents' runs and verifies; the merged run verifies, its rows equal the unsharded
/// run's, and the merge job submitted again changes nothing and succeeds.
#[test]
fn slurm_array_and_afterok_merge_run_as_documented() {
    let mut tools = BTreeMap::new();
    let mut missing = Vec::new();
    for t in TOOLS {
        match find_program(t) {
            Some(p) => {
                tools.insert(*t, p);
            }
            None => missing.push(*t),
        }
    }
    if !missing.is_empty() {
        skip(&format!(
            "{} not installed (Debian's slurm-wlm and munge; tools/bootstrap.sh installs them as root)",
            missing.join(", ")
        ));
        return;
    }
    if !rustix::process::geteuid().is_root() {
        skip("the test's Slurm daemons run as root (SlurmUser=root, no slurm account needed)");
        return;
    }
    let t0 = Instant::now();
    let fx = Fx::new();
    // The soak folder as the guide has it: builds/unpatched-asan and builds/patched-asan.
    let (base, _) = stub_build(&fx, "unpatched-asan", STUB_ENGINE_OK_C);
    let (cand, _) = stub_build(&fx, "patched-asan", STUB_ENGINE_OK_C);
    let soak = fx.dir.path().to_path_buf();
    let slurm = Slurm::start(tools);
    let started = t0.elapsed();

    let scripts = repo_root().join("docs/guide/slurm");
    let rows = "8";
    let env = |c: &mut Command| {
        c.env("SOAK_DIR", &soak)
            .env("PINFORGE", pinforge_exe())
            .env("SOAK_ROWS", rows);
    };
    // What the jobs wrote, for a failure message.
    let job_output = || -> Vec<PathBuf> {
        (0..4)
            .flat_map(|i| [format!("shards/{i}.log"), format!("shards/{i}.json")])
            .chain(["merge.log".to_string()])
            .map(|f| soak.join(f))
            .collect()
    };

    // submit.sh, executed as the guide says (its #! line and mode included).
    let t1 = Instant::now();
    let mut c = slurm.cmd(scripts.join("submit.sh").to_str().expect("utf8"), &soak);
    env(&mut c);
    let o = slurm.run(&mut c);
    assert_eq!(code(&o), 0, "submit.sh: {}", report(&o));
    let merge_job = stdout(&o)
        .trim()
        .split(';')
        .next()
        .unwrap_or("")
        .to_string();
    assert!(
        merge_job.parse::<u64>().is_ok(),
        "submit.sh prints the merge's job id: {}",
        report(&o)
    );
    let end = slurm.wait_job(&merge_job, &soak);
    let jobs_took = t1.elapsed();
    assert!(
        end.starts_with("COMPLETED\n"),
        "the merge job: {end}\n{}",
        slurm.logs(&job_output())
    );
    for i in 0..4 {
        let doc: serde_json::Value = serde_json::from_slice(
            &std::fs::read(soak.join(format!("shards/{i}.json"))).expect("shard document"),
        )
        .unwrap_or_else(|e| panic!("shards/{i}.json: {e}\n{}", slurm.logs(&job_output())));
        assert_eq!(crate::schemas::validate(&doc), "pinforge.validate/v1");
    }

    // The merged run: its document, its verification, its rows against an unsharded run.
    let merged = soak.join(format!("merged-{rows}"));
    let doc_bytes = std::fs::read(soak.join("merged.json")).expect("merged.json");
    let doc: serde_json::Value = serde_json::from_slice(&doc_bytes).expect("merged.json is JSON");
    assert_eq!(crate::schemas::validate(&doc), "pinforge.validate-merge/v1");
    assert_eq!(doc["shards"].as_array().map(Vec::len), Some(4), "{doc}");
    assert_eq!(doc["arms"][0]["rows"], 8, "{doc}");
    let o = fx.run(&[
        "verify",
        merged.join("evidence.json").to_str().expect("utf8"),
    ]);
    assert_eq!(code(&o), 0, "{}", report(&o));
    let o = fx.run(&[
        "validate",
        base.to_str().expect("utf8"),
        cand.to_str().expect("utf8"),
        "--rows",
        rows,
        "--seed",
        "7",
        "--json",
    ]);
    assert_eq!(code(&o), 0, "{}", report(&o));
    let whole = crate::json(&o);
    let want = row_facts(&crate::common::shard::run_dir(&whole));
    assert_eq!(want.len(), 16);
    assert_eq!(
        row_facts(&merged),
        want,
        "merged rows equal the unsharded run's"
    );
    assert_eq!(doc["verdict"], whole["verdict"]);

    // The merge job again (as a re-run after a failure elsewhere would): nothing changes.
    let before = listing(&merged);
    let t2 = Instant::now();
    let mut c = slurm.cmd("sbatch", &soak);
    c.args(["--parsable"]).arg(scripts.join("merge.sbatch"));
    env(&mut c);
    let o = slurm.run(&mut c);
    assert_eq!(code(&o), 0, "sbatch merge.sbatch: {}", report(&o));
    let again = stdout(&o)
        .trim()
        .split(';')
        .next()
        .unwrap_or("")
        .to_string();
    let end = slurm.wait_job(&again, &soak);
    let rerun_took = t2.elapsed();
    assert!(
        end.starts_with("COMPLETED\n"),
        "the merge job again: {end}\n{}",
        slurm.logs(&job_output())
    );
    assert_eq!(listing(&merged), before, "the merged folder is untouched");
    assert_eq!(
        std::fs::read(soak.join("merged.json")).expect("merged.json"),
        doc_bytes,
        "the same document"
    );
    let log = std::fs::read_to_string(soak.join("merge.log")).expect("merge.log");
    assert!(log.contains("note: unchanged:"), "{log}");
    eprintln!(
        "fleet: Slurm up in {:.1}s (with the stub builds); 4 shards and the merge {:.1}s; the merge again {:.1}s; {:.1}s in all",
        started.as_secs_f64(),
        jobs_took.as_secs_f64(),
        rerun_took.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// The guide's Indexed Job (`docs/guide/k8s/soak-job.yaml`) against the Kubernetes Job schema
/// (`kubernetes-validate`, pinned by tools/bootstrap.sh, ships the schemas): no cluster runs it
/// here, so its fields and types are what is checked. `--strict` refuses unknown fields too.
#[test]
fn kubernetes_indexed_job_yaml_is_a_valid_job() {
    let validator = repo_root().join(".tools/bin/kubernetes-validate");
    if !validator.is_file() {
        skip("kubernetes-validate is not in .tools/bin (run tools/bootstrap.sh)");
        return;
    }
    let yaml = repo_root().join("docs/guide/k8s/soak-job.yaml");
    let dir = tempfile::tempdir().expect("tempdir");
    let check = |file: &Path| {
        in_test_env(validator.to_str().expect("utf8"), dir.path())
            .args(["--strict", "--kubernetes-version", "1.37.0"])
            .arg(file)
            .output()
            .expect("run kubernetes-validate")
    };
    let o = check(&yaml);
    assert_eq!(code(&o), 0, "{}", report(&o));
    assert!(
        stdout(&o).contains("passed for resource job/soak-1002"),
        "{}",
        report(&o)
    );
    // The checker does check: a misspelt field and a wrong type are refused.
    let text = std::fs::read_to_string(&yaml).expect("yaml");
    for (from, to) in [
        ("completionMode: Indexed", "completionMod: Indexed"),
        ("completions: 4", "completions: four"),
    ] {
        assert!(text.contains(from), "{from}");
        let bad = dir.path().join("bad.yaml");
        std::fs::write(&bad, text.replace(from, to)).expect("write");
        let o = check(&bad);
        assert_eq!(code(&o), 1, "{to}: {}", report(&o));
    }
}
