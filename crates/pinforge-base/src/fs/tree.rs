//! The one model of a tree whose entries come from data (an archive, a pinned folder, a git
//! tree, a build's staged outputs, an install-root entry): every path with its kind, and link
//! targets resolved lexically through the tree's other links as the kernel would follow them.
//! Extraction, the build's collection of its outputs and the install root's checks all resolve
//! links here, so a tree one of them accepts is a tree the others accept.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// The kernel's limit on links followed in one lookup (MAXSYMLINKS): a chain longer than this
/// is a loop as far as any reader of the tree is concerned.
const MAX_LINK_HOPS: u32 = 40;

/// Is this name a `.git` entry? Case-insensitively: git itself refuses `.GIT` in trees (it is
/// the repository folder on case-insensitive filesystems), and so does libgit2's index.
pub fn is_git(name: &OsStr) -> bool {
    name.as_bytes().eq_ignore_ascii_case(b".git")
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Dir,
    File,
    Link(PathBuf),
}

/// Why the tree model refused an entry or a link: the reason half of an archive or folder
/// pin's error (the caller names the archive and the entry).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A path below a symlink of the tree.
    #[error("its path goes through the symlink `{}`; entries may not traverse links", .0.display())]
    ThroughLink(PathBuf),
    /// A path below a file of the tree.
    #[error("its parent `{}` is a file", .0.display())]
    ParentIsFile(PathBuf),
    /// A path that other entries already made a folder.
    #[error("the path appears twice: other entries sit below it as a folder")]
    TwiceAsFolder,
    /// A path listed twice.
    #[error("the path appears twice")]
    Twice,
    /// A symlink with an empty target.
    #[error("symlink with an empty target")]
    EmptyTarget,
    /// A symlink to an absolute path.
    #[error("symlink to the absolute path `{}`; links must stay inside the tree", .0.display())]
    AbsoluteTarget(PathBuf),
    /// `resolve` asked about a path that is not a link.
    #[error("not a symlink")]
    NotALink,
    /// A link that climbs above the root.
    #[error("symlink to `{}` resolves outside the tree", .0.display())]
    Outside(PathBuf),
    /// A link whose target, after following links, is absolute.
    #[error("symlink to `{}` resolves through an absolute path", .0.display())]
    ThroughAbsolute(PathBuf),
    /// A loop of links (more hops than the kernel follows).
    #[error("symlink to `{}` does not resolve (a loop of links)", .0.display())]
    Loop(PathBuf),
    /// A link that passes through another link to an absolute path.
    #[error("symlink to `{}` resolves through `{}`, a link to an absolute path", .target.display(), .via.display())]
    ThroughAbsoluteLink {
        /// The first link's target.
        target: PathBuf,
        /// The link on the way that is absolute.
        via: PathBuf,
    },
    /// A link that lands in a `.git` folder.
    #[error("symlink to `{}` resolves into a .git folder", .0.display())]
    IntoGit(PathBuf),
}

/// Every path of a tree being written, with its kind: the ground truth the link checks use
/// (never the filesystem, which a hostile entry may already have shaped).
#[derive(Debug, Default)]
pub struct TreeModel {
    nodes: BTreeMap<PathBuf, Node>,
}

impl TreeModel {
    fn add(&mut self, rel: &Path, node: Node) -> std::result::Result<(), Refusal> {
        let mut prefix = PathBuf::new();
        let comps: Vec<Component> = rel.components().collect();
        for c in &comps[..comps.len().saturating_sub(1)] {
            prefix.push(c);
            match self.nodes.get(&prefix) {
                Some(Node::Link(_)) => return Err(Refusal::ThroughLink(prefix)),
                Some(Node::File) => return Err(Refusal::ParentIsFile(prefix)),
                Some(Node::Dir) => {}
                None => {
                    self.nodes.insert(prefix.clone(), Node::Dir);
                }
            }
        }
        match (self.nodes.get(rel), &node) {
            (None, _) => {
                self.nodes.insert(rel.to_path_buf(), node);
                Ok(())
            }
            (Some(Node::Dir), Node::Dir) => Ok(()),
            // Entries below it made it a folder: this entry would put them through a link
            // (or a file), in whichever order the source listed them.
            (Some(Node::Dir), _) => Err(Refusal::TwiceAsFolder),
            (Some(_), _) => Err(Refusal::Twice),
        }
    }

    /// Add a file or folder entry; the reason when it is refused.
    pub fn add_file(&mut self, rel: &Path) -> std::result::Result<(), Refusal> {
        self.add(rel, Node::File)
    }

    /// See [`TreeModel::add_file`].
    pub fn add_dir(&mut self, rel: &Path) -> std::result::Result<(), Refusal> {
        self.add(rel, Node::Dir)
    }

