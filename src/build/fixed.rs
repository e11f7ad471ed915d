//! The fixed build path: configure, build, install and the stamp's dry run see the vendor tree
//! at `/tmp/pinforge-<uid>/src`, the CMake build folder at `/tmp/pinforge-<uid>/build`, the
//! variant folder at `…/variant` and a provisioned CUDA toolkit at `…/toolkit`,
//! bound there in a private mount namespace that only the build's processes see (what Nix's
//! sandbox does with `/build`, without a new root: nothing of the host is hidden, two paths
//! are added).
//!
//! Why: prefix maps keep the source and build folders out of what gcc writes, but not out of
//! what nvcc writes. nvcc passes the real path of each `.cu` file to `cudafe++` and `cicc`
//! (`--orig_src_path_name`), whose CRC-32 names every internal-linkage device symbol
//! (`_GLOBAL__N__<crc>_…`, `_INTERNAL_<crc>_…`), inside the compressed fatbinary where no
//! normalization rule can reach. A link does not help (the path is resolved); a bind mount does.
//! With the fixed path, two workspaces (or two vendor trees) build the same bytes, and so do
//! two machines where the user has the same uid (a shared remote cache serves them alike).
//!
//! Why under `/tmp`: the path must not depend on the workspace or on the local cache folder
//! (machines sharing a remote cache have their own), and `/tmp` exists everywhere. The folder
//! is the user's own (mode 0700, checked like ssh checks its files), and its two mount points
//! stay empty: the binds exist only inside the build's namespace, for as long as it runs.
//!
//! The namespace needs no privilege: an unprivileged user namespace maps the user to itself
//! (root enters only a mount namespace). Where the kernel or a container refuses both, or
//! `PINFORGE_FIXED_PATH=0`, the build runs at its real folder, and the manifest's `build_path`
//! byproduct says so and why.

use crate::error::{Error, IoContext, Result};
use crate::manifest::Resource;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `0`/`off`/`false`/`no`: build at the real folder.
pub const ENV: &str = "PINFORGE_FIXED_PATH";
/// The folder that holds the user's folder of mount points.
pub const PARENT: &str = "/tmp";

/// Where one build's source tree and variant folder are, as its processes see them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildPaths {
    /// The source tree as the compilers see it.
    pub src: PathBuf,
    /// The variant folder as the build sees it.
    pub variant: PathBuf,
    /// The CMake build folder as the build sees it (`../src` from there is the source tree,
    /// as the compile cache's relative paths need).
    pub build: PathBuf,
    /// The fixed folder (the compile cache's `base_dir`); `None` at the real folders.
    pub root: Option<PathBuf>,
    /// The source tree's real folder (bound at `src` when fixed).
    pub real_src: PathBuf,
    /// The variant folder's real path (bound at `variant` when fixed).
    pub real_variant: PathBuf,
    /// A provisioned CUDA toolkit as the build sees it, and where it really is: bound at
    /// `<fixed>/toolkit` so that its cache folder reaches neither nvcc's `-isystem` (the
    /// compile cache's key) nor any object.
    #[serde(default)]
    pub toolkit: Option<(PathBuf, PathBuf)>,
    /// Why the build runs at its real folders; `None` when the path is fixed.
    pub unfixed: Option<String>,
}

impl BuildPaths {
    /// The real folders, unfixed for `why`.
    fn real(tree: &Path, vdir: &Path, why: String) -> BuildPaths {
        BuildPaths {
            src: tree.to_path_buf(),
            variant: vdir.to_path_buf(),
            build: vdir.join("cmake"),
            root: None,
            real_src: tree.to_path_buf(),
            real_variant: vdir.to_path_buf(),
            toolkit: None,
            unfixed: Some(why),
        }
    }

    /// Decide for one build: the fixed path when a private mount namespace can be entered
    /// here (checked by running `probe -E cat` on a file through the bind), else the real
    /// folders with the reason. Only a mount point that is not the user's own is an error.
    pub fn resolve(
        tree: &Path,
        vdir: &Path,
        toolkit: Option<&Path>,
        probe: &Path,
    ) -> Result<BuildPaths> {
        // SAFETY: getuid cannot fail and touches no memory.
        #[allow(unsafe_code)]
        let uid = unsafe { libc::getuid() };
        BuildPaths::resolve_at(
            &Path::new(PARENT).join(format!("pinforge-{uid}")),
            tree,
            vdir,
            toolkit,
            probe,
        )
    }

