//! What the fast (`tests/cli/sign_with.rs`) and slow (`tests/llama/sign_with.rs`) tests share.

use crate::which;
use crate::{code, pinforge, stderr};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A key made by `pinforge key generate` and an allowed_signers file trusting it.
pub(crate) fn key(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let key = dir.join(name);
    let principal = format!("{name}@example.org");
    let o = pinforge(
        dir,
        &[
            "key",
            "generate",
            "-o",
            key.to_str().expect("utf-8"),
            "--comment",
            &principal,
        ],
    );
    assert_eq!(code(&o), 0, "key generate: {}", stderr(&o));
    let public = std::fs::read_to_string(format!("{}.pub", key.display())).expect("pub");
    let signers = dir.join(format!("{name}.allowed_signers"));
    std::fs::write(
        &signers,
        format!("{principal} namespaces=\"pinforge\" {public}"),
    )
    .expect("w");
    (key, signers)
}

/// OpenSSH's own verdict on FILE.sig over FILE for the key named `name` (see [`key`]).
pub(crate) fn ssh_verified(file: &Path, signers: &Path, name: &str) -> bool {
    let o = Command::new("ssh-keygen")
        .args(["-Y", "verify", "-n", "pinforge", "-f"])
        .arg(signers)
        .args(["-I", &format!("{name}@example.org"), "-s"])
        .arg(format!("{}.sig", file.display()))
        .stdin(std::fs::File::open(file).expect("open record"))
        .output()
        .expect("ssh-keygen");
    o.status.success()
}

pub(crate) fn need_ssh_keygen() -> bool {
    if which("ssh-keygen").is_none() {
        crate::skip("ssh-keygen is not on PATH");
        return false;
    }
    true
}

pub(crate) fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}
