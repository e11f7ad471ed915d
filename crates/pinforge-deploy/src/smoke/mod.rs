//! Smoke decodes: a tiny model decoded by the build under test, with a sequence-state save,
//! memory clear and restore in the middle, compared token by token and logit by logit with an
//! uninterrupted reference run. The engine runs in a child process (this binary re-executed)
//! through a C shim compiled against the build's own `llama.h`, so an engine crash is a
//! result (`crash`, with the sanitizer's signature), never pinforge's crash.
//!
//! First the target is verified ([`target`]), then acted on: the shim compiled against it
//! ([`shim`]), the decode run in a child ([`run()`], [`child`]), a crash read ([`sanitizer`]) and made comparable
//! across runs ([`signature`], what flip and ablate compare). A [`scenario`] other than the
//! default restore decode drives another path of the engine (context shift, embedding batches).

pub mod child;
mod run;
mod sanitizer;
pub mod scenario;
mod shim;
pub mod signature;
mod target;

pub use run::{model_file, run, SmokeOptions, SmokeReport, Verdict};
pub use sanitizer::{
    asan_signature, engine_env_symbolized, ggml_abort_signature, without_shadow_legend, ASAN_EXIT,
};
pub use scenario::{decode_embd_batch, Scenario, EMBD_ROWS, SCENARIOS};
pub use shim::{shim_cache, shim_for};
pub use target::{target_from_installed, target_from_manifest, SmokeTarget};
