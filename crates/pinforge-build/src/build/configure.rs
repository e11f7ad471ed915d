//! The configure arguments: the template the manifest records (machine paths as `${SRC}`,
//! `${BUILD}`, `${VARIANT}`, `${TOOL:role}`, `${TOOLKIT}`) and the actual argv CMake gets,
//! built from one list so that the two can never disagree; plus the prefix maps that keep
//! machine paths out of the binaries, and the git stand-in the configure names.

use super::{cache, stage, BUILD_MAP, SRC_MAP};
use crate::toolchain::{ResolvedToolchain, Role};
use pinforge_base::error::{IoContext, Result};
use pinforge_base::process::shell_word;
use pinforge_source::recipe::{cmake_key_name, Variant};
use pinforge_source::upstream::Tree;
use std::path::Path;

/// How a host-compiler flag is handed through nvcc.
pub(super) const NVCC_PREFIX: &str = "-Xcompiler=";

/// The host compilers' flags variables: pinforge's prefix maps come first and a recipe's value
/// is appended, never replacing them. (`CMAKE_CUDA_FLAGS` is merged the same way, for a CUDA
/// toolchain only: without nvcc a recipe's CUDA flags pass through as written.)
const HOST_FLAG_VARIABLES: [&str; 2] = ["CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS"];
/// See [`HOST_FLAG_VARIABLES`].
const CUDA_FLAG_VARIABLE: &str = "CMAKE_CUDA_FLAGS";

/// One configure argument: plain text, or a flags variable whose pinforge words (which name
/// machine paths) are shell-quoted once substituted, followed by the recipe's own flags.
enum Arg {
    Plain(String),
    Flags {
        var: String,
        words: Vec<String>,
        user: Option<String>,
    },
}

/// The prefix maps whose left side is this variant's folder (`${SRC}`, the source link, and
/// `${BUILD}`), as template words: in the CUDA flags, and (substituted) in the list of
/// arguments the compile cache leaves out of its key.
pub(super) fn variant_prefix_maps(pre: &str) -> Vec<String> {
    vec![
        format!("{pre}-ffile-prefix-map=${{SRC}}={SRC_MAP}"),
        format!("{pre}-ffile-prefix-map=${{BUILD}}={BUILD_MAP}"),
    ]
}

/// Every prefix map a flags variable carries: the variant's two, with the compile cache's
/// `../src/...` (see [`cache`]) between them.
fn prefix_maps(pre: &str) -> Vec<String> {
    let mut v = variant_prefix_maps(pre);
    v.insert(
        1,
        format!(
            "{pre}-ffile-prefix-map={}={SRC_MAP}",
            cache::SOURCE_FROM_BUILD
        ),
    );
    v
}

/// `${TOOL:role}`, the template word for a tool's path.
fn tool(role: Role) -> String {
    format!("${{TOOL:{role}}}")
}

/// The configure arguments: the template recorded in the manifest (machine paths replaced by
/// `${SRC}`, `${BUILD}`, `${TOOL:role}`) and the actual arguments. Every argument is one argv
/// element (never re-split); recipe flags are appended after pinforge's prefix maps.
pub(super) fn cmake_args(
    variant: &Variant,
    tools: &ResolvedToolchain,
    tree: &Tree,
    cmake_dir: &Path,
    vdir: &Path,
) -> (Vec<String>, Vec<String>) {
    let args = template(variant, tools, tree);
    let subst = Subst::new(tools, tree, cmake_dir, vdir);
    let template = args.iter().map(|a| render(a, None)).collect();
    let actual = args.iter().map(|a| render(a, Some(&subst))).collect();
    (template, actual)
}

