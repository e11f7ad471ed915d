//! Unit and property tests of the tree writer: every refusal of issue #7 classes 4 and 5, and
//! the `.git` skip of issue #13 item 4.

use super::*;
use proptest::prelude::*;
use std::collections::VecDeque;
use std::os::unix::ffi::OsStrExt;

/// One tar entry; names and link targets are written raw so that hostile archives can be built
/// (`tar::Builder` refuses `..`).
#[derive(Debug, Clone)]
enum E {
    File(Vec<u8>, Vec<u8>),
    Dir(Vec<u8>),
    Link(Vec<u8>, Vec<u8>),
    Typed(Vec<u8>, tar::EntryType),
}

fn raw_header(name: &[u8], kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_size(size);
    h.set_mode(0o644);
    h.set_entry_type(kind);
    let field = &mut h.as_old_mut().name;
    let n = name.len().min(field.len());
    field[..n].copy_from_slice(&name[..n]);
    h
}

fn tar_of(entries: &[E]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        match e {
            E::File(name, data) => {
                let mut h = raw_header(name, tar::EntryType::Regular, data.len() as u64);
                h.set_cksum();
                b.append(&h, data.as_slice()).expect("append");
            }
            E::Dir(name) => {
                let mut h = raw_header(name, tar::EntryType::Directory, 0);
                h.set_cksum();
                b.append(&h, &[][..]).expect("append");
            }
            E::Link(name, target) => {
                let mut h = raw_header(name, tar::EntryType::Symlink, 0);
                let field = &mut h.as_old_mut().linkname;
                let n = target.len().min(field.len());
                field[..n].copy_from_slice(&target[..n]);
                h.set_cksum();
                b.append(&h, &[][..]).expect("append");
            }
            E::Typed(name, kind) => {
                let mut h = raw_header(name, *kind, 0);
                h.set_cksum();
                b.append(&h, &[][..]).expect("append");
            }
        }
    }
    b.into_inner().expect("finish")
}

fn f(name: &str) -> E {
    E::File(name.as_bytes().to_vec(), b"x".to_vec())
}
fn l(name: &str, target: &str) -> E {
    E::Link(name.as_bytes().to_vec(), target.as_bytes().to_vec())
}

fn extract(entries: &[E], sub: Option<&str>) -> (tempfile::TempDir, Result<Written>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let arch = dir.path().join("a.tar");
    std::fs::write(&arch, tar_of(entries)).expect("write");
    let dest = dir.path().join("out");
    std::fs::create_dir(&dest).expect("mkdir");
    let r = extract_archive(&arch, &dest, sub);
    (dir, r)
}

fn refusal(r: Result<Written>) -> String {
    let e = r.expect_err("refused");
    assert_eq!(e.exit_code(), 2, "{e}");
    e.to_string()
}

#[test]
fn extracts_subdir_and_strips_top() {
    let (dir, r) = extract(
        &[f("top/llama.cpp/src/a.c"), f("top/README")],
        Some("llama.cpp"),
    );
    r.expect("extract");
    assert!(dir.path().join("out/src/a.c").is_file());
    assert!(!dir.path().join("out/README").exists());
}

#[test]
fn refuses_path_escape() {
    let (_d, r) = extract(&[f("top/../../evil")], None);
    assert!(refusal(r).contains("escapes"));
}

#[test]
fn in_tree_links_are_created_as_links() {
    let (d, r) = extract(
        &[f("top/a/b"), l("top/l", "a/b"), l("top/a/up", "../a")],
        None,
    );
    r.expect("in-tree links are fine");
    assert!(d.path().join("out/l").is_symlink());
    assert_eq!(
        std::fs::read_link(d.path().join("out/a/up")).expect("link"),
        PathBuf::from("../a")
    );
}

