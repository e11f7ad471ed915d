//! The patch bundle: attributed patch files, their `series` order, lint, the bibliography, and
//! application onto a vendor tree (one commit per patch, attribution as trailers).

pub mod apply;
pub mod bundle;
pub(crate) mod diff;
pub mod export;
pub mod header;
pub mod lint;
pub(crate) mod mail;

use header::Header;
use lint::{Attribution, Finding, Severity};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::fsx;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// A patch's identity: its file name inside the bundle (`0001-slug.patch`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct PatchId(String);

impl PatchId {
    /// Validate a series entry or file name: a plain file name, no directories.
    pub(crate) fn new(name: &str) -> std::result::Result<PatchId, String> {
        if name.is_empty()
            || name.contains('/')
            || name.contains('\\')
            || name == "."
            || name == ".."
            || name.starts_with('.')
        {
            return Err(format!(
                "`{name}` is not a patch file name (a plain name inside the bundle folder)"
            ));
        }
        Ok(PatchId(name.to_string()))
    }
    /// The file name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One patch file, read and parsed.
#[derive(Debug, Clone)]
pub struct PatchFile {
    /// File name in the bundle.
    pub id: PatchId,
    /// Where it was read from (for messages); `embedded:` for the built-in bundle.
    pub origin: PathBuf,
    /// The bytes, exactly as on disk (the digest covers them all, header included).
    pub bytes: Vec<u8>,
    /// SHA-256 of the bytes.
    pub sha256: Sha256,
    /// Parsed header.
    pub header: Header,
    /// Validated attribution; None when lint found errors.
    pub attribution: Option<Attribution>,
    /// Lint findings.
    pub findings: Vec<Finding>,
}

impl PatchFile {
    /// Parse a patch from bytes.
    pub(crate) fn from_bytes(id: PatchId, origin: PathBuf, bytes: Vec<u8>) -> PatchFile {
        let header = Header::parse(&bytes);
        let (attribution, findings) = lint::analyze(&header);
        PatchFile {
            id,
            origin,
            sha256: Sha256::of_bytes(&bytes),
            bytes,
            header,
            attribution,
            findings,
        }
    }

    /// Read and parse a patch file.
    pub fn read(path: &Path) -> Result<PatchFile> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let id = PatchId::new(&name).map_err(|m| Error::input(path.display(), m))?;
        // A patch the user named that is not there is their input, not an I/O failure.
        let bytes = match fsx::read_if_present(path)? {
            Some(b) => b,
            None => {
                return Err(Error::input(path.display(), "no such patch file")
                    .with_hint("check the path (`pinforge patch list` shows the bundle's files)"))
            }
        };
        Ok(PatchFile::from_bytes(id, path.to_path_buf(), bytes))
    }

    /// The attribution, or an input error quoting the first lint error.
    pub fn require_attribution(&self) -> Result<&Attribution> {
        self.attribution.as_ref().ok_or_else(|| {
            let first = self.findings.iter().find(|f| f.severity == Severity::Error);
            let (line, msg) = first
                .map(|f| (f.line, f.message.clone()))
                .unwrap_or((1, "attribution header is invalid".into()));
            Error::input(
                format!("{}:{line}", self.origin.display()),
                format!("patch refused: {msg}"),
            )
            .with_hint(format!(
                "run `pinforge patch lint {}` for every finding",
                self.origin.display()
            ))
        })
    }
}

/// A series entry with the line it was read from.
#[derive(Debug, Clone)]
pub struct SeriesEntry {
    /// Patch file name.
    pub id: PatchId,
    /// 1-based line in `series`.
    pub line: usize,
}

/// The patches that ship inside the binary, so that the embedded default recipe builds
/// anywhere (the same files as the repository's `patches/`).
const EMBEDDED: &[(&str, &str)] = &[
    (
        "0001-batch-size-ubatch-reserve-pos-for-mrope.patch",
        include_str!("../../../../patches/0001-batch-size-ubatch-reserve-pos-for-mrope.patch"),
    ),
    (
        "0002-kv-cache-broadcast-restored-mrope-positions.patch",
        include_str!("../../../../patches/0002-kv-cache-broadcast-restored-mrope-positions.patch"),
    ),
    (
        "0003-kv-cache-can-shift-mrope.patch",
        include_str!("../../../../patches/0003-kv-cache-can-shift-mrope.patch"),
    ),
];
const EMBEDDED_SERIES: &str = include_str!("../../../../patches/series");

