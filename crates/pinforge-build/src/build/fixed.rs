//! The fixed build path: configure, build, install and the stamp's dry run see the vendor tree
//! at `/tmp/pinforge-<uid>/src`, the CMake build folder at `/tmp/pinforge-<uid>/build`, the
//! variant folder at `…/variant` and a provisioned CUDA toolkit at `…/toolkit-<tree digest>`,
//! bound there in a private mount namespace that only the build's processes see (what Nix's
//! sandbox does with `/build`, without a new root: nothing of the host is hidden, one folder is
//! covered by a private tmpfs that holds the mount points).
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
//! (machines sharing a remote cache have their own), and `/tmp` exists everywhere. On the host
//! there is only the folder itself, which must be the user's own and writable by nobody else
//! (the sticky `/tmp` then keeps others from replacing it); inside the namespace a private
//! tmpfs covers it and holds the mount points, so nothing under it is shared between builds or
//! left behind. A name in `/tmp` can be taken by another user first: then, as where the kernel
//! or a container refuses namespaces, or with `PINFORGE_FIXED_PATH=0`, the build runs at its
//! real folder, and the manifest's `build_path` byproduct says so and why. The fixed path is an
//! improvement the build can do without, never a reason to refuse one.
//!
//! What runs at the fixed path also reports it: `build.log` and compiler errors name
//! `/tmp/pinforge-<uid>/src/…`, which outside the build is an empty folder; the real folders
//! are in `build_path` (`real_source`, `real_variant`).

use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use pinforge_record::manifest::Resource;
use pinforge_sys::mount_ns as ns;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `0`/`off`/`false`/`no`: build at the real folder.
pub(crate) const ENV: &str = "PINFORGE_FIXED_PATH";
/// The folder that holds the user's folder of mount points.
pub(crate) const PARENT: &str = "/tmp";

