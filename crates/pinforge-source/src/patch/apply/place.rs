//! Placing a patch's hunks on a work tree the way `git apply` does (the stated line, then the
//! nearest match), without writing anything: the renumbered diff, the moved hunks, and the
//! content every touched file must hold afterwards.

use super::{read_sections, subject, HunkOffset};
use crate::patch::diff::{FilePatch, Hunk};
use crate::patch::PatchFile;
use pinforge_base::error::{Error, Result};
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where every hunk goes: the diff with its `@@` numbers rewritten to the found lines, the
/// moved hunks, and the content each touched file must have afterwards.
pub(super) struct Plan {
    pub(super) diff: Vec<u8>,
    pub(super) offsets: Vec<HunkOffset>,
    /// Path → content after the patch (None: the file is deleted).
    results: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

/// A file being patched: its lines and which of them a hunk already wrote.
struct Image {
    lines: Vec<Vec<u8>>,
    patched: Vec<bool>,
}

impl Image {
    fn new(bytes: &[u8]) -> Image {
        let lines: Vec<Vec<u8>> = bytes
            .split_inclusive(|&b| b == b'\n')
            .map(<[u8]>::to_vec)
            .collect();
        let patched = vec![false; lines.len()];
        Image { lines, patched }
    }
    fn bytes(&self) -> Vec<u8> {
        self.lines.concat()
    }
    /// git's `match_fragment` with exact comparison (no whitespace fixing, no fuzz).
    fn matches(&self, pre: &[&[u8]], at: usize, beginning: bool, end: bool) -> bool {
        let nr = self.lines.len();
        if pre.len() + at > nr || (end && pre.len() + at != nr) || (beginning && at != 0) {
            return false;
        }
        pre.iter()
            .enumerate()
            .all(|(i, l)| !self.patched[at + i] && self.lines[at + i] == *l)
    }
    /// git's `find_pos`: the stated line, then +1, -1, +2, -2, ... until a match.
    fn find_pos(&self, pre: &[&[u8]], line: usize, beginning: bool, end: bool) -> Option<usize> {
        let nr = self.lines.len();
        let line = if beginning {
            0
        } else if end {
            nr.checked_sub(pre.len()).unwrap_or(nr)
        } else {
            line
        }
        .min(nr);
        let (mut back, mut fwd, mut cur) = (line, line, line);
        let mut i = 0usize;
        loop {
            if self.matches(pre, cur, beginning, end) {
                return Some(cur);
            }
            loop {
                if back == 0 && fwd == nr {
                    return None;
                }
                if i & 1 == 1 {
                    if back == 0 {
                        i += 1;
                        continue;
                    }
                    back -= 1;
                    cur = back;
                } else {
                    if fwd == nr {
                        i += 1;
                        continue;
                    }
                    fwd += 1;
                    cur = fwd;
                }
                break;
            }
            i += 1;
        }
    }
    fn splice(&mut self, at: usize, old_len: usize, post: &[&[u8]]) {
        self.lines
            .splice(at..at + old_len, post.iter().map(|l| l.to_vec()));
        self.patched
            .splice(at..at + old_len, std::iter::repeat_n(true, post.len()));
    }
}

fn os_path(bytes: &[u8]) -> &Path {
    Path::new(std::ffi::OsStr::from_bytes(bytes))
}

/// A tree file's bytes; None when absent. Links, folders, FIFOs and devices are refused before
/// they are opened, and so is any path through a symbolic link.
fn read_tree_file(workdir: &Path, p: &PatchFile, rel: &[u8]) -> Result<Option<Vec<u8>>> {
    let rel_path = os_path(rel);
    let mut cur = workdir.to_path_buf();
    for c in rel_path.components() {
        cur.push(c);
        match std::fs::symlink_metadata(&cur) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("inspect", &cur, e)),
            Ok(m) if m.file_type().is_symlink() => {
                return Err(Error::input(
                    subject(p),
                    format!(
                        "refused: `{}` goes through or is the symbolic link `{}`",
                        rel_path.display(),
                        cur.strip_prefix(workdir).unwrap_or(&cur).display()
                    ),
                )
                .with_hint("patches may change regular files only"))
            }
            Ok(_) => {}
        }
    }
    let m = std::fs::symlink_metadata(&cur).map_err(|e| Error::io("inspect", &cur, e))?;
    if !m.file_type().is_file() {
        return Err(Error::input(
            subject(p),
            format!("refused: `{}` is not a regular file", rel_path.display()),
        )
        .with_hint("patches may change regular files only"));
    }
    // The lstat above names the refusal in the patch's terms; the shared open refuses again,
    // without following, anything swapped in since, before a byte is read.
    let mut f = pinforge_base::fsx::open_regular(&cur, "patch target", false)?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut bytes).map_err(|e| Error::io("read", &cur, e))?;
    Ok(Some(bytes))
}

