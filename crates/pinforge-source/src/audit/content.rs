//! Content evidence, for every pin kind (a registry tree has nothing else): what upstream
//! changed between the old and the new pin inside the function a hunk lands in, the three
//! versions of a hunk's lines (base, upstream, patch), and a readable three-way conflict.

use crate::patch::diff::{FilePatch, Hunk};
use git2::{Index, MergeFileOptions, Repository};
use similar::{Algorithm, DiffOp};

/// A file's lines, newline kept.
pub(crate) fn lines(bytes: &[u8]) -> Vec<&[u8]> {
    bytes.split_inclusive(|&b| b == b'\n').collect()
}

fn text(l: &[u8]) -> String {
    String::from_utf8_lossy(l)
        .trim_end_matches(['\n', '\r'])
        .to_string()
}

fn trimmed(l: &[u8]) -> String {
    String::from_utf8_lossy(l).trim().to_string()
}

/// Where old line `i` (0-based; `i == old.len()` is the end) lands in the new file. An end
/// boundary stays before lines inserted exactly there; a start boundary goes after them.
fn map_line(ops: &[DiffOp], i: usize, is_end: bool) -> usize {
    let mut last_new_end = 0usize;
    for op in ops {
        // similar's own ranges: (start, length) of the op on each side.
        let (o, ol) = (op.old_range().start, op.old_range().len());
        let (n, nl) = (op.new_range().start, op.new_range().len());
        last_new_end = n + nl;
        if ol == 0 {
            if o == i && is_end {
                return n;
            }
            continue;
        }
        if (o..o + ol).contains(&i) {
            return match op {
                DiffOp::Equal { .. } => n + (i - o),
                _ if is_end && i > o => n + nl,
                _ => n,
            };
        }
    }
    last_new_end
}

/// The old line range of the function around `[at, at+len)`: from its signature (the hunk's
/// `@@` heading, else the nearest line above at column 0) to the first `}` at column 0 below.
fn function_around(old: &[&[u8]], at: usize, len: usize) -> (usize, usize) {
    let at = at.min(old.len());
    // The nearest signature-looking line at column 0 above the first changed line (the `@@`
    // heading names the line before the hunk, which may be the previous function).
    let mut start = None;
    for i in (0..=at.min(old.len().saturating_sub(1))).rev().take(400) {
        let l = text(old[i]);
        if !l.is_empty() && !l.starts_with([' ', '\t', '}', '#', '/', '{', '*']) && l.contains('(')
        {
            start = Some(i);
            break;
        }
    }
    let end_from = (at + len).min(old.len());
    let end = (end_from..old.len())
        .take(3000)
        .find(|&i| text(old[i]) == "}")
        .map(|i| i + 1);
    match (start, end) {
        (Some(s), Some(e)) => (s, e),
        _ => (at.saturating_sub(3), (at + len + 3).min(old.len())),
    }
}

/// What upstream changed between `old` and `new` (one file) inside the functions the hunks
/// of `f` land in; None when nothing there changed.
pub(crate) fn region_changes(f: &FilePatch, old: &[u8], new: &[u8]) -> Option<String> {
    if old == new {
        return None;
    }
    let ol = lines(old);
    let nl = lines(new);
    let ops = similar::capture_diff_slices(Algorithm::Myers, &ol, &nl);
    let mut shown = String::new();
    let mut seen: Vec<(usize, usize)> = Vec::new();
    for h in &f.hunks {
        let first_change = h.old_start.saturating_sub(1) + h.leading;
        let (fs, fe) = function_around(&ol, first_change, h.old_lines.saturating_sub(h.leading));
        if seen.contains(&(fs, fe)) {
            continue;
        }
        seen.push((fs, fe));
        let mut changes = String::new();
        let mut count = 0usize;
        for op in &ops {
            if op.tag() == similar::DiffTag::Equal {
                continue;
            }
            let (o, olen) = (op.old_range().start, op.old_range().len());
            let (n, nlen) = (op.new_range().start, op.new_range().len());
            let inside = if olen == 0 {
                o > fs && o < fe
            } else {
                o < fe && o + olen > fs
            };
            if !inside {
                continue;
            }
            changes.push_str(&format!(
                "  @@ old line {} / new line {} @@\n",
                o + 1,
                n + 1
            ));
            for l in &ol[o..o + olen] {
                if count < 40 {
                    changes.push_str(&format!("  -{}\n", text(l)));
                }
                count += 1;
            }
            for l in &nl[n..n + nlen] {
                if count < 40 {
                    changes.push_str(&format!("  +{}\n", text(l)));
                }
                count += 1;
            }
        }
        if count > 40 {
            changes.push_str(&format!("  … {} more changed line(s)\n", count - 40));
        }
        if !changes.is_empty() {
            shown.push_str(&format!(
                "{} (lines {}-{} of the old pin, `{}`):\n{changes}",
                f.display(),
                fs + 1,
                fe,
                text(ol.get(fs).copied().unwrap_or_default()).trim()
            ));
        }
    }
    (!shown.is_empty()).then_some(shown)
}

/// A hunk whose lines upstream changed: the three versions, and whether upstream's version
/// looks like the same fix in other words (the lines the patch removes are gone upstream too,
/// or every line the patch adds is already there).
pub(crate) struct Versions {
    /// Upstream's version looks like the fix.
    pub superseded: bool,
    /// base / upstream / patch, for a person to compare.
    pub shown: String,
}

