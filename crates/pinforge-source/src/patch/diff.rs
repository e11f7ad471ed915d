//! A byte-level reader of unified git diffs: file sections (paths, creation, deletion,
//! rename), hunks with their lines and the byte span of their `@@ -a,b +c,d @@` numbers, so
//! that apply can place each hunk as `git apply` does and rewrite only those numbers. Content
//! is never decoded: a diff may carry any bytes in its changed lines.

use std::ops::Range;

/// One line of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Line {
    /// `b' '` context, `b'-'` removed, `b'+'` added.
    pub origin: u8,
    /// The line's bytes with its newline (none when `\ No newline at end of file` follows).
    pub content: Vec<u8>,
}

/// One hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hunk {
    /// Old range start and length as written.
    pub old_start: usize,
    /// Old range length.
    pub old_lines: usize,
    /// New range start as written.
    pub new_start: usize,
    /// New range length.
    pub new_lines: usize,
    /// Byte span of `-a[,b] +c[,d]` in the diff buffer.
    pub numbers: Range<usize>,
    /// The `@@ ... @@` line for messages (lossy text: shown, never used to index bytes).
    pub heading: String,
    /// The body.
    pub lines: Vec<Line>,
    /// Context lines before the first change (git's `leading`).
    pub leading: usize,
    /// Context lines after the last change (git's `trailing`).
    pub trailing: usize,
    /// 1-based line of the `@@` in the diff buffer.
    pub line: usize,
}

impl Hunk {
    /// The lines the tree must hold: context and removed lines.
    pub(crate) fn preimage(&self) -> Vec<&[u8]> {
        self.lines
            .iter()
            .filter(|l| l.origin != b'+')
            .map(|l| l.content.as_slice())
            .collect()
    }
    /// The lines that replace them: context and added lines.
    pub(crate) fn postimage(&self) -> Vec<&[u8]> {
        self.lines
            .iter()
            .filter(|l| l.origin != b'-')
            .map(|l| l.content.as_slice())
            .collect()
    }
}

/// One file section of a diff.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FilePatch {
    /// Path before (without the `a/` prefix); None for a creation.
    pub old_path: Option<Vec<u8>>,
    /// Path after (without the `b/` prefix); None for a deletion.
    pub new_path: Option<Vec<u8>>,
    /// `new file mode` or `--- /dev/null`.
    pub is_new: bool,
    /// `deleted file mode` or `+++ /dev/null`.
    pub is_delete: bool,
    /// A binary section (`GIT binary patch`, `Binary files ... differ`).
    pub binary: bool,
    /// `copy from`: the old path stays (a rename removes it).
    pub is_copy: bool,
    /// Hunks in file order.
    pub hunks: Vec<Hunk>,
    /// 1-based line of the section start in the diff buffer.
    pub line: usize,
}

impl FilePatch {
    /// The path to name in messages and trailers (after, else before), lossy for display.
    pub(crate) fn display(&self) -> String {
        let p = self.new_path.as_ref().or(self.old_path.as_ref());
        p.map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_else(|| "(unnamed)".into())
    }
}

/// Why a diff could not be read, at a 1-based line of the diff buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DiffError {
    /// Line in the diff buffer.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

fn err(line: usize, message: impl Into<String>) -> DiffError {
    DiffError {
        line,
        message: message.into(),
    }
}