/// The text of a patch embedded in the binary, by file name (a manifest of the embedded
/// default recipe records no local path for its patches; `report` reads their attribution here).
pub fn embedded_patch(name: &str) -> Option<&'static str> {
    EMBEDDED.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// A bundle of patches with their order.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// The folder, or `embedded:patches` for the built-in bundle.
    pub dir: PathBuf,
    /// Path of the series file (for `file:line` messages).
    pub series_path: PathBuf,
    /// Series order.
    pub series: Vec<SeriesEntry>,
    /// Patches by file name (every `*.patch` in the folder, listed or not).
    pub files: BTreeMap<PatchId, PatchFile>,
}

impl Bundle {
    /// Load a bundle folder: every `*.patch` in it and its `series` file. A missing series
    /// means "all patches in file-name order" (quilt's convention for a fresh folder).
    pub fn load(dir: &Path) -> Result<Bundle> {
        if !dir.is_dir() {
            return Err(Error::input(dir.display(), "patch folder not found")
                .with_hint("create it, or point the recipe's `patches-dir` at your bundle"));
        }
        let mut files = BTreeMap::new();
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| Error::io("read directory", dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "patch" || x == "diff"))
            .collect();
        entries.sort();
        for path in entries {
            let p = PatchFile::read(&path)?;
            files.insert(p.id.clone(), p);
        }
        let series_path = dir.join("series");
        let series = if series_path.exists() {
            parse_series(&series_path, &fsx::read_to_string(&series_path)?)?
        } else {
            files
                .keys()
                .enumerate()
                .map(|(i, id)| SeriesEntry {
                    id: id.clone(),
                    line: i + 1,
                })
                .collect()
        };
        Ok(Bundle {
            dir: dir.to_path_buf(),
            series_path,
            series,
            files,
        })
    }

    /// The bundle compiled into the binary.
    pub fn embedded() -> Result<Bundle> {
        let dir = PathBuf::from("embedded:patches");
        let series_path = dir.join("series");
        let mut files = BTreeMap::new();
        for (name, text) in EMBEDDED {
            let id = PatchId::new(name).map_err(|m| Error::Internal(m.to_string()))?;
            files.insert(
                id.clone(),
                PatchFile::from_bytes(id, dir.join(name), text.as_bytes().to_vec()),
            );
        }
        let series = parse_series(&series_path, EMBEDDED_SERIES)?;
        Ok(Bundle {
            dir,
            series_path,
            series,
            files,
        })
    }

    /// The patches named by `selection` (None: the whole series), in order, each checked to
    /// exist and to carry a valid attribution.
    pub fn select(&self, selection: Option<&[String]>) -> Result<Vec<&PatchFile>> {
        let wanted: Vec<(PatchId, String)> = match selection {
            None => self
                .series
                .iter()
                .map(|e| {
                    (
                        e.id.clone(),
                        format!("{}:{}", self.series_path.display(), e.line),
                    )
                })
                .collect(),
            Some(names) => names
                .iter()
                .map(|n| {
                    PatchId::new(n)
                        .map(|id| (id, format!("{}", self.dir.display())))
                        .map_err(|m| Error::input(self.dir.display(), m))
                })
                .collect::<Result<_>>()?,
        };
        wanted
            .into_iter()
            .map(|(id, at)| {
                let p = self.files.get(&id).ok_or_else(|| {
                    Error::input(
                        at,
                        format!("patch `{id}` not found in {}", self.dir.display()),
                    )
                    .with_hint("add the file to the bundle or remove it from the series")
                })?;
                p.require_attribution()?;
                Ok(p)
            })
            .collect()
    }

    /// Lint the whole bundle: every patch's header plus series consistency.
    pub fn lint(&self) -> Vec<(PathBuf, Finding)> {
        let mut out = Vec::new();
        for e in &self.series {
            if !self.files.contains_key(&e.id) {
                out.push((
                    self.series_path.clone(),
                    Finding {
                        line: e.line,
                        severity: Severity::Error,
                        rule: "series-missing-file",
                        message: format!("`{}` is listed but does not exist", e.id),
                        hint: Some("add the patch file or remove the line".into()),
                    },
                ));
            }
        }
        for (id, p) in &self.files {
            if !self.series.iter().any(|e| &e.id == id) {
                out.push((
                    p.origin.clone(),
                    Finding {
                        line: 1,
                        severity: Severity::Warning,
                        rule: "not-in-series",
                        message: "patch is not listed in `series` and is never applied".into(),
                        hint: Some(format!("add `{id}` to {}", self.series_path.display())),
                    },
                ));
            }
            out.extend(p.findings.iter().map(|f| (p.origin.clone(), f.clone())));
        }
        out
    }

    /// The bibliography: one row per patch in series order.
    pub fn bibliography(&self) -> Vec<BibRow> {
        self.series
            .iter()
            .filter_map(|e| self.files.get(&e.id))
            .map(BibRow::of)
            .collect()
    }
}

