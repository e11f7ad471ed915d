//! The book's examples as tests: every ```console block under `docs/` is run against the
//! `pinforge` binary this build made, from the repository root, and its output (stdout and
//! stderr together) compared with what the page shows; a `? N` line under the command is its
//! expected exit code. `[..]` (part of a line) and `...` (whole lines) stand for what differs by
//! machine: paths, digests, times, tool versions.
//!
//! Only commands that need no llama.cpp build, no network and no CMake belong in such blocks;
//! every other example stays in a ```sh block, which trycmd leaves alone. trycmd reads a fence
//! without an info string as a test too, so every block in docs/ names its language.
//!
//! Capture new output with `TRYCMD=overwrite cargo test --test docs`, then read it and put
//! wildcards where it depends on the machine.

// The link check reads the repository's own pages with plain std::fs: clippy.toml's fs entries
// are about files data names. The rules this also lifts (set_var, remove_var, exit) are kept by
// `trust_toolkit::test_code_keeps_the_rules_the_allow_lifts`, which reads every file in tests/.
#![allow(clippy::disallowed_methods)]

#[test]
fn docs_examples() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let no_config = root.join("docs/examples/no-config-home");
    trycmd::TestCases::new()
        .register_bin("pinforge", trycmd::cargo::cargo_bin!("pinforge"))
        // trycmd passes the test's environment through. What of a developer's could change an
        // example is set here, on every command (as tests/cli sets its variables on the child):
        // the workspace is the repository, no signing key (empty is unset) and no operator
        // config file (a `[sign] key` there would be loaded first), no color.
        .env("PINFORGE_WORKSPACE", root.display().to_string())
        .env("PINFORGE_SIGN_KEY", "")
        .env("XDG_CONFIG_HOME", no_config.display().to_string())
        .env("NO_COLOR", "1")
        .case("docs/**/*.md");
}

/// Every relative link in README.md and the book resolves: the file exists, and a `#fragment`
/// names a heading of that file (as the forge makes anchors from headings). The pages are read
/// on the forge without a build step, so a broken link is a broken page.
#[test]
fn docs_links_resolve() {
    use std::path::{Path, PathBuf};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    markdown_files(&root.join("docs"), &mut pages);
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("read page");
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, fragment) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let dest: PathBuf = if file.is_empty() {
                page.clone()
            } else {
                page.parent().expect("page folder").join(file)
            };
            let shown = format!(
                "{}:{line}: {target}",
                page.strip_prefix(root).unwrap_or(page).display()
            );
            if !dest.exists() {
                broken.push(format!("{shown} (no such file)"));
                continue;
            }
            if let Some(fragment) = fragment {
                let dest_text = std::fs::read_to_string(&dest).unwrap_or_default();
                if !anchors(&dest_text).iter().any(|a| a == fragment) {
                    broken.push(format!("{shown} (no such heading)"));
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} links found: is the scanner broken?"
    );
    // The book's table of contents names every page, so none is reachable only by luck.
    let summary = std::fs::read_to_string(root.join("docs/SUMMARY.md")).expect("SUMMARY.md");
    let listed: Vec<PathBuf> = links(&summary)
        .into_iter()
        .map(|(_, target)| root.join("docs").join(target))
        .collect();
    for page in pages.iter().filter(|p| p.starts_with(root.join("docs"))) {
        if !page.ends_with("SUMMARY.md") && !listed.contains(page) {
            broken.push(format!("{}: not in docs/SUMMARY.md", page.display()));
        }
    }
    eprintln!("{checked} relative links checked in {} pages", pages.len());
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// A script or manifest a page shows is a real file that tests run (`docs/guide/slurm/`,
/// `docs/guide/k8s/`), shown under a line that links it, ``[`F`](F):``: the block there is the
/// file byte for byte, and every such file is shown by a page. The book is read as plain
/// Markdown on the forge, so an mdBook `{{#include}}` would show as its own text there.
#[test]
fn shown_files_equal_the_files_the_tests_run() {
    use std::collections::BTreeSet;
    use std::path::Path;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = Vec::new();
    markdown_files(&root.join("docs"), &mut pages);
    let mut shown = BTreeSet::new();
    let mut differ = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("read page");
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(target) = line
                .strip_prefix("[`")
                .and_then(|l| l.split_once("`]("))
                .and_then(|(name, rest)| {
                    let target = rest.split_once(')')?.0;
                    (name == target).then_some(target)
                })
            else {
                continue;
            };
            let file = page.parent().expect("page folder").join(target);
            let at = format!(
                "{}:{}",
                page.strip_prefix(root).unwrap_or(page).display(),
                i + 1
            );
            // The fence follows the link line after one blank line.
            if !lines.get(i + 2).is_some_and(|l| l.starts_with("```")) {
                differ.push(format!("{at}: no code block under the link to {target}"));
                continue;
            }
            let body: String = lines[i + 3..]
                .iter()
                .take_while(|l| !l.starts_with("```"))
                .map(|l| format!("{l}\n"))
                .collect();
            match std::fs::read_to_string(&file) {
                Ok(want) if want == body => {}
                Ok(_) => differ.push(format!(
                    "{at}: the block differs from {} (copy the file into the page)",
                    file.display()
                )),
                Err(e) => differ.push(format!("{at}: {}: {e}", file.display())),
            }
            shown.insert(std::fs::canonicalize(&file).unwrap_or(file));
        }
    }
    for folder in ["docs/guide/slurm", "docs/guide/k8s"] {
        for e in std::fs::read_dir(root.join(folder))
            .expect(folder)
            .flatten()
        {
            let p = std::fs::canonicalize(e.path()).expect("canonicalize");
            if !shown.contains(&p) {
                differ.push(format!("{}: shown by no page", p.display()));
            }
        }
    }
    assert!(
        shown.len() >= 4,
        "only {} shown files found: {shown:?}",
        shown.len()
    );
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

