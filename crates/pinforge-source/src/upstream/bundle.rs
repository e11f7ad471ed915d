//! Git bundles (`git bundle create`, formats v2 and v3) as a pin's payload: the npm package
//! `node-llama-cpp` ships llama.cpp as `llama/gitRelease.bundle`, one squashed commit, and no
//! registry crate carries `tools/server`. libgit2 has no bundle reader, so the header (refs,
//! prerequisites, v3 capabilities) is parsed here and the pack after it is fed to the object
//! database through `Odb::packwriter`, whose indexer checks the pack's trailing checksum.
//!
//! Why refuse so much: a pinned tree must be complete and unambiguous. A prerequisite means the
//! bundle is a thin delta against history pinforge does not have; two refs naming different
//! commits leave the tree a guess; a ref name that is not UTF-8 cannot be recorded in a
//! manifest. Every malformed header is refused with the byte offset where reading stopped.
//! The tree itself is checked out by `extract::export_commit`, with the same refusal of
//! escaping links, `..` names and `.git` entries as every other git pin.

use crate::git::GitContext;
use pinforge_base::error::{Error, Result};
use std::io::Write;

/// What a bundle's header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    /// 2 or 3.
    pub version: u8,
    /// (commit, ref name), in the bundle's order.
    pub refs: Vec<(git2::Oid, String)>,
    /// Offset of the pack data (just past the blank line ending the header).
    pub pack_offset: usize,
}