fn parse_series(path: &Path, text: &str) -> Result<Vec<SeriesEntry>> {
    let mut out: Vec<SeriesEntry> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        // quilt allows options after the name (`-p1`); pinforge applies -p1 git diffs only.
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or("");
        if let Some(opt) = words.next() {
            if opt != "-p1" {
                return Err(Error::input(
                    format!("{}:{}", path.display(), i + 1),
                    format!("unsupported series option `{opt}`"),
                )
                .with_hint("pinforge applies git-style -p1 patches only"));
            }
        }
        let id = PatchId::new(name)
            .map_err(|m| Error::input(format!("{}:{}", path.display(), i + 1), m))?;
        if let Some(prev) = out.iter().find(|e| e.id == id) {
            return Err(Error::input(
                format!("{}:{}", path.display(), i + 1),
                format!("`{id}` is already listed on line {}", prev.line),
            ));
        }
        out.push(SeriesEntry { id, line: i + 1 });
    }
    Ok(out)
}

/// One bibliography row (the `patch list --json` contract).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct BibRow {
    /// Patch file name.
    pub file: String,
    /// Upstream-Status as written (`Backport [ref]`).
    pub status: Option<String>,
    /// First upstream issue URL.
    pub issue: Option<String>,
    /// First upstream PR URL.
    pub pr: Option<String>,
    /// Upstream commit.
    pub commit: Option<String>,
    /// Handles: authors then reporters.
    pub handles: Vec<String>,
    /// Citation URL.
    pub url: Option<String>,
    /// One-line summary.
    pub summary: Option<String>,
    /// SHA-256 of the file.
    pub sha256: Sha256,
    /// Whether the attribution passed lint.
    pub valid: bool,
}

impl BibRow {
    fn of(p: &PatchFile) -> BibRow {
        let a = p.attribution.as_ref();
        BibRow {
            file: p.id.to_string(),
            status: a.map(|a| a.status.to_string()),
            issue: a.and_then(|a| a.issues.first().map(|i| i.url.clone())),
            pr: a.and_then(|a| a.prs.first().map(|i| i.url.clone())),
            commit: a.and_then(|a| a.commit.clone()),
            handles: a.map(|a| a.handles()).unwrap_or_default(),
            url: a.and_then(|a| a.url()),
            summary: a.map(|a| a.summary.clone()),
            sha256: p.sha256,
            valid: a.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_bundle_is_the_repository_bundle_and_lints_clean() {
        let b = Bundle::embedded().expect("embedded bundle");
        assert_eq!(b.series.len(), 3);
        let errors: Vec<_> = b
            .lint()
            .into_iter()
            .filter(|(_, f)| f.severity == Severity::Error)
            .collect();
        assert!(errors.is_empty(), "{errors:?}");
        let bib = b.bibliography();
        assert_eq!(bib[2].commit.as_deref(), Some("99bd67c9b"));
        assert_eq!(bib[2].handles, vec!["ggerganov", "KernelFreeze"]);
        assert_eq!(bib[0].status.as_deref(), Some("Pending"));
        // the repository copy and the embedded copy are the same bytes
        let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("patches");
        let disk = Bundle::load(&dir).expect("disk bundle");
        for (id, p) in &b.files {
            assert_eq!(disk.files[id].sha256, p.sha256, "{id}");
        }
    }

    #[test]
    fn series_rejects_paths_duplicates_and_options() {
        let p = Path::new("series");
        assert!(parse_series(p, "../x.patch\n").is_err());
        assert!(parse_series(p, "a.patch\na.patch\n").is_err());
        assert!(parse_series(p, "a.patch -p0\n").is_err());
        let ok = parse_series(p, "# c\n\na.patch -p1\nb.patch # why\n").expect("ok");
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1].line, 4);
    }

