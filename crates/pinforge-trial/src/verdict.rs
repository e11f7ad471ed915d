//! The verdict rule of a flip: from what each side gave (a failed build, a smoke verdict and
//! signature) to `supported`, `falsified` or `invalid`, always with the reason.

use pinforge_deploy::smoke::signature::{has_frame, normalize_signature};
use pinforge_deploy::smoke::Verdict as SmokeVerdict;
use serde::Serialize;

/// A flip's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FlipVerdict {
    /// The signature disappeared: the hypothesis that this axis is the defect is supported.
    Supported,
    /// The same signature on both sides: the hypothesis is falsified.
    Falsified,
    /// The comparison could not be made; not evidence either way.
    Invalid,
    /// Repeats of a soak trial disagree: not evidence either way until they agree.
    Inconclusive,
}

impl FlipVerdict {
    /// The word recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            FlipVerdict::Supported => "supported",
            FlipVerdict::Falsified => "falsified",
            FlipVerdict::Invalid => "invalid",
            FlipVerdict::Inconclusive => "inconclusive",
        }
    }
}

/// What one side of a trial gave, as far as the verdict rule needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SideResult {
    /// The build (or the step before the smoke) failed, with the reason.
    BuildFailed(String),
    /// Not run, with the reason (the other side failed first).
    NotRun(String),
    /// Smoked: the verdict, the signature and the smoke's own detail.
    Smoked {
        /// ok | mismatch | crash | error.
        verdict: SmokeVerdict,
        /// The crash signature, if any.
        signature: Option<String>,
        /// The smoke's detail (why an error, where a mismatch).
        detail: Option<String>,
    },
}

/// The word a smoke verdict is recorded as.
pub(crate) fn smoke_word(v: &SmokeVerdict) -> &'static str {
    match v {
        SmokeVerdict::Ok => "ok",
        SmokeVerdict::Mismatch => "mismatch",
        SmokeVerdict::Crash => "crash",
        SmokeVerdict::Error => "error",
    }
}

/// The verdict rule. The `from` side must show a crash signature (there is nothing to test
/// otherwise); the `to` side showing the same normalized signature falsifies the hypothesis,
/// a clean (`ok`) `to` side supports it, and anything else — a failed build, a smoke that could
/// not run, a different crash, a diverged decode — makes the trial invalid, with the reason.
pub(crate) fn decide(from: &SideResult, to: &SideResult) -> (FlipVerdict, String) {
    // A failed build is the reason, whichever side: the other side then was not smoked.
    for (name, side) in [("from", from), ("to", to)] {
        if let SideResult::BuildFailed(e) = side {
            return invalid(format!("the {name} side did not build: {e}"));
        }
    }
    let from_sig = match from_signature(from) {
        Ok(s) => s,
        Err(verdict) => return verdict,
    };
    let want = normalize_signature(from_sig);
    if !has_frame(from_sig) {
        return invalid(format!(
            "the from side's signature `{want}` has no frame to compare (no sanitizer kind and \
             top function): another failure would read the same"
        ));
    }
    judge_to(to, &want)
}

fn invalid(why: String) -> (FlipVerdict, String) {
    (FlipVerdict::Invalid, why)
}

/// The from side's crash signature, or the `invalid` verdict when it shows none to test.
fn from_signature(from: &SideResult) -> Result<&str, (FlipVerdict, String)> {
    match from {
        SideResult::BuildFailed(e) => Err(invalid(format!("the from side did not build: {e}"))),
        SideResult::NotRun(e) => Err(invalid(format!("the from side did not run: {e}"))),
        SideResult::Smoked {
            verdict: SmokeVerdict::Error,
            detail,
            ..
        } => Err(invalid(format!(
            "the from side's smoke could not run: {}",
            detail.as_deref().unwrap_or("(no detail)")
        ))),
        SideResult::Smoked {
            verdict: SmokeVerdict::Crash,
            signature: Some(s),
            ..
        } => Ok(s),
        SideResult::Smoked { verdict, .. } => Err(invalid(format!(
            "the from side shows no crash signature to test (smoke {})",
            smoke_word(verdict)
        ))),
    }
}

