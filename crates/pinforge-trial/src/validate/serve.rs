//! The outcome rules of a row sent to a real `llama-server` (issue #20): `validate --serve`
//! and `--endpoint` see only HTTP, so each class is a mechanical rule over what the response
//! (or its absence) showed, and the rule that fired is recorded with the row as its evidence.
//!
//! Order matters and is part of the contract: the harness failing comes first (never counted
//! against a build), then every sign of a dead child (crash outranks whatever partial answer
//! came back), then the two `finish_reason: length` cases told apart by the token counts
//! (context first: a prompt that filled the context also stops at "length"), then an answer
//! with nothing visible in it, then schema validity. `mismatch` compares two arms' `ok` rows.
//!
//! One death, one crash: right after a child died the router may still proxy the next request
//! to the dead child's port before it has noticed the exit and respawned it, and that request
//! fails with `proxy error: Could not establish connection`. Such a row showed no new death
//! (nothing was listening to die), so when the arm's previous row was a crash (or itself such a
//! row) it is `follow-on`, recorded with the crash row it follows ([`follow_on`]); the crash
//! count and the onset then count deaths, and the follow-on rows are counted apart. A refused
//! connection with no crash before it stays a crash: nothing else explains a dead child.

/// A served row's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ServeClass {
    /// Complete, visible, schema-valid.
    Ok,
    /// The child died: 5xx from the proxy, a dropped connection, a cut stream, `/models`
    /// reporting the preset failed; or it hung: no complete answer within the row's time
    /// (`--row-timeout` per read, three times that in all), as the in-process harness counts a
    /// hang. The row's rule says which (`cut: hang: …`).
    Crash,
    /// `length` with `completion_tokens == max_tokens` and output not valid under the schema.
    TokenBudget,
    /// `length` with prompt + completion filling the context.
    ContextExhausted,
    /// A complete response with no visible content (or none the schema accepts).
    SemanticOutputAbsent,
    /// The arms differ on this row at temperature 0.
    Mismatch,
    /// The harness could not run the row.
    Error,
    /// A request that found the child of the previous row's crash still dead (the proxy could
    /// not connect to it): the same death, not a new one.
    FollowOn,
    /// A cut row whose child the router stopped itself while the row ran (its log shows
    /// `stopping model instance name=PRESET`, and the child exited 0 or took the exit
    /// command): no sanitizer report, so no death. The stale stop left from evicting a dead
    /// child hits the fresh one (issue #35); counted apart, as token-budget rows are.
    RouterStop,
}

