//! `verify` of a build folder against its manifest: every output re-hashed (and its
//! normalized digest re-derived), every link read back, every input still on disk re-hashed;
//! the files are hashed on all cores, each read once (`base::hashing`).

use super::inputs::{Place, Scope};
use super::{annotation, Mismatch, Statement};
use pinforge_base::digest::{GitOid, Sha256};
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The result of `verify`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct VerifyReport {
    /// No mismatch.
    pub ok: bool,
    /// Every difference.
    pub mismatches: Vec<Mismatch>,
    /// Outputs re-hashed.
    pub outputs_checked: usize,
    /// Inputs re-hashed (those still on disk).
    pub inputs_checked: usize,
    /// Inputs not on disk any more (not an error: a manifest outlives its workspace).
    pub inputs_absent: Vec<String>,
    /// The manifest came from a registry (`pull`): its inputs name another machine's files,
    /// so none was read and every one is in `inputs_absent`.
    pub pulled: bool,
    /// Bytes re-hashed (outputs and inputs), each file read once.
    pub bytes_hashed: u64,
    /// The manifest's input digest.
    pub input_digest: Sha256,
}

/// How an input that is a git work tree (a vendor tree) is checked clean at its commit. This
/// crate reads no git repository itself, so that a host that only verifies records needs no
/// libgit2: the caller that has one passes it (`source::git::GitTrees`).
pub trait TreeCheck: Sync {
    /// Ok when the work tree at `path` is exactly the commit `head`, with no change.
    fn check_clean(&self, path: &Path, head: GitOid) -> Result<()>;
}

/// Re-hash every output and every input still on disk; a tree input is checked with `trees`
/// (None: not checked, nor counted as checked; push and pull pass None, since they judge
/// outputs only, and every command that prints a report passes a check).
pub fn verify(manifest_path: &Path, trees: Option<&dyn TreeCheck>) -> Result<VerifyReport> {
    let st = Statement::read(manifest_path)?;
    let root = st.checked_artifact_root(manifest_path)?;
    let (mut mismatches, out_bytes) = verify_subjects(&st, &root, manifest_path)?;
    mismatches.extend(verify_links(&st, &root)?);
    let (inputs_checked, inputs_absent, in_bytes, pulled) =
        verify_inputs(&st, manifest_path, trees, &mut mismatches)?;
    Ok(VerifyReport {
        ok: mismatches.is_empty(),
        mismatches,
        outputs_checked: st.subject.len(),
        inputs_checked,
        inputs_absent,
        pulled,
        bytes_hashed: out_bytes + in_bytes,
        input_digest: st
            .predicate
            .build_definition
            .internal_parameters
            .input_digest,
    })
}

/// Every subject re-hashed under the artifact root (and its normalized digest re-derived),
/// on all cores; returns the mismatches in the manifest's order and the bytes hashed.
fn verify_subjects(
    st: &Statement,
    root: &Path,
    manifest_path: &Path,
) -> Result<(Vec<Mismatch>, u64)> {
    // First the cheap, ordered part: each subject's digest and where it stands.
    let mut jobs = Vec::new();
    for s in &st.subject {
        let path = root.join(&s.name);
        let expected = s.sha256().ok_or_else(|| {
            Error::input(
                manifest_path.display(),
                format!("subject `{}` has no sha256", s.name),
            )
        })?;
        let present = match walk_inside(root, &s.name)? {
            None => None,
            Some(p) => match std::fs::symlink_metadata(&p) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(Error::io("stat", &p, e)),
                Ok(m) => Some((p, m.len())),
            },
        };
        jobs.push((
            path,
            expected,
            present,
            s.annotations.get(annotation::NORMALIZED),
        ));
    }
    let checked = pinforge_base::hashing::par_map(
        &jobs,
        |(_, _, present, _)| present.as_ref().map_or(0, |(_, len)| *len),
        |(path, expected, present, claimed)| {
            check_subject(path, *expected, present.as_ref().map(|(p, _)| p), *claimed)
        },
    );
    let mut mismatches = Vec::new();
    let mut bytes = 0;
    for c in checked {
        let (m, n) = c?;
        bytes += n;
        mismatches.extend(m);
    }
    Ok((mismatches, bytes))
}

