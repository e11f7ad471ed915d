//! `--sign KEY` on build, flip, ablate, validate and install, its environment variable and
//! config file (issue #24): each record is checked by `ssh-keygen -Y verify` (no pinforge code
//! in the verifying path); `sign FILE` killed at each step and refusing what is not a regular
//! file; `verify --installed --allowed-signers` requiring a signed receipt for the layer.

pub(crate) use crate::common::sign_with::{key, need_ssh_keygen, s, ssh_verified};
use crate::{code, json, pinforge, pinforge_cmd, stderr, stdout};
use crate::{synthetic_build, Tiny};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn receipts(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root.join("receipts"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.retain(|n| n.ends_with("-install.json"));
    v.sort();
    v
}

#[test]
fn install_signs_its_receipt_from_flag_env_or_config_and_verify_installed_requires_it() {
    if !need_ssh_keygen() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path();
    let root = ws.join("root");
    let (a, a_signers) = key(ws, "a");
    let (b, b_signers) = key(ws, "b");
    let (c, c_signers) = key(ws, "c");
    let config = ws.join("xdg");
    std::fs::create_dir_all(config.join("pinforge")).expect("mkdir");
    std::fs::write(
        config.join("pinforge/config.toml"),
        format!("[sign]\nkey = \"{}\"\n", c.display()),
    )
    .expect("config");
    let install = |n: usize, env: &[(&str, &str)], extra: &[&str]| {
        let m = synthetic_build(&ws.join(format!("b{n}")), &[("lib/x.so", 512 + n)]);
        let mut cmd = pinforge_cmd(ws);
        cmd.args([
            "install",
            s(&m),
            "--layer",
            "live",
            "--root",
            s(&root),
            "--json",
        ]);
        cmd.args(extra).envs(env.iter().copied());
        cmd.output().expect("run")
    };
    let xdg = ("XDG_CONFIG_HOME", s(&config));
    let b_env = ("PINFORGE_SIGN_KEY", s(&b));
    // Flag over environment over config; then environment over config; then config alone.
    for (n, env, extra, signers, name) in [
        (1, vec![xdg, b_env], vec!["--sign", s(&a)], &a_signers, "a"),
        (2, vec![xdg, b_env], vec![], &b_signers, "b"),
        (3, vec![xdg], vec![], &c_signers, "c"),
    ] {
        let o = install(n, &env, &extra);
        assert_eq!(code(&o), 0, "install {n}: {}", stderr(&o));
        let receipt = PathBuf::from(json(&o)["receipt"].as_str().expect("receipt"));
        assert!(
            ssh_verified(&receipt, signers, name),
            "receipt {n} by {name}"
        );
        let o = pinforge(
            ws,
            &[
                "verify",
                "--installed",
                "live",
                "--root",
                s(&root),
                "--allowed-signers",
                s(signers),
            ],
        );
        assert_eq!(code(&o), 0, "verify {n}: {} {}", stdout(&o), stderr(&o));
        assert!(
            stdout(&o).contains(&format!("installed by {name}@example.org")),
            "{}",
            stdout(&o)
        );
        // The --json document names the signer too, and matches its schema.
        let o = pinforge(
            ws,
            &[
                "verify",
                "--installed",
                "live",
                "--root",
                s(&root),
                "--allowed-signers",
                s(signers),
                "--json",
            ],
        );
        assert_eq!(code(&o), 0, "verify --json {n}: {}", stderr(&o));
        let j = json(&o);
        assert_eq!(
            crate::schemas::validate(&j),
            "pinforge.verify-installed-signed/v1"
        );
        assert_eq!(
            j["signature"]["principals"],
            serde_json::json!([format!("{name}@example.org")]),
            "{j}"
        );
        assert_eq!(
            Path::new(j["receipt"].as_str().expect("receipt")).file_name(),
            receipt.file_name(),
            "{j}"
        );
        assert_eq!(j["ok"], true, "{j}");
    }
    // The layer's receipt is c's: a's policy refuses it, naming the key as unknown.
    let o = pinforge(
        ws,
        &[
            "verify",
            "--installed",
            "live",
            "--root",
            s(&root),
            "--allowed-signers",
            s(&a_signers),
        ],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("not in"), "{}", stderr(&o));
    // An unsigned install: the layer's receipt has no signature.
    let o = install(4, &[], &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = pinforge(
        ws,
        &[
            "verify",
            "--installed",
            "--root",
            s(&root),
            "--allowed-signers",
            s(&a_signers),
        ],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("unsigned"), "{}", stderr(&o));
    // Killed after the sidecars were staged, and after they were renamed: no receipt appears
    // (let alone an unsigned one), and the layer is not vouched for. A signed install
    // afterwards recovers the root (the interrupted receipt is written, signed) and the
    // layer is vouched for again.
    use pinforge_base::txn::Step as _;
    use pinforge_record::sign::record::SignRecordStep;
    let steps = SignRecordStep::ALL.iter().zip([5, 7]);
    assert_eq!(
        steps.len(),
        SignRecordStep::ALL.len(),
        "one install per step"
    );
    for (step, n) in steps {
        let at = &step.crash_at();
        let before = receipts(&root);
        let o = install(n, &[("PINFORGE_CRASH_AT", at)], &["--sign", s(&a)]);
        assert_eq!(o.status.signal(), Some(9), "{at}: {}", stderr(&o));
        assert_eq!(receipts(&root), before, "{at}: no new receipt");
        let verify_a = || {
            pinforge(
                ws,
                &[
                    "verify",
                    "--installed",
                    "live",
                    "--root",
                    s(&root),
                    "--allowed-signers",
                    s(&a_signers),
                ],
            )
        };
        let o = verify_a();
        assert_ne!(code(&o), 0, "{at}: {} {}", stdout(&o), stderr(&o));
        // Killed with the sidecars staged, their temp files are left (renamed at :2, none).
        assert_eq!(
            sign_temps(&root.join("receipts")).len(),
            if at == "sign-record:1" { 2 } else { 0 },
            "{at}"
        );
        let o = install(n + 1, &[], &["--sign", s(&a)]);
        assert_eq!(code(&o), 0, "{at}: {}", stderr(&o));
        // The signed install removed the killed run's staged sidecars.
        assert_eq!(
            sign_temps(&root.join("receipts")),
            Vec::<String>::new(),
            "{at}"
        );
        let o = verify_a();
        assert_eq!(code(&o), 0, "{at}: {} {}", stdout(&o), stderr(&o));
    }
}

/// The signing temp files in `dir`, sorted.
fn sign_temps(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("ls")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".pinforge-tmp-sign-"))
        .collect();
    v.sort();
    v
}