/// Where one build's source tree and variant folder are, as its processes see them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BuildPaths {
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
    /// `<fixed>/toolkit-<tree digest>` so that its cache folder reaches neither nvcc's
    /// `-isystem` (the compile cache's key) nor any object, while another toolkit is another
    /// path (Ninja then sees every command change).
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
    /// folders with the reason. `toolkit` is a provisioned toolkit's root and its identity.
    pub(crate) fn resolve(
        tree: &Path,
        vdir: &Path,
        toolkit: Option<(&Path, &str)>,
        probe: &Path,
    ) -> Result<BuildPaths> {
        let (uid, _) = ns::ids();
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
        toolkit: Option<(&Path, &str)>,
        probe: &Path,
    ) -> Result<BuildPaths> {
        if matches!(
            std::env::var(ENV).ok().as_deref().map(str::trim),
            Some("0" | "off" | "false" | "no")
        ) {
            return Ok(BuildPaths::real(tree, vdir, format!("{ENV}=0")));
        }
        if let Err(why) = own_folder(base) {
            return Ok(BuildPaths::real(tree, vdir, why));
        }
        let paths = BuildPaths {
            src: base.join("src"),
            variant: base.join("variant"),
            build: base.join("build"),
            root: Some(base.to_path_buf()),
            real_src: tree.to_path_buf(),
            real_variant: vdir.to_path_buf(),
            toolkit: toolkit.map(|(t, id)| (base.join(format!("toolkit-{id}")), t.to_path_buf())),
            unfixed: None,
        };
        pinforge_base::fsx::create_dir_all(&vdir.join("cmake"))?;
        // The probe file proves that the bind took place, not only that unshare returned.
        let marker = vdir.join(".pinforge-fixed-probe");
        let body = format!("{}\n", std::process::id());
        std::fs::write(&marker, &body).at("write", &marker)?;
        let out = paths.command(probe).and_then(|mut cmd| {
            cmd.arg("-E")
                .arg("cat")
                .arg(paths.variant.join(".pinforge-fixed-probe"))
                .stdin(Stdio::null())
                .stderr(Stdio::piped());
            cmd.output().map_err(|e| {
                Error::check(
                    probe.display(),
                    format!("the build could not start in a private mount namespace here: {e}"),
                )
            })
        });
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
            Err(e) => Ok(BuildPaths::real(tree, vdir, e.to_string())),
        }
    }

    /// Whether the path is fixed.
    pub(crate) fn fixed(&self) -> bool {
        self.unfixed.is_none()
    }

    /// The CMake build folder as the build sees it.
    pub(crate) fn cmake_dir(&self) -> PathBuf {
        self.build.clone()
    }

    /// A command for `program` that runs with these paths: in a private mount namespace with
    /// the binds when fixed, a plain command otherwise. The folder is checked again each time
    /// (the stamp's fast path reads these paths from a file). Do not give the command a
    /// `current_dir` at the fixed path: std changes folder before the namespace exists.
    pub(crate) fn command(&self, program: &Path) -> Result<Command> {
        self.command_in(program, None)
    }

    /// [`BuildPaths::command`], run from `cwd` as the build sees it (inside the namespace when
    /// fixed).
    fn command_in(&self, program: &Path, cwd: Option<&Path>) -> Result<Command> {
        let mut cmd = Command::new(program);
        let Some(root) = &self.root else {
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
            return Ok(cmd);
        };
        own_folder(root).map_err(|why| Error::check(root.display(), why))?;
        let mut binds = vec![
            (self.real_src.clone(), self.src.clone()),
            (self.real_variant.clone(), self.variant.clone()),
            (self.real_variant.join("cmake"), self.build.clone()),
        ];
        if let Some((seen, real)) = &self.toolkit {
            binds.push((real.clone(), seen.clone()));
        }
        // A bind whose source is gone would fail in the child with ENOENT, which reads like a
        // missing program: say which folder instead.
        for (real, _) in &binds {
            if !real.is_dir() {
                return Err(Error::check(
                    real.display(),
                    "a folder the build binds at the fixed path is missing",
                ));
            }
        }
        let binds = binds
            .iter()
            .map(|(r, s)| Ok((cstring(r)?, cstring(s)?)))
            .collect::<Result<Vec<_>>>()?;
        let cwd = cwd.map(cstring).transpose()?;
        ns::enter_on_exec(&mut cmd, cstring(root)?, binds, cwd);
        // gcc and ccache take $PWD for the working folder when it is the same inode as the
        // real one, which a bind keeps: a pinforge started inside the real build folder would
        // put that path into the debug info.
        cmd.env_remove("PWD");
        Ok(cmd)
    }

    /// The toolchain as the build sees it: tools inside a bound toolkit at their fixed path.
    pub(crate) fn seen_tools(
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
    pub(crate) fn resource(&self) -> Resource {
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
        if self.fixed() {
            // Where the bound folders really were, for a reader of build.log.
            ann.insert(
                "real_source".into(),
                Value::from(self.real_src.display().to_string()),
            );
            ann.insert(
                "real_variant".into(),
                Value::from(self.real_variant.display().to_string()),
            );
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

/// `program` as `pinforge exec` runs it for the variant built in `vdir` (named `name`): in the
/// build's mount namespace, with the folders bound where its manifest's `build_path` says the
/// build saw them, from the fixed CMake build folder, so that a build folder can be driven by
/// hand (`cmake --build .`) and CMake's regeneration writes only inside the namespace. A
/// variant never built, or built at its real folder, is an input error.
pub fn exec_command(vdir: &Path, vendor: &Path, name: &str, program: &Path) -> Result<Command> {
    let mpath = vdir.join("manifest.json");
    if !mpath.exists() {
        return Err(
            Error::input(name, format!("was never built (no {})", mpath.display())).with_hint(
                format!(
                    "build it first: pinforge build --variant {}",
                    name.rsplit('/').next().unwrap_or(name)
                ),
            ),
        );
    }
    let st = pinforge_record::manifest::Statement::read(&mpath)?;
    let paths = BuildPaths::recorded(&st, &mpath, vdir, vendor)?;
    if let Some(why) = &paths.unfixed {
        return Err(Error::input(
            name,
            format!(
                "was built at its real folder ({why}): nothing needs mounting; run the command \
                 there directly: {}",
                paths.build.display()
            ),
        ));
    }
    let mut cmd = paths.command_in(program, Some(&paths.build))?;
    // A shell started here takes $PWD for its folder name: the one the build saw.
    cmd.env("PWD", &paths.build);
    Ok(cmd)
}

impl BuildPaths {
    /// The paths a build recorded in its manifest (the `build_path` byproduct), checked
    /// against what this machine and workspace derive, because they become mount binds: the
    /// fixed root is this user's `/tmp/pinforge-<uid>`, the variant folder is `vdir` itself,
    /// and the source tree a real folder inside the workspace's `vendor/`. A manifest copied
    /// from another workspace, or crafted, can never bind another folder of the host.
    fn recorded(
        st: &pinforge_record::manifest::Statement,
        mpath: &Path,
        vdir: &Path,
        vendor: &Path,
    ) -> Result<BuildPaths> {
        let ann = st
            .predicate
            .run_details
            .byproducts
            .iter()
            .find(|b| b.name == "build_path")
            .map(|b| &b.annotations)
            .ok_or_else(|| {
                Error::input(mpath.display(), "the manifest records no build_path")
                    .with_hint("rebuild the variant with this pinforge")
            })?;
        let get = |k: &str| ann.get(k).and_then(Value::as_str).map(PathBuf::from);
        let need = |k: &str| {
            get(k).ok_or_else(|| {
                Error::input(
                    mpath.display(),
                    format!("the manifest's build_path has no `{k}`"),
                )
            })
        };
        let (src, variant, build) = (need("source")?, need("variant")?, need("build")?);
        if ann.get("fixed").and_then(Value::as_bool) != Some(true) {
            let why = ann
                .get("unfixed_because")
                .and_then(Value::as_str)
                .unwrap_or("not recorded");
            return Ok(BuildPaths::real(&src, &variant, why.to_string()));
        }
        if get("toolkit").is_some() {
            // Where the provisioned toolkit really is is not part of the record.
            return Err(Error::input(
                mpath.display(),
                "the build bound a provisioned CUDA toolkit at the fixed path, which exec \
                 cannot find from the manifest",
            ));
        }
        let (uid, _) = ns::ids();
        let root = Path::new(PARENT).join(format!("pinforge-{uid}"));
        if src != root.join("src") || variant != root.join("variant") || build != root.join("build")
        {
            return Err(Error::input(
                mpath.display(),
                format!(
                    "the manifest's build_path folders are not this user's fixed path ({})",
                    root.display()
                ),
            )
            .with_hint("rebuild the variant here: pinforge build --variant NAME"));
        }
        let (real_src, real_variant) = (need("real_source")?, need("real_variant")?);
        if real_variant != fsx::absolute(vdir)? {
            return Err(Error::input(
                mpath.display(),
                format!(
                    "the manifest's real_variant is {}, not this variant's folder {} (a manifest \
                     copied from another workspace?)",
                    real_variant.display(),
                    vdir.display()
                ),
            )
            .with_hint("rebuild the variant here: pinforge build --variant NAME"));
        }
        if !is_real_folder_inside(&real_src, &fsx::absolute(vendor)?) {
            return Err(Error::input(
                mpath.display(),
                format!(
                    "the manifest's real_source {} is not a vendor tree of this workspace",
                    real_src.display()
                ),
            )
            .with_hint("rebuild the variant here: pinforge build --variant NAME"));
        }
        Ok(BuildPaths {
            src,
            variant,
            build,
            root: Some(root),
            real_src,
            real_variant,
            toolkit: None,
            unfixed: None,
        })
    }
}

/// Whether `p` is an absolute path with no `.`/`..` component naming a folder strictly inside
/// `dir`, once both are resolved through their links (a workspace may sit behind a link; a
/// link inside it that leads out is refused).
fn is_real_folder_inside(p: &Path, dir: &Path) -> bool {
    use std::path::Component;
    let plain = p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    match (std::fs::canonicalize(p), std::fs::canonicalize(dir)) {
        (Ok(rp), Ok(rd)) => plain && rp != rd && rp.starts_with(&rd) && rp.is_dir(),
        _ => false,
    }
}

/// Create the user's folder of mount points (0700), or say why it cannot be used: not a
/// folder, a link, another owner's, or writable by someone else.
fn own_folder(p: &Path) -> std::result::Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o700).create(p) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(format!("{} cannot be created: {e}", p.display()))
        }
        _ => {}
    }
    let m = std::fs::symlink_metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let (uid, _) = ns::ids();
    if !m.is_dir() || m.uid() != uid || m.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is not a folder of this user's that only this user can write (remove it, or \
             ask its owner to)",
            p.display()
        ));
    }
    Ok(())
}

