//! The one Rust binding of the smoke shim's C ABI (`shim.c`, `pf_*`): the library is opened and
//! every symbol bound once here, and the smoke child and the validate engine call safe methods.
//!
//! The unsafe boundary is [`Shim::open`]: loading a library runs its initializers, and the
//! symbol types are trusted to match `shim.c` once `pf_abi_version` says so. Past that, each
//! method keeps the C side's preconditions itself (live handle, buffer lengths, token ids in the
//! vocabulary), so callers hold no `unsafe`.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::Path;
use std::ptr::NonNull;

/// The shim's PF_ABI_VERSION this driver speaks (the smoke child and the validate engine load
/// the same shim).
pub(crate) const SHIM_ABI: c_int = 4;

/// Why [`Shim::open`] refused a shim.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The dynamic loader refused the file (missing, not a library, an unresolved symbol of
    /// libllama).
    #[error("cannot load the shim {}: {source}", .path.display())]
    Load {
        /// The shim.
        path: std::path::PathBuf,
        /// The loader's message.
        source: libloading::Error,
    },
    /// A `pf_*` symbol is missing: the shim is not one this crate compiled.
    #[error("shim lacks {name}: {source}")]
    Symbol {
        /// The symbol.
        name: &'static str,
        /// The loader's message.
        source: libloading::Error,
    },
    /// The shim was compiled from another version of `shim.c`.
    #[error("shim ABI version mismatch: the shim has {found}, this pinforge needs {SHIM_ABI}")]
    Abi {
        /// The shim's `pf_abi_version()`.
        found: c_int,
    },
}

type LoadFn = unsafe extern "C" fn(
    *const c_char,
    c_int,
    c_int,
    c_int,
    c_int,
    *mut c_char,
    usize,
) -> *mut c_void;
type HIntFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type TokenizeFn = unsafe extern "C" fn(*mut c_void, *const c_char, *mut i32, c_int) -> c_int;
type DecodeFn = unsafe extern "C" fn(*mut c_void, *const i32, c_int, c_int) -> c_int;
type LogitsFn = unsafe extern "C" fn(*mut c_void, *mut f32, c_int) -> c_int;
type SizeFn = unsafe extern "C" fn(*mut c_void) -> usize;
type StateGetFn = unsafe extern "C" fn(*mut c_void, *mut u8, usize) -> usize;
type StateSetFn = unsafe extern "C" fn(*mut c_void, *const u8, usize) -> usize;
type VoidFn = unsafe extern "C" fn(*mut c_void);
type InfoFn = unsafe extern "C" fn() -> *const c_char;
type AbiFn = unsafe extern "C" fn() -> c_int;
type CrashFn = unsafe extern "C" fn();
type SeqRmFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
type GrammarInitFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type GrammarPickFn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
type GrammarAcceptFn = unsafe extern "C" fn(*mut c_void, c_int);
type TokenFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
type PieceFn = unsafe extern "C" fn(*mut c_void, c_int, *mut c_char, c_int) -> c_int;
type ShiftFn = unsafe extern "C" fn(*mut c_void, c_int, c_int, c_int) -> c_int;
type DecodeEmbdFn = unsafe extern "C" fn(*mut c_void, *const f32, c_int, c_int, c_int) -> c_int;

/// The loaded shim: the library and its `pf_*` functions (valid while `_lib` is loaded, which
/// is as long as this value lives). Not `Sync`: `pf_system_info` and `pf_devices` return
/// static buffers that each call rewrites, so two threads must never call them at once.
pub struct Shim {
    _lib: libloading::Library,
    _not_sync: std::marker::PhantomData<std::cell::Cell<()>>,
    load: LoadFn,
    n_vocab: HIntFn,
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
    seq_rm: SeqRmFn,
    grammar_init: GrammarInitFn,
    grammar_pick: GrammarPickFn,
    grammar_accept: GrammarAcceptFn,
    grammar_free: VoidFn,
    is_eog: TokenFn,
    piece: PieceFn,
    can_shift: HIntFn,
    shift: ShiftFn,
    n_embd: HIntFn,
    decode_embd: DecodeEmbdFn,
}

/// What `pf_load` is given besides the model path.
#[derive(Debug, Clone, Copy)]
pub struct LoadParams {
    /// Layers offloaded to a GPU.
    pub gpu_layers: i32,
    /// Context size (also the batch size).
    pub n_ctx: i32,
    /// Threads for llama.cpp.
    pub threads: i32,
    /// Let llama.cpp log everything (else errors and warnings only).
    pub verbose: bool,
}