/// Parse every file section of `diff`.
pub(crate) fn parse(diff: &[u8]) -> Result<Vec<FilePatch>, DiffError> {
    let mut spans = Vec::new();
    let mut at = 0usize;
    for l in diff.split_inclusive(|&b| b == b'\n') {
        spans.push(at..at + l.len());
        at += l.len();
    }
    let line = |i: usize| &diff[spans[i].clone()];
    let mut files: Vec<FilePatch> = Vec::new();
    let mut git_names: Option<(Vec<u8>, Vec<u8>)> = None;
    let mut cur: Option<FilePatch> = None;
    let mut i = 0usize;
    while i < spans.len() {
        let l = strip_eol(line(i));
        if let Some(rest) = l.strip_prefix(b"diff --git ") {
            if let Some(done) = cur.take() {
                files.push(finish(done, git_names.take()));
            }
            git_names = split_git_names(rest);
            cur = Some(FilePatch {
                line: i + 1,
                ..FilePatch::default()
            });
            i += 1;
            continue;
        }
        if l.starts_with(b"--- ") && i + 1 < spans.len() && line(i + 1).starts_with(b"+++ ") {
            // A section without `diff --git` (plain `diff -u`) starts at its `---` line.
            if cur.as_ref().is_none_or(|c| !c.hunks.is_empty()) {
                if let Some(done) = cur.take() {
                    files.push(finish(done, git_names.take()));
                }
                cur = Some(FilePatch {
                    line: i + 1,
                    ..FilePatch::default()
                });
            }
            let c = cur.as_mut().expect("invariant: a section was just ensured");
            let old = header_path(&l[4..]).map_err(|m| err(i + 1, m))?;
            let new = header_path(strip_eol(&line(i + 1)[4..])).map_err(|m| err(i + 2, m))?;
            c.is_new |= old.is_none();
            c.is_delete |= new.is_none();
            if c.old_path.is_none() && !c.is_new {
                c.old_path = old;
            }
            if c.new_path.is_none() && !c.is_delete {
                c.new_path = new;
            }
            i += 2;
            continue;
        }
        let Some(c) = cur.as_mut() else {
            i += 1;
            continue;
        };
        if l.starts_with(b"@@ -") {
            let (hunk, next) = parse_hunk(diff, &spans, i)?;
            c.hunks.push(hunk);
            i = next;
            continue;
        }
        if c.hunks.is_empty() {
            if l.starts_with(b"new file mode ") {
                c.is_new = true;
            } else if l.starts_with(b"deleted file mode ") {
                c.is_delete = true;
            } else if let Some(p) = l
                .strip_prefix(b"rename from ")
                .or_else(|| l.strip_prefix(b"copy from "))
            {
                c.is_copy = l.starts_with(b"copy ");
                c.old_path = Some(unquote(p).map_err(|m| err(i + 1, m))?);
            } else if let Some(p) = l
                .strip_prefix(b"rename to ")
                .or_else(|| l.strip_prefix(b"copy to "))
            {
                c.new_path = Some(unquote(p).map_err(|m| err(i + 1, m))?);
            } else if l.starts_with(b"GIT binary patch") || l.starts_with(b"Binary files ") {
                c.binary = true;
            }
        }
        i += 1;
    }
    if let Some(done) = cur.take() {
        files.push(finish(done, git_names.take()));
    }
    Ok(files)
}

fn finish(mut f: FilePatch, names: Option<(Vec<u8>, Vec<u8>)>) -> FilePatch {
    if let Some((a, b)) = names {
        if f.old_path.is_none() && !f.is_new {
            f.old_path = Some(a);
        }
        if f.new_path.is_none() && !f.is_delete {
            f.new_path = Some(b);
        }
    }
    f
}

fn strip_eol(l: &[u8]) -> &[u8] {
    l.strip_suffix(b"\n").unwrap_or(l)
}

/// `a/X b/Y` of a `diff --git` line; only used when no `---`/`+++`/rename line names the
/// paths (mode-only changes). Unquoted names with spaces are split where both sides agree.
fn split_git_names(rest: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    if rest.first() == Some(&b'"') {
        let end = closing_quote(rest)?;
        let a = unquote(&rest[..=end]).ok()?;
        let b = unquote(rest.get(end + 2..)?).ok()?;
        return Some((strip_prefix(&a), strip_prefix(&b)));
    }
    // Same name on both sides: "a/X b/X" has an odd length split in the middle.
    let n = rest.len();
    if n % 2 == 1 {
        let (a, b) = (&rest[..n / 2], &rest[n / 2 + 1..]);
        if rest[n / 2] == b' ' && strip_prefix(a) == strip_prefix(b) {
            return Some((strip_prefix(a), strip_prefix(b)));
        }
    }
    None
}

