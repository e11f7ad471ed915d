//! The only room with `unsafe` code: foreign calls and system calls that have no safe wrapper,
//! each behind a safe function whose `SAFETY:` comment states what the caller relies on.

pub mod cuda;