#[test]
fn sign_is_one_transaction_killed_at_each_step_and_refuses_links_fifos_and_folders() {
    if !need_ssh_keygen() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path();
    let (k, signers) = key(ws, "k");
    let m = synthetic_build(&ws.join("b"), &[("lib/x.so", 64)]);
    let verify = || pinforge(ws, &["verify", s(&m), "--allowed-signers", s(&signers)]);
    let sign = |at: Option<&str>| {
        let mut c = pinforge_cmd(ws);
        c.args(["sign", s(&m), "--key", s(&k)]);
        if let Some(at) = at {
            c.env("PINFORGE_CRASH_AT", at);
        }
        c.output().expect("run")
    };
    let env = PathBuf::from(format!("{}.dsse.json", m.display()));
    let sig = PathBuf::from(format!("{}.sig", m.display()));
    // Each step of the library's SignStep is killed below: a new step needs its kill here.
    use pinforge_base::txn::Step;
    use pinforge_record::sign::SignStep;
    assert_eq!(
        SignStep::ALL.len(),
        3,
        "a new step of sign needs its kill here"
    );
    // sign:1: both staged, nothing renamed.
    let o = sign(Some(&SignStep::Staged.crash_at()));
    assert_eq!(o.status.signal(), Some(9), "{}", stderr(&o));
    assert!(!env.exists() && !sig.exists());
    let o = verify();
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("unsigned"), "{}", stderr(&o));
    // sign:2: the SSHSIG is in place, the envelope (the commit point) is not: still unsigned.
    let o = sign(Some(&SignStep::SigRenamed.crash_at()));
    assert_eq!(o.status.signal(), Some(9), "{}", stderr(&o));
    assert!(sig.exists() && !env.exists());
    assert_eq!(code(&verify()), 1);
    // sign:3: both renamed; signed, by OpenSSH's verdict and by pinforge's.
    let o = sign(Some(&SignStep::EnvelopeRenamed.crash_at()));
    assert_eq!(o.status.signal(), Some(9), "{}", stderr(&o));
    assert!(ssh_verified(&m, &signers, "k"));
    assert_eq!(code(&verify()), 0, "{}", stderr(&verify()));
    // After all three kills nothing is left: each kill leaves its staged temp files (sign:1
    // both, sign:2 the envelope's), and the next sign in the folder removes them under its
    // lock, since their writer is gone.
    assert_eq!(sign_temps(&ws.join("b")), Vec::<String>::new());
    let o = sign(Some(&SignStep::Staged.crash_at()));
    assert_eq!(o.status.signal(), Some(9), "{}", stderr(&o));
    assert_eq!(
        sign_temps(&ws.join("b")).len(),
        2,
        "sign:1's two staged files"
    );
    // A live writer's temp file (this test process stands for one) and another writer's
    // own temp file are not sign's to remove.
    let live = ws
        .join("b")
        .join(format!(".pinforge-tmp-sign-{}-x", std::process::id()));
    let other = ws.join("b").join(".pinforge-tmp-other");
    std::fs::write(&live, b"x").expect("write");
    std::fs::write(&other, b"x").expect("write");
    let o = sign(None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        sign_temps(&ws.join("b")),
        vec![live
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned()]
    );
    assert!(other.exists());
    assert_eq!(code(&verify()), 0, "{}", stderr(&verify()));
    std::fs::remove_file(&live).expect("rm");
    std::fs::remove_file(&other).expect("rm");

    // What is not a regular file is refused with exit 2 and nothing written beside it.
    let link = ws.join("link.json");
    std::os::unix::fs::symlink(&m, &link).expect("symlink");
    let fifo = ws.join("fifo.json");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo")
        .success());
    let folder = ws.join("folder.json");
    std::fs::create_dir(&folder).expect("mkdir");
    for (p, kind) in [
        (&link, "a symlink"),
        (&fifo, "a FIFO"),
        (&folder, "a folder"),
    ] {
        let o = pinforge(ws, &["sign", s(p), "--key", s(&k)]);
        assert_eq!(code(&o), 2, "{kind}: {}", stderr(&o));
        assert!(stderr(&o).contains(kind), "{kind}: {}", stderr(&o));
        assert!(
            !PathBuf::from(format!("{}.sig", p.display())).exists(),
            "{kind}"
        );
        assert!(
            !PathBuf::from(format!("{}.dsse.json", p.display())).exists(),
            "{kind}"
        );
    }
}