// issue #7 class 5: the example. `l -> .` is harmless alone; `l/l/…/evil.h` traverses it, and a
// link whose text stays "inside" by counting components leaves the tree through it.
#[test]
fn a_symlink_chain_through_an_earlier_link_is_refused() {
    let (_d, r) = extract(
        &[
            f("top/a.h"),
            l("top/l", "."),
            l("top/l/l/l/evil.h", "../../../etc/passwd"),
        ],
        None,
    );
    let text = refusal(r);
    assert!(text.contains("top/l/l/l/evil.h"), "{text}");
    assert!(text.contains("through the symlink `l`"), "{text}");

    // The same leak without an entry below a link: `evil.h -> l/l/l/../..`: the text climbs
    // two levels after three descents, but each `l` is the root itself.
    let (_d, r) = extract(
        &[
            f("top/a.h"),
            l("top/l", "."),
            l("top/evil.h", "l/l/l/../../x"),
        ],
        None,
    );
    let text = refusal(r);
    assert!(text.contains("evil.h"), "{text}");
    assert!(text.contains("resolves outside the tree"), "{text}");

    // d/m -> l/.. where d/l -> .. : l is the root, so l/.. is above it.
    let (_d, r) = extract(
        &[f("top/d/x"), l("top/d/l", ".."), l("top/d/m", "l/..")],
        None,
    );
    assert!(refusal(r).contains("resolves outside"));
}

// issue #7 class 5, another member: the order of entries does not matter; a link added later
// redirects an earlier one.
#[test]
fn a_link_redirected_by_a_later_link_is_refused() {
    let (_d, r) = extract(&[f("top/x"), l("top/a", "b/c"), l("top/b", "..")], None);
    let text = refusal(r);
    assert!(text.contains("top/a") || text.contains("`a`"), "{text}");
}

// issue #7 class 5: an entry whose parent path goes through a link that leaves the tree.
#[test]
fn an_entry_below_a_link_is_refused_before_it_is_written() {
    let (d, r) = extract(
        &[f("top/x"), l("top/esc", "../.."), f("top/esc/evil")],
        None,
    );
    assert!(refusal(r).contains("through the symlink `esc`"));
    assert!(!d.path().join("evil").exists());
    // Even a link that stays inside may not carry entries below it.
    let (_d, r) = extract(&[f("top/sub/x"), l("top/in", "sub"), f("top/in/y")], None);
    assert!(refusal(r).contains("traverse"));
}

#[test]
fn links_to_absolute_paths_loops_and_into_git_are_refused() {
    let (_d, r) = extract(&[f("top/x"), l("top/abs", "/etc/passwd")], None);
    assert!(refusal(r).contains("absolute"));
    let (_d, r) = extract(&[f("top/x"), l("top/a", "b"), l("top/b", "a")], None);
    assert!(refusal(r).contains("loop"));
    let (_d, r) = extract(&[f("top/x"), l("top/cfg", ".git/config")], None);
    assert!(refusal(r).contains(".git"));
    let (_d, r) = extract(
        &[f("top/x"), l("top/g", "."), l("top/cfg", "g/.GIT/hooks")],
        None,
    );
    assert!(refusal(r).contains(".git"));
}

#[test]
fn duplicate_paths_of_another_kind_are_refused() {
    let (_d, r) = extract(&[f("top/x"), l("top/x", "y")], None);
    assert!(refusal(r).contains("twice"));
    let (_d, r) = extract(&[f("top/x/y"), l("top/x", ".")], None);
    assert!(refusal(r).contains("twice"));
}

// issue #7 class 4 (the pin side): special files in an archive are refused by type.
#[test]
fn devices_fifos_and_hard_links_are_refused() {
    for (kind, want) in [
        (tar::EntryType::Fifo, "FIFO"),
        (tar::EntryType::Char, "device"),
        (tar::EntryType::Block, "device"),
        (tar::EntryType::Link, "hard link"),
    ] {
        let (_d, r) = extract(&[f("top/x"), E::Typed(b"top/dev".to_vec(), kind)], None);
        let text = refusal(r);
        assert!(text.contains(want), "{kind:?}: {text}");
    }
}

// issue #13 item 4: `.git` entries are skipped, counted and never written.
#[test]
fn git_entries_at_any_depth_are_skipped_and_counted() {
    let (d, r) = extract(
        &[
            f("top/a.c"),
            E::Dir(b"top/.git/".to_vec()),
            f("top/.git/hooks/post-checkout"),
            f("top/.git/config"),
            f("top/sub/.git"),
            f("top/sub/b.c"),
            f("top/deep/x/.GIT/HEAD"),
            l("top/.git/evil", "../../../../etc"),
        ],
        None,
    );
    let w = r.expect("archives carrying .git are ordinary");
    assert_eq!(w.files, 2);
    assert_eq!(w.skipped_git.entries, 6);
    let roots: Vec<&str> = w.skipped_git.roots.iter().map(String::as_str).collect();
    assert_eq!(roots, vec![".git", "deep/x/.GIT", "sub/.git"]);
    let out = d.path().join("out");
    assert!(!out.join(".git").exists());
    assert!(!out.join("sub/.git").exists());
    assert!(out.join("sub/b.c").is_file());
    assert!(!out.join("deep/x/.GIT").exists());

    // Under a subdir only the subdir's own `.git` counts.
    let (_d, r) = extract(
        &[
            f("top/.git/config"),
            f("top/v/l/.git"),
            f("top/v/l/CMakeLists.txt"),
        ],
        Some("v/l"),
    );
    let w = r.expect("extract");
    assert_eq!(w.skipped_git.entries, 1);
    // Other refusals stand beside a `.git`.
    let (_d, r) = extract(&[f("top/.git/x"), f("top/../evil")], None);
    assert!(refusal(r).contains("escapes"));
}

