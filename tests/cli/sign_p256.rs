//! ECDSA P-256 signing keys (issue #24, for cosign users): `key generate --type p256` writes an
//! OpenSSH ecdsa-sha2-nistp256 pair; `sign` with it writes an SSHSIG that `ssh-keygen -Y
//! verify` accepts and a DSSE envelope whose signature is ECDSA over SHA-256 of the PAE in
//! ASN.1 DER (what `cosign verify-blob --key pub.pem` reads), checked here by `openssl pkeyutl
//! -verify` with the public key exported by `ssh-keygen -e -m PKCS8`: no pinforge code in the
//! verifying path. pinforge's own policy check accepts it and refuses a flipped byte.

use crate::{code, pinforge, skip, stderr, stdout, synthetic_build, which};
use std::path::Path;
use std::process::Command;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}

#[test]
fn a_p256_signed_manifest_is_verified_by_ssh_keygen_openssl_and_pinforge() {
    for tool in ["ssh-keygen", "openssl", "base64", "jq"] {
        if which(tool).is_none() {
            return skip(&format!("{tool} is not on PATH"));
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path();
    let manifest = synthetic_build(&ws.join("b"), &[("lib/liba.so", 4096)]);
    let key = ws.join("builder_ecdsa");
    let o = pinforge(
        ws,
        &[
            "key",
            "generate",
            "--type",
            "p256",
            "-o",
            s(&key),
            "--comment",
            "builder@example.org",
        ],
    );
    assert_eq!(code(&o), 0, "key generate: {}", stderr(&o));
    let public = std::fs::read_to_string(format!("{}.pub", key.display())).expect("pub");
    assert!(public.starts_with("ecdsa-sha2-nistp256 "), "{public}");
    let mut parts = public.split_whitespace();
    let (kt, kb) = (parts.next().expect("type"), parts.next().expect("key"));
    let signers = ws.join("allowed_signers");
    std::fs::write(
        &signers,
        format!("builder@example.org namespaces=\"pinforge\" {kt} {kb}\n"),
    )
    .expect("write");

    let o = pinforge(ws, &["sign", s(&manifest), "--key", s(&key)]);
    assert_eq!(code(&o), 0, "sign: {}", stderr(&o));

    let sh = |script: &str| {
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(ws.join("b"))
            .output()
            .expect("sh")
    };
    // 1. OpenSSH over the file's bytes.
    let o = sh(
        "ssh-keygen -Y verify -f ../allowed_signers -I builder@example.org -n pinforge \
         -s manifest.json.sig < manifest.json",
    );
    assert!(
        o.status.success(),
        "ssh-keygen: {} {}",
        stdout(&o),
        stderr(&o)
    );
    assert!(stdout(&o).contains("ECDSA"), "{}", stdout(&o));
    // 2. openssl: the PAE rebuilt in shell, hashed with SHA-256, and the DER signature checked
    //    against the SPKI PEM that ssh-keygen exports from the .pub (cosign's --key form).
    let pae_check = r#"set -e
        ssh-keygen -e -m PKCS8 -f ../builder_ecdsa.pub > pub.pem
        t=$(jq -r .payloadType manifest.json.dsse.json)
        jq -r .payload manifest.json.dsse.json | base64 -d > body.bin
        jq -r '.signatures[0].sig' manifest.json.dsse.json | base64 -d > sig.der
        printf 'DSSEv1 %d %s %d ' "${#t}" "$t" "$(wc -c < body.bin)" > pae.bin
        cat body.bin >> pae.bin
        cmp body.bin manifest.json
        openssl asn1parse -inform DER -in sig.der > /dev/null
        openssl dgst -sha256 -binary pae.bin > pae.sha256
        openssl pkeyutl -verify -pubin -inkey pub.pem -in pae.sha256 -sigfile sig.der"#;
    let o = sh(pae_check);
    assert!(o.status.success(), "openssl: {} {}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("Signature Verified Successfully"),
        "{}",
        stdout(&o)
    );
    // The same check over a PAE with one flipped byte fails: the check can fail.
    let o = sh(
        "printf X >> pae.bin && openssl dgst -sha256 -binary pae.bin > pae.sha256 && \
         openssl pkeyutl -verify -pubin -inkey pub.pem -in pae.sha256 -sigfile sig.der",
    );
    assert!(!o.status.success(), "openssl accepted a changed PAE");

    // 3. pinforge's policy check.
    let o = pinforge(
        ws,
        &["verify", s(&manifest), "--allowed-signers", s(&signers)],
    );
    assert_eq!(code(&o), 0, "verify: {} {}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("builder@example.org"), "{}", stdout(&o));
    // A flipped byte inside the DER signature's integers: exit 1, naming the key.
    let envelope = ws.join("b/manifest.json.dsse.json");
    let pristine = std::fs::read(&envelope).expect("read");
    let mut env: serde_json::Value = serde_json::from_slice(&pristine).expect("json");
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut der = b64
        .decode(env["signatures"][0]["sig"].as_str().expect("sig"))
        .expect("base64");
    let last = der.len() - 1;
    der[last] ^= 1;
    env["signatures"][0]["sig"] = b64.encode(&der).into();
    std::fs::write(&envelope, serde_json::to_vec(&env).expect("json")).expect("write");
    let o = pinforge(
        ws,
        &["verify", s(&manifest), "--allowed-signers", s(&signers)],
    );
    assert_eq!(code(&o), 1, "bad sig: {} {}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("bad signature by SHA256:"),
        "{}",
        stderr(&o)
    );
}