    fn resolve_at(
        base: &Path,
        tree: &Path,
        vdir: &Path,
        toolkit: Option<&Path>,
        probe: &Path,
    ) -> Result<BuildPaths> {
        if matches!(
            std::env::var(ENV).ok().as_deref().map(str::trim),
            Some("0" | "off" | "false" | "no")
        ) {
            return Ok(BuildPaths::real(tree, vdir, format!("{ENV}=0")));
        }
        own_folder(base)?;
        let paths = BuildPaths {
            src: base.join("src"),
            variant: base.join("variant"),
            build: base.join("build"),
            root: Some(base.to_path_buf()),
            real_src: tree.to_path_buf(),
            real_variant: vdir.to_path_buf(),
            toolkit: toolkit.map(|t| (base.join("toolkit"), t.to_path_buf())),
            unfixed: None,
        };
        for p in [
            &paths.src,
            &paths.variant,
            &paths.build,
            &base.join("toolkit"),
        ] {
            mount_point(p)?;
        }
        crate::fsx::create_dir_all(&vdir.join("cmake"))?;
        // The probe file proves that the bind took place, not only that unshare returned.
        let marker = vdir.join(".pinforge-fixed-probe");
        let body = format!("{}\n", std::process::id());
        std::fs::write(&marker, &body).at("write", &marker)?;
        let mut cmd = paths.command(probe)?;
        cmd.arg("-E")
            .arg("cat")
            .arg(paths.variant.join(".pinforge-fixed-probe"))
            .stdin(Stdio::null())
            .stderr(Stdio::piped());
        let out = cmd.output();
        let _ = std::fs::remove_file(&marker);
        match out {
            Ok(o) if o.status.success() && o.stdout == body.as_bytes() => Ok(paths),
            Ok(o) => Ok(BuildPaths::real(
                tree,
                vdir,
                format!(
                    "the bind mount was not visible to the build ({})",
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
            )),
            Err(e) => Ok(BuildPaths::real(
                tree,
                vdir,
                format!("the build could not start in a private mount namespace here: {e}"),
            )),
        }
    }

    /// Whether the path is fixed.
    pub fn fixed(&self) -> bool {
        self.unfixed.is_none()
    }

    /// The CMake build folder as the build sees it.
    pub fn cmake_dir(&self) -> PathBuf {
        self.build.clone()
    }

    /// A command for `program` that runs with these paths: in a private mount namespace with
    /// the two binds when fixed, a plain command otherwise.
    pub fn command(&self, program: &Path) -> Result<Command> {
        let mut cmd = Command::new(program);
        if self.fixed() {
            let mut binds = vec![
                (cstring(&self.real_src)?, cstring(&self.src)?),
                (cstring(&self.real_variant)?, cstring(&self.variant)?),
                (
                    cstring(&self.real_variant.join("cmake"))?,
                    cstring(&self.build)?,
                ),
            ];
            if let Some((seen, real)) = &self.toolkit {
                binds.push((cstring(real)?, cstring(seen)?));
            }
            ns::enter_on_exec(&mut cmd, binds);
        }
        Ok(cmd)
    }

    /// The toolchain as the build sees it: tools inside a bound toolkit at their fixed path.
    pub fn seen_tools(
        &self,
        tools: &crate::toolchain::ResolvedToolchain,
    ) -> crate::toolchain::ResolvedToolchain {
        let mut seen = tools.clone();
        if let Some((fixed, real)) = &self.toolkit {
            for t in seen.tools.values_mut() {
                if let Ok(rest) = t.path.strip_prefix(real) {
                    t.path = fixed.join(rest);
                }
            }
        }
        seen
    }

    /// The manifest byproduct `build_path`: run details (the bytes of CUDA objects depend on
    /// them), not an input.
    pub fn resource(&self) -> Resource {
        let mut ann = BTreeMap::from([
            ("fixed".to_string(), Value::from(self.fixed())),
            (
                "source".to_string(),
                Value::from(self.src.display().to_string()),
            ),
            (
                "variant".to_string(),
                Value::from(self.variant.display().to_string()),
            ),
            (
                "build".to_string(),
                Value::from(self.build.display().to_string()),
            ),
        ]);
        if let Some((seen, _)) = &self.toolkit {
            ann.insert("toolkit".into(), Value::from(seen.display().to_string()));
        }
        if let Some(why) = &self.unfixed {
            ann.insert("unfixed_because".into(), Value::from(why.clone()));
        }
        Resource {
            name: "build_path".into(),
            uri: None,
            digest: BTreeMap::new(),
            annotations: ann,
        }
    }
}

/// Create the user's folder of mount points (0700), or refuse one that someone else could
/// change: not a folder, a link, another owner's, or writable by others.
fn own_folder(p: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o700).create(p) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(Error::io("create", p, e))
        }
        _ => {}
    }
    let m = std::fs::symlink_metadata(p).at("inspect", p)?;
    // SAFETY: geteuid cannot fail and touches no memory.
    #[allow(unsafe_code)]
    let uid = unsafe { libc::geteuid() };
    if !m.is_dir() || m.uid() != uid || m.mode() & 0o022 != 0 {
        return Err(Error::input(
            p.display(),
            "the folder of the build's mount points is not a folder of this user's that only \
             this user can write",
        )
        .with_hint(format!(
            "remove it (pinforge recreates it, mode 0700), or set {ENV}=0 to build at the real \
             folder"
        )));
    }
    Ok(())
}