    #[test]
    fn select_reports_missing_patch_with_series_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("series"), "gone.patch\n").expect("write");
        let b = Bundle::load(dir.path()).expect("load");
        let e = b.select(None).expect_err("missing");
        assert!(e.to_string().contains("series:1"), "{e}");
        assert_eq!(e.exit_code(), 2);
    }

    /// Pieces of headers and diffs, so that arbitrary input also reaches the deep paths.
    fn fragment() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        prop_oneof![
            Just(b"From: =?UTF-8?q?G=C3=A4?= <a@b>\n".to_vec()),
            Just(b"Subject: [PATCH 1/2] =?utf-8?B?w6Q=?=\n".to_vec()),
            Just(b" =?ISO-8859-1?Q?=E4?=\n".to_vec()),
            Just(b"=?".to_vec()),
            Just(b"?=".to_vec()),
            Just(b"?q?".to_vec()),
            Just(b"Description: x\n".to_vec()),
            Just(b"Upstream-Status: Pending\n".to_vec()),
            Just(b"\n".to_vec()),
            Just(b"---\n".to_vec()),
            Just(b"\xff\xfe\n".to_vec()),
            Just(b"diff --git a/x b/x\n".to_vec()),
            Just(b"diff --git \"a/\\303\" \"b/\\303\"\n".to_vec()),
            Just(b"--- a/x\n+++ b/x\n".to_vec()),
            Just(b"--- /dev/null\n".to_vec()),
            Just(b"rename from \"q\\\n".to_vec()),
            (0usize..5, 0usize..5, 0usize..5, 0usize..5)
                .prop_map(|(a, b, c, d)| format!("@@ -{a},{b} +{c},{d} @@\n").into_bytes()),
            Just(b"@@ -99999999999999999999 +1 @@\n".to_vec()),
            Just(b" a\n".to_vec()),
            Just(b"-a\n".to_vec()),
            Just(b"+b\n".to_vec()),
            Just(b"\\ No newline at end of file\n".to_vec()),
            proptest::collection::vec(any::<u8>(), 0..12),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 4000,
            failure_persistence: None,
            ..proptest::test_runner::Config::default()
        })]

        // issue #7 class 6: no parser panics on any bytes.
        #[test]
        fn arbitrary_bytes_never_panic_the_header_lint_or_diff_parsers(
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            pieces in proptest::collection::vec(fragment(), 0..40),
        ) {
            for bytes in [raw, pieces.concat()] {
                let p = PatchFile::from_bytes(
                    PatchId::new("0001-fuzz.patch").expect("id"),
                    PathBuf::from("0001-fuzz.patch"),
                    bytes.clone(),
                );
                let _ = p.require_attribution();
                let _ = diff::parse(&bytes);
                let _ = diff::reverse(&bytes);
                let text = String::from_utf8_lossy(&bytes);
                let _ = mail::decode_words(&text);
                let _ = mail::split_from(&text);
                let _ = mail::cleanup_subject(&text);
                let _ = mail::stripspace(&text);
                if let Some(o) = p.header.diff_offset {
                    proptest::prop_assert!(o <= bytes.len());
                }
            }
        }
    }
}