/// One subject checked: `present` is where it stands (None: missing). Returns its mismatch,
/// if any, and the bytes hashed.
fn check_subject(
    path: &Path,
    expected: Sha256,
    present: Option<&PathBuf>,
    claimed: Option<&Value>,
) -> Result<(Option<Mismatch>, u64)> {
    let shown = path.display().to_string();
    let Some(p) = present else {
        return Ok((
            Some(Mismatch {
                path: shown,
                expected: expected.to_string(),
                actual: "missing".into(),
                role: "output".into(),
            }),
            0,
        ));
    };
    // A subject with a normalized digest is read once, into memory: its digest and its
    // normalized digest come from the same bytes.
    let (actual, size, bytes) = match claimed {
        None => {
            let (d, n) = hash_regular(p, false, "artifact")?;
            (d, n, None)
        }
        Some(_) => {
            let bytes = read_regular(p, "artifact")?;
            (Sha256::of_bytes(&bytes), bytes.len() as u64, Some(bytes))
        }
    };
    if actual != expected {
        return Ok((
            Some(Mismatch {
                path: shown,
                expected: expected.to_string(),
                actual: actual.to_string(),
                role: "output".into(),
            }),
            size,
        ));
    }
    if let (Some(claimed), Some(bytes)) = (claimed, bytes) {
        // The bytes are right; the normalized digest a comparison will trust must follow
        // from them by the stated rule, or the manifest lies about noise.
        if let Some(m) = check_normalized(&bytes, claimed) {
            return Ok((Some(Mismatch { path: shown, ..m }), size));
        }
    }
    Ok((None, size))
}

/// Every link among the outputs read back: it must still point where the manifest says.
fn verify_links(st: &Statement, root: &Path) -> Result<Vec<Mismatch>> {
    let mut mismatches = Vec::new();
    for b in &st.predicate.run_details.byproducts {
        if let Some(Value::String(target)) = b.annotations.get(annotation::LINK_TARGET) {
            let path = root.join(&b.name);
            let actual = walk_inside(root, &b.name)?
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
                .and_then(std::fs::read_link)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "missing".into());
            if &actual != target {
                mismatches.push(Mismatch {
                    path: path.display().to_string(),
                    expected: format!("link to {target}"),
                    actual,
                    role: "output".into(),
                });
            }
        }
    }

    Ok(mismatches)
}

/// Every input still on disk re-hashed (a git tree checked clean), on all cores, each path
/// placed by [`Scope`] first (a pulled manifest's none, an escaping or special one refused as
/// a mismatch); returns how many were checked, which are absent, the bytes hashed, and
/// whether the manifest was pulled.
fn verify_inputs(
    st: &Statement,
    manifest_path: &Path,
    trees: Option<&dyn TreeCheck>,
    mismatches: &mut Vec<Mismatch>,
) -> Result<(usize, Vec<String>, u64, bool)> {
    let internal = &st.predicate.build_definition.internal_parameters;
    let scope = Scope::of(manifest_path);
    let mut inputs_absent = Vec::new();
    let mut jobs = Vec::new();
    for dep in &st.predicate.build_definition.resolved_dependencies {
        let Some(local) = internal.inputs.get(&dep.name) else {
            continue;
        };
        if trees.is_none() && is_tree(dep) {
            continue;
        }
        let path = match scope.place(&dep.name, local, is_tree(dep)) {
            Place::Read(p) => p,
            Place::Absent(_) => {
                inputs_absent.push(dep.name.clone());
                continue;
            }
            Place::Refused(why) => {
                mismatches.push(Mismatch {
                    path: local.display().to_string(),
                    expected: format!("input `{}`, a file verify may read", dep.name),
                    actual: format!("refused: {why}"),
                    role: "input".into(),
                });
                continue;
            }
        };
        let len = std::fs::metadata(&path).map_or(0, |m| m.len());
        jobs.push((dep, path, len));
    }
    let checked = pinforge_base::hashing::par_map(
        &jobs,
        |j| j.2,
        |(dep, path, _)| check_input(dep, path, trees),
    );
    let mut bytes = 0;
    for c in checked {
        let (m, n) = c?;
        bytes += n;
        mismatches.extend(m);
    }
    Ok((jobs.len(), inputs_absent, bytes, scope.pulled()))
}