/// Place every hunk of `p` on the work tree, as `git apply` would, without writing anything.
pub(super) fn plan(workdir: &Path, p: &PatchFile) -> Result<Plan> {
    let files = read_sections(p)?;
    let offset = p.header.diff_offset.unwrap_or(0);
    let mut diff_bytes = p.bytes.get(offset..).unwrap_or_default().to_vec();
    // Replacements of `@@` numbers, applied back to front so earlier spans stay valid.
    let mut renumber: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    let mut offsets = Vec::new();
    let mut images: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
    for f in &files {
        if f.hunks.is_empty() {
            carry_unhunked(workdir, p, f, &mut images)?;
            continue;
        }
        let current = current_content(workdir, p, f, &images)?;
        let mut img = Image::new(&current);
        place_hunks(p, f, &mut img, &mut offsets, &mut renumber)?;
        record_result(p, f, &current, &img, &mut images)?;
    }
    renumber.sort_by_key(|(r, _)| std::cmp::Reverse(r.start));
    for (range, text) in renumber {
        diff_bytes.splice(range, text.into_bytes());
    }
    // Only files a hunk touched are checked after libgit2 wrote them.
    let touched: Vec<Vec<u8>> = files
        .iter()
        .filter(|f| !f.hunks.is_empty())
        .filter_map(|f| f.new_path.clone().or_else(|| f.old_path.clone()))
        .collect();
    let results = images
        .into_iter()
        .filter(|(k, _)| touched.contains(k))
        .collect();
    Ok(Plan {
        diff: diff_bytes,
        offsets,
        results,
    })
}

/// A section without hunks (mode change, pure rename, binary): libgit2 handles it as written,
/// but a later section of the same patch must see where the content went.
fn carry_unhunked(
    workdir: &Path,
    p: &PatchFile,
    f: &FilePatch,
    images: &mut BTreeMap<Vec<u8>, Option<Vec<u8>>>,
) -> Result<()> {
    // Mode changes, pure renames, binary sections: libgit2 handles them as written;
    // a later section of the same patch must see where the content went.
    match (&f.old_path, &f.new_path) {
        (Some(old), _) if f.is_delete => {
            images.insert(old.clone(), None);
        }
        (Some(old), Some(new)) if old != new && !f.binary => {
            let content = match images.get(old) {
                Some(state) => state.clone(),
                None => read_tree_file(workdir, p, old)?,
            };
            if !f.is_copy {
                images.insert(old.clone(), None);
            }
            images.insert(new.clone(), content);
        }
        _ => {}
    }
    Ok(())
}

/// The content a section's hunks apply to: what an earlier section left, else the tree's file
/// (nothing for a new file, which must not exist yet).
fn current_content(
    workdir: &Path,
    p: &PatchFile,
    f: &FilePatch,
    images: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
) -> Result<Vec<u8>> {
    let current = match (&f.old_path, f.is_new) {
        (_, true) | (None, _) => {
            if let Some(new) = &f.new_path {
                let exists = match images.get(new) {
                    Some(state) => state.is_some(),
                    None => read_tree_file(workdir, p, new)?.is_some(),
                };
                if exists {
                    return Err(Error::input(
                        subject(p),
                        format!(
                            "does not apply: it creates `{}`, which already exists",
                            f.display()
                        ),
                    )
                    .with_hint("the file exists upstream now: rebase the patch"));
                }
            }
            Vec::new()
        }
        (Some(old), false) => {
            let known = images.get(old).cloned();
            let content = match known {
                Some(state) => state,
                None => read_tree_file(workdir, p, old)?,
            };
            content.ok_or_else(|| {
                Error::input(
                    subject(p),
                    format!(
                        "does not apply: `{}` does not exist in the tree",
                        String::from_utf8_lossy(old)
                    ),
                )
                .with_hint("the file was moved or removed upstream: rebase the patch")
            })?
        }
    };
    Ok(current)
}

