//! A git tree (a git pin's commit, an npm bundle's tip) written into a fresh folder with the
//! refusals of [`pinforge_base::archive`]: every entry name checked, symlink blobs resolved in the
//! tree's model before any link is created, submodules left out.

use crate::git::GitContext;
use git2::Repository;
use pinforge_base::archive::{create_file, finish, is_git, safe_rel, TreeModel, Written};
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Write the tree of `commit` (or its `subdir`) into `dest`; symlink blobs are checked like an
/// archive's links.
pub(crate) fn export_commit(
    repo_path: &Path,
    commit: git2::Oid,
    subdir: Option<&str>,
    dest: &Path,
) -> Result<Written> {
    let repo = Repository::open_bare(repo_path).git_at(&repo_path.display())?;
    let c = repo.find_commit(commit).git_at(&commit)?;
    let mut tree = c.tree().git_at(&commit)?;
    if let Some(s) = subdir {
        let e = tree.get_path(Path::new(s)).map_err(|_| {
            Error::input(format!("commit {commit}"), format!("has no folder `{s}`"))
        })?;
        tree = repo.find_tree(e.id()).git_at(&commit)?;
    }
    let mut model = TreeModel::default();
    let mut out = Written::default();
    fsx::create_dir_all(dest)?;
    export_tree(
        &repo,
        &tree,
        dest,
        Path::new(""),
        &mut model,
        &mut out,
        commit,
    )?;
    finish(&model, dest, |rel, why| {
        Error::input(
            format!("commit {commit}"),
            format!("refused tree entry `{}`: {why}", rel.display()),
        )
        .with_hint("the upstream tree carries a link that leaves it; nothing was used")
    })?;
    Ok(out)
}

fn export_tree(
    repo: &Repository,
    tree: &git2::Tree,
    dest: &Path,
    rel: &Path,
    model: &mut TreeModel,
    out: &mut Written,
    commit: git2::Oid,
) -> Result<()> {
    for entry in tree.iter() {
        let name = OsStr::from_bytes(entry.name_bytes());
        let refuse = |why: &str| {
            Error::input(
                format!("commit {commit}"),
                format!("refused tree entry `{}`: {why}", rel.join(name).display()),
            )
        };
        let one = safe_rel(Path::new(name)).filter(|r| r.components().count() == 1);
        if one.is_none() || is_git(name) {
            return Err(refuse("not a plain file name"));
        }
        let r = rel.join(name);
        let target = dest.join(&r);
        match entry.kind() {
            Some(git2::ObjectType::Tree) => {
                model.add_dir(&r).map_err(|w| refuse(&w.to_string()))?;
                fsx::create_dir_all(&target)?;
                let sub = repo.find_tree(entry.id()).git_at(&r.display())?;
                export_tree(repo, &sub, dest, &r, model, out, commit)?;
            }
            Some(git2::ObjectType::Blob) => {
                let blob = repo.find_blob(entry.id()).git_at(&r.display())?;
                if entry.filemode() == 0o120000 {
                    let link = PathBuf::from(OsStr::from_bytes(blob.content()));
                    model
                        .add_link(&r, &link)
                        .map_err(|w| refuse(&w.to_string()))?;
                } else {
                    model.add_file(&r).map_err(|w| refuse(&w.to_string()))?;
                    let exec = entry.filemode() == 0o100755;
                    let mut f = create_file(&target, exec)?;
                    std::io::Write::write_all(&mut f, blob.content()).at("write", &target)?;
                    out.files += 1;
                }
            }
            // Submodules are not part of a pinned tree.
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // issue #7 class 5: a symlink blob in a git pin's tree is resolved like an archive's link.
    #[test]
    fn a_git_tree_with_an_escaping_symlink_blob_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = Repository::init_bare(dir.path().join("r.git")).expect("init");
        let commit_with = |links: &[(&str, &str)]| -> git2::Oid {
            let file = repo.blob(b"int x;\n").expect("blob");
            let mut tb = repo.treebuilder(None).expect("tb");
            tb.insert("a.c", file, 0o100644).expect("insert");
            for (name, target) in links {
                let b = repo.blob(target.as_bytes()).expect("blob");
                tb.insert(name, b, 0o120000).expect("insert");
            }
            let tree = repo.find_tree(tb.write().expect("tree")).expect("tree");
            let sig = git2::Signature::new("t", "t@example.invalid", &git2::Time::new(0, 0))
                .expect("sig");
            repo.commit(None, &sig, &sig, "m", &tree, &[])
                .expect("commit")
        };
        let ok = commit_with(&[("l", "a.c")]);
        let out = dir.path().join("ok");
        export_commit(&dir.path().join("r.git"), ok, None, &out).expect("in-tree link");
        assert!(out.join("l").is_symlink());
        for links in [
            vec![("evil.h", "../../etc/passwd")],
            vec![("evil.h", "/etc/passwd")],
            vec![("s", "."), ("evil.h", "s/s/..")],
        ] {
            let c = commit_with(&links);
            let out = dir.path().join(format!("bad-{c}"));
            let e = export_commit(&dir.path().join("r.git"), c, None, &out).expect_err("refused");
            assert_eq!(e.exit_code(), 2, "{e}");
            assert!(e.to_string().contains("evil.h"), "{e}");
        }
    }
}