/// The arguments as template words, in the order CMake gets them.
fn template(variant: &Variant, tools: &ResolvedToolchain, tree: &Tree) -> Vec<Arg> {
    let user = |var: &str| -> Option<String> {
        variant
            .cmake
            .iter()
            .find(|(k, _)| cmake_key_name(k) == var)
            .map(|(_, v)| v.clone())
    };
    let mut t: Vec<Arg> = [
        "-S".to_string(),
        "${SRC}".to_string(),
        "-B".to_string(),
        "${BUILD}".to_string(),
        "-G".to_string(),
        "Ninja".to_string(),
        format!("-DCMAKE_MAKE_PROGRAM={}", tool(Role::Ninja)),
        format!("-DCMAKE_C_COMPILER={}", tool(Role::Cc)),
        format!("-DCMAKE_CXX_COMPILER={}", tool(Role::Cxx)),
    ]
    .into_iter()
    .map(Arg::Plain)
    .collect();
    let launcher = tools.has(Role::Ccache);
    for lang in ["C", "CXX"].iter().filter(|_| launcher) {
        t.push(Arg::Plain(format!(
            "-DCMAKE_{lang}_COMPILER_LAUNCHER={}",
            tool(Role::Ccache)
        )));
    }
    t.push(Arg::Plain(format!(
        "-DCMAKE_BUILD_TYPE={}",
        variant.build_type
    )));
    // Keep absolute source and build paths out of __FILE__ and debug info.
    for var in HOST_FLAG_VARIABLES {
        t.push(Arg::Flags {
            var: var.into(),
            words: prefix_maps(""),
            user: user(var),
        });
    }
    t.extend(fixed_args(tree).into_iter().map(Arg::Plain));
    if tools.has(Role::Nvcc) {
        t.push(Arg::Plain(format!(
            "-DCMAKE_CUDA_COMPILER={}",
            tool(Role::Nvcc)
        )));
        t.push(Arg::Plain(format!(
            "-DCMAKE_CUDA_COMPILER_LAUNCHER={}",
            cuda_launcher(
                aslr_off_works(),
                launcher.then(|| tool(Role::Ccache)).as_deref(),
            )
        )));
        t.push(Arg::Flags {
            var: CUDA_FLAG_VARIABLE.into(),
            words: prefix_maps(NVCC_PREFIX),
            user: user(CUDA_FLAG_VARIABLE),
        });
        if let Some(root) = &tools.cuda_root {
            t.push(Arg::Plain(format!("-DCUDAToolkit_ROOT={root}")));
        }
        if let Some(arch) = &tools.cuda_architectures {
            t.push(Arg::Plain(format!("-DCMAKE_CUDA_ARCHITECTURES={arch}")));
        }
    }
    // The recipe's other variables, after pinforge's: those merged into a flags variable above
    // are not passed again.
    let merged: Vec<&str> = t
        .iter()
        .filter_map(|a| match a {
            Arg::Flags { var, .. } => Some(var.as_str()),
            Arg::Plain(_) => None,
        })
        .collect();
    let rest: Vec<Arg> = variant
        .cmake
        .iter()
        .filter(|(k, _)| !merged.contains(&cmake_key_name(k)))
        .map(|(k, v)| Arg::Plain(format!("-D{k}={v}")))
        .collect();
    t.extend(rest);
    t
}

/// jemalloc options for nvcc's children: cicc allocates with jemalloc, whose time-based purging
/// of dirty pages (`dirty_decay_ms`, 10 s by default) changes which addresses later allocations
/// get, and cicc's PTX depends on those addresses (issue #25, measured on the fattn-tile units).
/// No purging at all: the allocation pattern depends on the input only.
pub(crate) const CUDA_MALLOC_CONF: &str = "dirty_decay_ms:-1,muzzy_decay_ms:-1";

/// The CUDA compiler's launcher, as CMake's list: `setarch -R` (ASLR off, inherited by nvcc's
/// children: cicc's output depends on where its heap is) when the machine has util-linux's
/// `setarch`, then `env MALLOC_CONF=...` (see [`CUDA_MALLOC_CONF`]), then ccache when the
/// toolchain has it. Both are found on PATH when Ninja runs each compile; the template names
/// no path. Without `setarch` the compiles run with ASLR on: the manifest's CMake arguments say
/// which launcher a build used.
fn cuda_launcher(setarch: bool, ccache: Option<&str>) -> String {
    let mut words: Vec<String> = Vec::new();
    if setarch {
        words.extend(["setarch".into(), "-R".into()]);
    }
    words.extend(["env".into(), format!("MALLOC_CONF={CUDA_MALLOC_CONF}")]);
    words.extend(ccache.map(str::to_string));
    words.join(";")
}