#[test]
fn the_model_resolves_like_the_kernel() {
    let mut m = TreeModel::default();
    m.add_dir(Path::new("a/b")).expect("dir");
    m.add_link(Path::new("a/up"), Path::new(".."))
        .expect("link");
    m.add_link(Path::new("a/b/c"), Path::new("../up/a/b"))
        .expect("link");
    assert_eq!(
        m.resolve(Path::new("a/up")).expect("inside"),
        PathBuf::new()
    );
    assert_eq!(
        m.resolve(Path::new("a/b/c")).expect("inside"),
        PathBuf::from("a/b")
    );
    m.add_link(Path::new("a/b/d"), Path::new("c/../../.."))
        .expect("link");
    assert!(
        m.resolve(Path::new("a/b/d")).is_err(),
        "a/b/d -> a/b/../../.. leaves"
    );
}

// ---------------------------------------------------------------------------------------------
// Folder pins.

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).expect("path");
    let rc = pinforge_sys::mkfifo(c.as_c_str(), 0o644);
    assert_eq!(rc, 0, "mkfifo {}", p.display());
}

fn copy(src: &Path) -> (tempfile::TempDir, Result<Written>) {
    let out = tempfile::tempdir().expect("tempdir");
    let r = copy_dir(src, out.path());
    (out, r)
}

// issue #7 class 4: a FIFO in a folder pin is refused without being opened (no hang).
#[test]
fn a_fifo_in_a_folder_pin_is_refused_without_opening_it() {
    let src = tempfile::tempdir().expect("tempdir");
    std::fs::write(src.path().join("a.c"), "x").expect("write");
    mkfifo(&src.path().join("pipe"));
    let (_o, r) = copy(src.path());
    let text = refusal(r);
    assert!(text.contains("pipe") && text.contains("FIFO"), "{text}");
    let e = crate::digest::tree_digest(src.path()).expect_err("digest refuses too");
    assert!(e.to_string().contains("FIFO"), "{e}");
}

// issue #7 class 5: folder pins copy links as links, and only links that stay inside.
#[test]
fn a_folder_pin_copies_links_as_links_and_refuses_escaping_ones() {
    let src = tempfile::tempdir().expect("tempdir");
    let s = src.path();
    std::fs::create_dir_all(s.join("inc")).expect("mkdir");
    std::fs::write(s.join("inc/a.h"), "a").expect("write");
    std::os::unix::fs::symlink("inc", s.join("include")).expect("link");
    std::fs::create_dir_all(s.join(".git/hooks")).expect("mkdir");
    std::fs::write(s.join(".git/hooks/post-checkout"), "boom").expect("write");
    std::fs::write(s.join("inc/.git"), "gitdir: ../x").expect("write");
    let (o, r) = copy(s);
    let w = r.expect("copy");
    assert!(o.path().join("include").is_symlink(), "a link stays a link");
    assert_eq!(w.skipped_git.entries, 4);
    assert!(!o.path().join(".git").exists());
    assert!(!o.path().join("inc/.git").exists());

    for target in ["../../etc/passwd", "/etc/passwd", "inc/../.."] {
        let bad = s.join("evil.h");
        let _ = std::fs::remove_file(&bad);
        std::os::unix::fs::symlink(target, &bad).expect("link");
        let (_o, r) = copy(s);
        let text = refusal(r);
        assert!(text.contains("evil.h"), "{target}: {text}");
    }
}

// ---------------------------------------------------------------------------------------------
// Git trees.

// ---------------------------------------------------------------------------------------------
// Files that are not files.

