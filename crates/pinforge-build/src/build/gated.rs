//! Options of a pin's tree that gate a source folder the tree does not have (issue #39).
//!
//! A registry crate or a release tarball often vendors part of upstream: the crate
//! `llama-cpp-sys-2` 0.1.161 leaves out llama.cpp's `app/`, while upstream's top-level
//! `CMakeLists.txt` gained `option(LLAMA_BUILD_APP … ${LLAMA_STANDALONE})` and
//! `if (LLAMA_BUILD_APP) add_subdirectory(app) endif()`. Built standalone, that option is ON and
//! the configure fails (`add_subdirectory given source "app" which is not an existing
//! directory`); the crate's own `build.rs` passes `LLAMA_BUILD_APP=OFF`. A recipe written for an
//! older pin cannot know of an option that did not exist yet, so moving it to the new pin (an
//! audit, a rebase, a bisect probe) would fail on a fact about the tree, not about the recipe.
//!
//! The rule, read from the tree and so the same for everyone: an `option(NAME …)` of the
//! top-level `CMakeLists.txt` that is the whole condition of a top-level `if (NAME)` whose body
//! adds a folder the tree lacks cannot be ON for this tree, so it is passed as `-DNAME=OFF`
//! unless the recipe sets it. The argument is in the manifest's CMake arguments like any other,
//! and the build log says why. Compound conditions (`A AND B`) are not decided here: the
//! configure failure then names the options in its hint ([`diagnose`]).

use std::path::Path;

/// A folder the top-level `CMakeLists.txt` adds under a condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Gate {
    /// The folder, as `add_subdirectory` names it.
    pub(crate) dir: String,
    /// The `if (…)` conditions around it, outermost first, as written.
    pub(crate) conditions: Vec<String>,
    /// The 1-based line of the `add_subdirectory`.
    pub(crate) line: usize,
}

/// An option turned off because the folder it gates is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Forced {
    /// The option's name.
    pub(crate) name: String,
    /// Where it is declared (1-based line of `option(`).
    pub(crate) option_line: usize,
    /// The folder it gates.
    pub(crate) dir: String,
}

impl Forced {
    /// The configure argument.
    pub(crate) fn arg(&self) -> String {
        format!("-D{}=OFF", self.name)
    }

    /// The build log's line saying why.
    pub(crate) fn why(&self) -> String {
        format!(
            "pinforge: {}: option {} (CMakeLists.txt:{}) gates add_subdirectory({}), and this tree has no {}/; set it in the recipe to override",
            self.arg(),
            self.name,
            self.option_line,
            self.dir,
            self.dir
        )
    }
}

/// The command name and argument text of a line that is one CMake command, lowercased name.
/// Comments (`#` outside quotes) are dropped; a command spread over lines is not joined (the
/// commands read here, `if`, `option`, `add_subdirectory`, are one line in the trees seen).
fn command(line: &str) -> Option<(String, String)> {
    let mut code = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            '#' if !quoted => break,
            _ => {}
        }
        code.push(c);
    }
    let code = code.trim();
    let open = code.find('(')?;
    let name = code[..open].trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let args = code[open + 1..].trim_end();
    let args = args.strip_suffix(')').unwrap_or(args).trim();
    Some((name.to_ascii_lowercase(), args.to_string()))
}

/// The declared options (name, 1-based line) and the conditional folders of one CMakeLists.txt.
pub(crate) fn scan(text: &str) -> (Vec<(String, usize)>, Vec<Gate>) {
    let mut options = Vec::new();
    let mut gates = Vec::new();
    let mut stack: Vec<String> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some((name, args)) = command(line) else {
            continue;
        };
        match name.as_str() {
            "option" => {
                if let Some(n) = args.split_whitespace().next() {
                    options.push((n.to_string(), i + 1));
                }
            }
            "if" => stack.push(args),
            // Another branch: the folder is no longer under the plain condition.
            "elseif" | "else" => {
                if let Some(top) = stack.last_mut() {
                    *top = format!("NOT ({top}) ...");
                }
            }
            "endif" => {
                stack.pop();
            }
            "add_subdirectory" if !stack.is_empty() => {
                if let Some(dir) = args.split_whitespace().next() {
                    gates.push(Gate {
                        dir: dir.trim_matches('"').to_string(),
                        conditions: stack.clone(),
                        line: i + 1,
                    });
                }
            }
            _ => {}
        }
    }
    (options, gates)
}

