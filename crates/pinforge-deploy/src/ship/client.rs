//! The registry client: the few OCI distribution-spec calls push and pull need, over ureq.
//! Plain HTTP goes only to a loopback registry unless the caller opted in; credentials come
//! from the environment (`PINFORGE_REGISTRY_USER` / `PINFORGE_REGISTRY_PASSWORD`) or the
//! Docker config file (`auths.<registry>.auth`, base64 `user:pass`) and are sent only after
//! the registry asks (a 401 challenge: Basic, or a Bearer token fetched from the realm), never
//! written anywhere and never part of an error. Transient failures (no connection, 5xx, 429)
//! are retried a bounded number of times; then the error names the registry.
//!
//! Nothing a registry sends is trusted: a manifest or blob is only returned, or left on disk,
//! after its SHA-256 equals the digest it was asked for and its size the expected one.

use super::reference::Reference;
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// Builds one attempt of a request: the agent, and the Authorization header once learned.
type MakeRequest<'a> = dyn FnMut(
        &ureq::Agent,
        Option<&str>,
    ) -> std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error>
    + 'a;

/// Attempts per request before the registry counts as unreachable.
const ATTEMPTS: u32 = 3;
/// The largest manifest or attestation document read into memory.
pub(crate) const DOC_LIMIT: u64 = 4 << 20;

/// Whether plain HTTP may go to a registry that is not on this machine.
#[derive(Debug, Clone, Copy, Default)]
pub struct Access {
    /// `--insecure-registry`: plain HTTP to any host.
    pub insecure: bool,
}

/// A session with one registry repository.
pub(crate) struct Client {
    agent: ureq::Agent,
    base: String,
    repo: String,
    registry: String,
    creds: Option<(String, String)>,
    /// The Authorization header value learned from a challenge.
    auth: Option<String>,
}

/// A manifest as fetched: its bytes, their digest, and the media type the registry sent.
pub(crate) struct Fetched {
    pub bytes: Vec<u8>,
    pub digest: Sha256,
}

