//! The git side of a resolution: the checkout of the new pin, the series replayed onto it as
//! commits (as `patch apply` makes them, each with its patch note), a conflicting patch
//! cherry-picked with its conflicts written as diff3 markers, and the operator's commit turned
//! back into the patch file (header kept byte for byte, `Last-Update` refreshed, hunks
//! regenerated from the commit's diff).

use super::state::{Done, Paths, State};
use super::Resolving;
use crate::audit::{refreshed, tree_diff};
use crate::git::GitContext;
use crate::git::OidExt;
use crate::patch::{apply, PatchFile};
use crate::rebase::{Action, Loaded, Moved};
use crate::upstream::{self, Tree};
use git2::{Repository, RepositoryState};
use pinforge_base::digest::GitOid;
use pinforge_base::error::{Error, Result};
use pinforge_base::workspace::Workspace;

/// Clone the new pristine tree into the checkout folder (which does not exist yet).
pub(super) fn create(at: &Paths, new_tree: &Tree) -> Result<Repository> {
    pinforge_base::fsx::create_dir_all(&pinforge_base::fsx::parent_of(&at.checkout))?;
    Repository::clone(&new_tree.path.to_string_lossy(), &at.checkout)
        .git_at(&new_tree.path.display())
}

/// Open the checkout; gone is a usage error.
pub(super) fn open(at: &Paths) -> Result<Repository> {
    Repository::open(&at.checkout).map_err(|e| {
        Error::input(
            at.checkout.display(),
            format!(
                "the resolution's checkout cannot be opened: {}",
                e.message()
            ),
        )
        .with_hint("`pinforge rebase RECIPE --abort` removes the resolution; then rebase again")
    })
}

fn head_of<'r>(repo: &'r Repository, at: &Paths) -> Result<git2::Commit<'r>> {
    repo.head()
        .and_then(|h| h.peel_to_commit())
        .git_at(&at.checkout.display())
}

/// Take the operator's commit: the checkout must be clean (no cherry-pick in progress, no
/// conflict, no uncommitted change) with HEAD past the recorded base; the diff from the base
/// to HEAD becomes the patch in progress. After a `--continue` that did not end, its own
/// commits past the operator's are undone instead, and the patch it took is kept.
pub(super) fn take_commit(
    repo: &Repository,
    at: &Paths,
    st: &mut State,
    l: &Loaded,
    today: &str,
) -> Result<()> {
    let subject = at.checkout.display().to_string();
    if let Some(c) = st.resumed_from {
        return reset_to(repo, at, c);
    }
    let fix = format!(
        "edit the conflict markers away, `git -C {subject} add FILE...`, `git -C {subject} commit`, then continue"
    );
    if repo.state() != RepositoryState::Clean || repo.index().git_at(&subject)?.has_conflicts() {
        return Err(Error::check(
            &subject,
            format!(
                "the conflict of {} is not committed yet (a cherry-pick is in progress)",
                st.in_progress
            ),
        )
        .with_hint(fix));
    }
    let head = head_of(repo, at)?;
    let dirty = dirty_files(repo, &subject)?;
    if !dirty.is_empty() {
        return Err(Error::check(
            &subject,
            format!("uncommitted changes: {}", dirty.join(", ")),
        )
        .with_hint(
            "commit them (`git commit`) or undo them (`git checkout -- FILE`), then continue",
        ));
    }
    if head.id() == st.base.to_git() || !crate::git::is_ancestor(repo, st.base.to_git(), head.id())
    {
        return Err(Error::check(
            &subject,
            format!(
                "HEAD is not a commit on top of {} (where {} conflicted): nothing to take",
                st.base.short(9),
                st.in_progress
            ),
        )
        .with_hint(fix));
    }
    let from = repo
        .find_commit(st.base.to_git())
        .and_then(|c| c.tree())
        .git_at(&subject)?;
    let diff = tree_diff(repo, &from, &head.tree().git_at(&subject)?, &subject)?;
    if diff.is_empty() {
        return Err(Error::check(
            &subject,
            format!("the commit changes nothing: {} would be empty", st.in_progress),
        )
        .with_hint("to take the patch out of the series instead: `--abort`, then rebase with `--drop FILE`"));
    }
    let p = original(l, &st.in_progress)?;
    let bytes = refreshed(p, &diff, today);
    let taken = PatchFile::from_bytes(p.id.clone(), p.origin.clone(), bytes.clone());
    apply::parse_diff(&taken)?;
    crate::git::write_patch_note(repo, head.id(), &bytes)?;
    st.done.push(Done {
        resolved: true,
        ..done(&st.in_progress, bytes)?
    });
    st.resumed_from = Some(crate::git::git_oid(head.id()));
    Ok(())
}

/// Move the checkout back to `c` (its work tree and index too), dropping the commits after it.
pub(super) fn reset_to(repo: &Repository, at: &Paths, c: GitOid) -> Result<()> {
    let subject = at.checkout.display().to_string();
    let obj = repo.find_object(c.to_git(), None).git_at(&subject)?;
    repo.reset(&obj, git2::ResetType::Hard, None)
        .git_at(&subject)
}

/// The files `git status` would list.
fn dirty_files(repo: &Repository, subject: &str) -> Result<Vec<String>> {
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true)
        .include_ignored(false)
        .recurse_untracked_dirs(true);
    let statuses = repo.statuses(Some(&mut opts)).git_at(&subject)?;
    Ok(statuses
        .iter()
        .filter(|s| s.status() != git2::Status::CURRENT)
        .filter_map(|s| s.path().map(str::to_string))
        .take(10)
        .collect())
}

