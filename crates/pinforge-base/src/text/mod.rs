//! The one rule for strings that cross a trust boundary, in one place.
//!
//! A value that *becomes* something (a recipe key or value, a patch header line, a path, a name)
//! must not hold a control character: [`refuse_control`] rejects it at input, naming the value,
//! with exit 2. Free text that is only *shown* to a person (a link target, a dependency name read
//! from a manifest, a subject line) is passed through [`shown`] on its way to the terminal, which
//! quotes and escapes it as git's `core.quotePath` does, so that an ESC sequence, a newline that
//! forges a row, or a bidi override that reorders a line can never reach the reader raw.
//!
//! "Control" here means Unicode's `Cc` class (C0, DEL, C1) plus the format characters that
//! change how the surrounding text is drawn (bidi embeddings, overrides and isolates, the zero-
//! width joiners and marks, the BOM, the Arabic letter mark, the Mongolian vowel separator, the
//! interlinear annotation marks, the invisible tag characters): the Trojan Source set and the
//! characters that hide text. Plain tabs count too: a tab in a
//! name aligns a forged column as well as a newline forges a row.
//!
//! Its submodules hold the other text the tool reads or prints: checked names (`names`),
//! times and dates (`time`), progress lines (`progress`) and notices to a waiting person
//! (`notice`).

pub mod names;
pub mod notice;
pub mod progress;
pub mod time;

use std::borrow::Cow;
use std::fmt;

use crate::error::{Error, Result};

/// Whether `c` is a character this module refuses in values and escapes in shown text.
pub fn is_unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2069}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{E0000}'..='\u{E007F}'
        )
}

/// The first unsafe character of `s` and its byte offset, if any.
pub fn first_unsafe(s: &str) -> Option<(usize, char)> {
    s.char_indices().find(|&(_, c)| is_unsafe_char(c))
}

/// Refuses `value` when it holds a control character: `what` names it as the user spelled it
/// (`--onto`, "variant name in manifest.json"). Exit 2, with the value shown escaped and the
/// offending character named, never echoed raw.
pub fn refuse_control(what: &str, value: &str) -> Result<()> {
    match first_unsafe(value) {
        None => Ok(()),
        Some((at, c)) => Err(Error::input(
            what,
            format!(
                "{} holds the control character U+{:04X} at byte {at}",
                shown(value),
                u32::from(c)
            ),
        )
        .with_hint("control characters (newlines, tabs, ESC, bidi overrides) cannot appear in names, paths, pins or header values; retype the value")),
    }
}

/// `s` as it may be shown on a terminal: unchanged when it holds nothing unsafe, otherwise in
/// double quotes with C escapes (`\n`, `\t`, `\033`, `\u{202e}`), and `"` and `\` escaped so
/// that the quoted form is unambiguous. Mirrors git's quoting of unusual path names.
pub fn shown(s: &str) -> Cow<'_, str> {
    if first_unsafe(s).is_none() {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\{:03o}", c as u32));
            }
            c if is_unsafe_char(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    Cow::Owned(out)
}

/// One line for the terminal (an error message, a hint): every unsafe character, `\n`
/// included, written as its escape, unquoted, so that a value embedded in it (a file name, a
/// field of a record) can neither move the cursor nor forge a line.
pub fn shown_line(s: &str) -> Cow<'_, str> {
    escaped(s, false)
}

/// Lines for the terminal whose breaks are their own (an error's detail: a diff, a tool's log
/// tail with colour codes): as [`shown_line`], but `\n` is kept.
pub fn shown_lines(s: &str) -> Cow<'_, str> {
    escaped(s, true)
}

fn escaped(s: &str, keep_newlines: bool) -> Cow<'_, str> {
    let kept = |c: char| keep_newlines && c == '\n';
    if !s.chars().any(|c| !kept(c) && is_unsafe_char(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            c if kept(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\{:03o}", c as u32));
            }
            c if is_unsafe_char(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Lossy bytes (a link target, a file name that is not UTF-8) as shown text: invalid UTF-8 is
/// replaced by U+FFFD and the rest goes through [`shown`].
pub fn shown_bytes(b: &[u8]) -> String {
    shown(&String::from_utf8_lossy(b)).into_owned()
}

/// A `Display` wrapper for format strings: `format!("{}", Shown(name))`.
pub struct Shown<'a>(pub &'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&shown(self.0))
    }
}

/// Text for a Markdown table cell: no line breaks, no pipes (the flip, ablation and soak
/// summaries all write tables).
pub fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_text_passes_unchanged() {
        for s in [
            "",
            "cpu-asan",
            "llama.cpp b7709",
            "caf\u{e9} \"quoted\" a\\b",
        ] {
            assert!(refuse_control("x", s).is_ok(), "{s:?}");
            assert!(matches!(shown(s), Cow::Borrowed(_)), "{s:?}");
        }
    }

    #[test]
    fn every_control_character_is_refused_and_escaped() {
        let mut unsafe_chars: Vec<char> = (0u32..0x20)
            .chain(0x7f..0xa0)
            .filter_map(char::from_u32)
            .collect();
        unsafe_chars.extend([
            '\u{202e}',
            '\u{2066}',
            '\u{200b}',
            '\u{feff}',
            '\u{2028}',
            '\u{061c}',
            '\u{180e}',
            '\u{fff9}',
            '\u{e0001}',
            '\u{e007f}',
        ]);
        for c in unsafe_chars {
            let v = format!("a{c}b");
            let e = refuse_control("--onto", &v).expect_err(&format!("{c:?}"));
            assert_eq!(e.exit_code(), crate::error::ExitCode::Input);
            let msg = e.to_string();
            assert!(!msg.contains(c), "{c:?} reached the message raw: {msg:?}");
            let s = shown(&v);
            assert!(!s.contains(c), "{c:?} reached the terminal raw: {s:?}");
            assert!(s.starts_with('"') && s.ends_with('"'), "{s}");
        }
    }

    #[test]
    fn quoting_is_unambiguous() {
        // A literal backslash-n and a real newline must not show the same.
        assert_ne!(shown("a\\n\n"), shown("a\n\n"));
        assert_eq!(shown("x\n* gen 9"), "\"x\\n* gen 9\"");
        assert_eq!(shown("\u{1b}[31mred"), "\"\\033[31mred\"");
        assert_eq!(shown_bytes(b"a\xffb\n"), "\"a\u{fffd}b\\n\"");
        assert_eq!(
            shown_lines("line one\nname \u{1b}[2J\tend"),
            "line one\nname \\033[2J\\tend"
        );
        assert!(matches!(shown_lines("two\nlines"), Cow::Borrowed(_)));
        assert_eq!(shown_line("x.json\n* gen 9"), "x.json\\n* gen 9");
    }
}
