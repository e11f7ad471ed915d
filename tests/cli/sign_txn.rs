//! `key generate` as a transaction (`artifact::sign::keygen`): killed at every step it leaves
//! nothing, or a `.pub` alone that the next run recovers, or the whole pair — never a private
//! key without its `.pub`; the private key is 0600 from its first byte; and a symlink or FIFO
//! at either name is refused (exit 2) with nothing written.

use crate::inputs::mkfifo;
use crate::{code, listing, pinforge, pinforge_cmd, stderr, which};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// The names of `key generate`'s staged temp files in `dir`.
fn temps(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("ls")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".pinforge-tmp-key-"))
        .collect()
}

/// The public key `ssh-keygen` derives from the private key at `key` (type and base64).
fn derived_public(key: &Path) -> String {
    let o = Command::new("ssh-keygen")
        .arg("-y")
        .arg("-f")
        .arg(key)
        .output()
        .expect("ssh-keygen -y");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    first_two(&String::from_utf8_lossy(&o.stdout))
}

fn first_two(line: &str) -> String {
    line.split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

fn generate(dir: &Path, key: &Path) -> std::process::Output {
    pinforge(
        dir,
        &["key", "generate", "-o", key.to_str().expect("utf-8")],
    )
}

#[test]
fn key_generate_killed_at_every_step_never_leaves_a_private_key_without_its_pub() {
    if which("ssh-keygen").is_none() {
        crate::skip("ssh-keygen is not installed");
        return;
    }
    use pinforge_base::txn::Step;
    for &at in pinforge_record::sign::KeyStep::ALL {
        let step = at.index();
        let d = tempfile::tempdir().expect("tempdir");
        let key = d.path().join("k");
        let pubk = d.path().join("k.pub");
        // Someone's own public key with no private key beside it: never ours to remove.
        let theirs = d.path().join("theirs");
        let st = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&theirs)
            .status()
            .expect("ssh-keygen");
        assert!(st.success());
        std::fs::remove_file(&theirs).expect("rm");
        let o = pinforge_cmd(d.path())
            .args(["key", "generate", "-o", key.to_str().expect("utf-8")])
            .env("PINFORGE_CRASH_AT", at.crash_at())
            .output()
            .expect("key generate");
        assert_eq!(o.status.code(), None, "step {step}: killed: {}", stderr(&o));
        assert!(
            !key.exists() || pubk.exists(),
            "step {step}: a private key alone"
        );
        match step {
            1 => {
                assert!(!key.exists() && !pubk.exists(), "step 1: nothing published");
                let t = temps(d.path());
                assert_eq!(t.len(), 2, "step 1: both staged: {t:?}");
                let private = t.iter().find(|n| n.ends_with("-private")).expect("private");
                let mode = std::fs::metadata(d.path().join(private))
                    .expect("stat")
                    .permissions()
                    .mode();
                assert_eq!(
                    mode & 0o777,
                    0o600,
                    "step 1: the staged private key is 0600"
                );
            }
            2 => assert!(!key.exists() && pubk.exists(), "step 2: the .pub alone"),
            _ => {
                assert!(key.exists() && pubk.exists(), "step 3: the pair");
                assert!(temps(d.path()).is_empty(), "step 3: nothing staged is left");
            }
        }
        let o = generate(d.path(), &key);
        if step == 3 {
            // The pair was committed: it is kept, not overwritten.
            assert_eq!(code(&o), 2, "step 3: {}", stderr(&o));
            assert!(stderr(&o).contains("already exists"), "{}", stderr(&o));
        } else {
            assert_eq!(code(&o), 0, "step {step}: the rerun: {}", stderr(&o));
        }
        let pub_text = std::fs::read_to_string(&pubk).expect("pub");
        assert_eq!(
            derived_public(&key),
            first_two(&pub_text),
            "step {step}: a matching pair"
        );
        let mode = std::fs::metadata(&key).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "step {step}");
        assert!(
            temps(d.path()).is_empty(),
            "step {step}: {:?}",
            temps(d.path())
        );
        assert!(
            d.path().join("theirs.pub").exists(),
            "step {step}: their .pub is kept"
        );
    }
}

#[test]
fn a_symlink_or_fifo_at_the_key_path_or_its_pub_is_refused_with_exit_2_and_nothing_written() {
    let cases: [(&str, &str); 4] = [
        ("k", "symlink"),
        ("k.pub", "symlink"),
        ("k", "FIFO"),
        ("k.pub", "FIFO"),
    ];
    for (at, kind) in cases {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join(at);
        let target = d.path().join("target");
        if kind == "FIFO" {
            mkfifo(&p);
        } else {
            std::os::unix::fs::symlink(&target, &p).expect("link");
        }
        let before = listing(d.path());
        let o = generate(d.path(), &d.path().join("k"));
        assert_eq!(code(&o), 2, "{at} {kind}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains(&p.display().to_string()) && err.contains(&format!("a {kind}")),
            "{at} {kind}: {err}"
        );
        assert_eq!(listing(d.path()), before, "{at} {kind}: nothing written");
        assert!(
            !target.exists(),
            "{at} {kind}: nothing written through the link"
        );
    }
}
