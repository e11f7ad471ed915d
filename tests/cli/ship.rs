//! Shipping builds through a real OCI registry (issue #24): `push` to Debian's
//! `docker-registry` (distribution 2.8, no referrers API: the tag-schema fallback) on a free
//! loopback port, `pull` into a second workspace, `install oci://…@sha256:…` into a fresh root,
//! read back independently with `skopeo` and raw HTTP; and the refusals (a tampered blob, a
//! key not in allowed_signers, an unsigned artifact under a policy, a moved tag, an escaping
//! layer path), each exit 1 with the install root unchanged.

pub(crate) use crate::common::ship::{push, Registry};
use crate::{code, listing, pinforge, pinforge_cmd, stderr, stdout, synthetic_build, which};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A key pair and an allowed_signers file naming it as `principal`.
fn keypair(dir: &Path, name: &str, principal: &str) -> Option<(PathBuf, PathBuf)> {
    if which("ssh-keygen").is_none() {
        crate::skip("ssh-keygen is not installed");
        return None;
    }
    let key = dir.join(name);
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", principal, "-f"])
        .arg(&key)
        .status()
        .expect("ssh-keygen");
    assert!(st.success());
    let pubkey = std::fs::read_to_string(key.with_extension("pub")).unwrap_or_else(|_| {
        std::fs::read_to_string(format!("{}.pub", key.display())).expect("pub")
    });
    let allowed = dir.join(format!("{name}.allowed_signers"));
    std::fs::write(&allowed, format!("{principal} {pubkey}")).expect("allowed");
    Some((key, allowed))
}

/// `pinforge sign` the manifest: the DSSE envelope and the SSHSIG that push attaches and pull
/// checks with the verifier of `verify --allowed-signers`.
fn sign(key: &Path, manifest: &Path) {
    let o = pinforge(
        manifest.parent().expect("folder"),
        &[
            "sign",
            &manifest.display().to_string(),
            "--key",
            &key.display().to_string(),
        ],
    );
    assert_eq!(code(&o), 0, "sign: {}", stderr(&o));
}

fn synthetic(dir: &Path, name: &str, seed: usize) -> PathBuf {
    let d = dir.join(name);
    synthetic_build(
        &d,
        &[
            ("lib/libsyn.so.1", 70_000 + seed),
            ("include/syn.h", 300 + seed),
        ],
    )
}