fn closing_quote(s: &[u8]) -> Option<usize> {
    let mut i = 1;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// Remove the first path component (`a/`, `b/`: git's -p1).
fn strip_prefix(p: &[u8]) -> Vec<u8> {
    match p.iter().position(|&b| b == b'/') {
        Some(i) => p[i + 1..].to_vec(),
        None => p.to_vec(),
    }
}

/// The path of a `---`/`+++` line; None for `/dev/null`.
fn header_path(raw: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let name = if raw.first() == Some(&b'"') {
        unquote(raw)?
    } else {
        // Non-git diffs append a tab and a timestamp.
        let end = raw.iter().position(|&b| b == b'\t').unwrap_or(raw.len());
        raw[..end].to_vec()
    };
    if name == b"/dev/null" {
        return Ok(None);
    }
    Ok(Some(strip_prefix(&name)))
}

/// Undo git's C-style quoting of a path (`"a/\303\244 b"`); a bare path is returned as is.
fn unquote(raw: &[u8]) -> Result<Vec<u8>, String> {
    let Some(inner) = raw.strip_prefix(b"\"") else {
        return Ok(raw.to_vec());
    };
    let mut out = Vec::with_capacity(inner.len());
    let mut i = 0;
    while i < inner.len() {
        match inner[i] {
            b'"' => return Ok(out),
            b'\\' => {
                let c = *inner.get(i + 1).ok_or("quoted path ends in `\\`")?;
                let simple = match c {
                    b'a' => Some(7),
                    b'b' => Some(8),
                    b't' => Some(b'\t'),
                    b'n' => Some(b'\n'),
                    b'v' => Some(11),
                    b'f' => Some(12),
                    b'r' => Some(b'\r'),
                    b'"' | b'\\' => Some(c),
                    _ => None,
                };
                if let Some(s) = simple {
                    out.push(s);
                    i += 2;
                    continue;
                }
                let digits = inner.get(i + 1..i + 4).ok_or("bad escape in quoted path")?;
                if !digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                    return Err("bad escape in quoted path".into());
                }
                let v = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                out.push(u8::try_from(v).map_err(|_| "bad octal escape in quoted path")?);
                i += 4;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Err("quoted path has no closing quote".into())
}

fn number(s: &[u8], at: &mut usize) -> Option<usize> {
    let start = *at;
    while *at < s.len() && s[*at].is_ascii_digit() {
        *at += 1;
    }
    if *at == start || *at - start > 12 {
        return None;
    }
    std::str::from_utf8(&s[start..*at]).ok()?.parse().ok()
}

fn parse_range(s: &[u8], at: &mut usize) -> Option<(usize, usize)> {
    let start = number(s, at)?;
    let len = if s.get(*at) == Some(&b',') {
        *at += 1;
        number(s, at)?
    } else {
        1
    };
    Some((start, len))
}

fn parse_hunk(diff: &[u8], spans: &[Range<usize>], i: usize) -> Result<(Hunk, usize), DiffError> {
    let span = spans[i].clone();
    let l = strip_eol(&diff[span.clone()]);
    let bad = || err(i + 1, "malformed hunk header (expected `@@ -a,b +c,d @@`)");
    let mut at = 3; // after "@@ "
    let nums_start = at;
    at += 1; // '-'
    let (old_start, old_lines) = parse_range(l, &mut at).ok_or_else(bad)?;
    if l.get(at..at + 2) != Some(b" +") {
        return Err(bad());
    }
    at += 2;
    let (new_start, new_lines) = parse_range(l, &mut at).ok_or_else(bad)?;
    let nums_end = at;
    if l.get(at..at + 3) != Some(b" @@") {
        return Err(bad());
    }
    if old_lines == 0 && new_lines == 0 {
        return Err(err(i + 1, "empty hunk"));
    }
    let mut hunk = Hunk {
        old_start,
        old_lines,
        new_start,
        new_lines,
        numbers: span.start + nums_start..span.start + nums_end,
        heading: String::from_utf8_lossy(l).trim_end().to_string(),
        lines: Vec::new(),
        leading: 0,
        trailing: 0,
        line: i + 1,
    };
    let (mut old_rem, mut new_rem) = (old_lines, new_lines);
    let mut changed = false;
    let mut j = i + 1;
    while old_rem > 0 || new_rem > 0 {
        let Some(span) = spans.get(j) else {
            return Err(err(
                i + 1,
                format!(
                    "hunk ends early: {old_rem} old and {new_rem} new line(s) missing (truncated patch)"
                ),
            ));
        };
        let raw = &diff[span.clone()];
        let corrupt = || {
            err(
                j + 1,
                "corrupt patch: the line does not fit the hunk's counts",
            )
        };
        match raw[0] {
            b' ' | b'\n' => {
                if old_rem == 0 || new_rem == 0 {
                    return Err(corrupt());
                }
                old_rem -= 1;
                new_rem -= 1;
                if !changed {
                    hunk.leading += 1;
                }
                hunk.trailing += 1;
                let content = if raw[0] == b'\n' { raw } else { &raw[1..] };
                hunk.lines.push(Line {
                    origin: b' ',
                    content: content.to_vec(),
                });
            }
            b'-' | b'+' => {
                let rem = if raw[0] == b'-' {
                    &mut old_rem
                } else {
                    &mut new_rem
                };
                if *rem == 0 {
                    return Err(corrupt());
                }
                *rem -= 1;
                changed = true;
                hunk.trailing = 0;
                hunk.lines.push(Line {
                    origin: raw[0],
                    content: raw[1..].to_vec(),
                });
            }
            b'\\' => no_newline(&mut hunk, j)?,
            _ => return Err(corrupt()),
        }
        j += 1;
    }
    if spans
        .get(j)
        .is_some_and(|s| diff[s.clone()].starts_with(b"\\"))
    {
        no_newline(&mut hunk, j)?;
        j += 1;
    }
    Ok((hunk, j))
}

/// `\ No newline at end of file`: the line before it has no newline.
fn no_newline(hunk: &mut Hunk, j: usize) -> Result<(), DiffError> {
    match hunk.lines.last_mut() {
        Some(last) if last.content.ends_with(b"\n") => {
            last.content.pop();
            Ok(())
        }
        _ => Err(err(
            j + 1,
            "`\\ No newline` marker without a line before it",
        )),
    }
}

/// The same diff undone (`git apply -R`'s reading): old and new swapped in every header, `-`
/// and `+` swapped in every hunk. Used to ask "is this patch already in the tree?": the reverse
/// of an applied patch applies cleanly. Works on bytes; lines it does not know pass through.
pub(crate) fn reverse(diff: &[u8]) -> Vec<u8> {
    let lines: Vec<&[u8]> = diff.split_inclusive(|&b| b == b'\n').collect();
    let mut out = Vec::with_capacity(diff.len());
    let mut i = 0usize;
    while i < lines.len() {
        let raw = lines[i];
        let eol = &raw[strip_eol(raw).len()..];
        let l = strip_eol(raw);
        if let Some(rest) = l.strip_prefix(b"diff --git ") {
            reverse_git_header(rest, raw, eol, &mut out);
            i += 1;
        } else if l.starts_with(b"--- ") && i + 1 < lines.len() && lines[i + 1].starts_with(b"+++ ")
        {
            let new = strip_eol(lines[i + 1]);
            let new_eol = &lines[i + 1][new.len()..];
            out.extend_from_slice(b"--- ");
            out.extend_from_slice(&swap_side(&new[4..], b"b/", b"a/"));
            out.extend_from_slice(eol);
            out.extend_from_slice(b"+++ ");
            out.extend_from_slice(&swap_side(&l[4..], b"a/", b"b/"));
            out.extend_from_slice(new_eol);
            i += 2;
        } else if let Some(rest) = l.strip_prefix(b"@@ -") {
            i = reverse_hunk(&lines, i, rest, eol, &mut out);
        } else {
            reverse_header_line(l, raw, eol, &mut out);
            i += 1;
        }
    }
    out
}

/// `path` with its `from` side prefix (`a/`, `b/`) swapped for `to`.
fn swap_side(path: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    match path.strip_prefix(from) {
        Some(rest) => [to, rest].concat(),
        None => path.to_vec(),
    }
}

/// `diff --git a/X b/Y` as `diff --git a/Y b/X` (a quoted line passes through).
fn reverse_git_header(rest: &[u8], raw: &[u8], eol: &[u8], out: &mut Vec<u8>) {
    let names = split_git_names(rest).or_else(|| {
        // Different names (a rename): `a/X b/Y` split at its one ` b/`.
        let at: Vec<usize> = rest
            .windows(3)
            .enumerate()
            .filter(|(_, w)| w == b" b/")
            .map(|(i, _)| i)
            .collect();
        match (rest.strip_prefix(b"a/"), at.as_slice()) {
            (Some(_), [i]) => Some((rest[2..*i].to_vec(), rest[*i + 3..].to_vec())),
            _ => None,
        }
    });
    match names {
        Some((a, b)) if !rest.starts_with(b"\"") => {
            out.extend_from_slice(b"diff --git a/");
            out.extend_from_slice(&b);
            out.extend_from_slice(b" b/");
            out.extend_from_slice(&a);
            out.extend_from_slice(eol);
        }
        _ => out.extend_from_slice(raw),
    }
}

/// The hunk whose `@@` line is `lines[i]` (`rest` after `@@ -`), its numbers and `-`/`+`
/// swapped; returns the index of the line after it.
fn reverse_hunk(
    lines: &[&[u8]],
    mut i: usize,
    rest: &[u8],
    eol: &[u8],
    out: &mut Vec<u8>,
) -> usize {
    let raw = lines[i];
    let Some(sp) = rest.iter().position(|&b| b == b' ') else {
        out.extend_from_slice(raw);
        return i + 1;
    };
    let old = &rest[..sp];
    let after = &rest[sp + 1..];
    let Some(new_rest) = after.strip_prefix(b"+") else {
        out.extend_from_slice(raw);
        return i + 1;
    };
    let sp2 = new_rest
        .iter()
        .position(|&b| b == b' ')
        .unwrap_or(new_rest.len());
    let new = &new_rest[..sp2];
    let tail = &new_rest[sp2..];
    let count = |r: &[u8]| -> usize {
        let s = String::from_utf8_lossy(r);
        match s.split_once(',') {
            Some((_, n)) => n.parse().unwrap_or(0),
            None => 1,
        }
    };
    let (mut old_rem, mut new_rem) = (count(old), count(new));
    out.extend_from_slice(b"@@ -");
    out.extend_from_slice(new);
    out.extend_from_slice(b" +");
    out.extend_from_slice(old);
    out.extend_from_slice(tail);
    out.extend_from_slice(eol);
    i += 1;
    while i < lines.len() && (old_rem > 0 || new_rem > 0 || lines[i].starts_with(b"\\")) {
        let b = lines[i];
        match b.first() {
            Some(b'-') => {
                old_rem = old_rem.saturating_sub(1);
                out.push(b'+');
                out.extend_from_slice(&b[1..]);
            }
            Some(b'+') => {
                new_rem = new_rem.saturating_sub(1);
                out.push(b'-');
                out.extend_from_slice(&b[1..]);
            }
            Some(b'\\') => out.extend_from_slice(b),
            _ => {
                old_rem = old_rem.saturating_sub(1);
                new_rem = new_rem.saturating_sub(1);
                out.extend_from_slice(b);
            }
        }
        i += 1;
    }
    i
}

/// One extended header line with its sides swapped (new/deleted mode, rename from/to, index);
/// any other line passes through.
fn reverse_header_line(l: &[u8], raw: &[u8], eol: &[u8], out: &mut Vec<u8>) {
    if let Some(rest) = l.strip_prefix(b"new file mode ") {
        out.extend_from_slice(b"deleted file mode ");
        out.extend_from_slice(rest);
        out.extend_from_slice(eol);
    } else if let Some(rest) = l.strip_prefix(b"deleted file mode ") {
        out.extend_from_slice(b"new file mode ");
        out.extend_from_slice(rest);
        out.extend_from_slice(eol);
    } else if let Some(rest) = l.strip_prefix(b"rename from ") {
        out.extend_from_slice(b"rename to ");
        out.extend_from_slice(rest);
        out.extend_from_slice(eol);
    } else if let Some(rest) = l.strip_prefix(b"rename to ") {
        out.extend_from_slice(b"rename from ");
        out.extend_from_slice(rest);
        out.extend_from_slice(eol);
    } else if let Some(rest) = l.strip_prefix(b"index ") {
        // `index a..b [mode]` → `index b..a [mode]`
        let (ids, mode) = match rest.iter().position(|&b| b == b' ') {
            Some(p) => (&rest[..p], &rest[p..]),
            None => (rest, &b""[..]),
        };
        match ids.windows(2).position(|w| w == b"..") {
            Some(p) => {
                out.extend_from_slice(b"index ");
                out.extend_from_slice(&ids[p + 2..]);
                out.extend_from_slice(b"..");
                out.extend_from_slice(&ids[..p]);
                out.extend_from_slice(mode);
                out.extend_from_slice(eol);
            }
            None => out.extend_from_slice(raw),
        }
    } else {
        out.extend_from_slice(raw);
    }
}

#[cfg(test)]
mod tests {
    // issue #9 / #8: the reverse of the reverse is the diff itself; `-`/`+` and sides swap.
    #[test]
    fn reversing_a_diff_twice_gives_it_back_and_swaps_sides_once() {
        let d = b"diff --git a/x b/y\nindex 111..222 100644\n--- a/x\n+++ b/y\n@@ -1,3 +1,3 @@ f\n a\n--- old\n+new\n c\n\\ No newline at end of file\n";
        let r = reverse(d);
        let text = String::from_utf8_lossy(&r);
        assert!(text.contains("diff --git a/y b/x\nindex 222..111 100644\n--- a/y\n+++ b/x\n@@ -1,3 +1,3 @@ f\n a\n+-- old\n-new\n"), "{text}");
        assert_eq!(reverse(&r), d.to_vec());
    }

    use super::*;

    #[test]
    fn sections_hunks_and_spans() {
        let d = b"diff --git a/x.c b/x.c\nindex 1..2 100644\n--- a/x.c\n+++ b/x.c\n@@ -1,3 +1,3 @@ fn\n a\n-b\n+\xe4\n c\n@@ -10 +10,2 @@\n k\n+l\n\\ No newline at end of file\ndiff --git a/n b/n\nnew file mode 100644\n--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+n\ndiff --git a/o b/p\nsimilarity index 90%\nrename from o\nrename to p\n";
        let f = parse(d).expect("parse");
        assert_eq!(f.len(), 3);
        assert_eq!(f[0].old_path.as_deref(), Some(&b"x.c"[..]));
        let h = &f[0].hunks[0];
        assert_eq!(
            (h.old_start, h.old_lines, h.new_start, h.new_lines),
            (1, 3, 1, 3)
        );
        assert_eq!(&d[h.numbers.clone()], b"-1,3 +1,3");
        assert_eq!(h.postimage(), vec![&b"a\n"[..], b"\xe4\n", b"c\n"]);
        assert_eq!((h.leading, h.trailing), (1, 1));
        let h2 = &f[0].hunks[1];
        assert_eq!(h2.postimage(), vec![&b"k\n"[..], b"l"]);
        assert!(f[1].is_new && f[1].old_path.is_none());
        assert_eq!(f[2].old_path.as_deref(), Some(&b"o"[..]));
        assert_eq!(f[2].new_path.as_deref(), Some(&b"p"[..]));
    }

    #[test]
    fn quoted_paths_unquote_to_bytes() {
        assert_eq!(
            unquote(b"\"a/\\303\\244 \\\"q\\\"\"").as_deref(),
            Ok(&b"a/\xc3\xa4 \"q\""[..])
        );
        assert!(unquote(b"\"a/\\9\"").is_err());
        assert!(unquote(b"\"open").is_err());
    }

    #[test]
    fn truncated_and_corrupt_hunks_are_errors_with_lines() {
        let e = parse(b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n").expect_err("truncated");
        assert_eq!(e.line, 3);
        let e = parse(b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n?b\n").expect_err("corrupt");
        assert_eq!(e.line, 5);
        assert!(parse(b"--- a/x\n+++ b/x\n@@ -1,99999999999999999 +1 @@\n").is_err());
    }
}