impl Shim {
    /// Load the shim at `path`, bind every `pf_*` symbol and check its ABI version.
    ///
    /// # Safety
    ///
    /// This is the one unsafe boundary, and it is a safe function on purpose: no caller can
    /// check more than it does. Loading runs the shim's and libllama's initializers (the build
    /// under test), and the symbols are taken to have the signatures declared above once
    /// `pf_abi_version` returns [`SHIM_ABI`]; `path` is a shim that `smoke::shim_for` compiled
    /// from this crate's `shim.c`. Only the smoke child and the validate engine call it, each
    /// in a process of its own, so that whatever the engine does is observed from outside.
    pub fn open(path: &Path) -> Result<Shim, OpenError> {
        // SAFETY: see `# Safety` above: a shim of ours, loaded in an isolated process.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|source| OpenError::Load {
            path: path.to_path_buf(),
            source,
        })?;
        macro_rules! sym {
            ($name:literal, $ty:ty) => {{
                // SAFETY: the type is the shim's declared C signature (ABI checked below).
                let s: libloading::Symbol<$ty> =
                    unsafe { lib.get($name) }.map_err(|source| OpenError::Symbol {
                        name: std::str::from_utf8($name).unwrap_or("pf_?"),
                        source,
                    })?;
                *s
            }};
        }
        let abi = sym!(b"pf_abi_version", AbiFn);
        // SAFETY: no arguments, returns an int.
        let found = unsafe { abi() };
        if found != SHIM_ABI {
            return Err(OpenError::Abi { found });
        }
        Ok(Shim {
            load: sym!(b"pf_load", LoadFn),
            n_vocab: sym!(b"pf_n_vocab", HIntFn),
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
            seq_rm: sym!(b"pf_seq_rm", SeqRmFn),
            grammar_init: sym!(b"pf_grammar_init", GrammarInitFn),
            grammar_pick: sym!(b"pf_grammar_pick", GrammarPickFn),
            grammar_accept: sym!(b"pf_grammar_accept", GrammarAcceptFn),
            grammar_free: sym!(b"pf_grammar_free", VoidFn),
            is_eog: sym!(b"pf_is_eog", TokenFn),
            piece: sym!(b"pf_token_piece", PieceFn),
            can_shift: sym!(b"pf_can_shift", HIntFn),
            shift: sym!(b"pf_shift", ShiftFn),
            n_embd: sym!(b"pf_n_embd", HIntFn),
            decode_embd: sym!(b"pf_decode_embd", DecodeEmbdFn),
            _lib: lib,
            _not_sync: std::marker::PhantomData,
        })
    }

    /// Load a model (`pf_load`); `Err` carries the shim's message.
    pub fn load(&self, model: &CStr, p: LoadParams) -> Result<Model<'_>, String> {
        let mut err = vec![0 as c_char; 512];
        // SAFETY: model is NUL-terminated; err has err.len() bytes.
        let h = unsafe {
            (self.load)(
                model.as_ptr(),
                p.gpu_layers,
                p.n_ctx,
                p.threads,
                c_int::from(p.verbose),
                err.as_mut_ptr(),
                err.len(),
            )
        };
        let Some(h) = NonNull::new(h) else {
            // The last byte is ours: a message that filled the buffer still ends there.
            if let Some(last) = err.last_mut() {
                *last = 0;
            }
            // SAFETY: err is NUL-terminated within its length (the line above).
            let msg = unsafe { CStr::from_ptr(err.as_ptr()) };
            return Err(msg.to_string_lossy().into_owned());
        };
        // SAFETY: h is a live handle from pf_load.
        let n_vocab = unsafe { (self.n_vocab)(h.as_ptr()) }.max(1) as usize;
        Ok(Model {
            shim: self,
            h,
            n_vocab,
        })
    }

    /// `llama_print_system_info()`.
    pub fn system_info(&self) -> String {
        // SAFETY: pf_system_info returns a static NUL-terminated string.
        unsafe { CStr::from_ptr((self.info)()) }
            .to_string_lossy()
            .into_owned()
    }

    /// `pf_devices`' lines (`kind\tname\tdescription`).
    pub fn devices(&self) -> String {
        // SAFETY: pf_devices returns a static NUL-terminated buffer.
        unsafe { CStr::from_ptr((self.devices)()) }
            .to_string_lossy()
            .into_owned()
    }

    /// Die the way a broken engine dies (a faulting store: SIGSEGV), for the tests of the
    /// parent's crash reporting. Does not return in practice.
    pub fn crash_for_test(&self) {
        // SAFETY: pf_crash_for_test takes nothing; it ends this process, which is its purpose.
        unsafe { (self.crash)() }
    }
}

