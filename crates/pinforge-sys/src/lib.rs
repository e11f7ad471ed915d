//! pinforge-sys: the only crate with `unsafe` code, and the seam for the system calls that have
//! no safe wrapper or are one platform's own: the one binding of the C smoke shim, the mount
//! namespace a build enters, the CUDA driver probe, signal handling, who holds a lock
//! (`locks`) and which files a process maps (`maps`). Each foreign call sits behind a safe
//! function whose `SAFETY:` comment states what the caller relies on. It depends on no other
//! pinforge crate, so every layer above may use it.

pub mod cuda;
pub mod locks;
pub mod maps;
pub mod mount_ns;
pub mod shim;
pub mod signal;

/// Make a FIFO at `path` (tests of the code that must refuse one without opening it): 0, or -1
/// as `mkfifo(3)` returns, through rustix's safe `mknodat` so that the tests hold no `unsafe`.
#[cfg(any(test, feature = "testing"))]
pub fn mkfifo<P: rustix::path::Arg>(path: P, mode: u32) -> i32 {
    use rustix::fs::{mknodat, FileType, Mode, CWD};
    match mknodat(CWD, path, FileType::Fifo, Mode::from_raw_mode(mode), 0) {
        Ok(()) => 0,
        Err(_) => -1,
    }
}
