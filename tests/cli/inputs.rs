//! Pins and other inputs against their trust rules: archives, folder pins, links, FIFOs, `.git` entries, real source distributions.

use crate::{
    code, json, pinforge, pinforge_cmd, repo_root, stderr, stdout, tool_path, TINY_C, TINY_CMAKE,
};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

/// Run `pinforge ARGS` in `ws`, killed (and the test failed) after `secs`: the refusals these
/// tests check used to hang.
pub(crate) fn pinforge_within(ws: &Path, args: &[&str], secs: u64) -> Output {
    let logs = tempfile::tempdir().expect("tempdir");
    let out_path = logs.path().join("stdout");
    let err_path = logs.path().join("stderr");
    let mut child = pinforge_cmd(ws)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .spawn()
        .expect("spawn pinforge");
    let deadline = Instant::now() + Duration::from_secs(secs);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "pinforge {args:?} hung for {secs}s\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: std::fs::read(&out_path).expect("stdout"),
        stderr: std::fs::read(&err_path).expect("stderr"),
    }
}

pub(crate) fn mkfifo(p: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        p,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap_or_else(|e| panic!("mkfifo {}: {e}", p.display()));
}

/// No temp folder of a materialization may survive a refusal.
fn assert_no_tmp(ws: &Path) {
    let vendor = ws.join("vendor");
    let Ok(rd) = std::fs::read_dir(&vendor) else {
        return;
    };
    let left: Vec<String> = rd
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-"))
        .collect();
    assert!(left.is_empty(), "left behind in vendor/: {left:?}");
}

/// No tree was materialized (only caches may exist).
fn assert_no_tree(ws: &Path) {
    assert_no_tmp(ws);
    let Ok(rd) = std::fs::read_dir(ws.join("vendor")) else {
        return;
    };
    let trees: Vec<String> = rd
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "cache")
        .collect();
    assert!(trees.is_empty(), "materialized: {trees:?}");
}

// ---------------------------------------------------------------------------------------------
// Tarballs built entry by entry, with raw names (tar::Builder refuses `..`).

enum T<'a> {
    File(&'a str, &'a str),
    Dir(&'a str),
    Link(&'a str, &'a str),
}

fn tarball(entries: &[T]) -> Vec<u8> {
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    for e in entries {
        let (name, kind, data, link) = match e {
            T::File(n, d) => (*n, tar::EntryType::Regular, d.as_bytes(), ""),
            T::Dir(n) => (*n, tar::EntryType::Directory, &b""[..], ""),
            T::Link(n, t) => (*n, tar::EntryType::Symlink, &b""[..], *t),
        };
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(kind);
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
        h.set_cksum();
        b.append(&h, data).expect("append");
    }
    b.into_inner().expect("tar").finish().expect("gzip")
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

const PIN_BASE: &str = r#"
[toolchain.cpu]
cc = "gcc"
cxx = "g++"
cmake-version = ">=3.24"
[base]
toolchain = "cpu"
targets = ["tiny"]
patches = []
cmake = { BUILD_SHARED_LIBS = true }
[variants.plain]
"#;

/// A workspace whose recipe pins `pin` (a `[pin]` table body).
fn workspace(pin: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("recipes")).expect("mkdir");
    std::fs::create_dir_all(ws.join("patches")).expect("mkdir");
    let text = format!("name = \"pin\"\ndefault-variant = \"plain\"\n[pin]\n{pin}\n{PIN_BASE}");
    std::fs::write(ws.join("recipes/pin.toml"), text).expect("recipe");
    dir
}

/// A workspace whose recipe pins `ws/src.tar.gz` holding `entries`.
fn tar_workspace(entries: &[T]) -> tempfile::TempDir {
    let bytes = tarball(entries);
    let dir = workspace(&format!(
        "kind = \"tarball\"\npath = \"../src.tar.gz\"\nsha256 = \"{}\"",
        sha256_hex(&bytes)
    ));
    std::fs::write(dir.path().join("ws/src.tar.gz"), bytes).expect("tarball");
    dir
}

fn build(dir: &tempfile::TempDir) -> Output {
    pinforge_within(
        &dir.path().join("ws"),
        &["build", "recipes/pin.toml", "--json"],
        300,
    )
}