// issue #7 class 4: a tarball pin (or `vendor digest`) naming a FIFO or /dev/zero is refused
// at once.
#[test]
fn a_fifo_or_dev_zero_as_an_archive_is_refused_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("pipe.tar.gz");
    mkfifo(&fifo);
    let dest = dir.path().join("out");
    std::fs::create_dir(&dest).expect("mkdir");
    for p in [fifo.as_path(), Path::new("/dev/zero")] {
        let e = extract_archive(p, &dest, None).expect_err("refused");
        assert_eq!(e.exit_code(), 2, "{e}");
        let e = crate::digest::Sha256::of_file(p).expect_err("refused");
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
}

// ---------------------------------------------------------------------------------------------
// Property tests: arbitrary archives never panic and never write outside the destination.

/// Where a link leads on the real filesystem, component by component with `read_link` (an
/// implementation independent of the model): None when it climbs above `root`.
fn fs_resolve(root: &Path, link: &Path) -> Option<()> {
    let mut stack: Vec<OsString> = link
        .strip_prefix(root)
        .ok()?
        .parent()?
        .components()
        .map(|c| c.as_os_str().to_owned())
        .collect();
    let mut pending: VecDeque<OsString> = std::fs::read_link(link)
        .ok()?
        .components()
        .map(|c| c.as_os_str().to_owned())
        .collect();
    let mut hops = 0;
    while let Some(c) = pending.pop_front() {
        if c == "/" {
            return None;
        }
        if c == "." {
            continue;
        }
        if c == ".." {
            stack.pop()?;
            continue;
        }
        stack.push(c);
        let here = root.join(stack.iter().collect::<PathBuf>());
        if let Ok(t) = std::fs::read_link(&here) {
            hops += 1;
            if hops > 64 {
                return None;
            }
            stack.pop();
            for c in t.components().collect::<Vec<_>>().into_iter().rev() {
                pending.push_front(c.as_os_str().to_owned());
            }
        }
    }
    Some(())
}

fn listing(root: &Path, skip: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("ls").flatten() {
            let p = e.path();
            if p.starts_with(skip) {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).expect("stat");
            out.push(format!("{} {}", p.display(), m.len()));
            if m.is_dir() {
                todo.push(p);
            }
        }
    }
    out.sort();
    out
}

fn all_links(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("ls").flatten() {
        let p = e.path();
        let m = std::fs::symlink_metadata(&p).expect("stat");
        if m.file_type().is_symlink() {
            out.push(p);
        } else if m.is_dir() {
            all_links(&p, out);
        }
    }
}

/// Run the extractor on `bytes` in a deep temp layout and check the invariants.
fn check_archive(bytes: &[u8], sub: Option<&str>) -> std::result::Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let dest = root.join("w1/w2/w3/dest");
    std::fs::create_dir_all(&dest).expect("mkdir");
    std::fs::write(root.join("w1/w2/victim"), b"v").expect("write");
    let arch = root.join("a.tar");
    std::fs::write(&arch, bytes).expect("write");
    let before = listing(root, &dest);
    let r = extract_archive(&arch, &dest, sub);
    prop_assert_eq!(listing(root, &dest), before, "nothing outside dest changed");
    if let Err(e) = &r {
        prop_assert!(
            matches!(e.exit_code().code(), 2 | 4),
            "refusals are input errors (or I/O on corrupt data): {}",
            e
        );
    }
    let mut links = Vec::new();
    all_links(&dest, &mut links);
    if r.is_ok() {
        for link in links {
            prop_assert!(
                fs_resolve(&dest, &link).is_some(),
                "link {} resolves outside",
                link.display()
            );
        }
    } else {
        prop_assert!(links.is_empty(), "a refused archive creates no link");
    }
    Ok(())
}

fn name_strategy() -> impl Strategy<Value = Vec<u8>> {
    let part = prop::sample::select(vec![
        "a", "b", "l", "..", ".", ".git", ".GIT", "x.h", "", "sub",
    ]);
    prop::collection::vec(part, 0..5).prop_map(|parts| {
        let mut s = String::from("top");
        for p in parts {
            s.push('/');
            s.push_str(p);
        }
        s.into_bytes()
    })
}

fn target_strategy() -> impl Strategy<Value = Vec<u8>> {
    let part = prop::sample::select(vec!["a", "b", "l", "..", ".", ".git", "x.h", "sub", ""]);
    (any::<bool>(), prop::collection::vec(part, 0..6)).prop_map(|(abs, parts)| {
        let mut s = String::new();
        if abs {
            s.push('/');
        }
        s.push_str(&parts.join("/"));
        s.into_bytes()
    })
}

