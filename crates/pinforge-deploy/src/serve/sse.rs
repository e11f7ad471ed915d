//! Reading an OpenAI chat-completions stream (`"stream": true`, Server-Sent Events) line by
//! line, and saying at its end whether it was complete.
//!
//! Why this matters (issue #20): when a router child dies mid-stream, the client already has
//! HTTP 200; the stream just stops, with no chunk carrying a `finish_reason` and no
//! `data: [DONE]`, sometimes after a raw `proxy error: …` line. A reader that only collected
//! tokens would see a short answer and call it a token-budget stop. So completeness is a rule
//! here: a stream is complete only when a chunk gave a `finish_reason` AND `[DONE]` followed;
//! anything else is [`StreamEnd::Cut`], with what was seen.

use serde::Deserialize;

/// Usage as the last chunk reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct Usage {
    /// Prompt tokens.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Generated tokens.
    #[serde(default)]
    pub completion_tokens: u64,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
}

/// How a stream ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StreamEnd {
    /// A `finish_reason` chunk, then `[DONE]`.
    Complete {
        /// `stop`, `length`, …
        finish_reason: String,
        /// The content deltas joined.
        content: String,
        /// Usage, when the server sent it.
        usage: Option<Usage>,
    },
    /// The stream stopped before it was complete.
    Cut {
        /// Which rule failed, and the proxy's error line when there was one.
        why: String,
        /// The content received before the cut.
        content: String,
    },
}

/// The reader's state, fed one line at a time (without its line ending).
#[derive(Debug, Default)]
pub(crate) struct SseReader {
    content: String,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    done: bool,
    proxy_error: Option<String>,
    bad_chunk: Option<String>,
    chunks: u64,
}

/// The longest line kept in a reason (a proxy error can carry a whole body).
const MAX_SHOWN: usize = 200;

impl SseReader {
    /// Feed one line of the stream.
    pub(crate) fn line(&mut self, line: &str) {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() || line.starts_with(':') {
            return; // event separator or comment
        }
        let Some(data) = line.strip_prefix("data:") else {
            if line.contains("proxy error") && self.proxy_error.is_none() {
                self.proxy_error = Some(line.chars().take(MAX_SHOWN).collect());
            }
            return;
        };
        let data = data.trim_start();
        if self.done {
            // Anything after [DONE] makes the stream malformed, never complete.
            self.bad_chunk
                .get_or_insert_with(|| "data after [DONE]".into());
            return;
        }
        if data == "[DONE]" {
            self.done = true;
            return;
        }
        match serde_json::from_str::<Chunk>(data) {
            Ok(c) => {
                self.chunks += 1;
                for ch in c.choices {
                    if let Some(t) = ch.delta.and_then(|d| d.content) {
                        self.content.push_str(&t);
                    }
                    if let Some(f) = ch.finish_reason {
                        self.finish_reason = Some(f);
                    }
                }
                if c.usage.is_some() {
                    self.usage = c.usage;
                }
            }
            Err(e) => {
                if data.contains("proxy error") && self.proxy_error.is_none() {
                    self.proxy_error = Some(data.chars().take(MAX_SHOWN).collect());
                } else {
                    self.bad_chunk
                        .get_or_insert_with(|| format!("a chunk that is not JSON: {e}"));
                }
            }
        }
    }

    /// The stream is over (end of body, or the connection dropped: `dropped` says which).
    pub(crate) fn finish(self, dropped: Option<&str>) -> StreamEnd {
        let why = if let Some(d) = dropped {
            Some(format!("the connection dropped mid-stream: {d}"))
        } else if let Some(p) = &self.proxy_error {
            Some(format!("the router reported `{p}`"))
        } else if let Some(b) = &self.bad_chunk {
            Some(b.clone())
        } else if self.finish_reason.is_none() {
            Some(format!(
                "no chunk gave a finish_reason ({} chunk(s) received)",
                self.chunks
            ))
        } else if !self.done {
            Some("no `data: [DONE]` after the finish_reason".into())
        } else {
            None
        };
        match (why, self.finish_reason) {
            (None, Some(finish_reason)) => StreamEnd::Complete {
                finish_reason,
                content: self.content,
                usage: self.usage,
            },
            (why, _) => StreamEnd::Cut {
                why: why.unwrap_or_else(|| "incomplete".into()),
                content: self.content,
            },
        }
    }
}

/// Read a whole stream from `lines` (the tests' way in; the client feeds lines as they come).
#[cfg(test)]
pub(crate) fn read_all<'a>(
    lines: impl IntoIterator<Item = &'a str>,
    dropped: Option<&str>,
) -> StreamEnd {
    let mut r = SseReader::default();
    for l in lines {
        r.line(l);
    }
    r.finish(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = r#"data: {"choices":[{"delta":{"content":"{\"a\""}}]}"#;
    const B: &str = r#"data: {"choices":[{"delta":{"content":":1}"}}]}"#;
    const FIN: &str = r#"data: {"choices":[{"delta":{},"finish_reason":"length"}],"usage":{"prompt_tokens":12,"completion_tokens":8}}"#;

    #[test]
    fn a_complete_stream_has_a_finish_reason_then_done() {
        let end = read_all([A, "", B, "", FIN, "", "data: [DONE]", ""], None);
        assert_eq!(
            end,
            StreamEnd::Complete {
                finish_reason: "length".into(),
                content: "{\"a\":1}".into(),
                usage: Some(Usage {
                    prompt_tokens: 12,
                    completion_tokens: 8
                }),
            }
        );
        // CRLF line endings and comments are the same stream.
        let end = read_all([": ping", "data: [DONE]\r"], None);
        assert!(matches!(end, StreamEnd::Cut { .. }), "no finish_reason");
    }

    #[test]
    fn a_stream_cut_by_a_dying_child_is_never_complete() {
        // Tokens, then nothing: the child died (issue #20: must be a crash, not token-budget).
        let end = read_all([A, B], None);
        let StreamEnd::Cut { why, content } = end else {
            panic!("cut expected")
        };
        assert!(why.contains("no chunk gave a finish_reason"), "{why}");
        assert_eq!(content, "{\"a\":1}");
        // A finish_reason without [DONE], a raw proxy error line, a dropped connection.
        assert!(matches!(read_all([A, FIN], None), StreamEnd::Cut { .. }));
        let StreamEnd::Cut { why, .. } =
            read_all([A, "proxy error: Could not establish connection"], None)
        else {
            panic!("cut expected")
        };
        assert!(why.contains("proxy error"), "{why}");
        let StreamEnd::Cut { why, .. } =
            read_all([A, FIN, "data: [DONE]"], Some("connection reset"))
        else {
            panic!("cut expected")
        };
        assert!(why.contains("connection reset"), "{why}");
        assert!(matches!(
            read_all([A, "data: {oops", FIN, "data: [DONE]"], None),
            StreamEnd::Cut { .. }
        ));
        assert!(matches!(
            read_all([FIN, "data: [DONE]", A], None),
            StreamEnd::Cut { .. }
        ));
    }

    #[test]
    fn arbitrary_lines_never_panic_the_reader() {
        use proptest::prelude::*;
        proptest!(|(lines in proptest::collection::vec(".{0,80}", 0..20))| {
            let _ = read_all(lines.iter().map(String::as_str), None);
        });
    }
}
