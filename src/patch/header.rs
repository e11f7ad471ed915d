//! The attribution header of a patch file: RFC-822 style fields before the diff (DEP-3 and
//! Yocto `Upstream-Status` compatible, and ignored by `git apply`, `git am` and `patch`),
//! parsed with line numbers so that lint can say `file:line: message`.

use serde::Serialize;
use std::fmt;

/// One `Name: value` field with its (possibly folded) value and the line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Field name as written.
    pub name: String,
    /// Value with continuation lines joined by `\n`.
    pub value: String,
    /// 1-based line number of the field name.
    pub line: usize,
}

/// The header block and where the diff starts.
#[derive(Debug, Clone, Default)]
pub struct Header {
    /// Fields in file order.
    pub fields: Vec<Field>,
    /// 1-based line where the diff (`diff --git`, `--- `, `Index:`) starts; None when absent.
    pub diff_line: Option<usize>,
    /// Byte offset of the diff start.
    pub diff_offset: Option<usize>,
}

impl Header {
    /// Parse the header of patch text. Fields run from the top until the first blank line or
    /// the `---` separator; free text may follow until the diff starts.
    pub fn parse(text: &str) -> Header {
        let mut header = Header::default();
        let mut in_fields = true;
        let mut offset = 0usize;
        for (idx, raw) in text.split_inclusive('\n').enumerate() {
            let line_no = idx + 1;
            let line = raw.trim_end_matches(['\n', '\r']);
            if is_diff_start(line) {
                header.diff_line = Some(line_no);
                header.diff_offset = Some(offset);
                break;
            }
            offset += raw.len();
            if !in_fields {
                continue;
            }
            if line.trim().is_empty() || line == "---" {
                in_fields = false;
                continue;
            }
            if line.starts_with([' ', '\t']) {
                if let Some(last) = header.fields.last_mut() {
                    last.value.push('\n');
                    last.value.push_str(line.trim());
                }
                continue;
            }
            match line.split_once(':') {
                Some((name, value))
                    if !name.is_empty()
                        && name
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
                {
                    header.fields.push(Field {
                        name: name.to_string(),
                        value: value.trim().to_string(),
                        line: line_no,
                    });
                }
                // An mbox separator line ("From <sha> <date>") starts git format-patch output.
                _ if line.starts_with("From ") && idx == 0 => {}
                _ => in_fields = false,
            }
        }
        header
    }

    /// The first field named `name` (case-insensitive, as RFC 822).
    pub fn get(&self, name: &str) -> Option<&Field> {
        self.fields
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(name))
    }

    /// All fields named `name`.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Field> + 'a {
        self.fields
            .iter()
            .filter(move |f| f.name.eq_ignore_ascii_case(name))
    }
}

fn is_diff_start(line: &str) -> bool {
    line.starts_with("diff --git ")
        || line.starts_with("Index: ")
        || (line.starts_with("--- ") && line.len() > 4)
}

/// `Upstream-Status` values (DEP-3 / Yocto).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "detail")]
pub enum UpstreamStatus {
    /// Not yet submitted or still under discussion upstream.
    Pending,
    /// Submitted upstream; the bracket says where.
    Submitted(Option<String>),
    /// Taken from a newer upstream; the bracket names the reference.
    Backport(Option<String>),
    /// Accepted upstream.
    Accepted,
    /// Will never go upstream; the bracket gives the reason.
    Inappropriate(Option<String>),
    /// Rejected upstream.
    Denied,
}

impl UpstreamStatus {
    /// Parse `Word [detail]`.
    pub fn parse(value: &str) -> Result<UpstreamStatus, String> {
        let value = value.trim();
        let (word, rest) = match value.find(|c: char| c.is_whitespace() || c == '[') {
            Some(i) => (&value[..i], value[i..].trim()),
            None => (value, ""),
        };
        let detail = if rest.is_empty() {
            None
        } else if let Some(inner) = rest.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            let inner = inner.trim();
            if inner.is_empty() {
                return Err("empty [ ] after the status word".into());
            }
            Some(inner.to_string())
        } else {
            return Err(format!(
                "`{rest}` after `{word}` must be written in brackets: `{word} [{rest}]`"
            ));
        };
        let status = match word.to_ascii_lowercase().as_str() {
            "pending" => UpstreamStatus::Pending,
            "submitted" => UpstreamStatus::Submitted(detail.clone()),
            "backport" => UpstreamStatus::Backport(detail.clone()),
            "accepted" => UpstreamStatus::Accepted,
            "inappropriate" => UpstreamStatus::Inappropriate(detail.clone()),
            "denied" => UpstreamStatus::Denied,
            _ => {
                return Err(format!(
                    "unknown status `{word}`; expected one of Pending, Submitted [where], \
                     Backport [ref], Accepted, Inappropriate [reason], Denied"
                ))
            }
        };
        let takes_detail = matches!(
            status,
            UpstreamStatus::Submitted(_)
                | UpstreamStatus::Backport(_)
                | UpstreamStatus::Inappropriate(_)
        );
        if detail.is_some() && !takes_detail {
            return Err(format!("`{word}` takes no [detail]"));
        }
        Ok(status)
    }

    /// The status word.
    pub fn word(&self) -> &'static str {
        match self {
            UpstreamStatus::Pending => "Pending",
            UpstreamStatus::Submitted(_) => "Submitted",
            UpstreamStatus::Backport(_) => "Backport",
            UpstreamStatus::Accepted => "Accepted",
            UpstreamStatus::Inappropriate(_) => "Inappropriate",
            UpstreamStatus::Denied => "Denied",
        }
    }
}

impl fmt::Display for UpstreamStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamStatus::Submitted(Some(d))
            | UpstreamStatus::Backport(Some(d))
            | UpstreamStatus::Inappropriate(Some(d)) => write!(f, "{} [{d}]", self.word()),
            _ => f.write_str(self.word()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fields_continuations_and_diff_start() {
        let text = "From: A <a@b>\nDescription: one\n two\nUpstream-Status: Pending\n\nfree text\n---\n x | 1 +\ndiff --git a/x b/x\n";
        let h = Header::parse(text);
        assert_eq!(h.fields.len(), 3);
        assert_eq!(
            h.get("description").map(|f| f.value.as_str()),
            Some("one\ntwo")
        );
        assert_eq!(h.get("Upstream-Status").map(|f| f.line), Some(4));
        assert_eq!(h.diff_line, Some(9));
        assert_eq!(h.diff_offset.map(|o| &text[o..o + 10]), Some("diff --git"));
    }

    #[test]
    fn mbox_from_line_is_skipped() {
        let h = Header::parse("From 0123abc Mon Sep 17 00:00:00 2001\nFrom: A <a@b>\n\n");
        assert_eq!(h.fields.len(), 1);
    }

    #[test]
    fn status_words_and_brackets() {
        assert_eq!(
            UpstreamStatus::parse("Pending"),
            Ok(UpstreamStatus::Pending)
        );
        assert_eq!(
            UpstreamStatus::parse("Backport [abc]"),
            Ok(UpstreamStatus::Backport(Some("abc".into())))
        );
        assert!(UpstreamStatus::parse("Merged").is_err());
        assert!(UpstreamStatus::parse("Backport abc").is_err());
        assert!(UpstreamStatus::parse("Pending [x]").is_err());
        assert!(UpstreamStatus::parse("Submitted []").is_err());
        assert_eq!(
            UpstreamStatus::parse("Inappropriate [local config]")
                .map(|s| s.to_string())
                .as_deref(),
            Ok("Inappropriate [local config]")
        );
    }
}