fn entry_strategy() -> impl Strategy<Value = E> {
    prop_oneof![
        4 => (name_strategy(), prop::collection::vec(any::<u8>(), 0..8)).prop_map(|(n, d)| E::File(n, d)),
        2 => name_strategy().prop_map(E::Dir),
        4 => (name_strategy(), target_strategy()).prop_map(|(n, t)| E::Link(n, t)),
        1 => (name_strategy(), prop::sample::select(vec![
            tar::EntryType::Fifo, tar::EntryType::Char, tar::EntryType::Link,
        ])).prop_map(|(n, k)| E::Typed(n, k)),
    ]
}

/// Cases per property (reported in the closing note of issue #7).
const CASES: u32 = 1500;

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_as_an_archive_never_panic_or_escape(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        check_archive(&bytes, None)?;
        // The same bytes behind a gzip header, so the decoder sees them too.
        let mut gz = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
        gz.extend_from_slice(&bytes);
        check_archive(&gz, None)?;
    }

    #[test]
    fn arbitrary_entries_and_link_targets_never_escape(
        entries in prop::collection::vec(entry_strategy(), 1..10),
        sub in prop::option::of(prop::sample::select(vec!["a", "sub", "l"])),
    ) {
        check_archive(&tar_of(&entries), sub)?;
    }

    #[test]
    fn tar_entries_with_corrupted_bytes_never_escape(
        entries in prop::collection::vec(entry_strategy(), 1..6),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
    ) {
        let mut bytes = tar_of(&entries);
        for (i, b) in flips {
            let at = i.index(bytes.len());
            bytes[at] = b;
        }
        check_archive(&bytes, None)?;
    }
}

// issue #7 class 5: a folder pin's `subdir` through a link would copy what the digest never saw.
#[test]
fn a_folder_pin_subdir_through_a_link_is_refused() {
    let src = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("secret.h"), "s").expect("write");
    std::os::unix::fs::symlink(outside.path(), src.path().join("llama.cpp")).expect("link");
    let e = real_subdir(src.path(), Some("llama.cpp")).expect_err("refused");
    assert_eq!(e.exit_code(), 2, "{e}");
    std::fs::create_dir_all(src.path().join("real/sub")).expect("mkdir");
    real_subdir(src.path(), Some("real/sub")).expect("a real folder");
}

// issue #7 class 4: a socket is refused like a FIFO, by type, before anything opens it.
#[test]
fn a_socket_in_a_folder_pin_is_refused() {
    let src = tempfile::tempdir().expect("tempdir");
    std::fs::write(src.path().join("a.c"), "x").expect("write");
    let _sock = std::os::unix::net::UnixListener::bind(src.path().join("s.sock")).expect("bind");
    let (_o, r) = copy(src.path());
    let text = refusal(r);
    assert!(text.contains("s.sock") && text.contains("socket"), "{text}");
    let e =
        crate::fsx::open_regular(&src.path().join("s.sock"), "file", true).expect_err("refused");
    assert_eq!(e.exit_code(), 2, "{e}");
}

// issue #20: the npm pin reads one member (the git bundle) out of the package tarball.
#[test]
fn a_member_is_read_only_when_it_is_one_plain_file_inside_the_archive() {
    let read = |entries: &[E]| {
        let dir = tempfile::tempdir().expect("tempdir");
        let arch = dir.path().join("a.tar");
        std::fs::write(&arch, tar_of(entries)).expect("write");
        read_member(&arch, "package/llama/b.bundle")
    };
    let ok = read(&[f("package/x"), f("./package/llama/b.bundle")]).expect("member");
    assert_eq!(ok, b"x");
    for (entries, want) in [
        (vec![l("package/llama/b.bundle", "../x")], "is a link"),
        (
            vec![E::Typed(
                b"package/llama/b.bundle".to_vec(),
                tar::EntryType::Link,
            )],
            "is a link",
        ),
        (
            vec![E::Dir(b"package/llama/b.bundle".to_vec())],
            "not a regular file",
        ),
        (
            vec![f("package/llama/b.bundle"), f("package/llama/b.bundle")],
            "more than once",
        ),
        (
            vec![f("package/../b"), f("package/llama/b.bundle")],
            "escapes",
        ),
        (vec![f("package/llama/other")], "no member"),
    ] {
        let e = read(&entries).expect_err(want);
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().contains(want), "{want}: {e}");
    }
}
