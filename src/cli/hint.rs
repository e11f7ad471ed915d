//! Hints that name the options actually in use (issue #8): a hint that suggests a command
//! (`` `pinforge history` ``) is rewritten, where errors are rendered, to repeat the
//! `--workspace` and `--root` the user typed, so that copying it acts on the same workspace
//! and install root. Library code keeps writing plain `` `pinforge CMD ...` `` spans: it does
//! not know how it was invoked, and this is the one place that does.
//!
//! Only options given on the command line are repeated (one set through `PINFORGE_ROOT` or
//! `PINFORGE_WORKSPACE` is still set in the shell that runs the hint). `--root` is added only to
//! a command that takes it, as the clap definition says.

use clap::parser::ValueSource;
use clap::ArgMatches;
use pinforge_base::process;
use std::path::PathBuf;

/// The options a hint repeats.
#[derive(Debug, Clone, Default)]
pub(crate) struct HintOptions {
    /// `--workspace DIR`, as typed.
    pub workspace: Option<PathBuf>,
    /// `--root DIR`, as typed.
    pub root: Option<PathBuf>,
}

impl HintOptions {
    /// The options of `matches` that came from the command line (at any subcommand depth).
    pub(crate) fn from_matches(matches: &ArgMatches) -> HintOptions {
        HintOptions {
            workspace: given(matches, "workspace"),
            root: given(matches, "root"),
        }
    }

    /// `hint` with every `` `pinforge …` `` span repeating the options in use.
    pub(crate) fn apply(&self, hint: &str) -> String {
        if self.workspace.is_none() && self.root.is_none() {
            return hint.to_string();
        }
        let mut out = String::new();
        let mut rest = hint;
        while let Some(i) = rest.find("`pinforge") {
            out.push_str(&rest[..i + 1]);
            let span_start = &rest[i + 1..];
            let Some(end) = span_start.find('`') else {
                out.push_str(span_start);
                return out;
            };
            out.push_str(&self.command(&span_start[..end]));
            out.push('`');
            rest = &span_start[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// One suggested command line (`pinforge WORDS...`) with the options inserted.
    fn command(&self, line: &str) -> String {
        let words: Vec<&str> = line.split(' ').collect();
        if words.first() != Some(&"pinforge") {
            return line.to_string();
        }
        let mut out = vec!["pinforge".to_string()];
        if let Some(w) = &self.workspace {
            out.push("--workspace".into());
            out.push(quote(w));
        }
        // The subcommand path (`patch lint`), then --root where that command takes it.
        use clap::CommandFactory;
        let mut cmd = super::Cli::command();
        let mut n = 1;
        while let Some(sub) = words.get(n).and_then(|w| cmd.find_subcommand(w)).cloned() {
            out.push(words[n].to_string());
            cmd = sub;
            n += 1;
        }
        let takes_root = n > 1 && cmd.get_arguments().any(|a| a.get_id() == "root");
        let already = words
            .iter()
            .any(|w| *w == "--root" || w.starts_with("--root="));
        if let (Some(r), true, false) = (&self.root, takes_root, already) {
            out.push("--root".into());
            out.push(quote(r));
        }
        out.extend(words[n..].iter().map(|w| w.to_string()));
        out.join(" ")
    }
}

fn given(matches: &ArgMatches, id: &str) -> Option<PathBuf> {
    let mut m = matches;
    loop {
        if let Ok(Some(v)) = m.try_get_one::<PathBuf>(id) {
            if m.value_source(id) == Some(ValueSource::CommandLine) {
                return Some(v.clone());
            }
        }
        m = m.subcommand()?.1;
    }
}

/// A path as a shell word (quoted only when it needs to be): the one quoting rule of
/// [`process::shell_word`], so that a hint pastes into a shell as the command lines shown do.
fn quote(p: &std::path::Path) -> String {
    process::shell_word(&p.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(ws: Option<&str>, root: Option<&str>) -> HintOptions {
        HintOptions {
            workspace: ws.map(PathBuf::from),
            root: root.map(PathBuf::from),
        }
    }

    #[test]
    fn hints_repeat_the_workspace_and_root_in_use_where_the_command_takes_them() {
        let o = opts(Some("/w"), Some("/srv/my root"));
        assert_eq!(
            o.apply("`pinforge history` lists the generations"),
            "`pinforge --workspace /w history --root '/srv/my root'` lists the generations"
        );
        assert_eq!(
            o.apply("check --root; `pinforge install ...` creates it"),
            "check --root; `pinforge --workspace /w install --root '/srv/my root' ...` creates it"
        );
        // build and patch lint take no --root.
        assert_eq!(
            o.apply("run `pinforge build r.toml --variant v` first"),
            "run `pinforge --workspace /w build r.toml --variant v` first"
        );
        assert_eq!(
            o.apply("run `pinforge patch lint p` and `pinforge status`"),
            "run `pinforge --workspace /w patch lint p` and `pinforge --workspace /w status --root '/srv/my root'`"
        );
        // Nothing given: unchanged; a span that is not a pinforge command: unchanged.
        assert_eq!(
            opts(None, None).apply("`pinforge history` x"),
            "`pinforge history` x"
        );
        assert_eq!(o.apply("`git am` and `pinforge"), "`git am` and `pinforge");
    }

    #[test]
    fn only_options_typed_on_the_command_line_are_repeated() {
        use clap::CommandFactory;
        let m = super::super::Cli::command()
            .try_get_matches_from(["pinforge", "--workspace", "/w", "status", "--root", "/r"])
            .expect("parse");
        let o = HintOptions::from_matches(&m);
        assert_eq!(o.workspace, Some(PathBuf::from("/w")));
        assert_eq!(o.root, Some(PathBuf::from("/r")));
        let m = super::super::Cli::command()
            .try_get_matches_from(["pinforge", "status"])
            .expect("parse");
        assert!(HintOptions::from_matches(&m).root.is_none());
    }
}
