//! Applying a patch series onto a vendor repository with `git apply`'s semantics: every hunk
//! is placed where its removed and context lines match exactly, searching outward from the
//! stated line, nearest first, as git's `find_pos` does, never over lines an earlier hunk
//! wrote, never with fuzz (context is never ignored). The placement is computed here on the
//! bytes of the tree, the `@@` numbers of the diff are rewritten to the found lines, and
//! libgit2 then applies the rewritten diff (index and work tree, whole or not at all). Path
//! safety is checked before anything is read or written; each patch becomes one deterministic
//! commit whose trailers carry the attribution and every non-zero hunk offset.

use super::diff::{self, FilePatch};
use super::PatchFile;
use crate::git::GitContext;
use git2::{ApplyLocation, Delta, Diff, FileMode, Repository, Signature, Time};
use pinforge_base::digest::GitOid;
use pinforge_base::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

mod place;
use place::{check_results, plan};

/// The trailer that records, in the vendor commit, a hunk that applied at another line.
pub(crate) const OFFSET_TRAILER: &str = "Pinforge-Hunk-Offset";

/// A hunk that applied `offset` lines away from where its header put it (the patch is due a
/// refresh). Written as `FILE#N ±K` in trailers and in the manifest.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct HunkOffset {
    /// The file (path after the patch), as shown.
    pub file: String,
    /// 1-based hunk number within that file's section.
    pub hunk: usize,
    /// Applied line minus stated line (git's "offset N lines").
    pub offset: i64,
}

impl fmt::Display for HunkOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{} {:+}", self.file, self.hunk, self.offset)
    }
}

/// A patch applied as a commit.
#[derive(Debug, Clone)]
pub struct Applied {
    /// Which patch.
    pub id: super::PatchId,
    /// The commit it became.
    pub commit: GitOid,
    /// Hunks that applied at another line, in patch order (empty: every hunk where stated).
    pub offsets: Vec<HunkOffset>,
}

impl HunkOffset {
    /// The note a command prints for this moved hunk of `patch`.
    pub fn note(&self, patch: &str) -> String {
        format!(
            "patch {patch} hunk {} of {} applied at offset {:+}: the patch is due a refresh",
            self.hunk, self.file, self.offset
        )
    }
}

impl Applied {
    /// One note per moved hunk, for the command layer to print.
    pub fn notes(&self) -> Vec<String> {
        self.offsets
            .iter()
            .map(|o| o.note(self.id.as_str()))
            .collect()
    }
}

/// `git apply --check`: where the hunks of `p` would go on the work tree at `workdir`, without
/// writing anything (the tests ask "does it still apply, and did it move?").
#[cfg(test)]
fn check(workdir: &Path, p: &PatchFile) -> Result<Vec<HunkOffset>> {
    parse_diff(p)?;
    plan(workdir, p).map(|plan| plan.offsets)
}

/// The diff with its `@@` numbers rewritten to where the hunks go on `workdir`
/// (what a refreshed patch carries).
pub(crate) fn placed_diff(workdir: &Path, p: &PatchFile) -> Result<(Vec<u8>, Vec<HunkOffset>)> {
    parse_diff(p)?;
    plan(workdir, p).map(|plan| (plan.diff, plan.offsets))
}

/// `p` undone: the same header over the reversed diff (`git apply -R`).
pub(crate) fn reversed(p: &PatchFile) -> PatchFile {
    let at = p.header.diff_offset.unwrap_or(p.bytes.len());
    let (head, diff) = p.bytes.split_at(at.min(p.bytes.len()));
    let bytes = [head, &super::diff::reverse(diff)].concat();
    PatchFile::from_bytes(p.id.clone(), p.origin.clone(), bytes)
}