/// A loaded model and its context (one sequence). It is not freed on drop: the processes that
/// hold one exit right after, and [`Model::free`] says where freeing is wanted.
pub struct Model<'a> {
    shim: &'a Shim,
    h: NonNull<c_void>,
    n_vocab: usize,
}

impl<'a> Model<'a> {
    /// Vocabulary size (at least 1).
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    fn in_vocab(&self, t: i32) -> bool {
        t >= 0 && (t as usize) < self.n_vocab
    }

    /// Tokenize with the model's tokenizer into `out`; the count, or the shim's value (≤ 0)
    /// when it failed or `out` is short.
    pub fn tokenize(&self, text: &CStr, out: &mut [i32]) -> c_int {
        let max = c_int::try_from(out.len()).unwrap_or(c_int::MAX);
        // SAFETY: live handle; text is NUL-terminated; out has room for `max` tokens.
        unsafe { (self.shim.tokenize)(self.h.as_ptr(), text.as_ptr(), out.as_mut_ptr(), max) }
    }

    /// Decode `tokens` of sequence 0 at positions from `pos0`; llama_decode's return code, or
    /// -1 (nothing decoded) when a token is outside the vocabulary: older llama.cpp trees do
    /// not check the ids themselves and would read past the embedding table.
    pub fn decode(&self, tokens: &[i32], pos0: usize) -> c_int {
        let (Ok(n), Ok(pos0)) = (c_int::try_from(tokens.len()), c_int::try_from(pos0)) else {
            return -1;
        };
        if !tokens.iter().all(|&t| self.in_vocab(t)) {
            return -1;
        }
        // SAFETY: live handle; tokens holds n ints, each in the vocabulary.
        unsafe { (self.shim.decode)(self.h.as_ptr(), tokens.as_ptr(), n, pos0) }
    }

    /// Copy the last token's logits into `out`; the number copied, or -1.
    pub fn logits(&self, out: &mut [f32]) -> c_int {
        let max = c_int::try_from(out.len()).unwrap_or(c_int::MAX);
        // SAFETY: live handle; out holds `max` floats.
        unsafe { (self.shim.logits)(self.h.as_ptr(), out.as_mut_ptr(), max) }
    }

    /// The size of sequence 0's state.
    pub fn state_size(&self) -> usize {
        // SAFETY: live handle.
        unsafe { (self.shim.state_size)(self.h.as_ptr()) }
    }

    /// Write sequence 0's state into `buf`; the bytes written.
    pub fn state_get(&self, buf: &mut [u8]) -> usize {
        // SAFETY: live handle; buf has buf.len() bytes.
        unsafe { (self.shim.state_get)(self.h.as_ptr(), buf.as_mut_ptr(), buf.len()) }
    }

    /// Restore sequence 0 from `state`; the bytes read (0 on failure).
    pub fn state_set(&self, state: &[u8]) -> usize {
        // SAFETY: live handle; state holds state.len() bytes.
        unsafe { (self.shim.state_set)(self.h.as_ptr(), state.as_ptr(), state.len()) }
    }

    /// Clear the memory.
    pub fn clear(&self) {
        // SAFETY: live handle.
        unsafe { (self.shim.clear)(self.h.as_ptr()) }
    }

    /// Drop sequence 0's cells from `p0` on; false when llama.cpp refused.
    pub fn seq_rm(&self, p0: usize) -> bool {
        let Ok(p0) = c_int::try_from(p0) else {
            return false;
        };
        // SAFETY: live handle.
        unsafe { (self.shim.seq_rm)(self.h.as_ptr(), p0) != 0 }
    }

    /// Whether the engine says this context can shift positions (`llama_memory_can_shift`).
    pub fn can_shift(&self) -> bool {
        // SAFETY: live handle.
        unsafe { (self.shim.can_shift)(self.h.as_ptr()) != 0 }
    }

    /// The server's context shift of sequence 0: drop `n_discard` cells after the first
    /// `n_keep` and move the rest of the `n_past` back; false when llama.cpp refused the drop
    /// or a value does not fit. An engine that can not shift but said it can asserts here:
    /// that is what the K-shift check exists to see.
    pub fn shift(&self, n_keep: usize, n_discard: usize, n_past: usize) -> bool {
        let (Ok(k), Ok(d), Ok(p)) = (
            c_int::try_from(n_keep),
            c_int::try_from(n_discard),
            c_int::try_from(n_past),
        ) else {
            return false;
        };
        if k.checked_add(d).is_none_or(|e| e > p) {
            return false;
        }
        // SAFETY: live handle; positions are within what was decoded.
        unsafe { (self.shim.shift)(self.h.as_ptr(), k, d, p) != 0 }
    }