/// Whether `dir` names a folder of the tree that is missing (a variable in it is not decided).
fn missing(src: &Path, dir: &str) -> bool {
    !dir.contains("${") && !dir.starts_with('/') && !dir.contains("..") && !src.join(dir).is_dir()
}

/// The options to force off for the tree at `src`, leaving out those `set_by_recipe` names.
/// A tree without a readable top-level `CMakeLists.txt` has none (the configure says why).
pub(crate) fn forced_off(src: &Path, set_by_recipe: &dyn Fn(&str) -> bool) -> Vec<Forced> {
    let Ok(text) = pinforge_base::fsx::read_to_string(&src.join("CMakeLists.txt")) else {
        return Vec::new();
    };
    let (options, gates) = scan(&text);
    let mut out: Vec<Forced> = Vec::new();
    for g in gates.iter().filter(|g| missing(src, &g.dir)) {
        let [cond] = g.conditions.as_slice() else {
            continue;
        };
        let Some((name, line)) = options.iter().find(|(n, _)| n == cond.trim()) else {
            continue;
        };
        if set_by_recipe(name) || out.iter().any(|f| &f.name == name) {
            continue;
        }
        out.push(Forced {
            name: name.clone(),
            option_line: *line,
            dir: g.dir.clone(),
        });
    }
    out
}