// issue #7 class 5: the example. `l -> .` then `l/l/…/evil.h` through it, and a link whose
// text looks inside but climbs out through `l`: both refused, nothing materialized.
#[test]
fn a_tarball_symlink_chain_through_an_earlier_link_is_refused_with_exit_2() {
    for (evil, why) in [
        (
            T::Link("tiny-1/l/l/l/evil.h", "../../../../../../etc/passwd"),
            "through the symlink `l`",
        ),
        (
            T::Link("tiny-1/include/evil.h", "../l/l/l/../../../etc/passwd"),
            "resolves outside the tree",
        ),
    ] {
        let dir = tar_workspace(&[
            T::File("tiny-1/CMakeLists.txt", TINY_CMAKE),
            T::File("tiny-1/tiny.c", TINY_C),
            T::Dir("tiny-1/include/"),
            T::Link("tiny-1/l", "."),
            evil,
        ]);
        let o = build(&dir);
        assert_eq!(code(&o), 2, "{}", stderr(&o));
        assert!(stderr(&o).contains("evil.h"), "{}", stderr(&o));
        assert!(stderr(&o).contains(why), "{}", stderr(&o));
        assert!(stderr(&o).contains("hint:"), "{}", stderr(&o));
        assert_no_tree(&dir.path().join("ws"));
    }
}

// issue #7 class 5, other members: an entry whose parent goes through a link to outside, and a
// link to an absolute path.
#[test]
fn a_tarball_entry_below_an_escaping_link_or_an_absolute_link_is_refused() {
    let cases: [(Vec<T>, &str); 2] = [
        (
            vec![
                T::Link("tiny-1/out", "../.."),
                T::File("tiny-1/out/evil.c", "x"),
            ],
            "through the symlink `out`",
        ),
        (
            vec![T::Link("tiny-1/include/llama.h", "/etc/passwd")],
            "absolute path",
        ),
    ];
    for (extra, why) in cases {
        let mut entries = vec![
            T::File("tiny-1/CMakeLists.txt", TINY_CMAKE),
            T::File("tiny-1/tiny.c", TINY_C),
        ];
        entries.extend(extra);
        let dir = tar_workspace(&entries);
        let o = build(&dir);
        assert_eq!(code(&o), 2, "{}", stderr(&o));
        assert!(stderr(&o).contains(why), "{why}: {}", stderr(&o));
        assert_no_tree(&dir.path().join("ws"));
        assert!(!dir.path().join("evil.c").exists());
    }
}

// issue #7 class 5: a folder pin with a link that leaves the folder is refused; a link that stays
// inside is copied as a link.
#[test]
fn a_folder_pin_with_an_escaping_link_is_refused_and_in_tree_links_stay_links() {
    let dir = workspace("kind = \"dir\"\npath = \"../src\"\ntree-sha256 = \"DIGEST\"");
    let src = dir.path().join("ws/src");
    std::fs::create_dir_all(src.join("inc")).expect("mkdir");
    std::fs::write(src.join("CMakeLists.txt"), TINY_CMAKE).expect("write");
    std::fs::write(src.join("tiny.c"), TINY_C).expect("write");
    std::fs::write(src.join("inc/a.h"), "int a;\n").expect("write");
    std::os::unix::fs::symlink("inc/a.h", src.join("a.h")).expect("link");
    std::fs::write(dir.path().join("secret.h"), "host secret\n").expect("write");
    std::os::unix::fs::symlink("../../secret.h", src.join("inc/evil.h")).expect("link");
    let ws = dir.path().join("ws");
    let pin = |ws: &Path| {
        let o = pinforge(ws, &["vendor", "digest", "src"]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let digest = String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .next()
            .expect("digest")
            .to_string();
        let path = ws.join("recipes/pin.toml");
        let text = std::fs::read_to_string(&path).expect("recipe");
        let text = match text.find("tree-sha256 = \"") {
            Some(at) => {
                let end = at + "tree-sha256 = \"".len();
                let close = text[end..].find('"').expect("quote") + end;
                format!("{}{digest}{}", &text[..end], &text[close..])
            }
            None => text,
        };
        std::fs::write(&path, text).expect("recipe");
    };
    pin(&ws);
    let o = build(&dir);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("inc/evil.h"), "{}", stderr(&o));
    assert!(stderr(&o).contains("resolves outside"), "{}", stderr(&o));
    assert_no_tree(&ws);

    std::fs::remove_file(src.join("inc/evil.h")).expect("rm");
    pin(&ws);
    let o = build(&dir);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let tree = PathBuf::from(json(&o)["source_tree"].as_str().expect("source_tree"));
    assert_eq!(
        std::fs::read_link(tree.join("a.h")).expect("a link stays a link"),
        PathBuf::from("inc/a.h")
    );
}

