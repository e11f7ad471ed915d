//! Child processes: running a command with its output captured and a deadline (`process`),
//! and waiting on a process by its pidfd (`proc_wait`).

pub mod proc_wait;
pub mod process;