fn cstring(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::input(p.display(), "the path holds a NUL byte"))
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

    use pinforge_base::testing::cmake;

    fn cat(p: &BuildPaths, cmake: &Path, file: &Path) -> Vec<u8> {
        p.command(cmake)
            .unwrap()
            .args(["-E", "cat"])
            .arg(file)
            .output()
            .unwrap()
            .stdout
    }

    #[test]
    fn the_build_sees_the_tree_and_the_variant_at_the_fixed_path_and_the_host_does_not() {
        let cmake = cmake();
        let d = tempfile::tempdir().unwrap();
        let (t, v) = tree(d.path());
        let kit = d.path().join("toolkits/cuda-x/root");
        std::fs::create_dir_all(kit.join("bin")).unwrap();
        std::fs::write(kit.join("bin/nvcc"), "not nvcc").unwrap();
        // A folder of our own under the temp dir: the real /tmp/pinforge-<uid> may be in use.
        let base = d.path().join("fixed");
        let p = BuildPaths::resolve_at(&base, &t, &v, Some((&kit, "0123abcd")), &cmake).unwrap();
        if let Some(why) = &p.unfixed {
            // A machine that refuses namespaces must say why, and still build; the rest of
            // the test cannot be checked here, which is said, never passed in silence.
            assert!(why.contains("namespace") || why.contains("bind"), "{why}");
            pinforge_base::testing::skip(&format!("no fixed build path here: {why}"));
            return;
        }
        assert_eq!(p.src, base.join("src"));
        assert_eq!(cat(&p, &cmake, &p.src.join("a.c")), b"int a;\n");
        // Writes through the bind land in the real folder.
        let st = p
            .command(&cmake)
            .unwrap()
            .args(["-E", "touch"])
            .arg(p.variant.join("made-inside"))
            .status()
            .unwrap();
        assert!(st.success());
        assert!(v.join("made-inside").exists());
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
        // On the host the folder holds nothing: the mount points live in the build's tmpfs.
        assert!(std::fs::read_dir(&base).unwrap().next().is_none());
        assert!(!v.join(".pinforge-fixed-probe").exists());
        let r = p.resource();
        assert_eq!(r.annotations["fixed"], Value::from(true));
        assert_eq!(
            r.annotations["real_source"],
            Value::from(t.display().to_string())
        );
        // The toolkit too: the build names it at the fixed path, and finds it there.
        let mut tools = crate::toolchain::ResolvedToolchain {
            name: "cuda".into(),
            tools: Default::default(),
            cuda_root: None,
            cuda_architectures: None,
        };
        tools.tools.insert(
            crate::toolchain::Role::Nvcc,
            crate::toolchain::ToolRecord {
                path: kit.join("bin/nvcc"),
                real_path: kit.join("bin/nvcc"),
                version: "13.1.115".into(),
                version_line: String::new(),
                sha256: pinforge_base::digest::Sha256::of_bytes(b"not nvcc"),
            },
        );
        let seen = p.seen_tools(&tools).tools[&crate::toolchain::Role::Nvcc]
            .path
            .clone();
        assert_eq!(seen, base.join("toolkit-0123abcd/bin/nvcc"));
        assert_eq!(cat(&p, &cmake, &seen), b"not nvcc");
        // A file someone left in the host's folder is not what the build sees there.
        std::fs::write(base.join("left"), "x").unwrap();
        assert!(cat(&p, &cmake, &base.join("left")).is_empty());
        // A bound folder that went away is named, not reported as a missing program.
        std::fs::remove_dir_all(&kit).unwrap();
        let e = p.command(&cmake).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
    }

    #[test]
    fn a_folder_someone_else_could_change_leaves_the_build_at_its_real_folder() {
        use std::os::unix::fs::PermissionsExt;
        let cmake = cmake();
        let d = tempfile::tempdir().unwrap();
        let (t, v) = tree(d.path());
        let base = d.path().join("fixed");
        // Writable by others: not used, and the reason says so (never a refused build).
        std::fs::create_dir_all(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
        let p = BuildPaths::resolve_at(&base, &t, &v, None, &cmake).unwrap();
        assert!(!p.fixed());
        assert!(
            p.unfixed.as_deref().unwrap().contains("only this user"),
            "{p:?}"
        );
        // A link in its place.
        let link = d.path().join("fixed-link");
        std::os::unix::fs::symlink(&base, &link).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(!BuildPaths::resolve_at(&link, &t, &v, None, &cmake)
            .unwrap()
            .fixed());
        // A file in its place.
        let file = d.path().join("fixed-file");
        std::fs::write(&file, "").unwrap();
        assert!(!BuildPaths::resolve_at(&file, &t, &v, None, &cmake)
            .unwrap()
            .fixed());
        // The stamp's fast path re-checks before entering: a folder that changed is refused.
        let p = BuildPaths::resolve_at(&base, &t, &v, None, &cmake).unwrap();
        if p.fixed() {
            std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o770)).unwrap();
            assert!(p.command(&cmake).is_err());
        }
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
