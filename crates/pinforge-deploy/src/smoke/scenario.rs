//! What a smoke does besides the default save/restore decode: the paths of the engine that a
//! patch's defect lives on and that the restore decode never reaches.
//!
//! - `restore` (the default): the reference decode and the save/clear/restore decode compared
//!   token by token (`child::run`), the path of llama.cpp #20093.
//! - `kshift`: the server's context shift when a slot's context is full. The engine is asked
//!   `llama_memory_can_shift`; when it says yes, the child drops half the cells after the first
//!   and moves the rest back (`seq_rm` + `seq_add`), as `llama-server` does; when it says no,
//!   the child re-decodes the kept tokens, as a server without context shift must. An M-RoPE
//!   engine that says yes wrongly asserts in `seq_add` (llama.cpp #19915, PR #19928).
//! - `embd-pos-null` and `embd-pos-n-tokens`: an embedding batch, the way a multimodal caller
//!   feeds an image, with `pos` NULL ("tracked automatically", llama.h) or with the `n_tokens`
//!   entries `llama_batch_init` allocates; then greedy tokens after it. An M-RoPE engine that
//!   reads four position planes from either over-reads (llama.cpp #28902).
//!
//! Only `restore` compares two decodes; the others pass when the engine runs the path to its
//! end, and say which path it took (`note`), so a clean run is never mistaken for a shift the
//! engine did not do.

use super::child::{argmax, decode_logits, last_logits};
use pinforge_sys::shim::Model;
use serde::{Deserialize, Serialize};

/// A smoke scenario (see the module documentation).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Save, clear and restore the sequence state halfway; compare with the reference.
    #[default]
    Restore,
    /// Context shift halfway (`llama_memory_can_shift`, then `seq_rm` + `seq_add`).
    Kshift,
    /// An embedding batch with `pos` NULL, then tokens.
    EmbdPosNull,
    /// An embedding batch with `pos` of `n_tokens` entries, then tokens.
    EmbdPosNTokens,
}

/// Every scenario, in the order `--help` and errors list them.
pub const SCENARIOS: &[Scenario] = &[
    Scenario::Restore,
    Scenario::Kshift,
    Scenario::EmbdPosNull,
    Scenario::EmbdPosNTokens,
];

impl Scenario {
    /// Its name on the command line, in a `Pinforge-Check` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Restore => "restore",
            Scenario::Kshift => "kshift",
            Scenario::EmbdPosNull => "embd-pos-null",
            Scenario::EmbdPosNTokens => "embd-pos-n-tokens",
        }
    }

    /// The scenario of a name, or `None`.
    pub fn parse(name: &str) -> Option<Scenario> {
        SCENARIOS.iter().copied().find(|s| s.name() == name)
    }
}

/// The embedding rows an embedding scenario decodes: fixed, small and varied, so that every
/// run of every build decodes the same bytes (validate's embedding rows decode them too).
pub const EMBD_ROWS: usize = 8;

/// [`EMBD_ROWS`] embedding rows of width `n_embd`, the same bytes on every call.
fn embd_rows(n_embd: usize) -> Vec<f32> {
    (0..EMBD_ROWS * n_embd)
        .map(|i| ((i as f32) * 0.37).sin() * 0.05)
        .collect()
}

/// What a non-restore scenario generated: the tokens and which path the engine took.
pub(crate) struct Ran {
    pub(crate) tokens: Vec<i32>,
    pub(crate) step: usize,
    pub(crate) note: String,
}

/// Decode `tokens` at `pos0` and return the last logits' argmax.
fn next(model: &Model<'_>, tokens: &[i32], pos0: usize) -> Result<i32, String> {
    Ok(argmax(&decode_logits(model, tokens, pos0)?))
}