impl ServeClass {
    /// The name used in rows and counts.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ServeClass::Ok => "ok",
            ServeClass::Crash => "crash",
            ServeClass::TokenBudget => "token-budget",
            ServeClass::ContextExhausted => "context-exhausted",
            ServeClass::SemanticOutputAbsent => "semantic-output-absent",
            ServeClass::Mismatch => "mismatch",
            ServeClass::Error => "error",
            ServeClass::FollowOn => "follow-on",
            ServeClass::RouterStop => "router-stop",
        }
    }

    /// Every class, in the order counts list them.
    pub(crate) const ALL: [ServeClass; 9] = [
        ServeClass::Ok,
        ServeClass::Crash,
        ServeClass::FollowOn,
        ServeClass::RouterStop,
        ServeClass::TokenBudget,
        ServeClass::ContextExhausted,
        ServeClass::SemanticOutputAbsent,
        ServeClass::Mismatch,
        ServeClass::Error,
    ];

    /// The class a recorded name stands for.
    pub(crate) fn parse(s: &str) -> Option<ServeClass> {
        ServeClass::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// What one request showed, the input to [`classify`].
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Response {
    /// The harness could not build or send the request (nothing reached the server).
    pub harness_error: Option<String>,
    /// HTTP status, when a status line came back.
    pub status: Option<u16>,
    /// The connection dropped after the request was sent, or a stream was cut: why.
    pub cut: Option<String>,
    /// `/models` reported the row's preset `failed` after the row.
    pub child_failed: bool,
    /// `finish_reason` of a complete answer.
    pub finish_reason: Option<String>,
    /// Usage of a complete answer.
    pub prompt_tokens: u64,
    /// Generated tokens.
    pub completion_tokens: u64,
    /// The answer's content.
    pub content: Option<String>,
    /// Whether the content is valid under the run's schema (None: no schema).
    pub schema_valid: Option<bool>,
    /// The start of an error body (`proxy error: …`).
    pub error_body: Option<String>,
    /// The router stopped the row's child itself while the row ran, and nothing shows a
    /// death: see [`router_stopped`].
    pub router_stopped: bool,
}

/// Whether a row's facts show the router's own stop and no death: its log had the stop of
/// the row's preset (`stop_lines`) and no sanitizer report came; and either nothing shows a
/// failure (`/models` did not mark the preset failed, the recorded exit is none or 0) or the
/// child acknowledged the router's exit command after the stop (`exit command received`),
/// so a non-zero exit is its shutdown after the router stopped it. Measured on the real
/// router (issue #35): of 4 such rows in a 200-row control arm, 2 exited 0 and 2 exited 1
/// right after the exit command, none with a report.
pub(crate) fn router_stopped(
    stop_lines: &[String],
    sanitizer: &[String],
    child_failed: bool,
    child_exit: Option<i64>,
) -> bool {
    let stop_at = stop_lines
        .iter()
        .position(|l| l.contains("stopping model instance name="));
    let Some(stop_at) = stop_at else {
        return false;
    };
    if !sanitizer.is_empty() {
        return false;
    }
    let clean = !child_failed && matches!(child_exit, None | Some(0));
    let acknowledged = stop_lines[stop_at + 1..]
        .iter()
        .any(|l| l.contains("exit command received"));
    clean || acknowledged
}

/// What the proxy says when the child's port took no connection (httplib's text for
/// `Error::Connection`): the child was not there, so the request did not kill it.
const UNREACHED: &str = "Could not establish connection";

/// The follow-on rule: a row classified `crash` whose request never reached a child (the proxy
/// could not connect) right after a crash of the same arm is that crash's follow-on. `prev`
/// is the arm's previous row: its index, its final class and, for a follow-on, the crash row
/// it follows. Returns the crash row this one follows.
pub(crate) fn follow_on(
    class: ServeClass,
    r: &Response,
    prev: Option<(u64, ServeClass, Option<u64>)>,
) -> Option<u64> {
    let unreached = [&r.error_body, &r.cut]
        .iter()
        .any(|t| t.as_deref().is_some_and(|t| t.contains(UNREACHED)));
    if class != ServeClass::Crash || !unreached {
        return None;
    }
    match prev? {
        (row, ServeClass::Crash | ServeClass::RouterStop, _) => Some(row),
        (_, ServeClass::FollowOn, origin) => origin,
        _ => None,
    }
}

/// The limits a row ran under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// `max_tokens` sent.
    pub max_tokens: u64,
    /// The child's context per slot.
    pub n_ctx: u64,
}

/// Tokens of slack for "the context is full": the server stops a few tokens short of it
/// (BOS and the chat template's closing tokens are not all counted in `usage`).
const CTX_SLACK: u64 = 4;

/// The class of a row and the rule that gave it (recorded as the row's evidence).
pub(crate) fn classify(r: &Response, lim: Limits) -> (ServeClass, String) {
    let (class, rule) = classify_answer(r, lim);
    if class == ServeClass::Crash && r.router_stopped {
        return (
            ServeClass::RouterStop,
            format!(
                "{rule}; the router stopped this preset's child itself while the row ran \
                 (`stopping model instance` in its log) and no sanitizer report came: not a \
                 death"
            ),
        );
    }
    (class, rule)
}

/// [`classify`] from the answer alone.
fn classify_answer(r: &Response, lim: Limits) -> (ServeClass, String) {
    if let Some(e) = &r.harness_error {
        return (ServeClass::Error, format!("harness: {e}"));
    }
    if let Some(c) = &r.cut {
        return (ServeClass::Crash, format!("cut: {c}"));
    }
    if r.completion_tokens > lim.max_tokens {
        // No server that honours the request does this: the counts cannot be read as a
        // budget stop or a complete answer.
        return (
            ServeClass::Error,
            format!(
                "harness: the endpoint reports {} completion tokens, more than max_tokens {}",
                r.completion_tokens, lim.max_tokens
            ),
        );
    }
    match r.status {
        Some(s) if s >= 500 => return (ServeClass::Crash, format!("HTTP {s} from the proxy")),
        _ if r.child_failed => {
            return (
                ServeClass::Crash,
                "/models reports the preset failed".into(),
            )
        }
        None => return (ServeClass::Crash, "no HTTP status came back".into()),
        Some(200) => {}
        Some(s) => {
            return (
                ServeClass::Error,
                format!("HTTP {s}: the request was refused"),
            )
        }
    }
    let Some(finish) = r.finish_reason.as_deref() else {
        return (ServeClass::Crash, "HTTP 200 without a finish_reason".into());
    };
    let valid = r.schema_valid.unwrap_or(true);
    if finish == "length" {
        // Saturating: the counts are an endpoint's data.
        let used = r.prompt_tokens.saturating_add(r.completion_tokens);
        if used.saturating_add(CTX_SLACK) >= lim.n_ctx {
            return (
                ServeClass::ContextExhausted,
                format!(
                    "length: prompt {} + completion {} of context {}",
                    r.prompt_tokens, r.completion_tokens, lim.n_ctx
                ),
            );
        }
        if r.completion_tokens == lim.max_tokens && !valid {
            return (
                ServeClass::TokenBudget,
                format!("length: completion_tokens == max_tokens {}", lim.max_tokens),
            );
        }
    }
    let visible = r.content.as_deref().is_some_and(|c| !c.trim().is_empty());
    if !visible {
        return (
            ServeClass::SemanticOutputAbsent,
            format!("finish_reason {finish}, no visible content"),
        );
    }
    if !valid {
        return (
            ServeClass::SemanticOutputAbsent,
            format!("finish_reason {finish}, content not valid under the schema"),
        );
    }
    (ServeClass::Ok, format!("finish_reason {finish}"))
}