/// Whether `p` is already in the tree at `workdir`: its reverse applies cleanly there
/// (`git apply -R --check`), and the patch changes something.
pub(crate) fn already_applied(workdir: &Path, p: &PatchFile) -> bool {
    let changes = read_sections(p)
        .map(|files| {
            files
                .iter()
                .flat_map(|f| &f.hunks)
                .any(|h| h.lines.iter().any(|l| l.origin != b' '))
        })
        .unwrap_or(false);
    changes && plan(workdir, &reversed(p)).is_ok()
}

/// Apply `patches` in order on top of HEAD of `repo`, committing each.
pub(crate) fn apply_series(repo: &Repository, patches: &[&PatchFile]) -> Result<Vec<Applied>> {
    let mut out = Vec::with_capacity(patches.len());
    for (order, p) in patches.iter().enumerate() {
        let (commit, offsets) = apply_one(repo, p, order + 1)?;
        out.push(Applied {
            id: p.id.clone(),
            commit,
            offsets,
        });
    }
    Ok(out)
}

/// Apply a bundle's series onto an existing checkout (like `git am` of the whole series): the
/// repository must have a HEAD and no uncommitted changes, so that every patch becomes exactly
/// one commit and nothing of the user's is mixed in.
pub fn apply_to_checkout(repo_path: &Path, patches: &[&PatchFile]) -> Result<Vec<Applied>> {
    let repo = Repository::open(repo_path).map_err(|e| {
        Error::input(
            repo_path.display(),
            format!("not a git repository: {}", e.message()),
        )
    })?;
    let head = repo.head().and_then(|h| h.peel_to_commit()).map_err(|_| {
        Error::input(
            repo_path.display(),
            "repository has no commit to apply onto",
        )
    })?;
    crate::git::check_clean(repo_path, crate::git::git_oid(head.id())).map_err(|e| {
        Error::input(repo_path.display(), format!("uncommitted changes: {e}"))
            .with_hint("commit or stash them first")
    })?;
    for p in patches {
        parse_diff(p)?;
    }
    apply_series(&repo, patches)
}

pub(super) fn subject(p: &PatchFile) -> String {
    p.origin.display().to_string()
}

/// Parse the diff part of a patch, refusing unsafe paths and modes.
pub fn parse_diff(p: &PatchFile) -> Result<Diff<'static>> {
    let offset = p.header.diff_offset.ok_or_else(|| {
        Error::input(subject(p), "no diff found after the header")
            .with_hint("append the output of `git diff`")
    })?;
    let body = p.bytes.get(offset..).unwrap_or_default();
    let files = read_sections(p)?;
    let diff = Diff::from_buffer(body)
        .map_err(|e| Error::input(subject(p), format!("not a valid git diff: {}", e.message())))?;
    // The paths pinforge itself reads (the preimages) pass the same checks as libgit2's.
    for f in &files {
        for path in [&f.old_path, &f.new_path].into_iter().flatten() {
            check_path(p, Path::new(std::ffi::OsStr::from_bytes(path)))?;
        }
    }
    for delta in diff.deltas() {
        for file in [delta.old_file(), delta.new_file()] {
            let Some(path) = file.path() else { continue };
            if delta.status() == Delta::Added && std::ptr::eq(&file, &delta.old_file()) {
                continue;
            }
            check_path(p, path)?;
            match file.mode() {
                FileMode::Link => {
                    return Err(Error::input(
                        subject(p),
                        format!("refused: `{}` would become a symbolic link", path.display()),
                    )
                    .with_hint("patches may change regular files only"))
                }
                FileMode::Commit => {
                    return Err(Error::input(
                        subject(p),
                        format!("refused: `{}` is a submodule entry", path.display()),
                    ))
                }
                _ => {}
            }
        }
    }
    Ok(diff)
}