/// The input is a git tree (checked clean at its commit), not a file.
fn is_tree(dep: &super::Resource) -> bool {
    dep.digest.contains_key("gitCommit") && !dep.digest.contains_key("sha256")
}

/// One input on disk checked: a git tree must be clean at its commit, a file must hash to its
/// digest. Returns its mismatch, if any, and the bytes hashed.
fn check_input(
    dep: &super::Resource,
    path: &Path,
    trees: Option<&dyn TreeCheck>,
) -> Result<(Option<Mismatch>, u64)> {
    // An npm pin's upstream names both its tarball (sha256, the file on disk) and the bundle's
    // commit: the input kept is the file, so it is hashed; a tree has a commit only.
    let tree_commit = dep.digest.get("gitCommit").filter(|_| is_tree(dep));
    if let (Some(commit), Some(trees)) = (tree_commit, trees) {
        let head: GitOid = commit.parse()?;
        if let Err(e) = trees.check_clean(path, head) {
            return Ok((
                Some(Mismatch {
                    path: path.display().to_string(),
                    expected: format!("git tree at {commit}, unmodified"),
                    actual: e.to_string(),
                    role: "input".into(),
                }),
                0,
            ));
        }
    } else if let Some(expected) = dep.sha256() {
        let what = format!("input `{}`", dep.name);
        // `path` is the placed, canonical one (no link in it): a link found there now was
        // swapped in after the check, and is not followed.
        let (actual, n) = hash_regular(path, false, &what)?;
        if actual != expected {
            let m = Mismatch {
                path: path.display().to_string(),
                expected: expected.to_string(),
                actual: actual.to_string(),
                role: "input".into(),
            };
            return Ok((Some(m), n));
        }
        return Ok((None, n));
    }
    Ok((None, 0))
}

/// Recompute a subject's normalized digest (`normalized` annotation: `rule`, `sha256`) from its
/// bytes; a mismatch (or a rule this pinforge does not know) is returned for the report.
fn check_normalized(bytes: &[u8], claimed: &Value) -> Option<Mismatch> {
    let rule = claimed.get("rule").and_then(Value::as_str).unwrap_or("");
    let want = claimed.get("sha256").and_then(Value::as_str).unwrap_or("");
    let expected = format!("normalized {want} ({rule})");
    let actual = if rule != crate::normalize::NVCC_TMPXFT {
        format!("unknown normalization rule `{rule}`")
    } else {
        match crate::normalize::normalize(bytes) {
            Some(n) if n.sha256.to_string() == want => return None,
            Some(n) => format!("normalized {} ({rule})", n.sha256),
            None => "the rule does not apply to this file".to_string(),
        }
    };
    Some(Mismatch {
        path: String::new(),
        expected,
        actual,
        role: "output".into(),
    })
}

/// A regular file's bytes (never a FIFO or device, a link not followed).
fn read_regular(path: &Path, what: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    fsx::open_regular(path, what, false)?
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("read", path, e))?;
    Ok(bytes)
}

/// SHA-256 and size of a regular file, opened with [`fsx::open_regular`] (nothing else is read).
pub(super) fn hash_regular(path: &Path, follow: bool, what: &str) -> Result<(Sha256, u64)> {
    Sha256::of_reader(fsx::open_regular(path, what, follow)?, path)
}

/// `root/rel` when no component before the last is a link or a non-folder (`rel` was checked
/// with [`check_relative`]); None when something on the way is missing.
fn walk_inside(root: &Path, rel: &str) -> Result<Option<PathBuf>> {
    let parts: Vec<&str> = rel.split('/').collect();
    let mut cur = root.to_path_buf();
    for (i, c) in parts.iter().enumerate() {
        cur.push(c);
        if i + 1 == parts.len() {
            break;
        }
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::input(
                    cur.display(),
                    format!(
                        "`{rel}` passes through something that is not a folder (a link?); refused"
                    ),
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("stat", &cur, e)),
        }
    }
    Ok(Some(cur))
}
