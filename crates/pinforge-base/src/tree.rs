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

/// Every path of a tree being written, with its kind: the ground truth the link checks use
/// (never the filesystem, which a hostile entry may already have shaped).
#[derive(Debug, Default)]
pub struct TreeModel {
    nodes: BTreeMap<PathBuf, Node>,
}

impl TreeModel {
    fn add(&mut self, rel: &Path, node: Node) -> std::result::Result<(), String> {
        let mut prefix = PathBuf::new();
        let comps: Vec<Component> = rel.components().collect();
        for c in &comps[..comps.len().saturating_sub(1)] {
            prefix.push(c);
            match self.nodes.get(&prefix) {
                Some(Node::Link(_)) => {
                    return Err(format!(
                        "its path goes through the symlink `{}`; entries may not traverse links",
                        prefix.display()
                    ))
                }
                Some(Node::File) => {
                    return Err(format!("its parent `{}` is a file", prefix.display()))
                }
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
            (Some(Node::Dir), _) => {
                Err("the path appears twice: other entries sit below it as a folder".into())
            }
            (Some(_), _) => Err("the path appears twice".into()),
        }
    }

    /// Add a file or folder entry; the reason when it is refused.
    pub fn add_file(&mut self, rel: &Path) -> std::result::Result<(), String> {
        self.add(rel, Node::File)
    }

    /// See [`TreeModel::add_file`].
    pub fn add_dir(&mut self, rel: &Path) -> std::result::Result<(), String> {
        self.add(rel, Node::Dir)
    }

    /// Add a symlink; its target is resolved later, by [`TreeModel::check_links`].
    pub fn add_link(&mut self, rel: &Path, target: &Path) -> std::result::Result<(), String> {
        if target.as_os_str().is_empty() {
            return Err("symlink with an empty target".into());
        }
        if target.is_absolute() {
            return Err(format!(
                "symlink to the absolute path `{}`; links must stay inside the tree",
                target.display()
            ));
        }
        self.add(rel, Node::Link(target.to_path_buf()))
    }

    /// Where the link at `link` leads, followed through every link of the tree the way the
    /// kernel follows them, as a path relative to the root. Refused when it leaves the root,
    /// is absolute, loops, or lands in a `.git` folder (the vendor tree's own repository).
    pub fn resolve(&self, link: &Path) -> std::result::Result<PathBuf, String> {
        let Some(Node::Link(first)) = self.nodes.get(link) else {
            return Err("not a symlink".into());
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
                    return Err(format!(
                        "symlink to `{}` resolves outside the tree",
                        first.display()
                    ));
                }
                continue;
            }
            if c == "/" {
                return Err(format!(
                    "symlink to `{}` resolves through an absolute path",
                    first.display()
                ));
            }
            stack.push(c);
            let here: PathBuf = stack.iter().collect();
            if let Some(Node::Link(next)) = self.nodes.get(&here) {
                hops += 1;
                if hops > MAX_LINK_HOPS {
                    return Err(format!(
                        "symlink to `{}` does not resolve (a loop of links)",
                        first.display()
                    ));
                }
                if next.is_absolute() {
                    return Err(format!(
                        "symlink to `{}` resolves through `{}`, a link to an absolute path",
                        first.display(),
                        here.display()
                    ));
                }
                stack.pop();
                push_front(&mut pending, next);
            }
        }
        let out: PathBuf = stack.iter().collect();
        if stack.iter().any(|c| is_git(c)) {
            return Err(format!(
                "symlink to `{}` resolves into a .git folder",
                first.display()
            ));
        }
        Ok(out)
    }

    /// Resolve every link; the first refused one (in path order) with its reason.
    pub fn check_links(&self) -> std::result::Result<(), (PathBuf, String)> {
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
