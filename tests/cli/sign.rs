//! `key generate`, `sign` and `verify --allowed-signers` (issue #24): a signed build manifest is
//! checked by stock tools with no pinforge code in the verifying path (`ssh-keygen -Y verify`
//! over the detached SSHSIG, `openssl pkeyutl -verify -rawin` over the DSSE PAE rebuilt in
//! shell), then by pinforge's own policy check; every tampering is refused with exit 1 naming it.

use crate::{code, pinforge, pinforge_cmd, skip, stderr, stdout, synthetic_build, which};
use std::path::Path;
use std::process::Command;

/// A key pair made by `pinforge key generate` and the `allowed_signers` line that trusts it.
fn keypair(ws: &Path, name: &str, principal: &str) -> std::path::PathBuf {
    let key = ws.join(name);
    let o = pinforge(
        ws,
        &[
            "key",
            "generate",
            "-o",
            key.to_str().expect("utf-8"),
            "--comment",
            principal,
        ],
    );
    assert_eq!(code(&o), 0, "key generate: {}", stderr(&o));
    key
}

/// `principal namespaces="pinforge" <pubkey>`: git's allowed_signers format.
fn allowed_signers(ws: &Path, file: &str, principal: &str, key: &Path) -> std::path::PathBuf {
    let pubkey = std::fs::read_to_string(key.with_extension("pub"))
        .or_else(|_| std::fs::read_to_string(format!("{}.pub", key.display())))
        .expect("read .pub");
    let mut parts = pubkey.split_whitespace();
    let (kt, kb) = (parts.next().expect("type"), parts.next().expect("key"));
    let p = ws.join(file);
    std::fs::write(
        &p,
        format!("{principal} namespaces=\"pinforge\" {kt} {kb}\n"),
    )
    .expect("write");
    p
}

fn sh(script: &str, dir: &Path) -> std::process::Output {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .expect("sh")
}