    /// Add a symlink; its target is resolved later, by [`TreeModel::check_links`].
    pub fn add_link(&mut self, rel: &Path, target: &Path) -> std::result::Result<(), Refusal> {
        if target.as_os_str().is_empty() {
            return Err(Refusal::EmptyTarget);
        }
        if target.is_absolute() {
            return Err(Refusal::AbsoluteTarget(target.to_path_buf()));
        }
        self.add(rel, Node::Link(target.to_path_buf()))
    }

    /// Where the link at `link` leads, followed through every link of the tree the way the
    /// kernel follows them, as a path relative to the root. Refused when it leaves the root,
    /// is absolute, loops, or lands in a `.git` folder (the vendor tree's own repository).
    pub fn resolve(&self, link: &Path) -> std::result::Result<PathBuf, Refusal> {
        let Some(Node::Link(first)) = self.nodes.get(link) else {
            return Err(Refusal::NotALink);
        };
        let mut stack: Vec<OsString> = link
            .parent()
            .map(|p| p.components().map(|c| c.as_os_str().to_owned()).collect())
            .unwrap_or_default();
        let mut pending: VecDeque<OsString> = VecDeque::new();
        let push_front = |pending: &mut VecDeque<OsString>, target: &Path| {
            let comps: Vec<Component> = target.components().collect();
            for c in comps.into_iter().rev() {
                pending.push_front(c.as_os_str().to_owned());
            }
        };
        push_front(&mut pending, first);
        let mut hops = 0u32;
        while let Some(c) = pending.pop_front() {
            if c == "." {
                continue;
            }
            if c == ".." {
                if stack.pop().is_none() {
                    return Err(Refusal::Outside(first.clone()));
                }
                continue;
            }
            if c == "/" {
                return Err(Refusal::ThroughAbsolute(first.clone()));
            }
            stack.push(c);
            let here: PathBuf = stack.iter().collect();
            if let Some(Node::Link(next)) = self.nodes.get(&here) {
                hops += 1;
                if hops > MAX_LINK_HOPS {
                    return Err(Refusal::Loop(first.clone()));
                }
                if next.is_absolute() {
                    return Err(Refusal::ThroughAbsoluteLink {
                        target: first.clone(),
                        via: here,
                    });
                }
                stack.pop();
                push_front(&mut pending, next);
            }
        }
        let out: PathBuf = stack.iter().collect();
        if stack.iter().any(|c| is_git(c)) {
            return Err(Refusal::IntoGit(first.clone()));
        }
        Ok(out)
    }

    /// Resolve every link; the first refused one (in path order) with its reason.
    pub fn check_links(&self) -> std::result::Result<(), (PathBuf, Refusal)> {
        for (path, node) in &self.nodes {
            if let Node::Link(_) = node {
                self.resolve(path).map_err(|why| (path.clone(), why))?;
            }
        }
        Ok(())
    }

    /// The links, in path order, with their targets.
    pub(crate) fn links(&self) -> impl Iterator<Item = (&PathBuf, &PathBuf)> {
        self.nodes.iter().filter_map(|(p, n)| match n {
            Node::Link(t) => Some((p, t)),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // issue #7 class 1: a path below a link is refused whichever of the two comes first, so
    // callers that list files before links (the install root's records) get the same answer
    // as callers that walk in path order.
    #[test]
    fn a_path_below_a_link_is_refused_in_either_order() {
        let mut m = TreeModel::default();
        m.add_link(Path::new("zz"), Path::new("sub")).expect("link");
        assert!(m.add_file(Path::new("zz/file")).is_err());
        let mut m = TreeModel::default();
        m.add_file(Path::new("zz/file")).expect("file");
        assert!(m.add_link(Path::new("zz"), Path::new("sub")).is_err());
        assert!(m.add_file(Path::new("zz/file/x")).is_err(), "below a file");
    }

    #[test]
    fn links_resolve_through_earlier_links_with_raw_names() {
        let mut m = TreeModel::default();
        m.add_link(Path::new("l"), Path::new(".")).expect("link");
        m.add_link(Path::new("x"), Path::new("l/l/../../etc"))
            .expect("link");
        let bad = OsStr::from_bytes(b"n\xff");
        m.add_link(Path::new(bad), Path::new("l/l/lib"))
            .expect("link");
        assert!(m.resolve(Path::new("x")).is_err(), "escapes through l");
        assert_eq!(
            m.resolve(Path::new(bad)).expect("inside"),
            PathBuf::from("lib")
        );
        let mut cycle = TreeModel::default();
        cycle
            .add_link(Path::new("a"), Path::new("b"))
            .expect("link");
        cycle
            .add_link(Path::new("b"), Path::new("a"))
            .expect("link");
        assert!(cycle.resolve(Path::new("a")).is_err(), "a loop");
        assert!(cycle.check_links().is_err());
    }
}