// issue #7 class 4: a FIFO in a folder pin used to hang the build and leave vendor/.tmp-*.
#[test]
fn a_fifo_in_a_folder_pin_exits_2_without_hanging_or_leaving_a_temp_folder() {
    let dir = workspace("kind = \"dir\"\npath = \"../src\"\ntree-sha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"");
    let ws = dir.path().join("ws");
    let src = ws.join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("CMakeLists.txt"), TINY_CMAKE).expect("write");
    std::fs::write(src.join("tiny.c"), TINY_C).expect("write");
    mkfifo(&src.join("pipe.c"));
    let o = pinforge_within(&ws, &["vendor", "digest", "src"], 30);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("pipe.c"), "{}", stderr(&o));
    assert!(stderr(&o).contains("FIFO"), "{}", stderr(&o));
    let o = build(&dir);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("pipe.c"), "{}", stderr(&o));
    assert!(stderr(&o).contains("FIFO"), "{}", stderr(&o));
    assert_no_tree(&ws);
}

// issue #7 class 4: `vendor digest` and a tarball pin naming a FIFO or /dev/zero, and `verify` of
// a manifest whose input is /dev/zero or whose output is a FIFO, exit 2 at once.
#[test]
fn vendor_digest_tarball_pins_and_verify_of_a_fifo_or_dev_zero_are_refused_at_once() {
    let dir = tar_workspace(&[
        T::File("tiny-1/CMakeLists.txt", TINY_CMAKE),
        T::File("tiny-1/tiny.c", TINY_C),
    ]);
    let ws = dir.path().join("ws");
    let fifo = ws.join("pipe.tar.gz");
    mkfifo(&fifo);
    for p in ["/dev/zero", "pipe.tar.gz"] {
        let o = pinforge_within(&ws, &["vendor", "digest", p], 30);
        assert_eq!(code(&o), 2, "{p}: {}", stderr(&o));
        assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));
    }

    // A tarball pin whose path is a FIFO.
    let good = std::fs::read_to_string(ws.join("recipes/pin.toml")).expect("recipe");
    std::fs::write(
        ws.join("recipes/pin.toml"),
        good.replace("../src.tar.gz", "../pipe.tar.gz"),
    )
    .expect("recipe");
    let o = build(&dir);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("FIFO"), "{}", stderr(&o));
    assert_no_tree(&ws);
    std::fs::write(ws.join("recipes/pin.toml"), good).expect("recipe");

    // A real manifest, then its upstream input pointed at /dev/zero.
    let o = build(&dir);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let manifest = PathBuf::from(json(&o)["manifest"].as_str().expect("manifest"));
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).expect("read")).expect("json");
    m["predicate"]["buildDefinition"]["internalParameters"]["inputs"]["upstream"] =
        serde_json::Value::from("/dev/zero");
    let zero = manifest.with_file_name("zero.json");
    std::fs::write(&zero, serde_json::to_vec(&m).expect("json")).expect("write");
    // An input is data: refused unopened as a mismatch naming it (exit 1), not read.
    let o = pinforge_within(&ws, &["verify", zero.to_str().expect("utf8")], 30);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("/dev/zero") && stdout(&o).contains("not read"),
        "{}",
        stdout(&o)
    );

    // An output replaced by a FIFO.
    let subject = m["subject"][0]["name"]
        .as_str()
        .expect("subject")
        .to_string();
    let root = m["predicate"]["buildDefinition"]["internalParameters"]["artifact_root"]
        .as_str()
        .expect("artifact_root")
        .to_string();
    let out = manifest.with_file_name(root).join(&subject);
    std::fs::remove_file(&out).expect("rm");
    mkfifo(&out);
    let o = pinforge_within(&ws, &["verify", manifest.to_str().expect("utf8")], 30);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("FIFO"), "{}", stderr(&o));
}

