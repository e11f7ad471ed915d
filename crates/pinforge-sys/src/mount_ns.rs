//! The private mount namespace of a build at the fixed path (see `artifact::build::fixed`):
//! what the child does between fork and exec, the only part of it that needs `unsafe`.

use std::ffi::CString;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The effective uid and gid: what the kernel lets an unprivileged process map, and whose
/// folder the fixed path is.
pub fn ids() -> (u32, u32) {
    (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    )
}

/// Make `cmd`'s child enter a private mount namespace before it executes the program: a
/// private tmpfs over `root`, and each (source, target) of `binds` bound at its target,
/// created inside that tmpfs; then, when `cwd` is given, change into it (a folder that exists
/// only inside the namespace, which std's `current_dir` cannot reach: it changes folder before
/// this runs).
pub fn enter_on_exec(
    cmd: &mut Command,
    root: CString,
    binds: Vec<(CString, CString)>,
    cwd: Option<CString>,
) {
    let (uid, gid) = ids();
    // Built here, in the parent: the child must not allocate.
    let uid_map = format!("{uid} {uid} 1");
    let gid_map = format!("{gid} {gid} 1");
    // SAFETY: the closure runs in the forked child, which has one thread; it only makes
    // system calls (unshare, open, write, close, mount, mkdir, chdir) on memory prepared above,
    // which the closure owns, and allocates nothing (io::Error from an errno does not).
    unsafe {
        cmd.pre_exec(move || {
            let own_ns = uid == 0 && libc::unshare(libc::CLONE_NEWNS) == 0;
            if !own_ns {
                if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // Before gid_map, as the kernel requires of an unprivileged writer; an
                // old kernel without the file needs no such step.
                match write(c"/proc/self/setgroups", b"deny") {
                    Err(e) if e.raw_os_error() != Some(libc::ENOENT) => return Err(e),
                    _ => {}
                }
                write(c"/proc/self/uid_map", uid_map.as_bytes())?;
                write(c"/proc/self/gid_map", gid_map.as_bytes())?;
            }
            // Nothing this namespace mounts may propagate back to the host.
            check(libc::mount(
                c"none".as_ptr(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            // The mount points live in a tmpfs of this namespace's own: nothing under the
            // host's folder is read, shared with another build, or left behind.
            check(libc::mount(
                c"tmpfs".as_ptr(),
                root.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"mode=0700".as_ptr().cast(),
            ))?;
            for (src, dst) in &binds {
                check(libc::mkdir(dst.as_ptr(), 0o700))?;
                check(libc::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ))?;
            }
            if let Some(cwd) = &cwd {
                check(libc::chdir(cwd.as_ptr()))?;
            }
            Ok(())
        });
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Write `data` to a /proc file in one call (those files take one write).
fn write(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: path is NUL-terminated; data is a valid buffer of its length; the
    // descriptor is closed on every path.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        if n < 0 {
            return Err(err);
        }
        if n as usize != data.len() {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
    }
    Ok(())
}