/// A path a patch touches must stay inside the tree and away from `.git`.
fn check_path(p: &PatchFile, path: &Path) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::input(
            subject(p),
            format!("refused: path `{}` {why}", path.display()),
        )
        .with_hint("a patch may only touch files inside the source tree"))
    };
    if path.as_os_str().is_empty() {
        return bad("is empty");
    }
    for c in path.components() {
        match c {
            Component::Normal(name) => {
                if name.to_string_lossy().eq_ignore_ascii_case(".git") {
                    return bad("touches the repository's .git");
                }
            }
            Component::ParentDir => return bad("escapes the tree with `..`"),
            Component::RootDir | Component::Prefix(_) => return bad("is absolute"),
            Component::CurDir => {}
        }
    }
    Ok(())
}

/// Refuse writing through a symlink that already exists in the tree (a parent that is a link
/// could point anywhere).
fn check_no_symlink_parents(repo: &Repository, p: &PatchFile, diff: &Diff) -> Result<()> {
    let Some(workdir) = repo.workdir() else {
        return Err(Error::Internal("vendor repository has no work tree".into()));
    };
    for delta in diff.deltas() {
        let Some(path) = delta.new_file().path() else {
            continue;
        };
        let mut cur = workdir.to_path_buf();
        for c in path.components() {
            cur.push(c);
            if std::fs::symlink_metadata(&cur)
                .map(|m| m.file_type().is_symlink())
                .unwrap_or(false)
            {
                return Err(Error::input(
                    subject(p),
                    format!(
                        "refused: `{}` goes through the symbolic link `{}`",
                        path.display(),
                        cur.strip_prefix(workdir).unwrap_or(&cur).display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn apply_one(repo: &Repository, p: &PatchFile, order: usize) -> Result<(GitOid, Vec<HunkOffset>)> {
    let attribution = p.require_attribution()?;
    let diff = parse_diff(p)?;
    check_no_symlink_parents(repo, p, &diff)?;
    let Some(workdir) = repo.workdir().map(Path::to_path_buf) else {
        return Err(Error::Internal("vendor repository has no work tree".into()));
    };
    // Every hunk is placed before anything is written: a patch applies whole or not at all.
    let plan = match plan(&workdir, p) {
        Ok(plan) => plan,
        // A patch whose reverse applies is in the tree already: that is not "upstream changed
        // these lines" (issue #8).
        Err(e) if already_applied(&workdir, p) => return Err(Error::input(
            subject(p),
            "is already applied: the tree holds its change (the patch reverse-applies cleanly)",
        )
        .with_detail(e.to_string())
        .with_hint(
            "upstream or an earlier commit already has this fix: drop the patch from the series \
                 (`pinforge audit` says where it landed)",
        )),
        Err(e) => return Err(e),
    };
    let placed = Diff::from_buffer(&plan.diff).map_err(|e| {
        Error::Internal(format!(
            "{}: the re-numbered diff does not parse: {}",
            subject(p),
            e.message()
        ))
    })?;
    if let Err(e) = repo.apply(&placed, ApplyLocation::Both, None) {
        return Err(
            Error::input(subject(p), format!("does not apply: {}", e.message()))
                .with_hint("refresh the patch against this tree"),
        );
    }
    if let Err(e) = check_results(&workdir, &plan) {
        // libgit2 wrote something other than what was placed: put the tree back.
        if let Ok(head) = repo.head().and_then(|h| h.peel_to_commit()) {
            let _ = repo.reset(head.as_object(), git2::ResetType::Hard, None);
        }
        return Err(e);
    }
    let mut index = repo.index().git_at(&subject(p))?;
    let tree_oid = index.write_tree().git_at(&subject(p))?;
    let tree = repo.find_tree(tree_oid).git_at(&subject(p))?;
    let parent = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .git_at(&"vendor repository HEAD")?;

    let (secs, offset) = super::mail::when(attribution);
    let when = Time::new(secs, offset);
    // The same ident `patch bundle` writes into the mail, so `git am` makes the same author.
    let (name, email) = super::mail::author(attribution);
    let author = Signature::new(&name, &email, &when).git_at(&subject(p))?;
    // The committer is fixed, so that commit ids depend only on content and attribution, never
    // on who ran the tool or when.
    let committer = crate::git::tool_signature(&when)?;

    let message = commit_message(p, attribution, order, &plan.offsets);
    let oid = repo
        .commit(
            Some("HEAD"),
            &author,
            &committer,
            &message,
            &tree,
            &[&parent],
        )
        .git_at(&subject(p))?;
    // The exact file this commit came from, so `patch export` gives it back byte for byte.
    crate::git::write_patch_note(repo, oid, &p.bytes)?;
    Ok((crate::git::git_oid(oid), plan.offsets))
}

/// The vendor commit's message: what `git am` makes of the mail (subject, then the body,
/// cleaned by git's stripspace), the DEP-3 description when it says more than the subject,
/// and a last paragraph of trailers (attribution, patch identity, moved hunks). `patch export`
/// makes it again to tell whether a commit is still the one its note's file made.
pub(super) fn commit_message(
    p: &PatchFile,
    a: &super::lint::Attribution,
    order: usize,
    offsets: &[HunkOffset],
) -> String {
    let mut message = super::mail::stripspace(&format!("{}\n\n{}", a.summary, a.body));
    if message.is_empty() {
        message.push('\n');
    }
    if !a.description.is_empty() && a.description != a.summary {
        message.push('\n');
        message.push_str(&a.description);
        message.push('\n');
    }
    message.push('\n');
    for (k, v) in a.trailers() {
        message.push_str(&format!("{k}: {v}\n"));
    }
    message.push_str(&format!("Pinforge-Patch: {}\n", p.id));
    message.push_str(&format!("Pinforge-Patch-Order: {order}\n"));
    message.push_str(&format!("Pinforge-Patch-Sha256: {}\n", p.sha256));
    for o in offsets {
        message.push_str(&format!("{OFFSET_TRAILER}: {o}\n"));
    }
    message
}

/// The diff's file sections, read on bytes; a malformed diff is an error at `file:line`.
pub(super) fn read_sections(p: &PatchFile) -> Result<Vec<FilePatch>> {
    let (Some(offset), Some(first_line)) = (p.header.diff_offset, p.header.diff_line) else {
        return Err(Error::input(subject(p), "no diff found after the header")
            .with_hint("append the output of `git diff`"));
    };
    diff::parse(p.bytes.get(offset..).unwrap_or_default()).map_err(|e| {
        Error::input(
            format!("{}:{}", p.origin.display(), first_line + e.line - 1),
            format!("not a valid diff: {}", e.message),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "From: T <t@example.invalid>\nSubject: t\nUpstream-Status: Pending\nUpstream-Issue: https://example.invalid/o/r/issues/1\nReported-by: t\n\n---\n";

    // issue #13 item 1: git's find_pos order (stated line, +1, -1, +2, ...) and the offset.
    #[test]
    fn check_places_a_moved_hunk_at_the_nearest_match_without_writing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = "k\nctx\nold\nctx\nk\nk\nctx\nold\nctx\n";
        std::fs::write(dir.path().join("x"), file).expect("write");
        let patch = |at: usize| {
            let text = format!(
                "{HEADER}diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -{at},3 +{at},3 @@\n ctx\n-old\n+new\n ctx\n"
            );
            PatchFile::from_bytes(
                super::super::PatchId::new("0001-t.patch").expect("id"),
                "0001-t.patch".into(),
                text.into_bytes(),
            )
        };
        // Stated at line 4: line 2 is 2 back, line 7 is 3 ahead: the nearer wins.
        let o = check(dir.path(), &patch(4)).expect("applies");
        assert_eq!(
            o,
            vec![HunkOffset {
                file: "x".into(),
                hunk: 1,
                offset: -2
            }]
        );
        assert_eq!(o[0].to_string(), "x#1 -2");
        // Stated at line 5: lines 2 and 7 are 3 and 2 away.
        let o = check(dir.path(), &patch(5)).expect("applies");
        assert_eq!(o[0].offset, 2);
        assert!(check(dir.path(), &patch(2)).expect("applies").is_empty());
        // A tie (one line back, one ahead) goes ahead, as in git.
        std::fs::write(dir.path().join("x"), "ctx\nold\nctx\nold\nctx\n").expect("write");
        assert_eq!(check(dir.path(), &patch(2)).expect("applies")[0].offset, 1);
        std::fs::write(dir.path().join("x"), file).expect("write");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("x")).expect("read"),
            file
        );
    }

    // issue #8: a patch whose change is in the tree already is recognized by its reverse.
    #[test]
    fn already_applied_is_true_only_when_the_reverse_applies() {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = format!(
            "{HEADER}diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n ctx\n-old\n+new\n ctx\n"
        );
        let p = PatchFile::from_bytes(
            super::super::PatchId::new("0001-t.patch").expect("id"),
            "0001-t.patch".into(),
            text.into_bytes(),
        );
        std::fs::write(dir.path().join("x"), "ctx\nold\nctx\n").expect("write");
        assert!(!already_applied(dir.path(), &p));
        assert!(check(dir.path(), &p).is_ok());
        std::fs::write(dir.path().join("x"), "ctx\nnew\nctx\n").expect("write");
        assert!(already_applied(dir.path(), &p));
        assert!(check(dir.path(), &p).is_err());
        let r = reversed(&p);
        assert!(check(dir.path(), &r).is_ok(), "the reversed patch applies");
        std::fs::write(dir.path().join("x"), "ctx\nother\nctx\n").expect("write");
        assert!(!already_applied(dir.path(), &p), "neither way: not applied");
    }

    fn diff_piece() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        prop_oneof![
            Just(b"diff --git a/x b/x\n".to_vec()),
            Just(b"--- a/x\n+++ b/x\n".to_vec()),
            Just(b"--- /dev/null\n+++ b/x\n".to_vec()),
            Just(b"--- a/x\n+++ /dev/null\n".to_vec()),
            Just(b"new file mode 100644\n".to_vec()),
            Just(b"deleted file mode 100644\n".to_vec()),
            Just(b"rename from x\nrename to y\n".to_vec()),
            (0usize..6, 0usize..6, 0usize..6, 0usize..6)
                .prop_map(|(a, b, c, d)| format!("@@ -{a},{b} +{c},{d} @@\n").into_bytes()),
            Just(b" a\n".to_vec()),
            Just(b" b\n".to_vec()),
            Just(b"-a\n".to_vec()),
            Just(b"-c\n".to_vec()),
            Just(b"+b\n".to_vec()),
            Just(b"+\xff\n".to_vec()),
            Just(b"\n".to_vec()),
            Just(b"\\ No newline at end of file\n".to_vec()),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 3000,
            failure_persistence: None,
            ..proptest::test_runner::Config::default()
        })]

        // issue #7 class 6: placing arbitrary hunks on arbitrary files never panics.
        #[test]
        fn placing_arbitrary_diffs_on_arbitrary_files_never_panics(
            file in proptest::collection::vec(
                proptest::sample::select(vec![&b"a\n"[..], b"b\n", b"c\n", b"a", b"\n"]),
                0..20,
            ),
            pieces in proptest::collection::vec(diff_piece(), 0..30),
        ) {
            let dir = tempfile::tempdir().expect("tempdir");
            std::fs::write(dir.path().join("x"), file.concat()).expect("write");
            let bytes = [HEADER.as_bytes(), &pieces.concat()].concat();
            let p = PatchFile::from_bytes(
                super::super::PatchId::new("0001-fuzz.patch").expect("id"),
                "0001-fuzz.patch".into(),
                bytes,
            );
            if let Ok(plan) = plan(dir.path(), &p) {
                // What was placed parses again, and says the same hunk counts.
                let again = diff::parse(&plan.diff).expect("re-numbered diff parses");
                proptest::prop_assert_eq!(again.len(), read_sections(&p).expect("sections").len());
            }
        }
    }
}