impl Client {
    /// A client for `r`'s repository.
    pub(crate) fn new(r: &Reference, access: Access) -> Result<Client> {
        let scheme = if r.is_loopback() || access.insecure {
            "http"
        } else {
            "https"
        };
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::NativeTls)
            .build();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .tls_config(tls)
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_per_read(Some(Duration::from_secs(120)))
            .max_redirects(5)
            .build()
            .into();
        Ok(Client {
            agent,
            base: format!("{scheme}://{}", r.registry),
            repo: r.repository.clone(),
            registry: r.registry.clone(),
            creds: credentials(&r.registry)?,
            auth: None,
        })
    }

    /// The registry, as errors name it.
    pub(crate) fn registry(&self) -> &str {
        &self.registry
    }

    fn url(&self, tail: &str) -> String {
        format!("{}/v2/{}/{tail}", self.base, self.repo)
    }

    /// One request with bounded retries and the challenge-response login. `make` builds the
    /// request each attempt (a body is re-read from its start).
    fn send(
        &mut self,
        what: &str,
        make: &mut MakeRequest<'_>,
    ) -> Result<ureq::http::Response<ureq::Body>> {
        let mut last = String::new();
        let mut logged_in = false;
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(200 << attempt));
            }
            match make(&self.agent, self.auth.as_deref()) {
                Ok(resp) if resp.status() == 401 && !logged_in => {
                    logged_in = true;
                    let challenge = resp
                        .headers()
                        .get("www-authenticate")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_string();
                    self.auth = Some(self.login(&challenge)?);
                    // The login is not a failed attempt.
                    match make(&self.agent, self.auth.as_deref()) {
                        Ok(r) if r.status().is_server_error() || r.status() == 429 => {
                            last = format!("HTTP {}", r.status())
                        }
                        Ok(r) => return Ok(r),
                        Err(e) => last = e.to_string(),
                    }
                }
                Ok(resp) if resp.status().is_server_error() || resp.status() == 429 => {
                    last = format!("HTTP {}", resp.status());
                }
                Ok(resp) => return Ok(resp),
                Err(e) => last = e.to_string(),
            }
        }
        Err(Error::tool(
            format!("registry {}", self.registry),
            format!("{what}: no answer after {ATTEMPTS} attempts: {last}"),
        )
        .with_hint(format!(
            "is the registry running and reachable at {}? (plain HTTP is used only for loopback unless --insecure-registry)",
            self.base
        )))
    }

    /// Answer a 401 challenge: Basic with the credentials, or a Bearer token from the realm.
    fn login(&mut self, challenge: &str) -> Result<String> {
        use base64::Engine;
        let denied = || {
            Error::check(
                format!("registry {}", self.registry),
                "the registry requires a login and refused the credentials (or none were found)",
            )
            .with_hint("set PINFORGE_REGISTRY_USER and PINFORGE_REGISTRY_PASSWORD, or `docker login` the registry")
        };
        let basic = self.creds.as_ref().map(|(u, p)| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )
        });
        let (scheme, params) = challenge.split_once(' ').unwrap_or((challenge, ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return basic.ok_or_else(denied);
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(denied());
        }
        let param = |k: &str| {
            params.split(',').find_map(|kv| {
                let (a, b) = kv.trim().split_once('=')?;
                (a == k).then(|| b.trim_matches('"').to_string())
            })
        };
        let realm = param("realm").ok_or_else(denied)?;
        let mut req = self.agent.get(&realm);
        for k in ["service", "scope"] {
            if let Some(v) = param(k) {
                req = req.query(k, v);
            }
        }
        if let Some(b) = &basic {
            req = req.header("Authorization", b);
        }
        let mut resp = req.call().map_err(|e| {
            Error::tool(
                format!("registry {} token service", self.registry),
                e.to_string(),
            )
        })?;
        if !resp.status().is_success() {
            return Err(denied());
        }
        let body = resp
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_vec()
            .map_err(|_| denied())?;
        let v: serde_json::Value = serde_json::from_slice(&body).map_err(|_| denied())?;
        let token = v
            .get("token")
            .or_else(|| v.get("access_token"))
            .and_then(|t| t.as_str())
            .ok_or_else(denied)?;
        Ok(format!("Bearer {token}"))
    }

    fn status_error(&self, what: &str, status: u16) -> Error {
        let msg = format!("{what}: HTTP {status}");
        if status == 404 {
            Error::check(format!("registry {}", self.registry), msg)
        } else {
            Error::tool(format!("registry {}", self.registry), msg)
        }
    }

    /// Whether the blob is already in the repository.
    pub(crate) fn has_blob(&mut self, d: &Sha256) -> Result<bool> {
        let url = self.url(&format!("blobs/sha256:{}", d.to_hex()));
        let r = self.send("HEAD blob", &mut |a, auth| {
            let mut q = a.head(&url);
            if let Some(h) = auth {
                q = q.header("Authorization", h);
            }
            q.call()
        })?;
        Ok(r.status().is_success())
    }

    /// Upload a blob (monolithic: POST for a session, PUT with the digest), from a file.
    pub(crate) fn put_blob_file(&mut self, path: &Path, d: &Sha256, size: u64) -> Result<()> {
        if self.has_blob(d)? {
            return Ok(());
        }
        let location = self.start_upload()?;
        let url = upload_url(&location, d);
        let r = self.send("PUT blob", &mut |a, auth| {
            let f = pinforge_base::fsx::open_regular(path, "blob", false)
                .map_err(|e| ureq::Error::Io(std::io::Error::other(e.to_string())))?;
            let mut q = a
                .put(&url)
                .header("Content-Type", "application/octet-stream")
                .header("Content-Length", size.to_string());
            if let Some(h) = auth {
                q = q.header("Authorization", h);
            }
            q.send(ureq::SendBody::from_owned_reader(f))
        })?;
        if r.status() != 201 {
            return Err(self.status_error("PUT blob", r.status().as_u16()));
        }
        Ok(())
    }

    /// Upload a small blob from memory.
    pub(crate) fn put_blob_bytes(&mut self, bytes: &[u8]) -> Result<Sha256> {
        let d = Sha256::of_bytes(bytes);
        if self.has_blob(&d)? {
            return Ok(d);
        }
        let location = self.start_upload()?;
        let url = upload_url(&location, &d);
        let r = self.send("PUT blob", &mut |a, auth| {
            let mut q = a
                .put(&url)
                .header("Content-Type", "application/octet-stream");
            if let Some(h) = auth {
                q = q.header("Authorization", h);
            }
            q.send(bytes)
        })?;
        if r.status() != 201 {
            return Err(self.status_error("PUT blob", r.status().as_u16()));
        }
        Ok(d)
    }

    fn start_upload(&mut self) -> Result<String> {
        let url = self.url("blobs/uploads/");
        let r = self.send("POST upload", &mut |a, auth| {
            let mut q = a.post(&url);
            if let Some(h) = auth {
                q = q.header("Authorization", h);
            }
            q.send_empty()
        })?;
        if r.status() != 202 {
            return Err(self.status_error("POST upload", r.status().as_u16()));
        }
        let loc = r
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                Error::tool(
                    format!("registry {}", self.registry),
                    "upload session without a Location",
                )
            })?;
        // A relative Location is relative to the registry; an absolute one must stay on it
        // (credentials go with the PUT).
        if loc.starts_with('/') {
            Ok(format!("{}{loc}", self.base))
        } else if loc.starts_with(&format!("{}/", self.base)) {
            Ok(loc.to_string())
        } else {
            Err(Error::tool(
                format!("registry {}", self.registry),
                format!(
                    "upload Location `{}` points to another host; refused",
                    loc.escape_debug()
                ),
            ))
        }
    }

    /// PUT a manifest under `reference` (a tag or `sha256:…`); returns its digest.
    pub(crate) fn put_manifest(
        &mut self,
        reference: &str,
        media_type: &str,
        bytes: &[u8],
    ) -> Result<Sha256> {
        let url = self.url(&format!("manifests/{reference}"));
        let r = self.send("PUT manifest", &mut |a, auth| {
            let mut q = a.put(&url).header("Content-Type", media_type);
            if let Some(h) = auth {
                q = q.header("Authorization", h);
            }
            q.send(bytes)
        })?;
        if r.status() != 201 {
            return Err(self.status_error("PUT manifest", r.status().as_u16()));
        }
        Ok(Sha256::of_bytes(bytes))
    }

    /// GET a manifest by tag or digest; None when the registry has none (404). When
    /// `expect` is given the bytes must hash to it.
    pub(crate) fn get_manifest(
        &mut self,
        reference: &str,
        expect: Option<&Sha256>,
    ) -> Result<Option<Fetched>> {
        let url = self.url(&format!("manifests/{reference}"));
        let mut r = self.send("GET manifest", &mut |a, auth| {
            let mut q = a.get(&url).header("Accept", super::ACCEPT_MANIFESTS);
            if let Some(h) = auth {
                q = q.header("Authorization", h);
            }
            q.call()
        })?;
        if r.status() == 404 {
            return Ok(None);
        }
        if !r.status().is_success() {
            return Err(self.status_error("GET manifest", r.status().as_u16()));
        }
        let bytes = read_limited(r.body_mut(), DOC_LIMIT, &self.registry, "manifest")?;
        let digest = Sha256::of_bytes(&bytes);
        if let Some(e) = expect {
            if *e != digest {
                return Err(Error::check(
                    format!("registry {}: manifest sha256:{}", self.registry, e.to_hex()),
                    format!(
                        "the registry sent bytes whose digest is sha256:{}; refused",
                        digest.to_hex()
                    ),
                ));
            }
        }
        Ok(Some(Fetched { bytes, digest }))
    }

    /// The referrers API index for `d`, or None where the registry has no referrers API.
    pub(crate) fn referrers(&mut self, d: &Sha256) -> Result<Option<Vec<u8>>> {
        let url = format!(
            "{}/v2/{}/referrers/sha256:{}",
            self.base,
            self.repo,
            d.to_hex()
        );
        let mut r = self.send("GET referrers", &mut |a, auth| {
            let mut q = a.get(&url).header("Accept", super::MT_INDEX);
            if let Some(h) = auth {
                q = q.header("Authorization", h);
            }
            q.call()
        })?;
        let is_index = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with(super::MT_INDEX));
        if !r.status().is_success() || !is_index {
            return Ok(None);
        }
        Ok(Some(read_limited(
            r.body_mut(),
            DOC_LIMIT,
            &self.registry,
            "referrers",
        )?))
    }

    /// GET a small blob into memory, checked against its digest and size.
    pub(crate) fn get_blob_bytes(&mut self, d: &Sha256, size: u64) -> Result<Vec<u8>> {
        if size > DOC_LIMIT {
            return Err(Error::check(
                format!("registry {}: blob sha256:{}", self.registry, d.to_hex()),
                format!("declared size {size} is larger than a pinforge document may be"),
            ));
        }
        let mut out = Vec::new();
        self.get_blob(d, size, &mut out)?;
        Ok(out)
    }

    /// GET a blob into `sink`, streamed; exactly `size` bytes whose SHA-256 is `d`, or a
    /// check failure naming the blob (the caller discards what `sink` holds).
    pub(crate) fn get_blob(&mut self, d: &Sha256, size: u64, sink: &mut dyn Write) -> Result<()> {
        use sha2::Digest;
        let subject = format!("registry {}: blob sha256:{}", self.registry, d.to_hex());
        let url = self.url(&format!("blobs/sha256:{}", d.to_hex()));
        let mut r = self.send("GET blob", &mut |a, auth| {
            let mut q = a.get(&url);
            if let Some(h) = auth {
                q = q.header("Authorization", h);
            }
            q.call()
        })?;
        if !r.status().is_success() {
            return Err(self.status_error(
                &format!("GET blob sha256:{}", d.to_hex()),
                r.status().as_u16(),
            ));
        }
        let mut reader = r.body_mut().with_config().limit(size + 1).reader();
        let mut hasher = sha2::Sha256::new();
        let mut got = 0u64;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = reader
                .read(&mut buf)
                .map_err(|e| Error::tool(subject.clone(), format!("download failed: {e}")))?;
            if n == 0 {
                break;
            }
            got += n as u64;
            if got > size {
                return Err(Error::check(
                    &subject,
                    format!("longer than its declared {size} bytes; refused"),
                ));
            }
            hasher.update(&buf[..n]);
            sink.write_all(&buf[..n])
                .map_err(|e| Error::io("write", Path::new("blob"), e))?;
        }
        let actual: Sha256 = format!("{:x}", hasher.finalize())
            .parse()
            .expect("invariant: a SHA-256 in hex parses");
        if got != size || actual != *d {
            return Err(Error::check(
                &subject,
                format!(
                    "the registry sent {got} bytes with digest sha256:{}, expected {size} bytes with this digest; refused before anything was unpacked",
                    actual.to_hex()
                ),
            )
            .with_hint("the registry's copy is damaged or was tampered with; push the build again from a verified workspace"));
        }
        Ok(())
    }
}

