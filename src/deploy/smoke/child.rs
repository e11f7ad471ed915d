//! The child side of a smoke decode (runs inside `pinforge __smoke-child`): load the shim,
//! decode a prompt and generate greedily (reference), then repeat with a sequence-state save,
//! memory clear and restore halfway, and print one JSON result. Anything the engine does to
//! this process (a sanitizer stop, a signal) is observed by the parent.

use serde::{Deserialize, Serialize};
use std::ffi::{c_char, c_int, c_void, CString};
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
pub fn parse_devices(text: &str) -> Vec<EngineDevice> {
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

pub(crate) type LoadFn = unsafe extern "C" fn(
    *const c_char,
    c_int,
    c_int,
    c_int,
    c_int,
    *mut c_char,
    usize,
) -> *mut c_void;
pub(crate) type NVocabFn = unsafe extern "C" fn(*mut c_void) -> c_int;
pub(crate) type TokenizeFn =
    unsafe extern "C" fn(*mut c_void, *const c_char, *mut i32, c_int) -> c_int;
pub(crate) type DecodeFn = unsafe extern "C" fn(*mut c_void, *const i32, c_int, c_int) -> c_int;
pub(crate) type LogitsFn = unsafe extern "C" fn(*mut c_void, *mut f32, c_int) -> c_int;
pub(crate) type SizeFn = unsafe extern "C" fn(*mut c_void) -> usize;
pub(crate) type StateGetFn = unsafe extern "C" fn(*mut c_void, *mut u8, usize) -> usize;
pub(crate) type StateSetFn = unsafe extern "C" fn(*mut c_void, *const u8, usize) -> usize;
pub(crate) type VoidFn = unsafe extern "C" fn(*mut c_void);
type InfoFn = unsafe extern "C" fn() -> *const c_char;
type AbiFn = unsafe extern "C" fn() -> c_int;
type CrashFn = unsafe extern "C" fn();

/// The shim's PF_ABI_VERSION this driver speaks (the validate engine uses the same shim).
pub const SHIM_ABI: c_int = 3;

/// The prompt every smoke decodes.
pub const PROMPT: &str = "the cat is in the hat and it is on the mat";

struct Shim {
    _lib: libloading::Library,
    load: LoadFn,
    n_vocab: NVocabFn,
    tokenize: TokenizeFn,
    decode: DecodeFn,
    logits: LogitsFn,
    state_size: SizeFn,
    state_get: StateGetFn,
    state_set: StateSetFn,
    clear: VoidFn,
    free: VoidFn,
    info: InfoFn,
    devices: InfoFn,
    crash: CrashFn,
}

#[allow(unsafe_code)]
impl Shim {
    fn open(path: &Path) -> Result<Shim, String> {
        // SAFETY: loading the shim runs its (and libllama's) initializers; that is the code
        // under test, isolated in this child process on purpose.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|e| format!("cannot load the shim {}: {e}", path.display()))?;
        macro_rules! sym {
            ($name:literal, $ty:ty) => {{
                // SAFETY: the symbol's type is the shim's declared C signature (PF_ABI_VERSION
                // is checked below).
                let s: libloading::Symbol<$ty> = unsafe { lib.get($name) }
                    .map_err(|e| format!("shim lacks {}: {e}", String::from_utf8_lossy($name)))?;
                *s
            }};
        }
        let abi = sym!(b"pf_abi_version", AbiFn);
        // SAFETY: no arguments, returns an int.
        if unsafe { abi() } != SHIM_ABI {
            return Err("shim ABI version mismatch".into());
        }
        Ok(Shim {
            load: sym!(b"pf_load", LoadFn),
            n_vocab: sym!(b"pf_n_vocab", NVocabFn),
            tokenize: sym!(b"pf_tokenize", TokenizeFn),
            decode: sym!(b"pf_decode", DecodeFn),
            logits: sym!(b"pf_logits", LogitsFn),
            state_size: sym!(b"pf_state_size", SizeFn),
            state_get: sym!(b"pf_state_get", StateGetFn),
            state_set: sym!(b"pf_state_set", StateSetFn),
            clear: sym!(b"pf_clear", VoidFn),
            free: sym!(b"pf_free", VoidFn),
            info: sym!(b"pf_system_info", InfoFn),
            devices: sym!(b"pf_devices", InfoFn),
            crash: sym!(b"pf_crash_for_test", CrashFn),
            _lib: lib,
        })
    }
}

/// One decode session on a loaded model.
struct Session<'a> {
    shim: &'a Shim,
    h: *mut c_void,
    n_vocab: usize,
}

#[allow(unsafe_code)]
impl Session<'_> {
    fn decode(&self, tokens: &[i32], pos0: usize) -> Result<Vec<f32>, String> {
        // SAFETY: h is a live handle from pf_load; tokens points at tokens.len() ints.
        let rc = unsafe {
            (self.shim.decode)(
                self.h,
                tokens.as_ptr(),
                tokens.len() as c_int,
                pos0 as c_int,
            )
        };
        if rc != 0 {
            return Err(format!("llama_decode returned {rc} at position {pos0}"));
        }
        let mut logits = vec![0f32; self.n_vocab];
        // SAFETY: the buffer holds n_vocab floats.
        let n = unsafe { (self.shim.logits)(self.h, logits.as_mut_ptr(), self.n_vocab as c_int) };
        if n < 0 {
            return Err("no logits after decode".into());
        }
        Ok(logits)
    }

    fn clear(&self) {
        // SAFETY: live handle.
        unsafe { (self.shim.clear)(self.h) }
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

fn argmax(v: &[f32]) -> i32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as i32
}

