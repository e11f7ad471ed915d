//! The child side of a smoke decode (runs inside `pinforge __smoke-child`): load the shim,
//! decode a prompt and generate greedily (reference), then repeat with a sequence-state save,
//! memory clear and restore halfway, and print one JSON result. Anything the engine does to
//! this process (a sanitizer stop, a signal) is observed by the parent.

use super::scenario::{self, Scenario};
use pinforge_sys::shim::{LoadParams, Model, Shim};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::path::Path;
use std::time::Instant;

/// The child's result line.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChildResult {
    /// Set when the decode could not run.
    pub error: Option<String>,
    /// Reference tokens.
    pub reference: Vec<i32>,
    /// Save/restore run tokens.
    pub restored: Vec<i32>,
    /// Step of the save/restore.
    pub restore_step: usize,
    /// Max |logit difference| after the restore.
    pub max_logit_diff: f32,
    /// Saved state size.
    pub state_bytes: usize,
    /// Reference generation wall time.
    pub reference_seconds: f64,
    /// llama_print_system_info().
    pub system_info: String,
    /// GPU memory used, when on a GPU.
    pub gpu_memory_used_bytes: Option<u64>,
    /// The backend devices the engine registered (`ggml_backend_dev_*`).
    #[serde(default)]
    pub devices: Vec<EngineDevice>,
    /// Which path a non-restore scenario took (`scenario::Ran::note`); null for `restore`.
    #[serde(default)]
    pub scenario_note: Option<String>,
}

/// One backend device as the engine sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EngineDevice {
    /// `cpu`, `gpu` or `accel`.
    pub kind: String,
    /// The backend's name for it (`CPU`, `CUDA0`).
    pub name: String,
    /// Its description (the CPU model, the GPU's name).
    pub description: String,
}

/// Parse `pf_devices`' lines (`kind\tname\tdescription`); malformed lines are skipped.
pub(crate) fn parse_devices(text: &str) -> Vec<EngineDevice> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, '\t');
            Some(EngineDevice {
                kind: it.next()?.to_string(),
                name: it.next()?.to_string(),
                description: it.next()?.to_string(),
            })
        })
        .collect()
}

/// The prompt every smoke decodes.
pub(crate) const PROMPT: &str = "the cat is in the hat and it is on the mat";

/// One decode session on a loaded model.
struct Session<'a> {
    model: Model<'a>,
}

impl Session<'_> {
    fn decode(&self, tokens: &[i32], pos0: usize) -> Result<Vec<f32>, String> {
        decode_logits(&self.model, tokens, pos0)
    }

    fn clear(&self) {
        self.model.clear()
    }

    /// Decode the prompt and generate `n` tokens greedily, returning tokens and logits.
    fn generate(
        &self,
        prompt: &[i32],
        n: usize,
        start: usize,
    ) -> Result<(Vec<i32>, Vec<Vec<f32>>), String> {
        let mut tokens = Vec::new();
        let mut all = Vec::new();
        let mut logits = if start == 0 {
            self.decode(prompt, 0)?
        } else {
            return Err("generate starts at 0".into());
        };
        for step in 0..n {
            let t = argmax(&logits);
            tokens.push(t);
            all.push(logits.clone());
            if step + 1 < n {
                logits = self.decode(&[t], prompt.len() + step)?;
            }
        }
        Ok((tokens, all))
    }
}

/// Decode `tokens` of sequence 0 from `pos0` and copy the last token's logits.
pub(crate) fn decode_logits(
    model: &Model<'_>,
    tokens: &[i32],
    pos0: usize,
) -> Result<Vec<f32>, String> {
    let rc = model.decode(tokens, pos0);
    if rc != 0 {
        return Err(format!("llama_decode returned {rc} at position {pos0}"));
    }
    last_logits(model)
}

/// The last decoded token's logits.
pub(crate) fn last_logits(model: &Model<'_>) -> Result<Vec<f32>, String> {
    let mut logits = vec![0f32; model.n_vocab()];
    if model.logits(&mut logits) < 0 {
        return Err("no logits after decode".into());
    }
    Ok(logits)
}

pub(crate) fn argmax(v: &[f32]) -> i32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as i32
}

/// Run the child and return its result (errors become `error`).
pub fn run(
    shim_path: &Path,
    model: &Path,
    n_tokens: usize,
    gpu_layers: i32,
    scenario: Scenario,
) -> ChildResult {
    match run_inner(shim_path, model, n_tokens, gpu_layers, scenario) {
        Ok(r) => r,
        Err(e) => ChildResult {
            error: Some(e),
            ..Default::default()
        },
    }
}

