//! Mail header decoding as `git am` (git's mailinfo) does it: folded lines, RFC 2047 encoded
//! words (Q and B; UTF-8, ISO-8859-1 and US-ASCII), the `[PATCH n/m]` cleanup of Subject, the
//! `Name <email>` split of From, and the `stripspace` cleanup of the message. Kept to git's
//! rules so that a vendor commit made from a `format-patch` file equals the one `git am` makes.

/// Unfold a header value the way mailinfo does: every continuation line has its first
/// whitespace character replaced by one space, is right-trimmed, and is appended as is.
pub(crate) fn unfold(first: &str, continuations: &[&str]) -> String {
    let mut out = first.trim_end().to_string();
    for c in continuations {
        let mut chars = c.chars();
        chars.next();
        out.push(' ');
        out.push_str(chars.as_str().trim_end());
    }
    out
}

/// Decode RFC 2047 encoded words in `value`. Linear white space between two adjacent encoded
/// words is dropped (RFC 2047 §6.2, and git's `decode_header`); anything else is kept.
pub(crate) fn decode_words(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    let mut after_word = false;
    while let Some(start) = rest.find("=?") {
        let before = &rest[..start];
        if !(after_word && before.chars().all(char::is_whitespace)) {
            out.push_str(before);
        }
        let word = &rest[start + 2..];
        let (charset, after_charset) = word
            .split_once('?')
            .ok_or_else(|| format!("unterminated encoded word `{}`", clip(&rest[start..])))?;
        let mut it = after_charset.chars();
        let encoding = it.next();
        if it.next() != Some('?') {
            return Err(format!(
                "encoded word `{}` has no `?Q?` or `?B?`",
                clip(&rest[start..])
            ));
        }
        let text_and_more = it.as_str();
        let end = text_and_more
            .find("?=")
            .ok_or_else(|| format!("unterminated encoded word `{}`", clip(&rest[start..])))?;
        let text = &text_and_more[..end];
        let bytes = match encoding.map(|c| c.to_ascii_lowercase()) {
            Some('q') => decode_q(text)?,
            Some('b') => decode_b64(text)?,
            _ => {
                return Err(format!(
                    "encoded word `{}`: unknown encoding (Q or B expected)",
                    clip(&rest[start..])
                ))
            }
        };
        out.push_str(&to_utf8(charset, &bytes)?);
        rest = &text_and_more[end + 2..];
        after_word = true;
    }
    out.push_str(rest);
    Ok(out)
}

fn clip(s: &str) -> String {
    s.chars().take(60).collect()
}

