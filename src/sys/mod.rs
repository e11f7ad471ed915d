//! The only room with `unsafe` code: foreign calls and system calls that have no safe wrapper,
//! each behind a safe function whose `SAFETY:` comment states what the caller relies on.

pub(crate) mod cuda;
pub(crate) mod mount_ns;
pub(crate) mod shim;
pub(crate) mod signal;

/// Make a FIFO at `path` (tests of the code that must refuse one without opening it): 0, or -1
/// as `mkfifo(3)` returns, through rustix's safe `mknodat` so that the tests hold no `unsafe`.
#[cfg(test)]
pub(crate) fn mkfifo<P: rustix::path::Arg>(path: P, mode: u32) -> i32 {
    use rustix::fs::{mknodat, FileType, Mode, CWD};
    match mknodat(CWD, path, FileType::Fifo, Mode::from_raw_mode(mode), 0) {
        Ok(()) => 0,
        Err(_) => -1,
    }
}