#[test]
fn a_signed_manifest_is_verified_by_ssh_keygen_openssl_and_pinforge_and_tampering_is_named() {
    for tool in ["ssh-keygen", "openssl", "base64", "jq"] {
        if which(tool).is_none() {
            return skip(&format!("{tool} is not on PATH"));
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path();
    let manifest = synthetic_build(&ws.join("b"), &[("lib/liba.so", 4096), ("include/a.h", 16)]);
    let key = keypair(ws, "builder_ed25519", "builder@example.org");
    let signers = allowed_signers(ws, "allowed_signers", "builder@example.org", &key);

    let o = pinforge(
        ws,
        &[
            "sign",
            manifest.to_str().expect("utf-8"),
            "--key",
            key.to_str().expect("utf-8"),
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "sign: {}", stderr(&o));
    assert_eq!(
        crate::schemas::validate(&crate::json(&o)),
        "pinforge.sign/v1"
    );
    let envelope = ws.join("b/manifest.json.dsse.json");
    let sig = ws.join("b/manifest.json.sig");
    assert!(
        envelope.is_file() && sig.is_file(),
        "sidecars: {}",
        stdout(&o)
    );

    // 1. OpenSSH's own verifier over the file's bytes (the mechanism git uses).
    let o = sh(
        "ssh-keygen -Y verify -f ../allowed_signers -I builder@example.org -n pinforge \
         -s manifest.json.sig < manifest.json",
        &ws.join("b"),
    );
    assert!(
        o.status.success(),
        "ssh-keygen: {} {}",
        stdout(&o),
        stderr(&o)
    );

    // 2. openssl over the DSSE PAE, rebuilt with printf from the envelope; the raw Ed25519 key is
    //    the last 32 bytes of the OpenSSH public blob, wrapped in the fixed SPKI DER prefix
    //    (30 2a 30 05 06 03 2b 65 70 03 21 00, written in octal: POSIX printf has no \x).
    let pae_check = r#"set -e
        t=$(jq -r .payloadType manifest.json.dsse.json)
        jq -r .payload manifest.json.dsse.json | base64 -d > body.bin
        jq -r '.signatures[0].sig' manifest.json.dsse.json | base64 -d > sig.bin
        printf 'DSSEv1 %d %s %d ' "${#t}" "$t" "$(wc -c < body.bin)" > pae.bin
        cat body.bin >> pae.bin
        cmp body.bin manifest.json
        awk '{print $2}' ../builder_ed25519.pub | base64 -d | tail -c 32 > raw.bin
        { printf '\060\052\060\005\006\003\053\145\160\003\041\000'; cat raw.bin; } > pub.der
        openssl pkey -pubin -inform DER -in pub.der -out pub.pem
        openssl pkeyutl -verify -pubin -inkey pub.pem -rawin -in pae.bin -sigfile sig.bin"#;
    let o = sh(pae_check, &ws.join("b"));
    assert!(o.status.success(), "openssl: {} {}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("Signature Verified Successfully"),
        "{}",
        stdout(&o)
    );

    // 3. pinforge's policy check names the signer.
    let m = manifest.to_str().expect("utf-8");
    let s = signers.to_str().expect("utf-8");
    let o = pinforge(ws, &["verify", m, "--allowed-signers", s]);
    assert_eq!(code(&o), 0, "verify: {} {}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("builder@example.org"), "{}", stdout(&o));
    let o = pinforge(ws, &["verify", m, "--allowed-signers", s, "--json"]);
    assert_eq!(code(&o), 0, "verify --json: {} {}", stdout(&o), stderr(&o));
    let j = crate::json(&o);
    assert_eq!(crate::schemas::validate(&j), "pinforge.verify-signed/v1");

    // A key the policy does not trust: exit 1, naming the key.
    let other = keypair(ws, "stranger_ed25519", "stranger@example.org");
    let foreign = allowed_signers(ws, "foreign_signers", "stranger@example.org", &other);
    let o = pinforge(
        ws,
        &[
            "verify",
            m,
            "--allowed-signers",
            foreign.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(code(&o), 1, "foreign key: {} {}", stdout(&o), stderr(&o));

    // One flipped byte in the signature of the envelope: exit 1.
    let pristine = std::fs::read(&envelope).expect("read");
    let mut env: serde_json::Value = serde_json::from_slice(&pristine).expect("json");
    let sig_b64 = env["signatures"][0]["sig"]
        .as_str()
        .expect("sig")
        .to_string();
    let mut chars: Vec<char> = sig_b64.chars().collect();
    chars[4] = if chars[4] == 'A' { 'B' } else { 'A' };
    env["signatures"][0]["sig"] = serde_json::Value::String(chars.into_iter().collect());
    std::fs::write(&envelope, serde_json::to_vec(&env).expect("json")).expect("write");
    let o = pinforge(ws, &["verify", m, "--allowed-signers", s]);
    assert_eq!(
        code(&o),
        1,
        "bad envelope sig: {} {}",
        stdout(&o),
        stderr(&o)
    );
    std::fs::write(&envelope, &pristine).expect("restore");

    // A payloadType that is not in-toto's: exit 1.
    let mut env: serde_json::Value = serde_json::from_slice(&pristine).expect("json");
    env["payloadType"] = serde_json::Value::String("text/plain".into());
    std::fs::write(&envelope, serde_json::to_vec(&env).expect("json")).expect("write");
    let o = pinforge(ws, &["verify", m, "--allowed-signers", s]);
    assert_eq!(code(&o), 1, "payloadType: {} {}", stdout(&o), stderr(&o));
    std::fs::write(&envelope, &pristine).expect("restore");

    // One flipped byte in the signed file: pinforge and ssh-keygen both refuse it.
    let bytes = std::fs::read(&manifest).expect("read");
    let mut tampered = bytes.clone();
    let at = tampered.iter().position(|b| *b == b'{').expect("brace") + 1;
    tampered.insert(at, b' ');
    std::fs::write(&manifest, &tampered).expect("write");
    let o = pinforge(ws, &["verify", m, "--allowed-signers", s]);
    assert_eq!(code(&o), 1, "tampered file: {} {}", stdout(&o), stderr(&o));
    let o = sh(
        "ssh-keygen -Y verify -f ../allowed_signers -I builder@example.org -n pinforge \
         -s manifest.json.sig < manifest.json",
        &ws.join("b"),
    );
    assert!(!o.status.success(), "ssh-keygen accepted a tampered file");
    std::fs::write(&manifest, &bytes).expect("restore");

    // Unsigned: exit 1 when a policy is given.
    std::fs::remove_file(&envelope).expect("rm");
    std::fs::remove_file(&sig).expect("rm");
    let o = pinforge(ws, &["verify", m, "--allowed-signers", s]);
    assert_eq!(code(&o), 1, "unsigned: {} {}", stdout(&o), stderr(&o));
    // Without a policy the re-hash alone still passes.
    let o = pinforge(ws, &["verify", m]);
    assert_eq!(code(&o), 0, "plain verify: {} {}", stdout(&o), stderr(&o));
}

#[test]
fn key_generate_writes_0600_and_0644_and_never_overwrites() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path();
    let key = keypair(ws, "k_ed25519", "ops@example.org");
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&key), 0o600);
    assert_eq!(mode(Path::new(&format!("{}.pub", key.display()))), 0o644);
    let before = std::fs::read(&key).expect("read");
    let o = pinforge_cmd(ws)
        .args(["key", "generate", "-o", key.to_str().expect("utf-8")])
        .output()
        .expect("run");
    assert_ne!(code(&o), 0, "overwrote a key: {}", stdout(&o));
    assert_eq!(
        std::fs::read(&key).expect("read"),
        before,
        "the key changed"
    );
}
