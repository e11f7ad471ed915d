//! Signal dispositions for a parent that waits on an interactive child (`pinforge exec --
//! bash`): Ctrl-C and Ctrl-\ go to the whole foreground process group, so the parent ignores
//! them while the child, which decides for itself, runs; otherwise the parent dies and leaves
//! the child orphaned in the foreground, fighting the user's shell for the terminal. This is
//! what `env`, `nix develop` and `sudo` do.

/// Ignore SIGINT and SIGQUIT in this process from now on. Call it after the child is spawned:
/// an ignored disposition is inherited across `exec`, a handled or default one is not.
pub(crate) fn ignore_terminal_interrupts() {
    for sig in [libc::SIGINT, libc::SIGQUIT] {
        // SAFETY: SIG_IGN installs no handler code; `signal` only changes this process's
        // disposition table, which no Rust code here relies on.
        unsafe {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
}