/// Create a mount point, or refuse one that is not an empty folder of its own (a link there
/// would move the bind somewhere else; a file in it would be hidden from the build).
fn mount_point(p: &Path) -> Result<()> {
    crate::fsx::create_dir_all(p)?;
    let m = std::fs::symlink_metadata(p).at("inspect", p)?;
    let hint = "remove it; pinforge recreates it (it only ever holds a bind mount)";
    if !m.is_dir() {
        return Err(
            Error::input(p.display(), "the build's mount point is not a folder").with_hint(hint),
        );
    }
    if std::fs::read_dir(p)
        .at("read directory", p)?
        .next()
        .is_some()
    {
        return Err(
            Error::input(p.display(), "the build's mount point is not empty").with_hint(hint),
        );
    }
    Ok(())
}

fn cstring(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::input(p.display(), "the path holds a NUL byte"))
}

/// The only unsafe part: what the child does between fork and exec.
mod ns {
    use std::ffi::CString;
    use std::io;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    /// Make `cmd`'s child enter a private mount namespace with `binds` (source, target) in
    /// place before it executes the program.
    #[allow(unsafe_code)]
    pub fn enter_on_exec(cmd: &mut Command, binds: Vec<(CString, CString)>) {
        // SAFETY: getuid, getgid and geteuid cannot fail and touch no memory.
        let (uid, gid, root) = unsafe { (libc::getuid(), libc::getgid(), libc::geteuid() == 0) };
        // Built here, in the parent: the child must not allocate.
        let uid_map = format!("{uid} {uid} 1");
        let gid_map = format!("{gid} {gid} 1");
        // SAFETY: the closure runs in the forked child, which has one thread; it only makes
        // system calls (unshare, open, write, close, mount) on memory prepared above, which
        // the closure owns, and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                let own_ns = root && libc::unshare(libc::CLONE_NEWNS) == 0;
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
                if libc::mount(
                    c"none".as_ptr(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                for (src, dst) in &binds {
                    if libc::mount(
                        src.as_ptr(),
                        dst.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ) != 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }

    /// Write `data` to a /proc file in one call (those files take one write).
    #[allow(unsafe_code)]
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
            if n < 0 || n as usize != data.len() {
                return Err(err);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(d: &Path) -> (PathBuf, PathBuf) {
        let t = d.join("vendor/tree");
        let v = d.join("build/r/v");
        std::fs::create_dir_all(&t).unwrap();
        std::fs::create_dir_all(&v).unwrap();
        std::fs::write(t.join("a.c"), "int a;\n").unwrap();
        (t, v)
    }

    fn cmake() -> Option<PathBuf> {
        let here = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/bin/cmake");
        if here.exists() {
            return Some(here);
        }
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|d| d.join("cmake"))
            .find(|p| p.exists())
    }

    #[test]
    fn the_build_sees_the_tree_and_the_variant_at_the_fixed_path_and_the_host_does_not() {
        let Some(cmake) = cmake() else { return };
        let d = tempfile::tempdir().unwrap();
        let (t, v) = tree(d.path());
        let kit = d.path().join("toolkits/cuda-x/root");
        std::fs::create_dir_all(kit.join("bin")).unwrap();
        std::fs::write(kit.join("bin/nvcc"), "not nvcc").unwrap();
        let p = BuildPaths::resolve(&t, &v, Some(&kit), &cmake).unwrap();
        if let Some(why) = &p.unfixed {
            // A machine that refuses namespaces must say why, and still build.
            assert!(why.contains("namespace") || why.contains("bind"), "{why}");
            return;
        }
        #[allow(unsafe_code)]
        let uid = unsafe { libc::getuid() };
        assert_eq!(p.src, Path::new(&format!("/tmp/pinforge-{uid}/src")));
        let out = p
            .command(&cmake)
            .unwrap()
            .arg("-E")
            .arg("cat")
            .arg(p.src.join("a.c"))
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"int a;\n");
        // Writes through the bind land in the real folder.
        let st = p
            .command(&cmake)
            .unwrap()
            .arg("-E")
            .arg("touch")
            .arg(p.variant.join("made-inside"))
            .status()
            .unwrap();
        assert!(st.success());
        assert!(v.join("made-inside").exists());
        // Outside the build the mount points stay empty.
        assert!(std::fs::read_dir(&p.src).unwrap().next().is_none());
        assert!(std::fs::read_dir(&p.variant).unwrap().next().is_none());
        assert!(std::fs::read_dir(&p.build).unwrap().next().is_none());
        // The build folder is the variant's, and the tree is `../src` from it.
        let st = p
            .command(&cmake)
            .unwrap()
            .current_dir("/")
            .args(["-E", "chdir"])
            .arg(&p.build)
            .arg(&cmake)
            .args(["-E", "cat", "../src/a.c"])
            .output()
            .unwrap();
        assert_eq!(
            st.stdout,
            b"int a;\n",
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
        assert!(!v.join(".pinforge-fixed-probe").exists());
        assert_eq!(p.resource().annotations["fixed"], Value::from(true));
        // The toolkit too: the build names it at the fixed path, and finds it there.
        let mut tools = crate::toolchain::ResolvedToolchain {
            name: "cuda".into(),
            tools: Default::default(),
            cuda_root: None,
            cuda_architectures: None,
        };
        tools.tools.insert(
            "nvcc".into(),
            crate::toolchain::ToolRecord {
                path: kit.join("bin/nvcc"),
                real_path: kit.join("bin/nvcc"),
                version: "13.1.115".into(),
                version_line: String::new(),
                sha256: crate::digest::Sha256::of_bytes(b"not nvcc"),
            },
        );
        let seen = p.seen_tools(&tools).tools["nvcc"].path.clone();
        assert_eq!(
            seen,
            Path::new(&format!("/tmp/pinforge-{uid}/toolkit/bin/nvcc"))
        );
        let out = p
            .command(&cmake)
            .unwrap()
            .args(["-E", "cat"])
            .arg(&seen)
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"not nvcc");
    }

    #[test]
    fn mount_points_someone_could_change_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let Some(cmake) = cmake() else { return };
        let d = tempfile::tempdir().unwrap();
        let (t, v) = tree(d.path());
        let base = d.path().join("fixed");
        // A link where a mount point belongs.
        std::fs::create_dir_all(&base).unwrap();
        std::os::unix::fs::symlink(d.path().join("vendor"), base.join("src")).unwrap();
        let e = BuildPaths::resolve_at(&base, &t, &v, None, &cmake).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().contains("not a folder"), "{e}");
        std::fs::remove_file(base.join("src")).unwrap();
        // A file inside one: the bind would hide it.
        std::fs::create_dir_all(base.join("variant")).unwrap();
        std::fs::write(base.join("variant/x"), "").unwrap();
        let e = BuildPaths::resolve_at(&base, &t, &v, None, &cmake).unwrap_err();
        assert!(e.to_string().contains("not empty"), "{e}");
        std::fs::remove_file(base.join("variant/x")).unwrap();
        // A folder of mount points that others may write, or that is a link.
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = BuildPaths::resolve_at(&base, &t, &v, None, &cmake).unwrap_err();
        assert!(e.to_string().contains("only this user can write"), "{e}");
        let link = d.path().join("fixed-link");
        std::os::unix::fs::symlink(&base, &link).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(BuildPaths::resolve_at(&link, &t, &v, None, &cmake).is_err());
        assert!(BuildPaths::resolve_at(&base, &t, &v, None, &cmake).is_ok());
    }

    #[test]
    fn at_the_real_folder_the_command_is_plain_and_the_record_says_why() {
        let d = tempfile::tempdir().unwrap();
        let (t, v) = tree(d.path());
        let p = BuildPaths::real(&t, &v, format!("{ENV}=0"));
        assert!(!p.fixed());
        assert_eq!(p.src, t);
        assert_eq!(p.cmake_dir(), v.join("cmake"));
        let r = p.resource();
        assert_eq!(r.annotations["fixed"], Value::from(false));
        assert_eq!(
            r.annotations["unfixed_because"],
            Value::from("PINFORGE_FIXED_PATH=0")
        );
        let st = p.command(Path::new("true")).unwrap().status().unwrap();
        assert!(st.success());
    }

    #[test]
    fn a_probe_that_cannot_run_leaves_the_build_at_its_real_folder_with_the_reason() {
        let d = tempfile::tempdir().unwrap();
        let (t, v) = tree(d.path());
        let base = d.path().join("fixed");
        let p = BuildPaths::resolve_at(&base, &t, &v, None, &d.path().join("no-cmake")).unwrap();
        assert!(!p.fixed());
        assert!(p.unfixed.as_deref().unwrap().contains("namespace"), "{p:?}");
    }
}