fn markdown_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read docs")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            markdown_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "md") {
            out.push(p);
        }
    }
}

/// The lines of `text` outside fenced code blocks, with their numbers.
fn prose(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fence: Option<String> = None;
    text.lines().enumerate().filter_map(move |(i, line)| {
        let ticks = line.len() - line.trim_start_matches('`').len();
        if ticks >= 3 {
            match &fence {
                None => {
                    fence = Some("`".repeat(ticks));
                    return None;
                }
                Some(f) if line.trim_end() == f.as_str() => {
                    fence = None;
                    return None;
                }
                Some(_) => {}
            }
        }
        fence.is_none().then_some((i + 1, line))
    })
}

/// A line without its inline code spans (a `](x)` inside backticks is no link).
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let run = rest[start..].len() - rest[start..].trim_start_matches('`').len();
        let delim = &rest[start..start + run];
        let after = &rest[start + run..];
        match after.find(delim) {
            Some(end) => rest = &after[end + run..],
            None => {
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `(line, target)` of every inline link `[text](target)`.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose(text) {
        let line = without_code(line);
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((n, after[..end].trim().to_string()));
            rest = &after[end..];
        }
    }
    out
}

/// The anchors the forge makes from a page's headings: lowercase, punctuation other than `-` and
/// `_` dropped, spaces as `-`, a repeated one suffixed `-1`, `-2`, ...
fn anchors(text: &str) -> Vec<String> {
    let (mut anchors, mut bases) = (Vec::new(), Vec::<String>::new());
    for (_, line) in prose(text) {
        let Some(title) = line.strip_prefix('#') else {
            continue;
        };
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        // Link text stays, link targets go: `[a](b)` reads as `a`.
        let mut plain = String::new();
        let mut rest = title.trim();
        while let Some(i) = rest.find("](") {
            plain.push_str(&rest[..i]);
            let after = &rest[i + 2..];
            rest = after.find(')').map_or("", |e| &after[e + 1..]);
        }
        plain.push_str(rest);
        let slug: String = plain
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = bases.iter().filter(|b| **b == slug).count();
        anchors.push(if n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        bases.push(slug);
    }
    anchors
}