// issue #13 item 4: `.git` folders and gitlink files are skipped, reported and counted; nothing
// from them reaches the tree (a hook, a config).
#[test]
fn a_tarball_with_git_entries_builds_reports_the_skip_and_records_the_count() {
    let dir = tar_workspace(&[
        T::File("tiny-1/CMakeLists.txt", TINY_CMAKE),
        T::File("tiny-1/tiny.c", TINY_C),
        T::Dir("tiny-1/.git/"),
        T::Dir("tiny-1/.git/hooks/"),
        T::File("tiny-1/.git/hooks/post-checkout", "#!/bin/sh\necho pwned\n"),
        T::File(
            "tiny-1/.git/config",
            "[core]\n\tfsmonitor = pinforge-evil-marker\n",
        ),
        T::File("tiny-1/sub/.git", "gitdir: ../.git/modules/sub\n"),
        T::File("tiny-1/sub/x.c", "int x;\n"),
    ]);
    let o = build(&dir);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("skipped 5 .git entries"), "{err}");
    assert!(err.contains(".git, sub/.git"), "{err}");
    let j = json(&o);
    let tree = PathBuf::from(j["source_tree"].as_str().expect("source_tree"));
    assert!(tree.join("sub/x.c").is_file());
    assert!(
        !tree.join("sub/.git").exists(),
        "the gitlink was not extracted"
    );
    assert!(
        !tree.join(".git/hooks/post-checkout").exists(),
        "no hook extracted"
    );
    let config = std::fs::read_to_string(tree.join(".git/config")).expect("vendor repo config");
    assert!(!config.contains("pinforge-evil-marker"), "{config}");
    // The pristine commit holds the upstream files only.
    let repo = git2::Repository::open(&tree).expect("vendor repo");
    let head = repo.head().expect("head").peel_to_tree().expect("tree");
    assert!(head.get_path(Path::new("sub/.git")).is_err());
    assert!(head.get_path(Path::new("sub/x.c")).is_ok());

    let m: serde_json::Value = serde_json::from_slice(
        &std::fs::read(j["manifest"].as_str().expect("manifest")).expect("read"),
    )
    .expect("json");
    let deps = m["predicate"]["buildDefinition"]["resolvedDependencies"]
        .as_array()
        .expect("deps");
    let up = deps
        .iter()
        .find(|d| d["name"] == "upstream")
        .expect("upstream");
    assert_eq!(up["annotations"]["skipped_git_entries"], 5, "{up}");

    // A second build reuses the tree, and still says what was skipped.
    let o = build(&dir);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("skipped 5 .git entries"),
        "{}",
        stderr(&o)
    );
}

// issue #7 class 5: a git pin whose tree holds a symlink blob that leaves the tree.
#[test]
fn a_git_pin_with_an_escaping_symlink_blob_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let up = dir.path().join("up");
    let repo = git2::Repository::init(&up).expect("init");
    std::fs::write(up.join("CMakeLists.txt"), TINY_CMAKE).expect("write");
    std::fs::write(up.join("tiny.c"), TINY_C).expect("write");
    std::os::unix::fs::symlink(".", up.join("l")).expect("link");
    std::os::unix::fs::symlink("l/l/../../../etc/passwd", up.join("evil.h")).expect("link");
    let mut index = repo.index().expect("index");
    index
        .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
        .expect("add");
    index.write().expect("write");
    let tree = repo
        .find_tree(index.write_tree().expect("tree"))
        .expect("tree");
    let sig = git2::Signature::new("u", "u@example.invalid", &git2::Time::new(0, 0)).expect("sig");
    let commit = repo
        .commit(Some("HEAD"), &sig, &sig, "v1", &tree, &[])
        .expect("commit");
    let wsdir = workspace(&format!(
        "kind = \"git\"\nurl = \"{}\"\ncommit = \"{commit}\"",
        up.display()
    ));
    let o = build(&wsdir);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("evil.h"), "{}", stderr(&o));
    assert!(stderr(&o).contains("resolves outside"), "{}", stderr(&o));
    assert_no_tree(&wsdir.path().join("ws"));
}

// ---------------------------------------------------------------------------------------------
// issue #13 "what must be shown": the llama-cpp-python 0.3.17 sdist as a tarball pin.

const SDIST: &str = "llama_cpp_python-0.3.17.tar.gz";
const SDIST_SHA256: &str = "39c31948d234ff351bf638f1e468d893dd29282dd4d47716a39c6a0a1e63b123";

