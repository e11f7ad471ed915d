//! The `pinforge` binary: everything lives in the library; this only sets the exit code.

use std::process::ExitCode;

/// Returning the code (ripgrep's `crates/core/main.rs`) rather than calling
/// `std::process::exit` lets every destructor of `main` run before the process ends.
fn main() -> ExitCode {
    // The low byte, exactly what `exit(2)` keeps of an `i32` status (codes are 0 to 4 today).
    ExitCode::from(pinforge::cli::main().to_le_bytes()[0])
}
