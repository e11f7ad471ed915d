//! The engine process's one slot (sequence 0): a row's restored path and uninterrupted path.
//!
//! The restored path works as a server's prompt cache does: restore a saved sequence state
//! (`llama_state_seq_set_data`, where llama.cpp issue #20093 lives), drop the cells past the
//! common prefix with the prompt, decode only the rest. The uninterrupted path decodes the
//! same prompt from an empty memory, so the parent can compare the two.
//!
//! The state row `r` restores is a function of the row alone: the one saved
//! (`llama_state_seq_get_data`) after row `r - 1`'s uninterrupted path. When this engine did
//! not just run row `r - 1` (its first row, the first after a restart or an error, every row of
//! a shard or of one `--jobs` worker, a resumed run), it replays that path first: the request
//! carries the previous prompt. So a row's outcome and tokens do not depend on which engine ran
//! it or what else that engine ran, and a sharded run, a run with more jobs and a resumed run
//! equal the plain one row for row (issue #21, proven on real builds in tests/cli/shard.rs).
//! Chaining instead (restore the state the previous row's restored path left) would make row
//! `r` depend on every row its engine ran since its last restart: shard `i` of `N` would
//! restore row `r - N`'s state, and after a crash the next row would start cold, so an ASan
//! build that crashes at every restore would crash at every other row, at different rows in
//! every split. The price: a replay is one more uninterrupted decode for such rows, and a
//! chain of restores upon restored states is not exercised (each restore starts from a state
//! an uninterrupted decode left), nor is anything else an engine process accumulates.

use super::{Request, Response, RowKind, N_CTX};
use pinforge_deploy::smoke::{decode_embd_batch, EMBD_ROWS};
use pinforge_sys::shim::Model;
use std::ffi::{c_char, CString};
use std::time::Instant;

/// A loaded model with its one slot.
pub(super) struct Slot<'a> {
    model: Model<'a>,
    grammar: Option<CString>,
    /// The saved state of the slot: the row whose uninterrupted path left it, the state, and
    /// the tokens its cells hold.
    saved: Option<(u64, Vec<u8>, Vec<i32>)>,
}

struct Generated {
    tokens: Vec<i32>,
    /// Every token whose cell is in the memory after the generation (prompt included).
    cells: Vec<i32>,
    eog: bool,
    exhausted: bool,
}