/// The sdist, downloaded once with pip into the build folder's shared test cache. None (with
/// the reason) when pip or PyPI is not available.
fn sdist() -> Result<PathBuf, String> {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap_or(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .join("test-cache/sdists");
    let file = cache.join(SDIST);
    if file.is_file() {
        return Ok(file);
    }
    std::fs::create_dir_all(&cache).expect("cache dir");
    let tmp = tempfile::tempdir_in(&cache).expect("tempdir");
    // CMake and Ninja on PATH: pip prepares the sdist's metadata with scikit-build-core, which
    // otherwise asks for CMake itself, and `--no-binary :all:` would build CMake from source.
    let path = std::env::join_paths(std::iter::once(tool_path()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let o = std::process::Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--no-binary", ":all:"])
        .arg("llama-cpp-python==0.3.17")
        .arg("-d")
        .arg(tmp.path())
        .env("PATH", path)
        .output()
        .map_err(|e| format!("python3 -m pip cannot run: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "pip download failed (PyPI unreachable?): {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | ")
        ));
    }
    let got = tmp.path().join(SDIST);
    assert!(
        got.is_file(),
        "pip did not download the sdist {SDIST} (a wheel instead?): {:?}",
        std::fs::read_dir(tmp.path())
            .map(|r| r.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
            .unwrap_or_default()
    );
    std::fs::rename(&got, &file).expect("into the cache");
    Ok(file)
}

#[test]
fn the_llama_cpp_python_0_3_17_sdist_builds_unpatched_and_smokes_ok() {
    let sdist = match sdist() {
        Ok(p) => p,
        // In CI the registry is reachable by contract: a failed download is a failure there,
        // never a green skip. A developer offline gets the skip, said out loud.
        Err(why) if std::env::var_os("CI").is_some() => {
            panic!("CI: the llama-cpp-python 0.3.17 sdist could not be fetched: {why}")
        }
        Err(why) => {
            crate::skip(&format!(
                "the llama-cpp-python 0.3.17 sdist could not be fetched: {why}"
            ));
            return;
        }
    };
    let bytes = std::fs::read(&sdist).expect("sdist");
    assert_eq!(&bytes[..2], b"\x1f\x8b", "the sdist is a .tar.gz");
    assert_eq!(sha256_hex(&bytes), SDIST_SHA256, "the sdist PyPI serves");

    // The shipped recipe, as a user would use it: the sdist where its comment says to put it.
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path();
    std::fs::create_dir_all(ws.join("recipes")).expect("mkdir");
    std::fs::create_dir_all(ws.join("patches")).expect("mkdir");
    std::fs::create_dir_all(ws.join("vendor/cache/sdists")).expect("mkdir");
    std::fs::copy(
        repo_root().join("recipes/llama-cpp-python-0.3.17.toml"),
        ws.join("recipes/llama-cpp-python-0.3.17.toml"),
    )
    .expect("recipe");
    std::fs::copy(&sdist, ws.join("vendor/cache/sdists").join(SDIST)).expect("sdist");

    let started = Instant::now();
    let o = pinforge(
        ws,
        &["build", "recipes/llama-cpp-python-0.3.17.toml", "--json"],
    );
    let built = started.elapsed();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "skipped 1 .git entry of the upstream source (never extracted): vendor/llama.cpp/.git"
        ),
        "the submodule's gitlink is skipped and said: {}",
        stderr(&o)
    );
    let j = json(&o);
    assert_eq!(j["variant"], "unpatched");
    let manifest = j["manifest"].as_str().expect("manifest").to_string();
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).expect("read")).expect("json");
    let names: Vec<&str> = m["subject"]
        .as_array()
        .expect("subjects")
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert!(
        names.iter().any(|n| n.contains("libllama.so")),
        "libllama is an artifact: {names:?}"
    );
    let deps = m["predicate"]["buildDefinition"]["resolvedDependencies"]
        .as_array()
        .expect("deps");
    let up = deps
        .iter()
        .find(|d| d["name"] == "upstream")
        .expect("upstream");
    assert_eq!(up["digest"]["sha256"], SDIST_SHA256);
    assert_eq!(up["annotations"]["kind"], "tarball");
    assert_eq!(up["annotations"]["subdir"], "vendor/llama.cpp");
    assert_eq!(up["annotations"]["skipped_git_entries"], 1);
    // The post-fix tree: tools/server is there (the registry crate's tree lacks it).
    let tree = PathBuf::from(j["source_tree"].as_str().expect("source_tree"));
    assert!(tree.join("tools/server").is_dir());
    assert!(!tree.join("vendor/llama.cpp").exists() && !tree.join(".git/modules").exists());

    let started = Instant::now();
    let o = pinforge(ws, &["smoke", &manifest, "--arch", "qwen2vl", "--json"]);
    let smoked = started.elapsed();
    let r = json(&o);
    assert_eq!((code(&o), r["verdict"].as_str()), (0, Some("ok")), "{r}");
    eprintln!(
        "llama-cpp-python 0.3.17 sdist: build {:.0}s, smoke {:.1}s",
        built.as_secs_f64(),
        smoked.as_secs_f64()
    );
}