#[test]
fn a_build_pushed_pulled_and_installed_by_digest_has_the_original_bytes() {
    let Some(reg) = Registry::start() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((key, allowed)) = keypair(dir.path(), "builder", "builder@example") else {
        return;
    };
    let ws1 = dir.path().join("ws1");
    let ws2 = dir.path().join("ws2");
    std::fs::create_dir_all(&ws2).expect("ws2");
    let m = synthetic(&ws1, "b", 0);
    sign(&key, &m);
    let reference = format!("{}/llama/syn:patched", reg.host());
    let digest = push(&ws1, &m, &reference);
    // Pushing the same build again gives the same artifact (the layer is deterministic).
    assert_eq!(push(&ws1, &m, &reference), digest);

    // Independent readers: raw HTTP sees the artifact and the tag-schema attestation index;
    // skopeo (when installed) reads the manifest and lists the attestation tag.
    let (st, body) = reg.get(&format!("/v2/llama/syn/manifests/sha256:{digest}"));
    assert_eq!(st, 200);
    assert_eq!(crate::sha2_like::digest_hex(body.as_bytes()), digest);
    assert!(
        body.contains("application/vnd.pinforge.build.v1+json"),
        "{body}"
    );
    let (st, index) = reg.get(&format!("/v2/llama/syn/manifests/sha256-{digest}"));
    assert_eq!(st, 200, "attestation tag");
    assert!(
        index.contains("application/vnd.pinforge.signatures.v1"),
        "{index}"
    );
    if which("skopeo").is_some() {
        let o = Command::new("skopeo")
            .args(["inspect", "--tls-verify=false", "--raw"])
            .arg(format!("docker://{reference}"))
            .output()
            .expect("skopeo");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(crate::sha2_like::digest_hex(&o.stdout), digest);
        let o = Command::new("skopeo")
            .args(["list-tags", "--tls-verify=false"])
            .arg(format!("docker://{}/llama/syn", reg.host()))
            .output()
            .expect("skopeo");
        assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("sha256-{digest}")));
    } else {
        crate::skip("skopeo is not installed: the raw HTTP reader checked the artifact alone");
    }

    // Pull into a second workspace: verify accepts what it left.
    let by_digest = format!("{}/llama/syn@sha256:{digest}", reg.host());
    let o = pinforge(
        &ws2,
        &[
            "pull",
            &by_digest,
            "--allowed-signers",
            &allowed.display().to_string(),
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "pull: {}", stderr(&o));
    let j = crate::json(&o);
    assert_eq!(crate::schemas::validate(&j), "pinforge.pull/v1");
    assert_eq!(j["signer"], "builder@example");
    let pulled = PathBuf::from(j["manifest"].as_str().expect("manifest"));
    let pulled = if pulled.is_absolute() {
        pulled
    } else {
        ws2.join(pulled)
    };
    let o = pinforge(&ws2, &["verify", &pulled.display().to_string()]);
    assert_eq!(code(&o), 0, "verify pulled: {}{}", stdout(&o), stderr(&o));

    // install oci:// into a fresh root: verified, and the bytes are the build's.
    let root = dir.path().join("root");
    let oci = format!("oci://{by_digest}");
    let o = pinforge_cmd(&ws2)
        .args(["install", &oci, "--layer", "live", "--allowed-signers"])
        .arg(&allowed)
        .arg("--root")
        .arg(&root)
        .output()
        .expect("install");
    assert_eq!(code(&o), 0, "install: {}", stderr(&o));
    let o = pinforge_cmd(&ws2)
        .args(["verify", "--installed", "live", "--root"])
        .arg(&root)
        .output()
        .expect("verify");
    assert_eq!(code(&o), 0, "verify --installed: {}", stderr(&o));
    for f in ["lib/libsyn.so.1", "include/syn.h"] {
        let a = std::fs::read(ws1.join("b/out").join(f)).expect("original");
        let b = std::fs::read(root.join("live").join(f)).expect("installed");
        assert!(a == b, "{f} differs after shipping");
    }
}

/// A tar whose one entry escapes the destination (`prefix/../../evil`), written by hand: the
/// tar crate refuses to write such a path.
fn escaping_tar() -> Vec<u8> {
    let mut h = [0u8; 512];
    let name = b"prefix/../../evil";
    h[..name.len()].copy_from_slice(name);
    h[100..107].copy_from_slice(b"0000644");
    h[108..115].copy_from_slice(b"0000000");
    h[116..123].copy_from_slice(b"0000000");
    h[124..135].copy_from_slice(b"00000000004");
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| b as u32).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    let mut out = h.to_vec();
    let mut data = b"evil".to_vec();
    data.resize(512, 0);
    out.extend(data);
    out.extend([0u8; 1024]);
    out
}

