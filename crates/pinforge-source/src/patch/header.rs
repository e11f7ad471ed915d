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
    /// Value with continuation lines trimmed and joined by `\n` (the DEP-3 reading of a folded
    /// `Description:`), RFC 2047 encoded words decoded.
    pub value: String,
    /// Value unfolded and decoded as mail is (git's mailinfo: a continuation's first blank
    /// becomes one space); what `git am` reads for `From:` and `Subject:`.
    pub mail: String,
    /// 1-based line number of the field name.
    pub line: usize,
}

/// A header line that cannot be read: not UTF-8, or an encoded word that does not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// The header block and where the diff starts.
#[derive(Debug, Clone, Default)]
pub struct Header {
    /// Fields in file order.
    pub fields: Vec<Field>,
    /// Free text after the fields up to the `---` separator or the diff: the mail body,
    /// which `git am` makes the rest of the commit message.
    pub body: String,
    /// Lines that could not be read; lint reports each as an error with its line.
    pub problems: Vec<Problem>,
    /// 1-based line where the diff (`diff --git`, `--- `, `Index:`) starts; None when absent.
    pub diff_line: Option<usize>,
    /// Byte offset of the diff start in the file's bytes.
    pub diff_offset: Option<usize>,
}

/// A field being read: its name line and continuation lines.
struct Pending<'a> {
    name: &'a str,
    first: &'a str,
    more: Vec<&'a str>,
    line: usize,
}

