//! Compiling the smoke shim (`shim.c`) against a verified target's own headers and libllama;
//! the Rust side that loads it is the one binding in [`pinforge_sys::shim`].

use super::SmokeTarget;
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use std::path::{Path, PathBuf};

/// The shim's source, compiled per build under test.
pub(crate) const SHIM_SOURCE: &str = include_str!("shim.c");

/// The target triple pinforge was built for (the shim is built for the same).
const TARGET: &str = env!("PINFORGE_TARGET");
/// Where the shims of commands run in workspace `ws_root` are kept: `build/.smoke` beside the
/// workspace's builds when it has a `build/` folder, else `smoke/` in the user's pinforge cache
/// (so that a validation run from a soak folder shared between operators creates no `build/`
/// there; issue #35). A shim's key names the build folder it is linked against, so one cache
/// serves every workspace.
pub fn shim_cache(ws_root: &Path) -> Result<PathBuf> {
    let build = ws_root.join("build");
    // Followed: a `build/` that links to a folder elsewhere (a scratch disk) is the
    // workspace's build folder, as every build command takes it.
    if std::fs::metadata(&build).is_ok_and(|m| m.is_dir()) {
        return Ok(build.join(".smoke"));
    }
    Ok(fsx::user_cache_dir("smoke shim cache")
        .map_err(|e| {
            e.with_hint("set XDG_CACHE_HOME, or run from a workspace with a build/ folder")
        })?
        .join("smoke"))
}

/// Compile (or reuse) the shim for `target` into `cache`. The cache key covers the shim
/// source, the recomputed digests of libllama and of every header the shim may include, the
/// compiler, and the build's folder (the shim's rpath points there, so a shim built for one
/// folder must not be reused for another holding the same bytes).
pub fn shim_for(target: &SmokeTarget, cache: &Path) -> Result<PathBuf> {
    let mut b = cc::Build::new();
    b.cargo_metadata(false)
        .cargo_warnings(false)
        .cargo_debug(false)
        .target(TARGET)
        .host(TARGET)
        .opt_level(1)
        .debug(false)
        .pic(true)
        .warnings(false);
    let compiler = b.try_get_compiler().map_err(|e| {
        Error::input("smoke shim", format!("no C compiler: {e}"))
            .with_hint("install gcc (or set CC)")
    })?;
    let mut key_text = format!(
        "shim {}\nlibllama {}\n",
        Sha256::of_bytes(SHIM_SOURCE.as_bytes()),
        target.libllama_sha256
    );
    for (name, sha) in &target.headers {
        key_text.push_str(&format!("header {} {sha}\n", name.escape_debug()));
    }
    key_text.push_str(&format!(
        "cc {}\nroot {}\n",
        compiler.path().display(),
        target.root.display()
    ));
    let key = Sha256::of_bytes(key_text.as_bytes());
    let out = cache.join(format!("pinforge-smoke-{}.so", key.short(16)));
    if out.is_file() {
        return Ok(out);
    }
    fsx::create_dir_all(cache)?;
    let src = cache.join(format!("shim-{}.c", key.short(16)));
    fsx::write_atomic(&src, SHIM_SOURCE.as_bytes())?;
    // The verified header bytes, in a folder of this process's own: the compiler sees those
    // and nothing else from the build (no header the manifest does not name, none swapped
    // after the check).
    let inc = cache.join(format!(".inc-{}-{}", key.short(16), std::process::id()));
    let _ = std::fs::remove_dir_all(&inc);
    let compiled = compile_shim(target, &compiler, &src, &inc, &out, &key);
    let _ = std::fs::remove_dir_all(&inc);
    compiled?;
    Ok(out)
}

fn compile_shim(
    target: &SmokeTarget,
    compiler: &cc::Tool,
    src: &Path,
    inc: &Path,
    out: &Path,
    key: &Sha256,
) -> Result<()> {
    for (name, bytes) in &target.header_bytes {
        let rel = name.strip_prefix("include/").unwrap_or(name);
        let p = inc.join(rel);
        fsx::create_dir_all(&fsx::parent_of(&p))?;
        fsx::write_atomic(&p, bytes)?;
    }
    let lib_path = target.root.join(&target.libllama);
    let lib_dir = fsx::parent_of(&lib_path);
    let cache = fsx::parent_of(out);
    let tmp = cache.join(format!(".tmp-{}-{}.so", key.short(16), std::process::id()));
    let mut cmd = compiler.to_command();
    cmd.arg("-shared")
        .arg("-o")
        .arg(&tmp)
        .arg(src)
        .arg(format!("-I{}", inc.display()))
        .arg(&lib_path)
        // Bound to this build's libraries, not to whatever a layer link shows later.
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()));
    pinforge_base::process::run(&mut cmd, "install gcc (or set CC)").map_err(|e| match e {
        Error::Tool {
            command, detail, ..
        } => Error::input(
            format!("smoke shim for {}", target.name),
            format!("does not compile against this build's llama.h ({command})"),
        )
        .with_detail(detail.unwrap_or_default())
        .with_hint("the build's C API changed in a way the shim does not cover"),
        other => other,
    })?;
    std::fs::rename(&tmp, out).at("rename into", out)?;
    Ok(())
}