/// Run the child and return its result (errors become `error`).
#[allow(unsafe_code)]
pub fn run(shim_path: &Path, model: &Path, n_tokens: usize, gpu_layers: i32) -> ChildResult {
    match run_inner(shim_path, model, n_tokens, gpu_layers) {
        Ok(r) => r,
        Err(e) => ChildResult {
            error: Some(e),
            ..Default::default()
        },
    }
}

#[allow(unsafe_code)]
fn run_inner(
    shim_path: &Path,
    model: &Path,
    n: usize,
    gpu_layers: i32,
) -> Result<ChildResult, String> {
    let shim = Shim::open(shim_path)?;
    if crate::base::hooks::smoke_crash() {
        // SAFETY: deliberately crashes this child (test of the parent's crash reporting).
        unsafe { (shim.crash)() };
    }
    let path = CString::new(model.as_os_str().to_string_lossy().as_bytes())
        .map_err(|_| "model path contains NUL".to_string())?;
    let mut err = vec![0 as c_char; 512];
    let gpu_before = gpu_free();
    // SAFETY: path is NUL-terminated; err has err.len() bytes.
    // PINFORGE_SMOKE_VERBOSE=1 lets llama.cpp log everything (for diagnosing a load failure).
    let verbose = c_int::from(std::env::var_os("PINFORGE_SMOKE_VERBOSE").is_some());
    let h = unsafe {
        (shim.load)(
            path.as_ptr(),
            gpu_layers,
            128,
            2,
            verbose,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    if h.is_null() {
        // SAFETY: pf_load NUL-terminates its message within err.
        let msg = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) };
        return Err(msg.to_string_lossy().into_owned());
    }
    // SAFETY: live handle.
    let n_vocab = unsafe { (shim.n_vocab)(h) }.max(1) as usize;
    let s = Session {
        shim: &shim,
        h,
        n_vocab,
    };
    let text = CString::new(PROMPT).map_err(|e| e.to_string())?;
    let mut prompt = vec![0i32; 128];
    // SAFETY: prompt has room for 128 tokens.
    let np =
        unsafe { (shim.tokenize)(h, text.as_ptr(), prompt.as_mut_ptr(), prompt.len() as c_int) };
    if np <= 0 {
        return Err(format!("tokenization failed ({np})"));
    }
    prompt.truncate(np as usize);

    // Reference: uninterrupted.
    s.clear();
    let t0 = Instant::now();
    let (reference, ref_logits) = s.generate(&prompt, n, 0)?;
    let reference_seconds = t0.elapsed().as_secs_f64();
    let gpu_memory_used_bytes = match (gpu_before, gpu_free()) {
        (Some(a), Some(b)) if a > b => Some(a - b),
        _ => None,
    };

    // Save at step k, clear, restore, continue.
    let k = n / 2;
    s.clear();
    let (first, _) = s.generate(&prompt, k, 0)?;
    // SAFETY: live handle.
    let size = unsafe { (shim.state_size)(h) };
    let mut state = vec![0u8; size];
    // SAFETY: state has `size` bytes.
    let got = unsafe { (shim.state_get)(h, state.as_mut_ptr(), state.len()) };
    state.truncate(got);
    s.clear();
    // SAFETY: state holds `got` bytes written by pf_state_get.
    let read = unsafe { (shim.state_set)(h, state.as_ptr(), state.len()) };
    if read == 0 {
        return Err("llama_state_seq_set_data restored nothing (returned 0)".into());
    }
    let mut restored = first;
    let mut max_diff = 0f32;
    // The token generated at step k-1 has not been decoded yet: decode it at its position.
    let mut last = *restored.last().ok_or("no token before the restore")?;
    for step in k..n {
        let logits = s.decode(&[last], prompt.len() + step - 1)?;
        if let Some(r) = ref_logits.get(step) {
            for (a, b) in logits.iter().zip(r) {
                max_diff = max_diff.max((a - b).abs());
            }
        }
        last = argmax(&logits);
        restored.push(last);
    }
    // SAFETY: pf_system_info returns a static NUL-terminated string.
    let system_info = unsafe { std::ffi::CStr::from_ptr((shim.info)()) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: pf_devices returns a static NUL-terminated buffer.
    let devices =
        parse_devices(&unsafe { std::ffi::CStr::from_ptr((shim.devices)()) }.to_string_lossy());
    // SAFETY: live handle, freed once.
    unsafe { (shim.free)(h) };
    Ok(ChildResult {
        error: None,
        reference,
        restored,
        restore_step: k,
        max_logit_diff: max_diff,
        state_bytes: got,
        reference_seconds,
        system_info,
        gpu_memory_used_bytes,
        devices,
    })
}

/// Free GPU memory on device 0, when a driver is present (for "memory used").
fn gpu_free() -> Option<u64> {
    let p = crate::sys::cuda::probe();
    p.devices.first().map(|d| d.free_bytes)
}
