//! Signal dispositions for a parent that waits on an interactive child (`pinforge exec --
//! bash`): Ctrl-C and Ctrl-\ go to the whole foreground process group, so the parent ignores
//! them while the child, which decides for itself, runs; otherwise the parent dies and leaves
//! the child orphaned in the foreground, fighting the user's shell for the terminal. This is
//! what `env`, `nix develop` and `sudo` do.
//!
//! Also for a parent that owns servers (`validate --serve`): interrupts become a flag it polls
//! so it can stop them, and its servers are told to die with it (`PR_SET_PDEATHSIG`).

/// Ignore SIGINT and SIGQUIT in this process from now on. Call it after the child is spawned:
/// an ignored disposition is inherited across `exec`, a handled or default one is not.
pub fn ignore_terminal_interrupts() {
    for sig in [libc::SIGINT, libc::SIGQUIT] {
        // SAFETY: SIG_IGN installs no handler code; `signal` only changes this process's
        // disposition table, which no Rust code here relies on.
        unsafe {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
}

/// Set when SIGINT or SIGTERM arrived after [`catch_interrupts`]; a loop that owns servers
/// polls it between requests and stops them (a served run must leave nothing listening).
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn note_interrupt(_sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// From now on SIGINT and SIGTERM only set a flag ([`interrupted`]) instead of ending the
/// process, so the caller can stop what it started and report.
pub fn catch_interrupts() {
    note_interrupts();
}

/// The signals [`catch_interrupts`] turns into the flag.
const CAUGHT: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// Install [`note_interrupt`] for [`CAUGHT`]; the dispositions they had before (SIG_DFL where
/// `signal` failed).
fn note_interrupts() -> [libc::sighandler_t; 2] {
    let handler = note_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
    let mut before = [libc::SIG_DFL; 2];
    for (slot, sig) in before.iter_mut().zip(CAUGHT) {
        // SAFETY: the handler only stores to a static atomic, which is async-signal-safe;
        // `signal` changes this process's disposition table and nothing else.
        let old = unsafe { libc::signal(sig, handler) };
        if old != libc::SIG_ERR {
            *slot = old;
        }
    }
    before
}

/// Whether an interrupt arrived since [`catch_interrupts`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Interrupts caught ([`catch_interrupts`]) for as long as this value lives, the dispositions
/// that were there before back when it is dropped: for a command that owns a server for only
/// one step (the `install --smoke` server check) and must stay interruptible the usual way before
/// and after it. "The usual way" is what pinforge was started with: a shell's background job
/// (`pinforge install … &`) starts with SIGINT ignored, and stays so.
pub struct InterruptsCaught([libc::sighandler_t; 2]);

impl InterruptsCaught {
    /// Catch SIGINT and SIGTERM from now on.
    #[allow(
        clippy::new_without_default,
        reason = "new installs signal handlers: a side effect that a Default would hide"
    )]
    pub fn new() -> InterruptsCaught {
        InterruptsCaught(note_interrupts())
    }
}

impl Drop for InterruptsCaught {
    fn drop(&mut self) {
        for (old, sig) in self.0.iter().zip(CAUGHT) {
            // SAFETY: `old` is a disposition `signal` returned for this very signal (SIG_DFL,
            // SIG_IGN or a handler of this process, still valid: nothing here unloads code).
            unsafe {
                libc::signal(sig, *old);
            }
        }
    }
}

/// Make the process `cmd` starts receive SIGKILL when the thread that spawned it dies
/// (`PR_SET_PDEATHSIG`): if pinforge is killed outright, a server it started does not stay
/// listening. (The router's own children are in its process group, stopped with it.)
pub fn kill_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // The parent as the child will see it before exec. If the parent dies between the fork
    // and the `prctl`, the death signal is never sent (the child was reparented first), so
    // the child checks after setting it and refuses to exec when its parent is gone.
    let parent = rustix::process::getpid().as_raw_nonzero().get();
    // SAFETY: the closure runs in the forked child before exec and calls only `prctl` and
    // `getppid`, which are async-signal-safe; it allocates nothing and touches no parent
    // state (`parent` is a copied integer).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The disposition `sig` has now, read without changing it for good.
    fn disposition(sig: libc::c_int) -> libc::sighandler_t {
        // SAFETY: sets and at once restores this process's disposition of `sig`.
        unsafe {
            let old = libc::signal(sig, libc::SIG_IGN);
            libc::signal(sig, old);
            old
        }
    }

    #[test]
    fn a_caught_interval_gives_back_the_disposition_it_found_not_the_default() {
        // A background job's pinforge starts with SIGINT ignored: the server check must not
        // make it killable by Ctrl-C afterwards. SIGTERM stays at the default.
        // SAFETY: SIG_IGN installs no handler code.
        let before = unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
        let term_before = disposition(libc::SIGTERM);
        {
            let _caught = InterruptsCaught::new();
            let handler = note_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
            assert_eq!(disposition(libc::SIGINT), handler);
            assert_eq!(disposition(libc::SIGTERM), handler);
        }
        assert_eq!(disposition(libc::SIGINT), libc::SIG_IGN);
        assert_eq!(disposition(libc::SIGTERM), term_before);
        // SAFETY: puts back what the test harness had.
        unsafe {
            libc::signal(libc::SIGINT, before);
        }
    }
}