/// A hint for a failed configure: when the log says a folder added by `add_subdirectory` does
/// not exist, the options of the condition around it, with where they are declared.
/// `seen` is the source folder as the configure named it (the fixed build path, when used).
pub(crate) fn diagnose(src: &Path, seen: &Path, log: &str) -> Option<String> {
    const SAYS: &str = "add_subdirectory given source \"";
    let at = log.find(SAYS)? + SAYS.len();
    let named = log[at..].split('"').next()?;
    let dir = Path::new(named)
        .strip_prefix(seen)
        .or_else(|_| Path::new(named).strip_prefix(src))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| named.to_string());
    let text = pinforge_base::fsx::read_to_string(&src.join("CMakeLists.txt")).ok()?;
    let (options, gates) = scan(&text);
    let gate = gates.iter().find(|g| g.dir == dir)?;
    let names: Vec<String> = options
        .iter()
        .filter(|(n, _)| {
            gate.conditions.iter().any(|c| {
                c.split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                    .any(|w| w == n)
            })
        })
        .map(|(n, l)| format!("{n} (CMakeLists.txt:{l})"))
        .collect();
    if names.is_empty() {
        return None;
    }
    Some(format!(
        "this tree has no {dir}/, which CMakeLists.txt:{} adds under `if ({})`: likely an option newer than the recipe; set {} to false in the recipe's cmake table",
        gate.line,
        gate.conditions.join(") and if ("),
        names.join(" or ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTS: &str = "\
option(LLAMA_BUILD_COMMON \"common\" ON)
option(LLAMA_BUILD_TESTS \"tests\" ON) # a comment (with parens)
option(LLAMA_BUILD_APP       \"app\"  ${LLAMA_STANDALONE})
add_subdirectory(src)
if (LLAMA_BUILD_COMMON)
    add_subdirectory(common)
endif()
if (LLAMA_BUILD_COMMON AND LLAMA_BUILD_TESTS)
    add_subdirectory(tests)
endif()
if (LLAMA_BUILD_APP)
    add_subdirectory(app)
endif()
IF (LLAMA_BUILD_TESTS)
    # add_subdirectory(commented)
ELSE()
    ADD_SUBDIRECTORY(other)
ENDIF()
";

    fn tree(dirs: &[&str]) -> tempfile::TempDir {
        let t = tempfile::tempdir().expect("tempdir");
        std::fs::write(t.path().join("CMakeLists.txt"), LISTS).expect("write");
        for d in dirs {
            std::fs::create_dir(t.path().join(d)).expect("mkdir");
        }
        t
    }

    #[test]
    fn scan_reads_options_and_conditions() {
        let (options, gates) = scan(LISTS);
        assert_eq!(options.len(), 3);
        assert_eq!(options[2], ("LLAMA_BUILD_APP".to_string(), 3));
        let app = gates.iter().find(|g| g.dir == "app").expect("app gate");
        assert_eq!(app.conditions, vec!["LLAMA_BUILD_APP".to_string()]);
        assert_eq!(app.line, 12);
        assert!(gates.iter().all(|g| g.dir != "commented" && g.dir != "src"));
        let other = gates.iter().find(|g| g.dir == "other").expect("else gate");
        assert!(other.conditions[0].starts_with("NOT ("));
    }

    #[test]
    fn a_single_option_gating_a_missing_folder_is_forced_off() {
        let t = tree(&["common", "src"]);
        let forced = forced_off(t.path(), &|_| false);
        // tests/ is missing too, but under a compound condition: not decided here.
        assert_eq!(forced.len(), 1, "{forced:?}");
        assert_eq!(forced[0].arg(), "-DLLAMA_BUILD_APP=OFF");
        assert!(forced[0].why().contains("CMakeLists.txt:3"));
    }

    #[test]
    fn the_recipe_wins_and_present_folders_force_nothing() {
        let t = tree(&["common", "src"]);
        assert!(forced_off(t.path(), &|n| n == "LLAMA_BUILD_APP").is_empty());
        let t = tree(&["common", "src", "app"]);
        assert!(forced_off(t.path(), &|_| false).is_empty());
    }

    #[test]
    fn no_lists_file_forces_nothing() {
        let t = tempfile::tempdir().expect("tempdir");
        assert!(forced_off(t.path(), &|_| false).is_empty());
    }

    #[test]
    fn a_lists_file_that_is_not_utf8_forces_nothing() {
        let t = tempfile::tempdir().expect("tempdir");
        let mut bytes =
            b"option(WITH_APP ON)\nif (WITH_APP)\n add_subdirectory(app)\nendif()\n".to_vec();
        bytes.insert(0, 0xff);
        std::fs::write(t.path().join("CMakeLists.txt"), bytes).expect("write");
        // Not decided here: CMake itself reports the file when it configures.
        assert!(forced_off(t.path(), &|_| false).is_empty());
    }

    #[test]
    fn a_fifo_for_the_lists_file_is_not_read() {
        let t = tempfile::tempdir().expect("tempdir");
        let fifo = t.path().join("CMakeLists.txt");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success());
        if !made {
            eprintln!("mkfifo unavailable: not checked");
            return;
        }
        // Opening a FIFO for reading would block forever; the refusal returns at once.
        assert!(forced_off(t.path(), &|_| false).is_empty());
        assert!(diagnose(t.path(), t.path(), "add_subdirectory given source \"app\"").is_none());
    }

    #[test]
    fn diagnose_names_the_options_of_the_condition() {
        let t = tree(&["common", "src"]);
        let log = format!(
            "CMake Error at CMakeLists.txt:9 (add_subdirectory):\n  add_subdirectory given source \"{}/tests\" which is not an existing directory.\n",
            t.path().display()
        );
        let hint = diagnose(t.path(), Path::new("/fixed/src"), &log).expect("a hint");
        assert!(hint.contains("no tests/"), "{hint}");
        assert!(
            hint.contains(
                "LLAMA_BUILD_COMMON (CMakeLists.txt:1) or LLAMA_BUILD_TESTS (CMakeLists.txt:2)"
            ),
            "{hint}"
        );
        assert!(diagnose(t.path(), t.path(), "some other failure").is_none());
    }
}
