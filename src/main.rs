//! The `pinforge` binary: everything lives in the library; this only sets the exit code.

/// Returning the code (ripgrep's `crates/core/main.rs`) rather than calling
/// `std::process::exit` lets every destructor of `main` run before the process ends.
fn main() -> std::process::ExitCode {
    pinforge::cli::main().into()
}