fn hexval(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

fn decode_q(text: &str) -> Result<Vec<u8>, String> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'_' => out.push(b' '),
            b'=' => {
                let hi = b.get(i + 1).copied().and_then(hexval);
                let lo = b.get(i + 2).copied().and_then(hexval);
                match (hi, lo) {
                    (Some(h), Some(l)) => out.push(h << 4 | l),
                    _ => return Err(format!("bad `=XX` escape in encoded word `{text}`")),
                }
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    Ok(out)
}

fn decode_b64(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    let mut padding = false;
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => {
                padding = true;
                continue;
            }
            _ => return Err(format!("bad base64 in encoded word `{text}`")),
        };
        if padding {
            return Err(format!("bad base64 padding in encoded word `{text}`"));
        }
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

fn to_utf8(charset: &str, bytes: &[u8]) -> Result<String, String> {
    // RFC 2231 allows a language after the charset: `UTF-8*en`.
    let cs = charset.split('*').next().unwrap_or("").to_ascii_lowercase();
    match cs.as_str() {
        "utf-8" | "utf8" => String::from_utf8(bytes.to_vec())
            .map_err(|_| format!("encoded word declared {charset} is not valid UTF-8")),
        "iso-8859-1" | "iso8859-1" | "latin1" | "latin-1" | "l1" => {
            Ok(bytes.iter().map(|&b| char::from(b)).collect())
        }
        "us-ascii" | "ascii" => {
            if bytes.is_ascii() {
                Ok(bytes.iter().map(|&b| char::from(b)).collect())
            } else {
                Err(format!(
                    "encoded word declared {charset} holds non-ASCII bytes"
                ))
            }
        }
        _ => Err(format!(
            "unsupported charset `{charset}` in encoded word (UTF-8, ISO-8859-1, US-ASCII)"
        )),
    }
}

/// git's `cleanup_space`: every run of whitespace becomes one space.
fn cleanup_space(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_space = false;
    for c in s.chars() {
        if c.is_ascii_whitespace() {
            if !in_space {
                out.push(' ');
            }
            in_space = true;
        } else {
            out.push(c);
            in_space = false;
        }
    }
    out
}

/// git am's Subject cleanup (mailinfo's `cleanup_subject` then `cleanup_space`): leading
/// `Re:`, whitespace, colons and every leading `[...]` group (`[PATCH 2/3]`, `[RFC]`) go.
pub(crate) fn cleanup_subject(subject: &str) -> String {
    let mut s = subject;
    loop {
        let lower = s.get(..3).map(str::to_ascii_lowercase);
        if s.len() > 3 && lower.as_deref() == Some("re:") {
            s = &s[3..];
        } else if s.starts_with([' ', '\t', ':']) {
            s = &s[1..];
        } else if s.starts_with('[') {
            match s.find(']') {
                Some(i) => s = &s[i + 1..],
                None => break,
            }
        } else {
            break;
        }
    }
    cleanup_space(s).trim().to_string()
}

/// Split a decoded `From:` value into (name, email) as mailinfo's `handle_from` does, with
/// git's ident "crud" trimmed from the name (git ≥ 2.33 no longer counts `.` as crud, so
/// `Jr.` keeps its dot). None when there is no `@`.
pub(crate) fn split_from(from: &str) -> Option<(String, String)> {
    let f = unquote_pairs(from);
    let at = f.find('@')?;
    let bytes = f.as_bytes();
    let mut start = at;
    let mut angle = false;
    while start > 0 {
        let c = bytes[start - 1];
        if c.is_ascii_whitespace() {
            break;
        }
        if c == b'<' {
            angle = true;
            break;
        }
        start -= 1;
    }
    let tail = &f[start..];
    let len = tail
        .find(|c: char| c.is_ascii_whitespace() || c == '>')
        .unwrap_or(tail.len());
    let email = tail[..len].to_string();
    let mut end = start + len;
    if f[end..].starts_with('>') {
        end += 1;
    }
    let name_start = if angle { start - 1 } else { start };
    let mut name = format!("{}{}", &f[..name_start], &f[end..]);
    name = cleanup_space(&name).trim().to_string();
    if name.len() >= 2 && name.starts_with('(') && name.ends_with(')') {
        name = name[1..name.len() - 1].to_string();
    }
    let crud =
        |c: char| (c as u32) <= 32 || matches!(c, ',' | ':' | ';' | '<' | '>' | '"' | '\\' | '\'');
    let name = name.trim_matches(crud).to_string();
    let name = if name.is_empty() { email.clone() } else { name };
    Some((name, email))
}

/// The author a patch's commit gets (`patch apply`) and its mail says (`patch bundle`): the
/// attribution's `From:` (or DEP-3 `Author:`) split as mailinfo splits it, else pinforge's own
/// identity, so that a patch naming only handles still has an ident `git am` accepts.
pub(crate) fn author(a: &super::lint::Attribution) -> (String, String) {
    use crate::git::{COMMITTER_EMAIL, COMMITTER_NAME};
    a.from
        .as_deref()
        .and_then(split_from)
        .unwrap_or((COMMITTER_NAME.to_string(), COMMITTER_EMAIL.to_string()))
}

/// The commit time of a patch as (seconds, offset in minutes): its `Date:`, else its
/// `Last-Update` at midnight UTC, else the epoch. Never the wall clock: the same bundle must
/// give the same commit ids everywhere, and the same `Date:` in the mail that carries it.
pub(crate) fn when(a: &super::lint::Attribution) -> (i64, i32) {
    a.date
        .as_deref()
        .and_then(pinforge_base::time::parse_rfc2822)
        .or_else(|| {
            a.last_update
                .as_deref()
                .and_then(|d| pinforge_base::time::parse_ymd(d).map(|s| (s, 0)))
        })
        .unwrap_or((0, 0))
}

/// mailinfo's `unquote_quoted_pair`: the quotes of quoted strings and the backslashes of
/// quoted pairs go; comments stay (handle_from strips a trailing `(...)` later).
fn unquote_pairs(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' if quoted => {
                if let Some(n) = chars.next() {
                    out.push(n);
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// git's `strbuf_stripspace` without comment handling: trailing whitespace goes from every
/// line, runs of empty lines collapse to one, leading and trailing empty lines go, and the
/// text ends with a newline (empty text stays empty).
pub(crate) fn stripspace(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pending_blank = false;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            pending_blank = !out.is_empty();
            continue;
        }
        if pending_blank {
            out.push('\n');
            pending_blank = false;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q_and_b_words_decode_and_adjacent_words_join() {
        assert_eq!(
            decode_words("=?UTF-8?q?Johannes=20G=C3=A4=C3=9Fler?= <j@x.y>").as_deref(),
            Ok("Johannes Gäßler <j@x.y>")
        );
        assert_eq!(
            decode_words("=?utf-8?B?R8Okw59sZXI=?=").as_deref(),
            Ok("Gäßler")
        );
        assert_eq!(
            decode_words("=?ISO-8859-1?Q?G=E4=DFler?=").as_deref(),
            Ok("Gäßler")
        );
        assert_eq!(
            decode_words("=?UTF-8?q?a?= \n =?UTF-8?q?b?= c =?UTF-8?q?d_e?=").as_deref(),
            Ok("ab c d e")
        );
        assert_eq!(decode_words("plain text").as_deref(), Ok("plain text"));
        assert!(decode_words("=?UTF-8?q?unterminated").is_err());
        assert!(decode_words("=?UTF-8?x?bad?=").is_err());
        assert!(decode_words("=?KOI8-R?q?x?=").is_err());
        assert!(decode_words("=?UTF-8?q?=C3?=").is_err());
        assert!(decode_words("=?UTF-8?q?=ZZ?=").is_err());
    }

    #[test]
    fn subject_and_from_clean_up_as_git_am() {
        assert_eq!(cleanup_subject("[PATCH 2/3] fix  it"), "fix it");
        assert_eq!(cleanup_subject("Re: [RFC][PATCH v2] x: y"), "x: y");
        assert_eq!(
            split_from("\"G\\\"a\" <a@b.c>"),
            Some(("G\"a".into(), "a@b.c".into()))
        );
        assert_eq!(
            split_from("Johannes Gäßler <j@x.y>"),
            Some(("Johannes Gäßler".into(), "j@x.y".into()))
        );
        assert_eq!(
            split_from("j@x.y (J X)"),
            Some(("J X".into(), "j@x.y".into()))
        );
        assert_eq!(split_from("nobody"), None);
    }

    #[test]
    fn stripspace_matches_git() {
        assert_eq!(stripspace("\n\na  \n\n\n b\n\n"), "a\n\n b\n");
        assert_eq!(stripspace(""), "");
    }
}