/// The cross-arm rule, applied to an arm's class of a row given the other arm's answer: two
/// `ok` answers to the same row at temperature 0 must be equal, else the row is `mismatch`.
pub(crate) fn against_other_arm(
    mine: (ServeClass, &Response),
    other: (ServeClass, &Response),
) -> ServeClass {
    match (mine.0, other.0) {
        (ServeClass::Ok, ServeClass::Ok) if mine.1.content != other.1.content => {
            ServeClass::Mismatch
        }
        (c, _) => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIM: Limits = Limits {
        max_tokens: 16,
        n_ctx: 256,
    };

    #[test]
    fn a_cut_the_router_made_itself_is_a_router_stop_and_a_death_never_is() {
        let stop = vec!["srv  operator(): stopping model instance name=p".to_string()];
        let cut = Response {
            cut: Some("connection reset".into()),
            ..Response::default()
        };
        assert_eq!(classify(&cut, LIM).0, ServeClass::Crash);
        let stopped = Response {
            router_stopped: router_stopped(&stop, &[], false, Some(0)),
            ..cut.clone()
        };
        let (c, rule) = classify(&stopped, LIM);
        assert_eq!(c, ServeClass::RouterStop);
        assert!(rule.contains("not a death"), "{rule}");
        // Any sign of a death keeps it a crash: a report, the preset failed, a non-zero exit.
        let report = vec!["ERROR: AddressSanitizer: heap-buffer-overflow".to_string()];
        assert!(!router_stopped(&stop, &report, false, None));
        assert!(!router_stopped(&stop, &[], true, None));
        assert!(!router_stopped(&stop, &[], false, Some(1)));
        // A non-zero exit right after the child took the router's exit command is its
        // shutdown, not a death; an acknowledgement before the stop does not count.
        let acked = vec![
            stop[0].clone(),
            "[57001] srv  operator(): exit command received, exiting...".to_string(),
        ];
        assert!(router_stopped(&acked, &[], true, Some(1)));
        let before: Vec<String> = acked.iter().rev().cloned().collect();
        assert!(!router_stopped(&before, &[], true, Some(1)));
        assert!(!router_stopped(&acked, &report, true, Some(1)));
        assert!(
            !router_stopped(&[], &[], false, None),
            "no stop line, no router stop"
        );
        // A complete answer is what it is, whatever the log says.
        let fine = Response {
            router_stopped: true,
            ..ok()
        };
        assert_eq!(classify(&fine, LIM).0, ServeClass::Ok);
        // The next unreached row follows the router stop, as it follows a crash.
        let unreached = Response {
            status: Some(500),
            error_body: Some(format!("proxy error: {UNREACHED}")),
            ..Response::default()
        };
        assert_eq!(
            follow_on(
                ServeClass::Crash,
                &unreached,
                Some((4, ServeClass::RouterStop, None))
            ),
            Some(4)
        );
        assert_eq!(
            ServeClass::parse("router-stop"),
            Some(ServeClass::RouterStop)
        );
    }

    fn ok() -> Response {
        Response {
            status: Some(200),
            finish_reason: Some("stop".into()),
            prompt_tokens: 20,
            completion_tokens: 9,
            content: Some("{\"a\":1}".into()),
            schema_valid: Some(true),
            ..Default::default()
        }
    }

    fn class(r: &Response) -> ServeClass {
        classify(r, LIM).0
    }

    #[test]
    fn more_completion_tokens_than_asked_for_is_the_endpoints_error_not_an_answer() {
        let r = Response {
            completion_tokens: 100_000,
            ..ok()
        };
        let (c, rule) = classify(&r, LIM);
        assert_eq!(c, ServeClass::Error, "{rule}");
        assert!(rule.contains("more than max_tokens 16"), "{rule}");
        let at_budget = Response {
            completion_tokens: 16,
            finish_reason: Some("length".into()),
            schema_valid: Some(false),
            ..ok()
        };
        assert_eq!(class(&at_budget), ServeClass::TokenBudget);
    }

    #[test]
    fn every_sign_of_a_dead_child_is_a_crash() {
        for r in [
            Response {
                status: Some(500),
                ..ok()
            },
            Response {
                cut: Some("no finish_reason".into()),
                ..ok()
            },
            Response {
                child_failed: true,
                ..ok()
            },
            Response {
                status: None,
                ..ok()
            },
            Response {
                finish_reason: None,
                ..ok()
            },
        ] {
            assert_eq!(class(&r), ServeClass::Crash, "{r:?}");
        }
        // A cut stream that had reached the budget is still a crash, never token-budget.
        let r = Response {
            cut: Some("no [DONE]".into()),
            finish_reason: Some("length".into()),
            completion_tokens: 16,
            schema_valid: Some(false),
            ..ok()
        };
        assert_eq!(class(&r), ServeClass::Crash);
    }

    #[test]
    fn length_is_told_apart_by_the_token_counts() {
        let budget = Response {
            finish_reason: Some("length".into()),
            completion_tokens: 16,
            schema_valid: Some(false),
            ..ok()
        };
        assert_eq!(class(&budget), ServeClass::TokenBudget);
        let full = Response {
            prompt_tokens: 240,
            completion_tokens: 14,
            ..budget.clone()
        };
        assert_eq!(class(&full), ServeClass::ContextExhausted);
        // Valid output that happened to use the whole budget is ok.
        let fits = Response {
            schema_valid: Some(true),
            ..budget
        };
        assert_eq!(class(&fits), ServeClass::Ok);
    }

    #[test]
    fn harness_failures_refusals_and_empty_answers_have_their_own_classes() {
        let r = Response {
            harness_error: Some("connection refused".into()),
            status: Some(500),
            ..ok()
        };
        assert_eq!(class(&r), ServeClass::Error);
        assert_eq!(
            class(&Response {
                status: Some(400),
                ..ok()
            }),
            ServeClass::Error
        );
        for c in [None, Some(""), Some(" \n")] {
            let r = Response {
                content: c.map(String::from),
                ..ok()
            };
            assert_eq!(class(&r), ServeClass::SemanticOutputAbsent);
        }
        let r = Response {
            schema_valid: Some(false),
            ..ok()
        };
        assert_eq!(class(&r), ServeClass::SemanticOutputAbsent);
        let (c, why) = classify(&ok(), LIM);
        assert_eq!((c, why.as_str()), (ServeClass::Ok, "finish_reason stop"));
        assert_eq!(ServeClass::ContextExhausted.as_str(), "context-exhausted");
        let ok_ = ServeClass::Ok;
        assert_eq!(against_other_arm((ok_, &ok()), (ok_, &ok())), ok_);
        let other = Response {
            content: Some("{\"a\":2}".into()),
            ..ok()
        };
        assert_eq!(
            against_other_arm((ok_, &ok()), (ok_, &other)),
            ServeClass::Mismatch
        );
        // A crash on the other arm is not a mismatch of this one.
        assert_eq!(
            against_other_arm((ok_, &ok()), (ServeClass::Crash, &other)),
            ok_
        );
        for c in ServeClass::ALL {
            assert_eq!(ServeClass::parse(c.as_str()), Some(c));
        }
        assert_eq!(ServeClass::parse("crash "), None);
    }

    #[test]
    fn a_refused_proxy_connection_right_after_a_crash_is_its_follow_on_not_a_new_death() {
        let refused = Response {
            status: Some(500),
            error_body: Some(
                "{\"message\":\"proxy error: Could not establish connection\"}".into(),
            ),
            ..ok()
        };
        let read_failed = Response {
            status: Some(500),
            error_body: Some("proxy error: Failed to read connection".into()),
            ..ok()
        };
        let crash = ServeClass::Crash;
        assert_eq!(class(&refused), crash);
        // After a crash at row 7 (directly, or through follow-ons of it).
        assert_eq!(follow_on(crash, &refused, Some((7, crash, None))), Some(7));
        let fo = ServeClass::FollowOn;
        assert_eq!(follow_on(crash, &refused, Some((8, fo, Some(7)))), Some(7));
        // A death of its own, or a refusal with no crash before it, stays a crash.
        assert_eq!(follow_on(crash, &read_failed, Some((7, crash, None))), None);
        assert_eq!(
            follow_on(crash, &refused, Some((7, ServeClass::Ok, None))),
            None
        );
        assert_eq!(follow_on(crash, &refused, None), None);
        assert_eq!(
            follow_on(ServeClass::Ok, &refused, Some((7, crash, None))),
            None
        );
    }
}