fn run_inner(
    shim_path: &Path,
    model: &Path,
    n: usize,
    gpu_layers: i32,
    scenario: Scenario,
) -> Result<ChildResult, String> {
    let shim = Shim::open(shim_path).map_err(|e| e.to_string())?;
    if pinforge_base::hooks::smoke_crash() {
        // Deliberately crashes this child (test of the parent's crash reporting).
        shim.crash_for_test();
    }
    let path = CString::new(model.as_os_str().to_string_lossy().as_bytes())
        .map_err(|_| "model path contains NUL".to_string())?;
    let gpu_before = gpu_free();
    // PINFORGE_SMOKE_VERBOSE=1 lets llama.cpp log everything (for diagnosing a load failure).
    let params = LoadParams {
        gpu_layers,
        n_ctx: 128,
        threads: 2,
        verbose: std::env::var_os("PINFORGE_SMOKE_VERBOSE").is_some(),
    };
    let s = Session {
        model: shim.load(&path, params)?,
    };
    let prompt = s.prompt()?;
    if scenario != Scenario::Restore {
        return other_scenario(&shim, s, &prompt, n, scenario, gpu_before);
    }

    // Reference: uninterrupted.
    s.clear();
    let t0 = Instant::now();
    let (reference, ref_logits) = s.generate(&prompt, n, 0)?;
    let reference_seconds = t0.elapsed().as_secs_f64();
    let gpu_memory_used_bytes = gpu_used_since(gpu_before);

    let k = n / 2;
    let (restored, max_diff, state_bytes) = s.restored(&prompt, n, k, &ref_logits)?;
    let system_info = shim.system_info();
    let devices = parse_devices(&shim.devices());
    s.model.free();
    Ok(ChildResult {
        error: None,
        reference,
        restored,
        restore_step: k,
        max_logit_diff: max_diff,
        state_bytes,
        reference_seconds,
        system_info,
        gpu_memory_used_bytes,
        devices,
        scenario_note: None,
    })
}

/// A scenario other than `restore`: its tokens as the reference, nothing restored.
fn other_scenario(
    shim: &Shim,
    s: Session<'_>,
    prompt: &[i32],
    n: usize,
    scenario: Scenario,
    gpu_before: Option<u64>,
) -> Result<ChildResult, String> {
    let t0 = Instant::now();
    let ran = match scenario {
        Scenario::Kshift => scenario::kshift(&s.model, prompt, n)?,
        Scenario::EmbdPosNull => scenario::embd(&s.model, n, false)?,
        Scenario::EmbdPosNTokens => scenario::embd(&s.model, n, true)?,
        Scenario::Restore => return Err("restore is not another scenario".into()),
    };
    let reference_seconds = t0.elapsed().as_secs_f64();
    let gpu_memory_used_bytes = gpu_used_since(gpu_before);
    let system_info = shim.system_info();
    let devices = parse_devices(&shim.devices());
    s.model.free();
    Ok(ChildResult {
        error: None,
        reference: ran.tokens,
        restored: vec![],
        restore_step: ran.step,
        max_logit_diff: 0.0,
        state_bytes: 0,
        reference_seconds,
        system_info,
        gpu_memory_used_bytes,
        devices,
        scenario_note: Some(ran.note),
    })
}

impl Session<'_> {
    /// The smoke prompt, tokenized.
    fn prompt(&self) -> Result<Vec<i32>, String> {
        let text = CString::new(PROMPT).map_err(|e| e.to_string())?;
        let mut prompt = vec![0i32; 128];
        let np = self.model.tokenize(&text, &mut prompt);
        if np <= 0 {
            return Err(format!("tokenization failed ({np})"));
        }
        prompt.truncate(np as usize);
        Ok(prompt)
    }

    /// Generate to step `k`, save the sequence state, clear, restore, and continue to `n`:
    /// the tokens, the largest logit difference from `ref_logits`, and the state's size.
    fn restored(
        &self,
        prompt: &[i32],
        n: usize,
        k: usize,
        ref_logits: &[Vec<f32>],
    ) -> Result<(Vec<i32>, f32, usize), String> {
        self.clear();
        let (first, _) = self.generate(prompt, k, 0)?;
        let mut state = vec![0u8; self.model.state_size()];
        let got = self.model.state_get(&mut state);
        state.truncate(got);
        self.clear();
        if self.model.state_set(&state) == 0 {
            return Err("llama_state_seq_set_data restored nothing (returned 0)".into());
        }
        let mut restored = first;
        let mut max_diff = 0f32;
        // The token generated at step k-1 has not been decoded yet: decode it at its position.
        let mut last = *restored.last().ok_or("no token before the restore")?;
        for step in k..n {
            let logits = self.decode(&[last], prompt.len() + step - 1)?;
            if let Some(r) = ref_logits.get(step) {
                for (a, b) in logits.iter().zip(r) {
                    max_diff = max_diff.max((a - b).abs());
                }
            }
            last = argmax(&logits);
            restored.push(last);
        }
        Ok((restored, max_diff, got))
    }
}

/// GPU memory taken since `before` (free then minus free now), when both are known.
fn gpu_used_since(before: Option<u64>) -> Option<u64> {
    match (before, gpu_free()) {
        (Some(a), Some(b)) if a > b => Some(a - b),
        _ => None,
    }
}

/// Free GPU memory on device 0, when a driver is present (for "memory used").
fn gpu_free() -> Option<u64> {
    let p = pinforge_sys::cuda::probe();
    p.devices.first().map(|d| d.free_bytes)
}