    /// The model's embedding width (the floats of one embedding row).
    pub fn n_embd(&self) -> usize {
        // SAFETY: live handle.
        unsafe { (self.shim.n_embd)(self.h.as_ptr()) }.max(0) as usize
    }

    /// Decode embedding rows of sequence 0 (`rows.len()` must be a whole number of
    /// [`Model::n_embd`] rows), with `pos` NULL (`explicit_pos` false: the engine tracks
    /// positions) or with the `n`-entry `pos` array `llama_batch_init` allocates, filled from
    /// `pos0`. llama_decode's return code, or -1 (nothing decoded) for a partial row.
    pub fn decode_embd(&self, rows: &[f32], explicit_pos: bool, pos0: usize) -> c_int {
        let w = self.n_embd();
        if w == 0 || rows.is_empty() || rows.len() % w != 0 {
            return -1;
        }
        let (Ok(n), Ok(pos0)) = (c_int::try_from(rows.len() / w), c_int::try_from(pos0)) else {
            return -1;
        };
        // SAFETY: live handle; rows holds n rows of n_embd floats.
        unsafe {
            (self.shim.decode_embd)(
                self.h.as_ptr(),
                rows.as_ptr(),
                n,
                c_int::from(explicit_pos),
                pos0,
            )
        }
    }

    /// Whether `t` ends generation (a token outside the vocabulary does not).
    pub fn is_eog(&self, t: i32) -> bool {
        // SAFETY: live handle; t is inside the vocabulary (checked first).
        self.in_vocab(t) && unsafe { (self.shim.is_eog)(self.h.as_ptr(), t) } != 0
    }

    /// The token's text into `buf`; the byte count, negative when `buf` is short, 0 for a token
    /// outside the vocabulary.
    pub fn piece(&self, t: i32, buf: &mut [c_char]) -> c_int {
        if !self.in_vocab(t) {
            return 0;
        }
        let cap = c_int::try_from(buf.len()).unwrap_or(c_int::MAX);
        // SAFETY: live handle; t in the vocabulary; buf has `cap` bytes.
        unsafe { (self.shim.piece)(self.h.as_ptr(), t, buf.as_mut_ptr(), cap) }
    }

    /// The engine's grammar sampler over this vocabulary; `None` when llama.cpp refuses it.
    pub fn grammar(&self, gbnf: &CStr) -> Option<Grammar<'_, 'a>> {
        // SAFETY: live handle; gbnf is NUL-terminated.
        let s = unsafe { (self.shim.grammar_init)(self.h.as_ptr(), gbnf.as_ptr()) };
        NonNull::new(s).map(|s| Grammar {
            model: self,
            s,
            picks: std::cell::Cell::new(0),
        })
    }

    /// Free the model and its context.
    pub fn free(self) {
        // SAFETY: live handle, freed once (self is consumed).
        unsafe { (self.shim.free)(self.h.as_ptr()) }
    }
}

/// A grammar sampler of one model, freed on drop.
pub struct Grammar<'m, 'a> {
    model: &'m Model<'a>,
    s: NonNull<c_void>,
    /// How many tokens were accepted: a [`Picked`] names the state it was picked in.
    picks: std::cell::Cell<u64>,
}

/// A token the grammar allowed in its current state: the only thing [`Grammar::accept`] takes,
/// because llama.cpp aborts (or throws through the C frames) on a token its grammar rejects.
pub struct Picked {
    token: i32,
    state: u64,
    sampler: NonNull<c_void>,
}

impl Picked {
    /// The token id.
    pub fn token(&self) -> i32 {
        self.token
    }
}

impl Grammar<'_, '_> {
    /// Greedy pick under the grammar from the last decode's logits; `None` when no token is
    /// allowed.
    pub fn pick(&self) -> Option<Picked> {
        // SAFETY: live handle and sampler.
        let t = unsafe { (self.model.shim.grammar_pick)(self.model.h.as_ptr(), self.s.as_ptr()) };
        (t >= 0 && self.model.in_vocab(t)).then(|| Picked {
            token: t,
            state: self.picks.get(),
            sampler: self.s,
        })
    }

    /// Advance the grammar past a token it picked in its current state; a token picked by
    /// another sampler, or before the grammar last advanced, is ignored (it may be one the
    /// grammar now rejects).
    pub fn accept(&self, p: Picked) {
        if p.sampler == self.s && p.state == self.picks.get() {
            self.picks.set(p.state + 1);
            // SAFETY: live sampler; the token is one this sampler allowed in this state.
            unsafe { (self.model.shim.grammar_accept)(self.s.as_ptr(), p.token) }
        }
    }
}

impl Drop for Grammar<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: live sampler, freed once (on drop).
        unsafe { (self.model.shim.grammar_free)(self.s.as_ptr()) }
    }
}