#[test]
fn tampered_unsigned_foreign_key_moved_tag_and_escaping_layer_are_refused_and_install_nothing() {
    let Some(reg) = Registry::start() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((key, allowed)) = keypair(dir.path(), "builder", "builder@example") else {
        return;
    };
    let Some((other, _)) = keypair(dir.path(), "stranger", "stranger@example") else {
        return;
    };
    let ws1 = dir.path().join("ws1");
    let ws2 = dir.path().join("ws2");
    std::fs::create_dir_all(&ws2).expect("ws2");
    let host = reg.host();
    // A root that already shows a build: "unchanged" is then a real claim.
    let root = dir.path().join("root");
    let base = synthetic(&ws1, "base", 7);
    let o = pinforge_cmd(&ws1)
        .args(["install"])
        .arg(&base)
        .args(["--layer", "live", "--root"])
        .arg(&root)
        .output()
        .expect("install");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let before = listing(&root);
    let install = |reference: &str, why: &str| {
        let o = pinforge_cmd(&ws2)
            .args([
                "install",
                &format!("oci://{reference}"),
                "--layer",
                "live",
                "--allowed-signers",
            ])
            .arg(&allowed)
            .arg("--root")
            .arg(&root)
            .output()
            .expect("install");
        assert_eq!(code(&o), 1, "{why}: {}{}", stdout(&o), stderr(&o));
        assert_eq!(listing(&root), before, "{why}: the install root changed");
        let left: Vec<_> = std::fs::read_dir(ws2.join("pulled"))
            .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{why}: pulled/ holds {left:?}");
        stderr(&o)
    };

    // Unsigned under a policy.
    let m = synthetic(&ws1, "unsigned", 1);
    let d = push(&ws1, &m, &format!("{host}/t/unsigned:v1"));
    let e = install(&format!("{host}/t/unsigned@sha256:{d}"), "unsigned");
    assert!(e.contains("unsigned"), "{e}");

    // Signed by a key that allowed_signers does not name.
    let m = synthetic(&ws1, "foreign", 2);
    sign(&other, &m);
    let d = push(&ws1, &m, &format!("{host}/t/foreign:v1"));
    let e = install(&format!("{host}/t/foreign@sha256:{d}"), "foreign key");
    assert!(e.contains("not in"), "{e}");

    // A tag that moved: pinned A, the tag now names B.
    let a = synthetic(&ws1, "tag-a", 3);
    sign(&key, &a);
    let da = push(&ws1, &a, &format!("{host}/t/moving:v1"));
    let b = synthetic(&ws1, "tag-b", 4);
    sign(&key, &b);
    let db = push(&ws1, &b, &format!("{host}/t/moving:v1"));
    assert_ne!(da, db);
    let e = install(&format!("{host}/t/moving:v1@sha256:{da}"), "moved tag");
    assert!(e.contains("moved"), "{e}");
    // A bare tag is not a pin: exit 2 with the digest to pin in the hint.
    let o = pinforge_cmd(&ws2)
        .args([
            "install",
            &format!("oci://{host}/t/moving:v1"),
            "--layer",
            "live",
            "--root",
        ])
        .arg(&root)
        .output()
        .expect("install");
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("@sha256:{db}")),
        "{}",
        stderr(&o)
    );
    assert_eq!(listing(&root), before);

    // A tampered layer blob in the registry's own storage.
    let t = synthetic(&ws1, "tamper", 5);
    sign(&key, &t);
    let d = push(&ws1, &t, &format!("{host}/t/tamper:v1"));
    let (_, man) = reg.get(&format!("/v2/t/tamper/manifests/sha256:{d}"));
    let man: serde_json::Value = serde_json::from_str(&man).expect("manifest");
    let layer_hex = man["layers"][0]["digest"]
        .as_str()
        .expect("layer")
        .trim_start_matches("sha256:")
        .to_string();
    let blob = reg.blob_file(&layer_hex);
    let mut bytes = std::fs::read(&blob).expect("blob");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&blob, &bytes).expect("tamper");
    let e = install(&format!("{host}/t/tamper@sha256:{d}"), "tampered blob");
    assert!(e.contains(&layer_hex), "{e}");

    // A layer with an escaping path, pushed by hand, with a signed, valid statement.
    let s = synthetic(&ws1, "escape", 6);
    sign(&key, &s);
    let config = std::fs::read(&s).expect("statement");
    let sig = std::fs::read(format!("{}.sig", s.display())).expect("sig");
    let env = std::fs::read(format!("{}.dsse.json", s.display())).expect("envelope");
    let repo = "t/escape";
    let cd = reg.put_blob(repo, &config);
    let tar = escaping_tar();
    let ld = reg.put_blob(repo, &tar);
    let manifest = serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": "application/vnd.pinforge.build.v1+json",
        "config": {"mediaType": "application/vnd.pinforge.build.v1+json", "digest": cd, "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": ld, "size": tar.len()}]
    });
    let mb = serde_json::to_vec(&manifest).expect("json");
    let d = reg.put_manifest(repo, "v1", &mb);
    let sd = reg.put_blob(repo, &sig);
    let dd = reg.put_blob(repo, &env);
    let ed = reg.put_blob(repo, b"{}");
    let att = serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": "application/vnd.pinforge.signatures.v1",
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": ed, "size": 2},
        "layers": [{"mediaType": "application/vnd.pinforge.sshsig.v1", "digest": sd, "size": sig.len()},
                   {"mediaType": "application/vnd.dsse.envelope.v1+json", "digest": dd, "size": env.len()}],
        "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": format!("sha256:{d}"), "size": mb.len()}
    });
    let ab = serde_json::to_vec(&att).expect("json");
    let ad = reg.put_manifest(
        repo,
        &format!("sha256:{}", crate::sha2_like::digest_hex(&ab)),
        &ab,
    );
    let index = serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": format!("sha256:{ad}"), "size": ab.len()}]
    });
    let ib = serde_json::to_vec(&index).expect("json");
    let st = Command::new("curl")
        .args([
            "-sf",
            "-o",
            "/dev/null",
            "-X",
            "PUT",
            "-H",
            "Content-Type: application/vnd.oci.image.index.v1+json",
            "--data-binary",
        ])
        .arg(String::from_utf8(ib).expect("utf8"))
        .arg(format!("http://{host}/v2/{repo}/manifests/sha256-{d}"))
        .status()
        .expect("curl");
    assert!(st.success());
    let e = install(&format!("{host}/{repo}@sha256:{d}"), "escaping layer");
    assert!(e.contains("escapes"), "{e}");
    assert!(!dir.path().join("evil").exists() && !ws2.join("evil").exists());
}