/// The verdict from the to side, given the from side's normalized signature `want`.
fn judge_to(to: &SideResult, want: &str) -> (FlipVerdict, String) {
    let shown = |signature: &Option<String>| {
        signature
            .as_deref()
            .map(normalize_signature)
            .unwrap_or_else(|| "none".into())
    };
    match to {
        SideResult::BuildFailed(e) => invalid(format!("the to side did not build: {e}")),
        SideResult::NotRun(e) => invalid(format!("the to side did not run: {e}")),
        SideResult::Smoked {
            verdict: SmokeVerdict::Ok,
            ..
        } => (
            FlipVerdict::Supported,
            format!("the signature `{want}` disappeared on the to side (smoke ok)"),
        ),
        SideResult::Smoked {
            verdict: SmokeVerdict::Crash,
            signature,
            ..
        } if !signature.as_deref().is_some_and(has_frame) => invalid(format!(
            "the to side crashed with a signature that has no frame to compare (`{}`): it \
             cannot be told apart from `{want}` or from another failure",
            shown(signature)
        )),
        SideResult::Smoked {
            verdict: SmokeVerdict::Crash,
            signature: Some(s),
            ..
        } if normalize_signature(s) == want => (
            FlipVerdict::Falsified,
            format!("the signature `{want}` survived the flip"),
        ),
        SideResult::Smoked {
            verdict: SmokeVerdict::Crash,
            signature,
            ..
        } => invalid(format!(
            "the to side crashed with another signature (`{}`, the from side `{want}`): the flip \
             changed the failure instead of keeping or removing it",
            shown(signature)
        )),
        SideResult::Smoked {
            verdict: SmokeVerdict::Error,
            detail,
            ..
        } => invalid(format!(
            "the to side's smoke could not run: {}",
            detail.as_deref().unwrap_or("(no detail)")
        )),
        SideResult::Smoked {
            verdict: SmokeVerdict::Mismatch,
            detail,
            ..
        } => invalid(format!(
            "the to side's decode diverged after the restore (mismatch{}): the signature is gone \
             but the result is not clean",
            detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    /// The #20093 signature, as deploy::smoke::signature's tests spell it.
    const SIG: &str = "heap-buffer-overflow in llama_kv_cache::apply_ubatch (allocated in llama_batch_allocr::ubatch_reserve)\nframes: llama_kv_cache::apply_ubatch <- x\nSUMMARY: AddressSanitizer: heap-buffer-overflow /pinforge/src/src/llama-kv-cache.cpp:1030 in llama_kv_cache::apply_ubatch";

    fn crash(sig: &str) -> SideResult {
        SideResult::Smoked {
            verdict: SmokeVerdict::Crash,
            signature: Some(sig.into()),
            detail: None,
        }
    }
    fn smoked(v: SmokeVerdict) -> SideResult {
        SideResult::Smoked {
            verdict: v,
            signature: None,
            detail: Some("why".into()),
        }
    }

    // issue #10: the verdict rule in both directions, and every way a trial is invalid.
    #[test]
    fn the_verdict_rule() {
        use FlipVerdict::*;
        let other_frames = SIG.replace("frames: llama_kv_cache::apply_ubatch <- x", "frames: y");
        let cases: Vec<(SideResult, SideResult, FlipVerdict, &str)> = vec![
            (
                crash(SIG),
                smoked(SmokeVerdict::Ok),
                Supported,
                "disappeared",
            ),
            (crash(SIG), crash(&other_frames), Falsified, "survived"),
            (
                crash(SIG),
                crash("heap-buffer-overflow in llama_kv_cache::state_read_meta"),
                Invalid,
                "another signature",
            ),
            (
                crash(SIG),
                smoked(SmokeVerdict::Mismatch),
                Invalid,
                "diverged",
            ),
            (
                crash(SIG),
                smoked(SmokeVerdict::Error),
                Invalid,
                "could not run",
            ),
            (
                crash(SIG),
                SideResult::BuildFailed("cmake".into()),
                Invalid,
                "to side did not build",
            ),
            (
                SideResult::NotRun("not smoked".into()),
                SideResult::BuildFailed("cmake".into()),
                Invalid,
                "to side did not build: cmake",
            ),
            (
                smoked(SmokeVerdict::Ok),
                smoked(SmokeVerdict::Ok),
                Invalid,
                "no crash signature",
            ),
            (
                smoked(SmokeVerdict::Mismatch),
                crash(SIG),
                Invalid,
                "no crash signature",
            ),
            (
                smoked(SmokeVerdict::Error),
                smoked(SmokeVerdict::Ok),
                Invalid,
                "from side's smoke could not run",
            ),
            (
                SideResult::BuildFailed("configure".into()),
                SideResult::NotRun("x".into()),
                Invalid,
                "from side did not build",
            ),
        ];
        // A frameless signature (signal, hang, exit without a result) on either side: two
        // unrelated failures would compare equal, so the trial is invalid, never falsified.
        let frameless = [
            "killed by signal 11 (SIGSEGV)",
            "hang: no result within 60s",
            "exited with 1 without a result",
            "heap-buffer-overflow in ?",
        ];
        let mut cases = cases;
        for f in frameless {
            cases.push((crash(f), crash(f), Invalid, "no frame to compare"));
            cases.push((crash(f), smoked(SmokeVerdict::Ok), Invalid, "no frame"));
            cases.push((crash(SIG), crash(f), Invalid, "no frame to compare"));
        }
        cases.push((
            crash(SIG),
            SideResult::Smoked {
                verdict: SmokeVerdict::Crash,
                signature: None,
                detail: None,
            },
            Invalid,
            "no frame to compare",
        ));
        for (from, to, want, why) in cases {
            let (v, reason) = decide(&from, &to);
            assert_eq!(v, want, "{from:?} -> {to:?}: {reason}");
            assert!(reason.contains(why), "{reason} should say {why}");
        }
    }
}
