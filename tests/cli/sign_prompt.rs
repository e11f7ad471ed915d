//! The passphrase prompt of an encrypted signing key (issue #24), driven through a real
//! pseudo-terminal (python3's `pty` module): with PINFORGE_KEY_PASSPHRASE unset and a terminal
//! on stdin and stderr, `sign` asks on the terminal with echo off and signs; a wrong
//! passphrase is exit 2; with no terminal and no variable it refuses at once (exit 2, the
//! hint names the variable) and writes nothing.

use crate::{code, pinforge_cmd, skip, stderr, stdout, which};
use std::path::Path;

/// Runs `EXE sign FILE --key KEY` on a pty, waits for the prompt and for the terminal's echo
/// to be off (the master side reads the slave's termios), types the passphrase, then prints
/// everything the terminal showed and exits with the child's status.
const DRIVER: &str = r#"
import os, pty, select, sys, termios, time
exe, key, rec, pw = sys.argv[1:5]
pid, fd = pty.fork()
if pid == 0:
    os.execv(exe, [exe, "sign", rec, "--key", key])
buf = b""
def pump(until, secs):
    global buf
    end = time.time() + secs
    while not until() and time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                d = os.read(fd, 4096)
            except OSError:
                return False
            if not d:
                return False
            buf += d
    return until()
if not pump(lambda: b"passphrase for" in buf, 60):
    sys.stdout.write("NO PROMPT: " + buf.decode(errors="replace"))
    sys.exit(97)
echo_off = lambda: not (termios.tcgetattr(fd)[3] & termios.ECHO)
if not pump(echo_off, 30):
    sys.stdout.write("ECHO STAYED ON: " + buf.decode(errors="replace"))
    sys.exit(98)
os.write(fd, pw.encode() + b"\n")
pump(lambda: False, 60)
_, st = os.waitpid(pid, 0)
sys.stdout.write(buf.decode(errors="replace"))
sys.exit(os.waitstatus_to_exitcode(st))
"#;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}

#[test]
fn an_encrypted_key_asks_on_the_terminal_and_without_one_is_refused_with_a_hint() {
    if which("python3").is_none() {
        return skip("python3 is not on PATH");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path();
    let key = ws.join("enc_ed25519");
    let o = pinforge_cmd(ws)
        .args([
            "key",
            "generate",
            "-o",
            s(&key),
            "--comment",
            "t@example.org",
        ])
        .env("PINFORGE_KEY_PASSPHRASE", "correct horse")
        .output()
        .expect("key generate");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("(encrypted)"), "{}", stdout(&o));
    let rec = ws.join("record.json");
    std::fs::write(&rec, b"{\"a\":1}\n").expect("write");
    let sig = ws.join("record.json.sig");
    let env_file = ws.join("record.json.dsse.json");

    // No terminal (stdin is /dev/null, stderr a pipe) and no variable: exit 2, nothing written.
    let o = pinforge_cmd(ws)
        .args(["sign", s(&rec), "--key", s(&key)])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("sign");
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no terminal") && stderr(&o).contains("PINFORGE_KEY_PASSPHRASE"),
        "{}",
        stderr(&o)
    );
    assert!(!sig.exists() && !env_file.exists());

    let driven = |pw: &str| {
        crate::in_test_env("python3", ws)
            .args(["-c", DRIVER, crate::pinforge_exe(), s(&key), s(&rec), pw])
            .output()
            .expect("python3")
    };
    // A wrong passphrase typed at the prompt: exit 2 naming the key, nothing written.
    let o = driven("wrong horse");
    assert_eq!(code(&o), 2, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("cannot decrypt"), "{}", stdout(&o));
    assert!(!sig.exists() && !env_file.exists());
    // The right one: signed, and the passphrase never appeared on the terminal.
    let o = driven("correct horse");
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("signed "), "{}", stdout(&o));
    assert!(!stdout(&o).contains("correct horse"), "{}", stdout(&o));
    assert!(sig.exists() && env_file.exists());
}