/// The context shift: the prompt, `n` greedy tokens, and a shift (or, when the engine says it
/// cannot shift, a re-decode of the kept tokens) once half of them are decoded.
pub(crate) fn kshift(model: &Model<'_>, prompt: &[i32], n: usize) -> Result<Ran, String> {
    model.clear();
    let mut ctx: Vec<i32> = prompt.to_vec(); // the tokens the cache holds, in position order
    let mut t = next(model, prompt, 0)?;
    let mut out = Vec::new();
    let step = n / 2;
    let mut note = String::new();
    for i in 0..n {
        out.push(t);
        if i + 1 == n {
            break;
        }
        if i == step {
            let n_past = ctx.len();
            let (n_keep, n_discard) = (1, (n_past - 1) / 2);
            let can = model.can_shift();
            if can && !model.shift(n_keep, n_discard, n_past) {
                return Err(format!(
                    "llama_memory_seq_rm refused to drop {n_discard} cells after {n_keep}"
                ));
            }
            ctx.drain(n_keep..n_keep + n_discard);
            note = if can {
                format!(
                    "shifted: the engine can shift; dropped {n_discard} of {n_past} cells after the first {n_keep} (seq_rm + seq_add) at step {i}"
                )
            } else {
                model.clear();
                let rc = model.decode(&ctx, 0);
                if rc != 0 {
                    return Err(format!(
                        "llama_decode returned {rc} re-decoding the kept tokens"
                    ));
                }
                format!(
                    "not shifted: the engine says it cannot shift this model (llama_memory_can_shift false); re-decoded the {} kept of {n_past} tokens at step {i}",
                    ctx.len()
                )
            };
        }
        // The cache now gets the token just generated; the next one comes from its logits.
        let decoded = t;
        t = next(model, &[decoded], ctx.len())?;
        ctx.push(decoded);
    }
    Ok(Ran {
        tokens: out,
        step,
        note,
    })
}

/// Decode the [`EMBD_ROWS`] embedding rows at position 0 of sequence 0, with `pos` NULL or
/// with the `n_tokens` positions `llama_batch_init` allocates (smoke's scenarios and
/// validate's embedding rows); the model's width, for the note.
pub fn decode_embd_batch(model: &Model<'_>, explicit_pos: bool) -> Result<usize, String> {
    let w = model.n_embd();
    if w == 0 {
        return Err("the model reports an embedding width of 0".into());
    }
    let rc = model.decode_embd(&embd_rows(w), explicit_pos, 0);
    if rc != 0 {
        return Err(format!("llama_decode of the embedding batch returned {rc}"));
    }
    Ok(w)
}

/// The embedding batch at position 0 (`pos` NULL or of `n_tokens` entries), then `n` greedy
/// tokens after it.
pub(crate) fn embd(model: &Model<'_>, n: usize, explicit_pos: bool) -> Result<Ran, String> {
    model.clear();
    let w = decode_embd_batch(model, explicit_pos)?;
    let mut t = argmax(&last_logits(model)?);
    let mut out = Vec::new();
    for i in 0..n {
        out.push(t);
        if i + 1 < n {
            t = next(model, &[t], EMBD_ROWS + i)?;
        }
    }
    let how = if explicit_pos {
        "with the n_tokens positions llama_batch_init allocates"
    } else {
        "with pos NULL"
    };
    Ok(Ran {
        tokens: out,
        step: 0,
        note: format!("decoded {EMBD_ROWS} embedding rows of width {w} {how}, then {n} tokens"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for s in SCENARIOS {
            assert_eq!(Scenario::parse(s.name()), Some(*s));
            let json = serde_json::to_string(s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.name()));
        }
        assert_eq!(Scenario::parse("Kshift"), None);
        assert_eq!(Scenario::parse(""), None);
        assert_eq!(Scenario::default(), Scenario::Restore);
    }

    #[test]
    fn embedding_rows_are_fixed_and_whole() {
        let a = embd_rows(16);
        assert_eq!(a.len(), EMBD_ROWS * 16);
        assert_eq!(a, embd_rows(16));
        assert!(a.iter().all(|x| x.abs() <= 0.05));
        assert!(a.iter().any(|x| *x != 0.0));
    }
}