#[test]
fn build_and_flip_sign_their_records_and_a_cached_build_is_signed_from_the_environment() {
    if !need_ssh_keygen() {
        return;
    }
    let t = Tiny::new();
    let (k, signers) = key(&t.ws, "k");
    let o = pinforge(
        &t.ws,
        &[
            "build",
            "recipes/tiny.toml",
            "--variant",
            "patched",
            "--sign",
            s(&k),
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let manifest = PathBuf::from(json(&o)["manifest"].as_str().expect("manifest"));
    assert!(ssh_verified(&manifest, &signers, "k"), "build manifest");
    // A cached build keeps its manifest and signs it as it stands (key from the environment).
    std::fs::remove_file(format!("{}.sig", manifest.display())).expect("rm sig");
    let o = pinforge_cmd(&t.ws)
        .env("PINFORGE_SIGN_KEY", &k)
        .args([
            "build",
            "recipes/tiny.toml",
            "--variant",
            "patched",
            "--json",
        ])
        .output()
        .expect("run");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json(&o)["cached"], true);
    assert!(ssh_verified(&manifest, &signers, "k"), "cached manifest");
    let o = pinforge(
        &t.ws,
        &["verify", s(&manifest), "--allowed-signers", s(&signers)],
    );
    assert_eq!(code(&o), 0, "{} {}", stdout(&o), stderr(&o));

    let path = t.ws.join("recipes/tiny.toml");
    let mut text = std::fs::read_to_string(&path).expect("recipe");
    text.push_str("[variants.broken]\ncmake = { CMAKE_C_FLAGS = \"-fpinforge-no-such-flag\" }\n");
    std::fs::write(&path, text).expect("write recipe");
    let o = pinforge(
        &t.ws,
        &[
            "flip",
            "recipes/tiny.toml",
            "--from",
            "patched",
            "--to",
            "broken",
            "--hypothesis",
            "the C flags are the defect",
            "--sign",
            s(&k),
            "--json",
        ],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let record = PathBuf::from(json(&o)["record"].as_str().expect("record"));
    assert!(ssh_verified(&record, &signers, "k"), "flip record");
}

#[test]
fn ablate_signs_its_record() {
    if !need_ssh_keygen() {
        return;
    }
    let t = Tiny::new();
    let (k, signers) = key(&t.ws, "k");
    let o = pinforge(
        &t.ws,
        &[
            "ablate",
            "recipes/tiny.toml",
            "--variant",
            "patched",
            "--sign",
            s(&k),
            "--json",
        ],
    );
    assert!(matches!(code(&o), 0 | 1), "{}", stderr(&o));
    let record = PathBuf::from(json(&o)["record"].as_str().expect("record"));
    assert!(ssh_verified(&record, &signers, "k"), "ablation record");
}