/// Whether `setarch -R` can run a program here: util-linux present, and the `personality` call
/// allowed (a container's seccomp profile may refuse ADDR_NO_RANDOMIZE, and then every compile
/// through the launcher would fail).
pub(crate) fn aslr_off_works() -> bool {
    // Asked once per process: the compile cache's namespace and the launcher must agree.
    static WORKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WORKS.get_or_init(|| {
        pinforge_base::process::which("setarch", &[]).is_some_and(|p| {
            std::process::Command::new(p)
                .args(["-R", "true"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
    })
}

/// The arguments every variant gets the same: where the binaries look for libraries, the fixed
/// install prefix, and the build info.
fn fixed_args(tree: &Tree) -> Vec<String> {
    vec![
        // Run paths relative to the library, not to this build folder, in the build tree
        // and in the installed copies (CMake rewrites run paths at install time).
        "-DCMAKE_BUILD_RPATH_USE_ORIGIN=ON".to_string(),
        "-DCMAKE_INSTALL_RPATH=$ORIGIN;$ORIGIN/../lib".to_string(),
        // A fixed prefix that exists nowhere: configured files and binaries never name the
        // workspace; the install goes through DESTDIR into the stage.
        format!("-DCMAKE_INSTALL_PREFIX={}", stage::PREFIX),
        "-DCMAKE_INSTALL_LIBDIR=lib".to_string(),
        // Build info from the pin, never from the vendor repository's own commits.
        format!("-DLLAMA_BUILD_NUMBER={}", tree.pin.build_number),
        format!("-DLLAMA_BUILD_COMMIT={}", tree.pin.build_commit),
        "-DGIT_EXE=${VARIANT}/pinforge-git".to_string(),
    ]
}

/// The machine paths the template words stand for.
struct Subst {
    src: String,
    build: String,
    variant: String,
    /// A provisioned toolkit's root (the folder above nvcc's `bin/`).
    toolkit: Option<String>,
    /// `${TOOL:role}` and the tool's path, for every role.
    tools: Vec<(String, String)>,
}

impl Subst {
    fn new(tools: &ResolvedToolchain, tree: &Tree, cmake_dir: &Path, vdir: &Path) -> Subst {
        Subst {
            src: tree.path.display().to_string(),
            build: cmake_dir.display().to_string(),
            variant: vdir.display().to_string(),
            toolkit: tools
                .get(Role::Nvcc)
                .and_then(|t| t.path.parent())
                .and_then(Path::parent)
                .map(|root| root.display().to_string()),
            tools: tools
                .tools
                .iter()
                .map(|(role, t)| (format!("${{TOOL:{role}}}"), t.path.display().to_string()))
                .collect(),
        }
    }

    fn apply(&self, a: &str) -> String {
        let mut s = a
            .replace("${SRC}", &self.src)
            .replace("${BUILD}", &self.build)
            .replace("${VARIANT}", &self.variant);
        // A provisioned toolkit's root is in the user's cache: it enters the identity as
        // `${TOOLKIT}` (the toolkit itself is identified by its tree digest), never by path.
        if let Some(root) = &self.toolkit {
            s = s.replace(crate::cudakit::ROOT_TEMPLATE, root);
        }
        for (word, path) in &self.tools {
            s = s.replace(word, path);
        }
        s
    }
}

/// One argument as the template (`subst` None) or as CMake gets it.
fn render(a: &Arg, subst: Option<&Subst>) -> String {
    match (a, subst) {
        (Arg::Plain(s), Some(subst)) => subst.apply(s),
        (Arg::Plain(s), None) => s.clone(),
        (Arg::Flags { var, words, user }, _) => {
            let mut ws: Vec<String> = words
                .iter()
                .map(|w| match subst {
                    Some(subst) => shell_word(&subst.apply(w)),
                    None => w.clone(),
                })
                .collect();
            ws.extend(user.iter().filter(|u| !u.is_empty()).cloned());
            format!("-D{var}={}", ws.join(" "))
        }
    }
}

/// ggml's CMakeLists asks git for the commit of its own folder, which inside a vendor
/// repository would be pinforge's patch commit: patched and unpatched builds would then differ
/// in libggml-base for no reason. This stand-in answers with the pin's build info instead.
pub(super) fn write_git_shim(vdir: &Path, tree: &Tree) -> Result<()> {
    let body = format!(
        "#!/bin/sh\n# Written by pinforge: build info comes from the pin, not from the vendor repository.\n\
         case \"$1\" in\n  rev-parse) echo '{commit}' ;;\n  rev-list) echo '{number}' ;;\n  \
         diff-index) exit 0 ;;\n  --version) echo 'git version 2.0.0.pinforge' ;;\n  *) exit 1 ;;\nesac\n",
        commit = tree.pin.build_commit.replace('\'', ""),
        number = tree.pin.build_number,
    );
    let path = vdir.join("pinforge-git");
    if pinforge_base::fsx::read_if_present(&path)
        .ok()
        .flatten()
        .as_deref()
        != Some(body.as_bytes())
    {
        pinforge_base::fsx::write_atomic(&path, body.as_bytes())?;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).at("chmod", &path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinforge_base::digest::Sha256;
    use std::path::PathBuf;

    // issue #7 class 7: every flags variable (C, C++, CUDA; typed or not) keeps pinforge's
    // prefix maps first; each argument is one argv element; the template has no machine path.
    #[test]
    fn recipe_flags_are_appended_for_every_language_and_paths_stay_one_argument() {
        let recipe = pinforge_source::recipe::Recipe::parse(
            r#"default-variant = "v"
[pin]
kind = "dir"
path = "/x"
tree-sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
[toolchain.cuda]
cc = "gcc"
cxx = "g++"
nvcc = "/cuda/bin/nvcc"
[base]
toolchain = "cuda"
targets = ["llama"]
cmake = { "CMAKE_CUDA_FLAGS:STRING" = "-lineinfo", CMAKE_CXX_FLAGS = "-g -O1", OTHER = "a b" }
[variants.v]
"#,
            Path::new("r.toml"),
            Some(Path::new("/ws/recipes")),
        )
        .expect("recipe");
        let variant = recipe.variant("v").expect("v");
        let tool = |p: &str| crate::toolchain::ToolRecord {
            path: PathBuf::from(p),
            real_path: PathBuf::from(p),
            version: "1".into(),
            version_line: "1".into(),
            sha256: Sha256::of_bytes(b""),
        };
        let tools = ResolvedToolchain {
            name: "cuda".into(),
            tools: [Role::Cc, Role::Cxx, Role::Cmake, Role::Ninja, Role::Nvcc]
                .into_iter()
                .map(|r| (r, tool(&format!("/t/{r}"))))
                .collect(),
            cuda_root: None,
            cuda_architectures: None,
        };
        let tree: Tree = serde_json::from_value(serde_json::json!({
            "path": "/my ws/vendor/src",
            "base_commit": "0123456789012345678901234567890123456789",
            "head": "0123456789012345678901234567890123456789",
            "patches": [],
            "pin": {"kind": "dir", "uri": "/x", "sha256": null, "git_commit": null, "tag": null,
                    "subdir": null, "build_number": 0, "build_commit": "x", "archive": null}
        }))
        .expect("tree");
        let (template, actual) = cmake_args(
            variant,
            &tools,
            &tree,
            Path::new("/my ws/build/r/v/cmake"),
            Path::new("/my ws/build/r/v"),
        );
        let find = |args: &[String], var: &str| -> Vec<String> {
            args.iter()
                .filter(|a| a.starts_with(&format!("-D{var}")))
                .cloned()
                .collect()
        };
        assert_eq!(
            find(&template, "CMAKE_CUDA_FLAGS"),
            vec!["-DCMAKE_CUDA_FLAGS=-Xcompiler=-ffile-prefix-map=${SRC}=/pinforge/src -Xcompiler=-ffile-prefix-map=../src=/pinforge/src -Xcompiler=-ffile-prefix-map=${BUILD}=/pinforge/build -lineinfo"]
        );
        assert_eq!(
            find(&template, "CMAKE_CXX_FLAGS"),
            vec!["-DCMAKE_CXX_FLAGS=-ffile-prefix-map=${SRC}=/pinforge/src -ffile-prefix-map=../src=/pinforge/src -ffile-prefix-map=${BUILD}=/pinforge/build -g -O1"]
        );
        assert_eq!(
            find(&actual, "CMAKE_CXX_FLAGS"),
            vec!["-DCMAKE_CXX_FLAGS='-ffile-prefix-map=/my ws/vendor/src=/pinforge/src' -ffile-prefix-map=../src=/pinforge/src '-ffile-prefix-map=/my ws/build/r/v/cmake=/pinforge/build' -g -O1"]
        );
        assert_eq!(find(&actual, "OTHER"), vec!["-DOTHER=a b"]);
        assert!(
            actual.contains(&"/my ws/vendor/src".to_string()),
            "{actual:?}"
        );
        assert!(
            template.iter().all(|a| !a.contains("/my ws")),
            "{template:?}"
        );
        assert!(template.contains(&"-DCMAKE_INSTALL_PREFIX=/pinforge/prefix".to_string()));
        // No ccache in this toolchain: the CUDA launcher is the allocator and ASLR settings only.
        let launcher = find(&template, "CMAKE_CUDA_COMPILER_LAUNCHER");
        assert_eq!(launcher.len(), 1, "{template:?}");
        assert!(
            launcher[0].ends_with("env;MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1"),
            "{launcher:?}"
        );
    }

    #[test]
    fn the_cuda_launcher_turns_aslr_and_jemalloc_purging_off_before_ccache() {
        assert_eq!(
            cuda_launcher(true, Some("${TOOL:ccache}")),
            "setarch;-R;env;MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1;${TOOL:ccache}"
        );
        assert_eq!(
            cuda_launcher(false, None),
            "env;MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1"
        );
    }
}