impl Header {
    /// The one commit the bundle's refs name: they must all name the same object.
    pub(crate) fn tip(&self, subject: &str) -> Result<git2::Oid> {
        let mut oids: Vec<git2::Oid> = self.refs.iter().map(|(o, _)| *o).collect();
        oids.sort();
        oids.dedup();
        match oids.as_slice() {
            [one] => Ok(*one),
            [] => Err(Error::input(subject, "git bundle names no ref")),
            _ => Err(Error::input(
                subject,
                format!(
                    "git bundle refs name {} different commits ({})",
                    oids.len(),
                    self.refs
                        .iter()
                        .map(|(o, r)| format!("{r} {o}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
            .with_hint("a pinned bundle must name exactly one commit")),
        }
    }
}

/// Parse the header of `bytes` (a whole bundle). `subject` names it in errors.
pub(crate) fn parse_header(bytes: &[u8], subject: &str) -> Result<Header> {
    let bad = |at: usize, why: &str| {
        Error::input(subject, format!("malformed git bundle at byte {at}: {why}")).with_hint(
            "the bundle is truncated, not a git bundle, or hostile; nothing from it was used",
        )
    };
    let mut at = 0usize;
    let line = |at: &mut usize| -> Result<&[u8]> {
        let rest = &bytes[*at..];
        let end = rest
            .iter()
            .position(|b| *b == b'\n')
            .ok_or_else(|| bad(*at, "header line without a newline"))?;
        let l = &rest[..end];
        *at += end + 1;
        Ok(l)
    };
    let version = match line(&mut at)? {
        b"# v2 git bundle" => 2,
        b"# v3 git bundle" => 3,
        _ => {
            return Err(bad(
                0,
                "not a `# v2 git bundle` or `# v3 git bundle` signature",
            ))
        }
    };
    let mut refs = Vec::new();
    loop {
        let start = at;
        let l = line(&mut at)?;
        if l.is_empty() {
            break;
        }
        if version == 3 && l.first() == Some(&b'@') {
            // Capabilities: only SHA-1 objects are something libgit2 here can index.
            match l {
                b"@object-format=sha1" => continue,
                _ if l.starts_with(b"@object-format=") => {
                    return Err(bad(start, "only the sha1 object format is supported"))
                }
                _ if l.starts_with(b"@filter=") => {
                    return Err(bad(
                        start,
                        "a filtered (partial) bundle is not a whole tree",
                    ))
                }
                _ => return Err(bad(start, "unknown bundle capability")),
            }
        }
        if l.first() == Some(&b'-') {
            return Err(Error::input(
                subject,
                format!(
                    "git bundle has a prerequisite commit (byte {start}): it is not self-contained"
                ),
            )
            .with_hint(
                "pin a bundle made with the whole history of its ref (`git bundle create F REF`)",
            ));
        }
        if l.len() < 42 || l[40] != b' ' {
            return Err(bad(
                start,
                "a ref line must be `<40 hex digits> <ref name>`",
            ));
        }
        let hex = std::str::from_utf8(&l[..40])
            .ok()
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| bad(start, "object id is not 40 hex digits"))?;
        let oid = git2::Oid::from_str(hex).map_err(|_| bad(start, "object id is not valid"))?;
        let name =
            std::str::from_utf8(&l[41..]).map_err(|_| bad(start + 41, "ref name is not UTF-8"))?;
        if name.is_empty() || name.chars().any(char::is_control) {
            return Err(bad(
                start + 41,
                "ref name is empty or has control characters",
            ));
        }
        refs.push((oid, name.to_string()));
    }
    if refs.is_empty() {
        return Err(bad(at, "the header names no ref"));
    }
    if bytes.len() < at + 12 || &bytes[at..at + 4] != b"PACK" {
        return Err(bad(at, "no pack data after the header"));
    }
    Ok(Header {
        version,
        refs,
        pack_offset: at,
    })
}

/// Write the bundle's pack into `repo`'s object database and check that its tip is a commit
/// there. Returns the tip.
pub(crate) fn load(repo: &git2::Repository, bytes: &[u8], subject: &str) -> Result<git2::Oid> {
    let header = parse_header(bytes, subject)?;
    let tip = header.tip(subject)?;
    let odb = repo.odb().git_at(&subject)?;
    let mut writer = odb.packwriter().git_at(&subject)?;
    let pack = &bytes[header.pack_offset..];
    let refuse = |why: String| {
        Error::input(
            subject,
            format!(
                "the git bundle's pack (from byte {}) cannot be indexed: {why}",
                header.pack_offset
            ),
        )
        .with_hint("the bundle is truncated or corrupt; nothing from it was used")
    };
    writer.write_all(pack).map_err(|e| refuse(e.to_string()))?;
    writer
        .commit()
        .map_err(|e| refuse(e.message().to_string()))?;
    match repo.find_commit(tip) {
        Ok(_) => Ok(tip),
        Err(_) => Err(Error::input(
            subject,
            format!("the git bundle's ref names {tip}, which is not a commit in its pack"),
        )
        .with_hint("the bundle is inconsistent; nothing from it was used")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real bundle made by git itself from a one-commit repository.
    fn real_bundle(dir: &std::path::Path) -> Option<Vec<u8>> {
        let run = |args: &[&str]| {
            std::process::Command::new("git")
                .args(args)
                .current_dir(dir)
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
                .output()
                .ok()
                .filter(|o| o.status.success())
        };
        run(&["init", "-q", "-b", "main"])?;
        std::fs::write(dir.join("a.txt"), b"hello\n").ok()?;
        run(&["add", "a.txt"])?;
        run(&["commit", "-q", "-m", "one"])?;
        run(&["bundle", "create", "b.bundle", "HEAD"])?;
        std::fs::read(dir.join("b.bundle")).ok()
    }

    #[test]
    fn a_real_bundle_loads_into_the_odb_and_names_its_commit() {
        let d = tempfile::tempdir().expect("tempdir");
        let Some(bytes) = real_bundle(d.path()) else {
            eprintln!("ignored at run time: git is not installed");
            return;
        };
        let h = parse_header(&bytes, "b.bundle").expect("header");
        assert_eq!(h.version, 2);
        assert_eq!(h.refs[0].1, "HEAD");
        let repo = git2::Repository::init_bare(d.path().join("r.git")).expect("bare");
        let tip = load(&repo, &bytes, "b.bundle").expect("load");
        assert_eq!(tip, h.refs[0].0);
        let tree = repo.find_commit(tip).expect("commit").tree().expect("tree");
        assert!(tree.get_name("a.txt").is_some());
        // Truncated: the indexer refuses the pack, naming where it starts.
        let repo2 = git2::Repository::init_bare(d.path().join("r2.git")).expect("bare");
        let e = load(&repo2, &bytes[..bytes.len() - 30], "b.bundle").expect_err("truncated");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().contains("cannot be indexed"), "{e}");
    }

    const OID: &str = "79efbb1339648f11c6135af95703a6eeb2ed06cf";

    fn with_pack(head: &str) -> Vec<u8> {
        let mut b = head.as_bytes().to_vec();
        b.extend_from_slice(b"PACK\0\0\0\x02\0\0\0\0");
        b
    }

    #[test]
    fn prerequisites_are_refused_with_their_offset() {
        let b = with_pack(&format!("# v2 git bundle\n-{OID} base\n{OID} HEAD\n\n"));
        let e = parse_header(&b, "x").expect_err("prereq");
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.to_string().contains("prerequisite") && e.to_string().contains("byte 16"),
            "{e}"
        );
    }

    #[test]
    fn malformed_headers_are_refused_with_the_byte_offset() {
        let cases: &[(&[u8], &str)] = &[
            (b"garbage\n", "byte 0"),
            (b"# v2 git bundle\nnot-an-oid HEAD\n\nPACK", "byte 16"),
            (b"# v2 git bundle\n", "byte 16"),
            (b"# v3 git bundle\n@object-format=sha256\n", "byte 16"),
            (b"# v3 git bundle\n@filter=blob:none\n", "byte 16"),
        ];
        for (bytes, at) in cases {
            let e = parse_header(bytes, "x").expect_err("malformed");
            assert_eq!(e.exit_code(), 2, "{e}");
            assert!(e.to_string().contains(at), "{at}: {e}");
        }
        let no_pack = format!("# v2 git bundle\n{OID} HEAD\n\nNOPE");
        let e = parse_header(no_pack.as_bytes(), "x").expect_err("no pack");
        assert!(e.to_string().contains("no pack data"), "{e}");
    }

    #[test]
    fn a_ref_name_that_is_not_utf8_is_refused_where_it_starts() {
        let mut b = format!("# v2 git bundle\n{OID} refs/heads/").into_bytes();
        b.extend_from_slice(b"\xff\xfe\n\n");
        b.extend_from_slice(b"PACK\0\0\0\x02\0\0\0\0");
        let e = parse_header(&b, "x").expect_err("non-utf8");
        assert!(
            e.to_string().contains("not UTF-8") && e.to_string().contains("byte 57"),
            "{e}"
        );
    }

    #[test]
    fn refs_naming_two_commits_are_ambiguous() {
        let other = "1111111111111111111111111111111111111111";
        let b = with_pack(&format!(
            "# v3 git bundle\n@object-format=sha1\n{OID} HEAD\n{other} refs/heads/x\n\n"
        ));
        let h = parse_header(&b, "x").expect("header");
        assert_eq!(h.version, 3);
        let e = h.tip("x").expect_err("two commits");
        assert!(e.to_string().contains("2 different commits"), "{e}");
    }
}