#[test]
fn a_pull_killed_at_every_step_leaves_nothing_or_a_complete_verified_folder() {
    let Some(reg) = Registry::start() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let ws1 = dir.path().join("ws1");
    let m = synthetic(&ws1, "crash", 0);
    let d = push(&ws1, &m, &format!("{}/t/crash:v1", reg.host()));
    let by_digest = format!("{}/t/crash@sha256:{d}", reg.host());
    use pinforge_base::txn::Step;
    use pinforge_deploy::ship::PullStep;
    for &step in PullStep::ALL {
        let step_name = step.crash_at();
        let ws = dir.path().join(format!("ws-{}", step.index()));
        std::fs::create_dir_all(&ws).expect("ws");
        let o = pinforge_cmd(&ws)
            .args(["pull", &by_digest])
            .env("PINFORGE_CRASH_AT", &step_name)
            .output()
            .expect("pull");
        assert_eq!(o.status.code(), None, "{step_name}: killed");
        let done = ws.join("pulled").join(&d);
        if step != PullStep::Committed {
            assert!(!done.exists(), "{step_name}: a partial pull is visible");
        }
        let o = pinforge(&ws, &["pull", &by_digest]);
        assert_eq!(code(&o), 0, "{step_name}: {}", stderr(&o));
        let o = pinforge(
            &ws,
            &["verify", &done.join("manifest.json").display().to_string()],
        );
        assert_eq!(code(&o), 0, "{step_name}: {}", stderr(&o));
        let stages: Vec<_> = std::fs::read_dir(ws.join("pulled"))
            .expect("pulled")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(stages.is_empty(), "{step_name}: a stage was left");
    }
}

#[test]
fn an_unreachable_registry_is_named_after_bounded_retries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let m = synthetic(dir.path(), "b", 0);
    let t = std::time::Instant::now();
    let o = pinforge(
        dir.path(),
        &[
            "push",
            &m.display().to_string(),
            &format!("127.0.0.1:{port}/t/x:v1"),
        ],
    );
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("registry 127.0.0.1:{port}")),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("3 attempts"), "{}", stderr(&o));
    assert!(t.elapsed() < std::time::Duration::from_secs(30));
    // A malformed reference is an input error before any connection.
    let o = pinforge(dir.path(), &["pull", "127.0.0.1:1/../x@sha256:00"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
}