fn original<'b>(l: &'b Loaded, file: &str) -> Result<&'b PatchFile> {
    l.bundle
        .files
        .iter()
        .find(|(id, _)| id.as_str() == file)
        .map(|(_, p)| p)
        .ok_or_else(|| Error::Internal(format!("{file} is not in the bundle")))
}

fn done(file: &str, bytes: Vec<u8>) -> Result<Done> {
    let patch = String::from_utf8(bytes).map_err(|_| {
        Error::input(file, "the regenerated patch is not UTF-8 text").with_hint(
            "a resolution can carry text changes only; change binary files in a patch of their own",
        )
    })?;
    Ok(Done {
        file: file.into(),
        patch,
        resolved: false,
    })
}

/// Replay the series from `from` onto the checkout, each patch as a commit: placed as written
/// (refreshed when only its position moved), else merged three-way from its vendor commit
/// (regenerated from the merge); a patch that conflicts stops the replay with its conflict
/// written as diff3 markers, and the state saved. `rows` are the rebase's decisions: a dropped
/// patch stays out.
#[allow(clippy::too_many_arguments)]
pub(super) fn replay(
    ws: &Workspace,
    repo: &Repository,
    at: &Paths,
    st: &mut State,
    l: &Loaded,
    rows: &[Moved],
    from: usize,
    today: &str,
) -> Result<Option<Resolving>> {
    let subject = at.checkout.display().to_string();
    let patches = l.bundle.select(None)?;
    let mut vendor: Option<Tree> = None;
    for (j, p) in patches.iter().enumerate().skip(from) {
        if rows.get(j).map(|r| r.action) == Some(Action::Dropped) {
            continue;
        }
        let bytes = match apply::placed_diff(&at.checkout, p) {
            // As the audit carries a patch that applies: byte for byte where it states, its
            // hunk numbers rewritten where only the position moved.
            Ok((_, offsets)) if offsets.is_empty() => p.bytes.clone(),
            Ok((diff, _)) => refreshed(p, &diff, today),
            Err(_) => {
                let old = match &vendor {
                    Some(t) => t,
                    None => {
                        let old_tree = upstream::pristine(ws, &l.recipe)?;
                        let t = upstream::patched(ws, &old_tree, &patches)?;
                        borrow_for_good(repo, &t)?;
                        vendor.insert(t)
                    }
                };
                let commit = old.patches.get(j).map(|r| r.commit).ok_or_else(|| {
                    Error::Internal(format!("patched tree has no commit for {}", p.id))
                })?;
                let head = head_of(repo, at)?;
                let conflicts = pick(repo, commit, &subject)?;
                if !conflicts.is_empty() {
                    st.in_progress = p.id.to_string();
                    st.base = crate::git::git_oid(head.id());
                    st.resumed_from = None;
                    st.save(at)?;
                    return Ok(Some(super::resolving(at, st, conflicts)));
                }
                let merged = repo
                    .index()
                    .and_then(|mut i| i.write_tree_to(repo))
                    .and_then(|t| repo.find_tree(t))
                    .git_at(&subject)?;
                let diff = tree_diff(repo, &head.tree().git_at(&subject)?, &merged, &subject)?;
                repo.cleanup_state().git_at(&subject)?;
                repo.reset(head.as_object(), git2::ResetType::Hard, None)
                    .git_at(&subject)?;
                refreshed(p, &diff, today)
            }
        };
        let carried = PatchFile::from_bytes(p.id.clone(), p.origin.clone(), bytes.clone());
        apply::apply_series(repo, &[&carried])?;
        st.done.push(done(p.id.as_str(), bytes)?);
    }
    Ok(None)
}

/// Make the old patched tree's objects (the vendor commits picked) readable from the checkout,
/// for libgit2 now and for the operator's `git commit` later (which looks up
/// `CHERRY_PICK_HEAD`): an alternates entry, written into the checkout's object store.
fn borrow_for_good(repo: &Repository, vendor: &Tree) -> Result<()> {
    crate::git::borrow_objects(repo, &vendor.path)?;
    let objects = vendor.path.join(".git").join("objects");
    let file = repo.path().join("objects").join("info").join("alternates");
    let mut text = pinforge_base::fsx::read_if_present(&file)?.unwrap_or_default();
    let line = format!("{}\n", objects.display());
    if !text.ends_with(b"\n") && !text.is_empty() {
        text.push(b'\n');
    }
    if !String::from_utf8_lossy(&text)
        .lines()
        .any(|l| l == line.trim_end())
    {
        text.extend_from_slice(line.as_bytes());
        pinforge_base::fsx::create_dir_all(&pinforge_base::fsx::parent_of(&file))?;
        pinforge_base::fsx::write_atomic(&file, &text)?;
    }
    Ok(())
}

/// Cherry-pick `commit` onto the checkout's HEAD, conflicts written into the files as diff3
/// markers (ours, the base, theirs); the paths that conflict (none: the pick merged cleanly,
/// its result staged).
fn pick(repo: &Repository, commit: GitOid, subject: &str) -> Result<Vec<String>> {
    let picked = repo.find_commit(commit.to_git()).git_at(&subject)?;
    let mut co = git2::build::CheckoutBuilder::new();
    co.safe().allow_conflicts(true).conflict_style_diff3(true);
    let mut opts = git2::CherrypickOptions::new();
    opts.checkout_builder(co);
    repo.cherrypick(&picked, Some(&mut opts)).git_at(&subject)?;
    let index = repo.index().git_at(&subject)?;
    let mut paths = Vec::new();
    if index.has_conflicts() {
        for c in index.conflicts().git_at(&subject)? {
            let c = c.git_at(&subject)?;
            if let Some(e) = c.our.or(c.their).or(c.ancestor) {
                paths.push(String::from_utf8_lossy(&e.path).into_owned());
            }
        }
    }
    Ok(paths)
}