impl<'a> Slot<'a> {
    /// A slot with nothing saved.
    pub(super) fn new(model: Model<'a>, grammar: Option<CString>) -> Slot<'a> {
        Slot {
            model,
            grammar,
            saved: None,
        }
    }

    fn decode(&self, tokens: &[i32], pos0: usize) -> std::result::Result<(), String> {
        if tokens.is_empty() {
            return Ok(());
        }
        let rc = self.model.decode(tokens, pos0);
        if rc != 0 {
            return Err(format!("llama_decode returned {rc} at position {pos0}"));
        }
        Ok(())
    }

    fn argmax(&self) -> std::result::Result<i32, String> {
        let mut logits = vec![0f32; self.model.n_vocab()];
        let n = self.model.logits(&mut logits);
        if n <= 0 {
            return Err("no logits after decode".into());
        }
        let mut best = 0usize;
        for (i, x) in logits.iter().enumerate().take(n as usize) {
            if *x > logits[best] {
                best = i;
            }
        }
        Ok(best as i32)
    }

    /// Generate greedily (under the grammar when there is one) from the logits of the last
    /// decode; `cells` are the tokens already in memory.
    fn generate(&self, mut cells: Vec<i32>, budget: u32) -> std::result::Result<Generated, String> {
        // The sampler is freed when it drops, on every path out of here.
        let smpl = match &self.grammar {
            Some(g) => match self.model.grammar(g) {
                Some(s) => Some(s),
                None => return Err("llama.cpp refused the grammar (its parser's message is on the engine's stderr)".into()),
            },
            None => None,
        };
        let mut tokens = Vec::new();
        let mut eog = false;
        loop {
            let (t, picked) = match &smpl {
                Some(s) => match s.pick() {
                    Some(p) => (p.token(), Some(p)),
                    None => return Err("the grammar allows no token here".into()),
                },
                None => (self.argmax()?, None),
            };
            if t < 0 {
                return Err("the grammar allows no token here".into());
            }
            if self.model.is_eog(t) {
                eog = true;
                break;
            }
            if let (Some(s), Some(p)) = (&smpl, picked) {
                s.accept(p);
            }
            tokens.push(t);
            if tokens.len() >= budget as usize {
                break;
            }
            self.decode(&[t], cells.len())?;
            cells.push(t);
        }
        let exhausted = !eog && tokens.len() >= budget as usize;
        Ok(Generated {
            tokens,
            cells,
            eog,
            exhausted,
        })
    }

    fn clear(&self) {
        self.model.clear()
    }

    fn tokenize(&self, text: &str) -> std::result::Result<Vec<i32>, String> {
        let c = CString::new(text).map_err(|_| "the prompt contains NUL".to_string())?;
        let mut out = vec![0i32; N_CTX * 4];
        let n = self.model.tokenize(&c, &mut out);
        if n <= 0 {
            return Err(format!("tokenization failed ({n})"));
        }
        out.truncate(n as usize);
        Ok(out)
    }

    fn text(&self, tokens: &[i32]) -> String {
        let mut bytes = Vec::new();
        let mut buf = vec![0 as c_char; 64];
        for &t in tokens {
            let n = self.model.piece(t, &mut buf);
            if n > 0 {
                bytes.extend(buf[..n as usize].iter().map(|&c| c as u8));
            }
            if bytes.len() > 512 {
                break;
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Run one row; an error leaves the slot empty.
    pub(super) fn row(&mut self, req: &Request) -> Response {
        let t0 = Instant::now();
        let mut r = Response {
            row: req.row,
            ..Default::default()
        };
        if let Err(e) = self.row_inner(req, &mut r) {
            r.error = Some(e);
            // The slot is in an unknown state: start the next row from an empty one.
            self.saved = None;
            self.clear();
        }
        r.engine_ms = t0.elapsed().as_secs_f64() * 1e3;
        r
    }

    fn row_inner(&mut self, req: &Request, r: &mut Response) -> std::result::Result<(), String> {
        let prompt = self.tokenize(&req.prompt)?;
        r.tokens_in = prompt.len() as u64;
        let explicit_pos = match req.kind {
            RowKind::PromptCache => return self.cache_row(req, &prompt, r),
            RowKind::EmbdPosNull => false,
            RowKind::EmbdPosNTokens => true,
        };
        // An embedding row: the same batch and prompt twice from an empty memory. Nothing is
        // saved or restored; the second decode is the reference the first is compared with.
        self.saved = None;
        let t_decode = Instant::now();
        let first = self.embd_path(&prompt, req.budget, explicit_pos)?;
        r.decode_ms = t_decode.elapsed().as_secs_f64() * 1e3;
        let reference = self.embd_path(&prompt, req.budget, explicit_pos)?;
        self.answer(r, first, reference);
        Ok(())
    }

    /// The row's answer from its compared path (`restored`) and its reference.
    fn answer(&self, r: &mut Response, compared: Generated, reference: Generated) {
        r.text = self.text(&compared.tokens);
        r.eog = compared.eog;
        r.budget_exhausted = compared.exhausted;
        r.restored = compared.tokens;
        r.reference = reference.tokens;
    }

    /// [`EMBD_ROWS`] embedding rows at position 0 (with `pos` NULL, or with the `n_tokens`
    /// positions `llama_batch_init` allocates), the prompt after them, and the generation;
    /// the memory cleared before and after.
    fn embd_path(
        &mut self,
        prompt: &[i32],
        budget: u32,
        explicit_pos: bool,
    ) -> std::result::Result<Generated, String> {
        if EMBD_ROWS + prompt.len() + budget as usize > N_CTX {
            return Err(format!(
                "{EMBD_ROWS} embedding rows, a prompt of {} tokens and a budget of {budget} exceed the context of {N_CTX}",
                prompt.len()
            ));
        }
        self.clear();
        decode_embd_batch(&self.model, explicit_pos)?;
        self.decode(prompt, EMBD_ROWS)?;
        // The embedding rows hold cells with no token: -1 keeps the positions right.
        let mut cells = vec![-1; EMBD_ROWS];
        cells.extend_from_slice(prompt);
        let g = self.generate(cells, budget);
        self.clear();
        g
    }

    /// A prompt-cache row: the restored path and the uninterrupted one.
    fn cache_row(
        &mut self,
        req: &Request,
        prompt: &[i32],
        r: &mut Response,
    ) -> std::result::Result<(), String> {
        let prompt = prompt.to_vec();
        fits(&prompt, req.budget)?;
        // The state this row restores: row - 1's, replayed unless this engine just left it.
        match (&req.previous, req.row.checked_sub(1)) {
            (Some(prev), Some(p)) if self.saved.as_ref().is_none_or(|s| s.0 != p) => {
                let tokens = self.tokenize(prev)?;
                self.fresh(&tokens, req.budget, p)
                    .map_err(|e| format!("replaying row {p} (the state this row restores): {e}"))?;
            }
            (Some(_), Some(_)) => {}
            _ => self.saved = None,
        }
        // The restored path: that state, then only the new part of the prompt.
        let t_decode = Instant::now();
        let kept = self.restore(&prompt, r)?;
        r.cached_prefix = kept as u64;
        self.decode(&prompt[kept..], kept)?;
        let restored = self.generate(prompt.clone(), req.budget)?;
        r.decode_ms = t_decode.elapsed().as_secs_f64() * 1e3;
        // The uninterrupted reference, whose state the next row restores.
        let reference = self.fresh(&prompt, req.budget, req.row)?;
        self.answer(r, restored, reference);
        Ok(())
    }

    /// `prompt` decoded and generated from an empty memory, the slot's state saved as row
    /// `row`'s (as the prompt cache saves it), and the memory cleared.
    fn fresh(
        &mut self,
        prompt: &[i32],
        budget: u32,
        row: u64,
    ) -> std::result::Result<Generated, String> {
        self.saved = None;
        fits(prompt, budget)?;
        self.clear();
        self.decode(prompt, 0)?;
        let g = self.generate(prompt.to_vec(), budget)?;
        let mut state = vec![0u8; self.model.state_size()];
        let got = self.model.state_get(&mut state);
        state.truncate(got);
        self.clear();
        if got > 0 {
            self.saved = Some((row, state, g.cells.clone()));
        }
        Ok(g)
    }

    /// Restore the saved state (if any) and drop the cells past the common prefix with
    /// `prompt`; the number of prompt tokens kept (0 from an empty memory).
    fn restore(&mut self, prompt: &[i32], r: &mut Response) -> std::result::Result<usize, String> {
        let Some((_, state, cached)) = self.saved.take() else {
            self.clear();
            return Ok(0);
        };
        self.clear();
        if self.model.state_set(&state) == 0 {
            return Err("llama_state_seq_set_data restored nothing (returned 0)".into());
        }
        r.restored_state = true;
        r.state_bytes = state.len() as u64;
        // Keep the common prefix, but always decode at least the prompt's last token
        // (its logits start the generation), as llama.cpp's server does.
        let kept = cached
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len() - 1);
        if !self.model.seq_rm(kept) {
            self.clear();
            return Ok(0);
        }
        Ok(kept)
    }
}

/// Whether a prompt and its budget fit the context.
fn fits(prompt: &[i32], budget: u32) -> std::result::Result<(), String> {
    if prompt.len() + budget as usize > N_CTX {
        return Err(format!(
            "prompt of {} tokens plus a budget of {budget} exceeds the context of {N_CTX}",
            prompt.len()
        ));
    }
    Ok(())
}