/// For each hunk of `f` that no longer matches `ours` (the new base) where `base` had it: the
/// three versions. Empty when every hunk still matches where it was.
pub(crate) fn hunk_versions(f: &FilePatch, base: &[u8], ours: &[u8]) -> Vec<Versions> {
    let bl = lines(base);
    let nl = lines(ours);
    let ops = similar::capture_diff_slices(Algorithm::Myers, &bl, &nl);
    let mut out = Vec::new();
    for (k, h) in f.hunks.iter().enumerate() {
        let pre = h.preimage();
        let at = h.old_start.saturating_sub(1).min(bl.len());
        let end = (at + pre.len()).min(bl.len());
        let (ns, ne) = (map_line(&ops, at, false), map_line(&ops, end, true));
        let upstream: Vec<&[u8]> = nl.get(ns..ne.max(ns)).unwrap_or_default().to_vec();
        if upstream == pre {
            continue;
        }
        out.push(versions(f, k, h, &bl[at..end], &upstream, ns));
    }
    out
}

fn versions(
    f: &FilePatch,
    k: usize,
    h: &Hunk,
    base: &[&[u8]],
    upstream: &[&[u8]],
    ns: usize,
) -> Versions {
    let up: Vec<String> = upstream.iter().map(|l| trimmed(l)).collect();
    let changed = |o: u8| -> Vec<String> {
        h.lines
            .iter()
            .filter(|l| l.origin == o)
            .map(|l| trimmed(&l.content))
            .filter(|l| !l.is_empty())
            .collect()
    };
    let removed = changed(b'-');
    let added = changed(b'+');
    let removed_gone = !removed.is_empty() && removed.iter().all(|r| !up.contains(r));
    let added_there = !added.is_empty() && added.iter().all(|a| up.contains(a));
    let block = |title: String, ls: &mut dyn Iterator<Item = String>| {
        let mut s = format!("  {title}:\n");
        for l in ls {
            s.push_str(&format!("    | {l}\n"));
        }
        s
    };
    let mut shown = format!("{} hunk {} (`{}`):\n", f.display(), k + 1, h.heading.trim());
    shown.push_str(&block(
        format!("base (old pin, line {})", h.old_start),
        &mut base.iter().map(|l| text(l)),
    ));
    shown.push_str(&block(
        format!("upstream (new pin, line {})", ns + 1),
        &mut upstream.iter().map(|l| text(l)),
    ));
    shown.push_str(&block(
        "patch".into(),
        &mut h.postimage().into_iter().map(text),
    ));
    if added_there {
        shown.push_str("  every line the patch adds is already in upstream's version\n");
    } else if removed_gone {
        shown.push_str("  upstream replaced the lines the patch removes, differently\n");
    }
    Versions {
        superseded: added_there || removed_gone,
        shown,
    }
}

/// The conflicts of a cherry-pick index, each shown as a diff3 region (base, upstream, patch)
/// with three lines of context and the line it starts at.
pub(crate) fn render_conflicts(repo: &Repository, index: &Index) -> String {
    let mut out = String::new();
    let Ok(conflicts) = index.conflicts() else {
        return "the three-way merge conflicts (details unavailable)".into();
    };
    for c in conflicts.flatten() {
        let side_path = c
            .our
            .as_ref()
            .or(c.their.as_ref())
            .map(|e| String::from_utf8_lossy(&e.path).into_owned())
            .unwrap_or_default();
        let (Some(anc), Some(ours), Some(theirs)) = (c.ancestor, c.our, c.their) else {
            out.push_str(&format!("{side_path}: added or removed on one side only\n"));
            continue;
        };
        let path = String::from_utf8_lossy(&ours.path).into_owned();
        let mut opts = MergeFileOptions::new();
        opts.ancestor_label("base (old pin)")
            .our_label("upstream (new pin)")
            .their_label("patch")
            .style_diff3(true);
        let Ok(merged) = repo.merge_file_from_index(&anc, &ours, &theirs, Some(&mut opts)) else {
            out.push_str(&format!("{path}: conflicts\n"));
            continue;
        };
        let ls = lines(merged.content());
        let marks: Vec<usize> = ls
            .iter()
            .enumerate()
            .filter(|(_, l)| l.starts_with(b"<<<<<<< "))
            .map(|(i, _)| i)
            .collect();
        for start in marks {
            let Some(end) = (start..ls.len()).find(|&i| ls[i].starts_with(b">>>>>>> ")) else {
                continue;
            };
            out.push_str(&format!("{path}:{}:\n", start + 1));
            for (i, l) in ls
                .iter()
                .enumerate()
                .take((end + 4).min(ls.len()))
                .skip(start.saturating_sub(3))
            {
                out.push_str(&format!("  {:>5} {}\n", i + 1, text(l)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_maps_across_an_insertion_and_a_replacement() {
        let old: Vec<&[u8]> = vec![b"a\n", b"b\n", b"c\n", b"d\n"];
        let new: Vec<&[u8]> = vec![b"x\n", b"a\n", b"B\n", b"c\n", b"d\n"];
        let ops = similar::capture_diff_slices(Algorithm::Myers, &old, &new);
        assert_eq!(
            map_line(&ops, 0, false),
            1,
            "start goes after the insertion"
        );
        assert_eq!(map_line(&ops, 0, true), 0, "end stays before it");
        assert_eq!(map_line(&ops, 1, false), 2);
        assert_eq!(map_line(&ops, 2, true), 3);
        assert_eq!(map_line(&ops, 4, true), 5);
    }
}