fn upload_url(location: &str, d: &Sha256) -> String {
    let sep = if location.contains('?') { '&' } else { '?' };
    format!("{location}{sep}digest=sha256:{}", d.to_hex())
}

fn read_limited(body: &mut ureq::Body, limit: u64, registry: &str, what: &str) -> Result<Vec<u8>> {
    body.with_config().limit(limit).read_to_vec().map_err(|e| {
        Error::check(
            format!("registry {registry}"),
            format!("{what}: {e} (limit {limit} bytes)"),
        )
    })
}

/// Credentials for `registry`: the environment first, then `~/.docker/config.json`.
fn credentials(registry: &str) -> Result<Option<(String, String)>> {
    if let (Ok(u), Ok(p)) = (
        std::env::var("PINFORGE_REGISTRY_USER"),
        std::env::var("PINFORGE_REGISTRY_PASSWORD"),
    ) {
        return Ok(Some((u, p)));
    }
    let path = match std::env::var_os("DOCKER_CONFIG") {
        Some(d) => std::path::PathBuf::from(d).join("config.json"),
        None => match std::env::var_os("HOME") {
            Some(h) => std::path::PathBuf::from(h).join(".docker/config.json"),
            None => return Ok(None),
        },
    };
    let Some(bytes) = pinforge_base::fsx::read_if_present(&path)? else {
        return Ok(None);
    };
    docker_auth(&bytes, registry).map_err(|why| {
        // The file holds secrets: the error names the file and the entry, never a value.
        Error::input(path.display(), format!("auths.{registry}: {why}"))
    })
}