impl Header {
    /// Parse the header of a patch file's bytes. Fields run from the top until the first
    /// blank line or the `---` separator; free text (the mail body) may follow until the
    /// diff starts. Every offset is a byte offset into `bytes`: nothing is decoded lossily.
    pub fn parse(bytes: &[u8]) -> Header {
        let mut header = Header::default();
        let mut in_fields = true;
        let mut in_body = true;
        let mut offset = 0usize;
        let mut pending: Option<Pending> = None;
        let mut body = String::new();
        for (idx, raw) in bytes.split_inclusive(|&b| b == b'\n').enumerate() {
            let line_no = idx + 1;
            let trimmed = raw
                .strip_suffix(b"\n")
                .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
                .unwrap_or(raw);
            if is_diff_start(trimmed) {
                header.diff_line = Some(line_no);
                header.diff_offset = Some(offset);
                break;
            }
            offset += raw.len();
            if !in_fields && !in_body {
                continue;
            }
            let line = match std::str::from_utf8(trimmed) {
                Ok(l) => l,
                Err(e) => {
                    header.problems.push(Problem {
                        line: line_no,
                        message: format!(
                            "header line is not UTF-8 (invalid byte 0x{:02x} at column {})",
                            trimmed.get(e.valid_up_to()).copied().unwrap_or(0),
                            e.valid_up_to() + 1
                        ),
                    });
                    continue;
                }
            };
            if !in_fields {
                // The mail body ends where mailinfo's patchbreak() says: a `---` line.
                if line.starts_with("---") && line[3..].trim().is_empty() {
                    in_body = false;
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
                continue;
            }
            if line.trim().is_empty() || line == "---" {
                in_fields = false;
                in_body = line != "---";
                continue;
            }
            if line.starts_with([' ', '\t']) {
                if let Some(p) = pending.as_mut() {
                    p.more.push(line);
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
                    if let Some(p) = pending.take() {
                        header.finish(p);
                    }
                    pending = Some(Pending {
                        name,
                        first: value,
                        more: Vec::new(),
                        line: line_no,
                    });
                }
                // An mbox separator line ("From <sha> <date>") starts git format-patch output.
                _ if line.starts_with("From ") && idx == 0 => {}
                _ => {
                    in_fields = false;
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
        if let Some(p) = pending.take() {
            header.finish(p);
        }
        header.body = body;
        header
    }

    fn finish(&mut self, p: Pending) {
        let dep3 = std::iter::once(p.first.trim())
            .chain(p.more.iter().map(|l| l.trim()))
            .collect::<Vec<_>>()
            .join("\n");
        let mail = super::mail::unfold(p.first.trim_start(), &p.more);
        let decoded = super::mail::decode_words(&dep3)
            .and_then(|value| super::mail::decode_words(&mail).map(|mail| (value, mail)));
        match decoded {
            Ok((value, mail)) => self.fields.push(Field {
                name: p.name.to_string(),
                value,
                mail,
                line: p.line,
            }),
            Err(why) => self.problems.push(Problem {
                line: p.line,
                message: format!("`{}`: {why}", p.name),
            }),
        }
    }

    /// The first field named `name` (case-insensitive, as RFC 822).
    pub(crate) fn get(&self, name: &str) -> Option<&Field> {
        self.fields
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(name))
    }

    /// All fields named `name`.
    pub(crate) fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Field> + 'a {
        self.fields
            .iter()
            .filter(move |f| f.name.eq_ignore_ascii_case(name))
    }
}

fn is_diff_start(line: &[u8]) -> bool {
    line.starts_with(b"diff --git ")
        || line.starts_with(b"Index: ")
        || (line.starts_with(b"--- ") && line.len() > 4)
}

/// `Upstream-Status` values (DEP-3 / Yocto).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
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
    pub(crate) fn parse(value: &str) -> Result<UpstreamStatus, String> {
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
    pub(crate) fn word(&self) -> &'static str {
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

/// A `Pinforge-Check:` field (issue #26 §2): the smoke that shows the patch's defect when the
/// fix is absent. Written as `key=value` words, a value with blanks in double quotes:
/// `variant=unpatched-asan arch=qwen2vl tokens=16 signature="heap-buffer-overflow in
/// llama_kv_cache::apply_ubatch"`. `audit --check` builds `variant` (a sanitizer variant of the
/// recipe, without this patch) on the old and the new pin and smokes both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct CheckSpec {
    /// The recipe variant to build: a sanitizer variant that does not apply the patch.
    pub variant: String,
    /// The tiny model's architecture (`qwen2vl`, `qwen2`), when no model file is named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// A GGUF model file (relative to the workspace), instead of `arch`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Tokens the smoke generates.
    pub tokens: usize,
    /// The engine path the smoke drives (`smoke --scenario`: `kshift`, `embd-pos-null`,
    /// `embd-pos-n-tokens`); absent for the default save/restore decode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// The crash signature expected without the fix, as smoke normalizes it (`KIND in FUNCTION`,
    /// or `GGML_ASSERT(COND) in FILE` for a ggml assertion).
    pub signature: String,
}

/// The architectures the smoke's tiny model generator knows.
pub(crate) const CHECK_ARCHES: &[&str] = &["qwen2vl", "qwen2"];
/// The scenarios smoke drives (`smoke --scenario`; `trial` checks this list against smoke's).
pub const CHECK_SCENARIOS: &[&str] = &["restore", "kshift", "embd-pos-null", "embd-pos-n-tokens"];
/// The most tokens a check may ask for: what smoke decodes at most.
pub(crate) const CHECK_MAX_TOKENS: usize = 64;
/// The fewest tokens a smoke decodes (it saves the state halfway).
pub(crate) const CHECK_MIN_TOKENS: usize = 2;

impl CheckSpec {
    /// Parse a `Pinforge-Check:` value (unfolded: continuation lines joined by one space).
    pub(crate) fn parse(value: &str) -> Result<CheckSpec, String> {
        let mut seen: Vec<(String, String)> = Vec::new();
        for (key, val) in check_words(value)? {
            if seen.iter().any(|(k, _)| *k == key) {
                return Err(format!("`{key}` is given twice"));
            }
            if ![
                "variant",
                "arch",
                "model",
                "tokens",
                "scenario",
                "signature",
            ]
            .contains(&key.as_str())
            {
                return Err(format!(
                    "unknown key `{key}`; expected variant, arch or model, tokens, scenario, signature"
                ));
            }
            seen.push((key, val));
        }
        let get = |k: &str| seen.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let variant = get("variant").ok_or("no `variant=` (the sanitizer variant to build)")?;
        if !pinforge_base::names::is_identifier(&variant) {
            return Err(format!("variant `{variant}` is not a variant name"));
        }
        let (arch, model) = (get("arch"), get("model"));
        match (&arch, &model) {
            (Some(_), Some(_)) => return Err("give `arch=` or `model=`, not both".into()),
            (None, None) => return Err("no `arch=` or `model=` (what the smoke decodes)".into()),
            (Some(a), None) if !CHECK_ARCHES.contains(&a.as_str()) => {
                return Err(format!(
                    "arch `{a}` is not one of {}",
                    CHECK_ARCHES.join(", ")
                ))
            }
            _ => {}
        }
        let tokens = match get("tokens") {
            None => 16,
            Some(t) => match t.parse::<usize>() {
                Ok(n) if (CHECK_MIN_TOKENS..=CHECK_MAX_TOKENS).contains(&n) => n,
                _ => {
                    return Err(format!(
                        "tokens `{t}` is not a number from {CHECK_MIN_TOKENS} to {CHECK_MAX_TOKENS} (what a smoke decodes)"
                    ))
                }
            },
        };
        let scenario = match get("scenario") {
            None => None,
            Some(s) if s == "restore" => None,
            Some(s) if CHECK_SCENARIOS.contains(&s.as_str()) => Some(s),
            Some(s) => {
                return Err(format!(
                    "scenario `{s}` is not one of {}",
                    CHECK_SCENARIOS.join(", ")
                ))
            }
        };
        let signature =
            get("signature").ok_or("no `signature=` (the crash expected without the fix)")?;
        match signature.split_once(" in ") {
            Some((kind, func)) if !kind.trim().is_empty() && !func.trim().is_empty() => {}
            _ => {
                return Err(format!(
                    "signature `{signature}` is not `KIND in FUNCTION` (e.g. `heap-buffer-overflow in llama_kv_cache::apply_ubatch`)"
                ))
            }
        }
        Ok(CheckSpec {
            variant,
            arch,
            model,
            tokens,
            scenario,
            signature,
        })
    }
}

/// The `key=value` words of a check; a value may be double-quoted to hold blanks.
fn check_words(value: &str) -> Result<Vec<(String, String)>, String> {
    if value.chars().any(char::is_control) {
        return Err("holds a control character".into());
    }
    let mut out = Vec::new();
    let mut rest = value.trim_start();
    while !rest.is_empty() {
        let (key, after) = rest
            .split_once('=')
            .filter(|(k, _)| !k.is_empty() && !k.contains(char::is_whitespace))
            .ok_or_else(|| {
                let word = rest.split_whitespace().next().unwrap_or(rest);
                format!("`{word}` is not `key=value`")
            })?;
        let (val, next) = match after.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted
                    .find('"')
                    .ok_or_else(|| format!("the value of `{key}` has no closing `\"`"))?;
                let next = &quoted[end + 1..];
                if !next.is_empty() && !next.starts_with(char::is_whitespace) {
                    return Err(format!("text right after the closing `\"` of `{key}`"));
                }
                (&quoted[..end], next)
            }
            None => {
                let end = after.find(char::is_whitespace).unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        if val.trim().is_empty() {
            return Err(format!("`{key}` is empty"));
        }
        out.push((key.to_string(), val.to_string()));
        rest = next.trim_start();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHECK: &str = "variant=unpatched-asan arch=qwen2vl tokens=16 signature=\"heap-buffer-overflow in llama_kv_cache::apply_ubatch\"";

    // issue #26 §2: the check field's syntax.
    #[test]
    fn a_check_reads_its_words_and_quoted_signature() {
        let c = CheckSpec::parse(CHECK).expect("check");
        assert_eq!(c.variant, "unpatched-asan");
        assert_eq!(c.arch.as_deref(), Some("qwen2vl"));
        assert_eq!(c.model, None);
        assert_eq!(c.tokens, 16);
        assert_eq!(
            c.signature,
            "heap-buffer-overflow in llama_kv_cache::apply_ubatch"
        );
        let m = CheckSpec::parse("signature=\"SEGV in f\" model=models/x.gguf variant=v")
            .expect("model, default tokens");
        assert_eq!((m.model.as_deref(), m.tokens), (Some("models/x.gguf"), 16));
        assert_eq!(m.scenario, None);
        let k = CheckSpec::parse(
            "variant=v arch=qwen2vl scenario=kshift signature=\"GGML_ASSERT(hparams.n_pos_per_embd() == 1) in llama-kv-cache.cpp\"",
        )
        .expect("a kshift check on a ggml assertion");
        assert_eq!(k.scenario.as_deref(), Some("kshift"));
        // `restore` is the default spelled out: the same check as without the key.
        let r = CheckSpec::parse(&format!("{CHECK} scenario=restore")).expect("restore");
        assert_eq!(r, CheckSpec::parse(CHECK).expect("check"));
    }

    // issue #26 §2: every malformed check says what is wrong.
    #[test]
    fn each_malformed_check_is_refused_with_its_reason() {
        let sig = "signature=\"heap-buffer-overflow in f\"";
        for (text, says) in [
            (format!("arch=qwen2vl {sig}"), "no `variant=`"),
            ("variant=v arch=qwen2vl".to_string(), "no `signature=`"),
            (format!("variant=v {sig}"), "no `arch=` or `model=`"),
            (
                format!("variant=v arch=qwen2vl model=m.gguf {sig}"),
                "not both",
            ),
            (format!("variant=v arch=llama9 {sig}"), "arch `llama9`"),
            (
                format!("variant=v arch=qwen2vl tokens=0 {sig}"),
                "tokens `0`",
            ),
            (
                format!("variant=v arch=qwen2vl tokens=many {sig}"),
                "tokens `many`",
            ),
            (
                format!("variant=v arch=qwen2vl tokens=99999 {sig}"),
                "tokens `99999`",
            ),
            (format!("variant=v variant=w arch=qwen2vl {sig}"), "twice"),
            (
                format!("variant=v arch=qwen2vl colour=blue {sig}"),
                "unknown key `colour`",
            ),
            (
                format!("variant=v arch=qwen2vl oops {sig}"),
                "`oops` is not `key=value`",
            ),
            (
                format!("variant=../x arch=qwen2vl {sig}"),
                "not a variant name",
            ),
            (
                "variant=v arch=qwen2vl signature=\"heap in f".to_string(),
                "no closing",
            ),
            (
                "variant=v arch=qwen2vl signature=\"a in f\"x".to_string(),
                "right after",
            ),
            (
                "variant=v arch=qwen2vl signature=\"\"".to_string(),
                "is empty",
            ),
            (
                "variant=v arch=qwen2vl signature=crash".to_string(),
                "KIND in FUNCTION",
            ),
            (
                format!("variant=v\u{1b} arch=qwen2vl {sig}"),
                "control character",
            ),
            (
                format!("variant=v arch=qwen2vl scenario=shift {sig}"),
                "scenario `shift` is not one of restore, kshift",
            ),
            (
                format!("variant=v arch=qwen2vl scenario=\"\" {sig}"),
                "is empty",
            ),
        ] {
            let e = CheckSpec::parse(&text).expect_err(&text);
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn parses_fields_continuations_and_diff_start() {
        let text = "From: A <a@b>\nDescription: one\n two\nUpstream-Status: Pending\n\nfree text\n---\n x | 1 +\ndiff --git a/x b/x\n";
        let h = Header::parse(text.as_bytes());
        assert_eq!(h.fields.len(), 3);
        assert_eq!(
            h.get("description").map(|f| f.value.as_str()),
            Some("one\ntwo")
        );
        assert_eq!(h.get("Upstream-Status").map(|f| f.line), Some(4));
        assert_eq!(h.diff_line, Some(9));
        assert_eq!(h.diff_offset.map(|o| &text[o..o + 10]), Some("diff --git"));
    }

    // issue #7 class 6, issue #13 item 2
    #[test]
    fn non_utf8_and_undecodable_lines_are_problems_at_their_line() {
        let h = Header::parse(b"From: A <a@b>\nDescription: Gr\xfc\xdfe\nX: =?UTF-8?q?bad\n\n---\ndiff --git a/x b/x\n");
        let lines: Vec<usize> = h.problems.iter().map(|p| p.line).collect();
        assert_eq!(lines, vec![2, 3]);
        assert!(h.problems[0].message.contains("not UTF-8"));
        assert_eq!(h.diff_line, Some(6));
        assert_eq!(h.diff_offset, Some(55));
    }

    // issue #13 item 2: folded encoded words join without the folding white space.
    #[test]
    fn folded_encoded_subject_unfolds_and_decodes_as_mail() {
        let h = Header::parse(
            "Subject: [PATCH] =?UTF-8?q?gr=C3=B6=C3=9Fer?=\n =?UTF-8?q?e=20Puffer?= und\n mehr\n\nbody\n---\n"
                .as_bytes(),
        );
        let f = h.get("subject").expect("subject");
        assert_eq!(f.mail, "[PATCH] größere Puffer und mehr");
        assert_eq!(h.body, "body\n");
    }

    #[test]
    fn mbox_from_line_is_skipped() {
        let h = Header::parse(b"From 0123abc Mon Sep 17 00:00:00 2001\nFrom: A <a@b>\n\n");
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
