//! Helpers for unit tests only: a test that cannot check what it is for on this machine (a
//! refused namespace, a missing tool) says so out loud and, where the environment asks for every
//! tool (`PINFORGE_REQUIRE_TOOLS=1`, set in CI), fails, so a skip is never a silent pass. The
//! integration tests' `skip` in `tests/cli/main.rs` follows the same rule.

/// Report that the current test cannot run here; panics under `PINFORGE_REQUIRE_TOOLS`.
pub fn skip(why: &str) {
    use std::io::Write;
    let name = std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string();
    if std::env::var_os("PINFORGE_REQUIRE_TOOLS").is_some_and(|v| !v.is_empty() && v != "0") {
        panic!("{name} cannot run here and PINFORGE_REQUIRE_TOOLS is set: {why}");
    }
    // On the handle, not `eprintln!`: libtest captures the print macros of a passing test.
    let _ = writeln!(
        std::io::stderr().lock(),
        "test {name} ... ignored at run time: {why}"
    );
}

/// The CMake that `tools/bootstrap.sh` installs (or one on `PATH`): the tests that drive CMake
/// need it, and its absence is a broken checkout, not a reason to pass.
pub fn cmake() -> std::path::PathBuf {
    let here = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join(".tools/bin/cmake");
    if here.exists() {
        return here;
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("cmake"))
        .find(|p| p.exists())
        .expect("cmake: run tools/bootstrap.sh, which installs it under .tools/bin")
}