/// Place each hunk of `f` on `img` as git's apply_one_fragment does, recording moved hunks and
/// the `@@` numbers to rewrite.
fn place_hunks(
    p: &PatchFile,
    f: &FilePatch,
    img: &mut Image,
    offsets: &mut Vec<HunkOffset>,
    renumber: &mut Vec<(std::ops::Range<usize>, String)>,
) -> Result<()> {
    let mut delta: i64 = 0;
    for (n, h) in f.hunks.iter().enumerate() {
        let pre = h.preimage();
        let post = h.postimage();
        // git's apply_one_fragment: a hunk at line 0 or 1 must match at the beginning, a
        // hunk without trailing context at the end; the search starts at the new line,
        // which already accounts for earlier hunks of this file.
        let beginning = h.old_start <= 1;
        let end = h.trailing == 0;
        let stated = h.new_start.saturating_sub(1);
        let Some(at) = img.find_pos(&pre, stated, beginning, end) else {
            return Err(no_match(p, f, n, h, img, stated));
        };
        let moved = at as i64 - stated as i64;
        if moved != 0 {
            offsets.push(HunkOffset {
                file: f.display(),
                hunk: n + 1,
                offset: moved,
            });
        }
        img.splice(at, pre.len(), &post);
        let new_start = at + 1;
        let old_start = (new_start as i64 - delta).max(0);
        delta += post.len() as i64 - pre.len() as i64;
        renumber.push((
            h.numbers.clone(),
            format!(
                "-{},{} +{},{}",
                old_start, h.old_lines, new_start, h.new_lines
            ),
        ));
    }
    Ok(())
}

/// What the section leaves behind: a deleted file (which the hunks must have emptied), or the
/// patched content at the new path (the old one removed by a rename, kept by a copy).
fn record_result(
    p: &PatchFile,
    f: &FilePatch,
    current: &[u8],
    img: &Image,
    images: &mut BTreeMap<Vec<u8>, Option<Vec<u8>>>,
) -> Result<()> {
    if f.is_delete {
        if !img.lines.is_empty() {
            return Err(Error::input(
                subject(p),
                format!(
                    "does not apply: deleting `{}` would leave {} line(s) the patch does not remove",
                    f.display(),
                    img.lines.len()
                ),
            )
            .with_hint("the file changed upstream: refresh the patch"));
        }
        if let Some(old) = &f.old_path {
            images.insert(old.clone(), None);
        }
    } else {
        if let (Some(old), Some(new)) = (&f.old_path, &f.new_path) {
            if old != new && !f.is_new {
                // A copy keeps the old file as it was; a rename removes it.
                let kept = f.is_copy.then(|| current.to_vec());
                images.insert(old.clone(), kept);
            }
        }
        if let Some(new) = &f.new_path {
            images.insert(new.clone(), Some(img.bytes()));
        }
    }
    Ok(())
}

/// After libgit2 wrote the placed diff, every touched file must hold exactly what was placed.
pub(super) fn check_results(workdir: &Path, plan: &Plan) -> Result<()> {
    for (rel, want) in &plan.results {
        let path: PathBuf = workdir.join(os_path(rel));
        let got = pinforge_base::fsx::read_if_present(&path)?;
        if &got != want {
            return Err(Error::Internal(format!(
                "{}: libgit2 wrote other content than the placed hunks; the tree was reset",
                path.display()
            )));
        }
    }
    Ok(())
}

/// A hunk that matches nowhere: name patch, file and hunk, and show the closest region of the
/// file (most lines equal, nearest the stated line on a tie) beside the expected lines.
fn no_match(p: &PatchFile, f: &FilePatch, n: usize, h: &Hunk, img: &Image, stated: usize) -> Error {
    let expected = h.preimage();
    let len = expected.len().min(img.lines.len());
    let mut best = (0usize, stated.min(img.lines.len().saturating_sub(len)));
    for s in 0..=img.lines.len().saturating_sub(len) {
        let score = expected
            .iter()
            .zip(&img.lines[s..s + len])
            .filter(|(a, b)| **a == b.as_slice())
            .count();
        let nearer = s.abs_diff(stated) < best.1.abs_diff(stated);
        if score > best.0 || (score == best.0 && nearer) {
            best = (score, s);
        }
    }
    let at = best.1;
    let text = |lines: &mut dyn Iterator<Item = &[u8]>| {
        let mut t = String::new();
        for l in lines {
            t.push_str(String::from_utf8_lossy(l).trim_end_matches(['\n', '\r']));
            t.push('\n');
        }
        t
    };
    let exp_text = text(&mut expected.iter().copied());
    let found_text = text(&mut img.lines[at..at + len].iter().map(Vec::as_slice));
    let found_label = format!("found (tree, line {})", at + 1);
    let shown = similar::TextDiff::from_lines(&exp_text, &found_text)
        .unified_diff()
        .context_radius(3)
        .header("expected (patch)", &found_label)
        .to_string();
    Error::input(
        subject(p),
        format!(
            "does not apply: {}, hunk {} ({}): its context matches nowhere in the file; \
             the closest region starts at line {} (stated: line {})",
            f.display(),
            n + 1,
            h.heading,
            at + 1,
            stated + 1
        ),
    )
    .with_detail(shown)
    .with_hint("upstream changed these lines: refresh the patch against this tree")
}
