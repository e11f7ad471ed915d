//! What the fast (`tests/cli/ship.rs`) and slow (`tests/llama/ship.rs`) tests share.

use crate::{code, pinforge, stderr, which};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// A registry of this test: its own storage folder and port, killed and waited for on drop.
pub(crate) struct Registry {
    pub(crate) child: Child,
    pub(crate) port: u16,
    pub(crate) storage: PathBuf,
    pub(crate) _dir: tempfile::TempDir,
}

impl Registry {
    pub(crate) fn start() -> Option<Registry> {
        if which("docker-registry").is_none() || which("curl").is_none() {
            crate::skip("docker-registry or curl is not installed (tools/bootstrap.sh installs them as root)");
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        let storage = dir.path().join("data");
        let cfg = dir.path().join("config.yml");
        std::fs::write(
            &cfg,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
                storage.display()
            ),
        )
        .expect("config");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&cfg)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("log")).expect("log"))
            .spawn()
            .expect("spawn docker-registry");
        let r = Registry {
            child,
            port,
            storage,
            _dir: dir,
        };
        for _ in 0..100 {
            if r.get("/v2/").0 == 200 {
                return Some(r);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("docker-registry did not answer /v2/ on port {port}");
    }

    pub(crate) fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A raw GET through curl (an independent reader): status and body.
    pub(crate) fn get(&self, path: &str) -> (u16, String) {
        let o = Command::new("curl")
            .args(["-s", "-H", "Accept: application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json", "-w", "\n%{http_code}"])
            .arg(format!("http://{}{path}", self.host()))
            .output()
            .expect("curl");
        let s = String::from_utf8_lossy(&o.stdout).into_owned();
        let (body, status) = s.rsplit_once('\n').unwrap_or(("", "0"));
        (status.trim().parse().unwrap_or(0), body.to_string())
    }

    /// Upload a blob with curl (for crafted artifacts pinforge would never push).
    pub(crate) fn put_blob(&self, repo: &str, bytes: &[u8]) -> String {
        let d = format!("sha256:{}", crate::sha2_like::digest_hex(bytes));
        let o = Command::new("curl")
            .args(["-s", "-D", "-", "-o", "/dev/null", "-X", "POST"])
            .arg(format!("http://{}/v2/{repo}/blobs/uploads/", self.host()))
            .output()
            .expect("curl");
        let head = String::from_utf8_lossy(&o.stdout).into_owned();
        let loc = head
            .lines()
            .find_map(|l| {
                l.strip_prefix("Location: ")
                    .or_else(|| l.strip_prefix("location: "))
            })
            .expect("upload location")
            .trim()
            .to_string();
        let sep = if loc.contains('?') { '&' } else { '?' };
        let tmp = tempfile::NamedTempFile::new().expect("tmp");
        std::fs::write(tmp.path(), bytes).expect("write");
        let st = Command::new("curl")
            .args([
                "-sf",
                "-X",
                "PUT",
                "-H",
                "Content-Type: application/octet-stream",
                "--data-binary",
            ])
            .arg(format!("@{}", tmp.path().display()))
            .arg(format!("{loc}{sep}digest={d}"))
            .status()
            .expect("curl");
        assert!(st.success(), "blob upload");
        d
    }

    pub(crate) fn put_manifest(&self, repo: &str, reference: &str, bytes: &[u8]) -> String {
        let tmp = tempfile::NamedTempFile::new().expect("tmp");
        std::fs::write(tmp.path(), bytes).expect("write");
        let st = Command::new("curl")
            .args([
                "-sf",
                "-o",
                "/dev/null",
                "-X",
                "PUT",
                "-H",
                "Content-Type: application/vnd.oci.image.manifest.v1+json",
                "--data-binary",
            ])
            .arg(format!("@{}", tmp.path().display()))
            .arg(format!(
                "http://{}/v2/{repo}/manifests/{reference}",
                self.host()
            ))
            .status()
            .expect("curl");
        assert!(st.success(), "manifest upload");
        crate::sha2_like::digest_hex(bytes)
    }

    /// The registry's own file holding a blob's bytes.
    pub(crate) fn blob_file(&self, hex: &str) -> PathBuf {
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Nothing is left listening on the port.
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err()
                || std::thread::panicking(),
            "the registry still listens on {}",
            self.port
        );
    }
}

/// Push and return the artifact digest (hex) from `--json`.
pub(crate) fn push(ws: &Path, manifest: &Path, reference: &str) -> String {
    let o = pinforge(
        ws,
        &["push", &manifest.display().to_string(), reference, "--json"],
    );
    assert_eq!(code(&o), 0, "push: {}", stderr(&o));
    let j = crate::json(&o);
    assert_eq!(crate::schemas::validate(&j), "pinforge.push/v1");
    j["digest"].as_str().expect("digest").to_string()
}