/// `auths[registry].auth` of a Docker config document, decoded.
fn docker_auth(
    bytes: &[u8],
    registry: &str,
) -> std::result::Result<Option<(String, String)>, &'static str> {
    use base64::Engine;
    let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|_| "not JSON")?;
    let entry = v.get("auths").and_then(|a| {
        a.get(registry)
            .or_else(|| a.get(format!("https://{registry}").as_str()))
    });
    let Some(auth) = entry.and_then(|e| e.get("auth")).and_then(|a| a.as_str()) else {
        return Ok(None);
    };
    let raw = base64::engine::general_purpose::STANDARD
        .decode(auth)
        .map_err(|_| "`auth` is not base64")?;
    let text = String::from_utf8(raw).map_err(|_| "`auth` is not UTF-8")?;
    let (u, p) = text.split_once(':').ok_or("`auth` is not user:password")?;
    Ok(Some((u.to_string(), p.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_config_auth_is_decoded_and_bad_entries_name_no_secret() {
        let doc = br#"{"auths":{"r.example:5000":{"auth":"dXNlcjpzM2NyZXQ="}}}"#;
        assert_eq!(
            docker_auth(doc, "r.example:5000").expect("ok"),
            Some(("user".into(), "s3cret".into()))
        );
        assert_eq!(docker_auth(doc, "other").expect("ok"), None);
        let e = docker_auth(br#"{"auths":{"r":{"auth":"!!"}}}"#, "r").expect_err("bad");
        assert!(!e.contains("!!"));
        assert!(docker_auth(b"\xff", "r").is_err());
    }

    #[test]
    fn upload_urls_keep_the_session_query() {
        let d = Sha256::of_bytes(b"x");
        assert!(upload_url("http://h/v2/r/blobs/uploads/u?_state=s", &d)
            .contains("?_state=s&digest=sha256:"));
        assert!(upload_url("http://h/v2/r/blobs/uploads/u", &d).contains("/u?digest=sha256:"));
    }
}
