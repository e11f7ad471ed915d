//! The one rule for the file name of an exported patch, whether a commit's `Pinforge-Patch:`
//! trailer names it or it is derived from the subject (issue #19 class 5).
//!
//! A name is accepted when the bundle reader would read it back as exactly that patch: the
//! line `NAME` of a `series` file, read by the series reader itself ([`super::super::parse_series`],
//! not a second copy of its rules), gives one entry equal to `NAME`, so no spaces, `#`, options
//! or path separators; it ends in `.patch`, so it can never be one of the bundle's own files
//! (`series`, `ledger.toml`, `dropped/`, the `.pinforge-tmp-*` files of a write), which are
//! also refused by name, case-insensitively, with a message that says why; and it holds no
//! control character ([`pinforge_base::text::refuse_control`], the rule every room shares).

use crate::patch::PatchId;
use pinforge_base::error::{Error, Result};
use pinforge_base::text;
use std::path::Path;

/// The names a bundle folder holds for itself: the series, the rebase ledger and the folder
/// of dropped patches (the spellings `source::rebase` and the bundle reader use).
pub(crate) const BUNDLE_OWN: &[&str] = &["series", "ledger.toml", "dropped"];

/// The suffix of every exported patch file.
const SUFFIX: &str = ".patch";

/// `name` as the file name of an exported patch, or exit 2 naming `what` (the commit and its
/// trailer) with the reason.
pub(crate) fn patch_file_name(what: &str, name: &str) -> Result<PatchId> {
    text::refuse_control(what, name)?;
    let refuse = |why: String| {
        Error::input(what, format!("`{name}` {why}")).with_hint(
            "name the patch like `0001-short-slug.patch` in its `Pinforge-Patch:` trailer \
             (`git commit --amend`), or remove the trailer to get a name derived from the subject",
        )
    };
    if let Some(own) = BUNDLE_OWN.iter().find(|o| o.eq_ignore_ascii_case(name)) {
        return Err(refuse(format!(
            "is the bundle's own `{own}`; a patch written there would replace it"
        )));
    }
    if !name.ends_with(SUFFIX) {
        return Err(refuse(format!("does not end in `{SUFFIX}`")));
    }
    // The series reader decides what a valid entry is: the line must come back as itself.
    let read_back = super::super::parse_series(Path::new("series"), &format!("{name}\n"));
    match read_back {
        Ok(entries) if entries.len() == 1 && entries[0].id.as_str() == name => {
            Ok(entries[0].id.clone())
        }
        Ok(_) => Err(refuse(
            "is not one `series` entry: the series reader would read another name \
             (spaces, `#` and options are not part of a file name)"
                .into(),
        )),
        Err(e) => Err(refuse(format!("is not a valid `series` entry ({e})"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::Bundle;

    #[test]
    fn the_issue_examples_are_refused_and_ordinary_names_pass() {
        for bad in [
            "ledger.toml",
            "series",
            "SERIES",
            "dropped",
            "0001 fix b.patch",
            "0001-fix.patch # note",
            "0001-fix.patch -p1",
            "0001-fix.diff",
            "a/b.patch",
            "../b.patch",
            ".hidden.patch",
            ".patch",
            "0001-fix\n.patch",
            "0001-\u{202e}hctap.patch",
            "",
        ] {
            let e = patch_file_name("commit abc", bad).expect_err(bad);
            assert_eq!(e.exit_code(), 2, "{bad:?}");
            assert!(e.to_string().contains("commit abc"), "{e}");
        }
        let e = patch_file_name("c", "ledger.toml").expect_err("reserved");
        assert!(e.to_string().contains("bundle's own"), "{e}");
        for good in ["0001-kv-cache-fix.patch", "fix_1.2.patch", "x.patch"] {
            assert_eq!(patch_file_name("c", good).expect(good).as_str(), good);
        }
    }

    /// Trailer values an operator or an attacker might write: reserved names, separators,
    /// whitespace, comment marks, control and bidi characters, dots, and plain slugs.
    fn trailer_name() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            Just("series".to_string()),
            Just("ledger.toml".to_string()),
            Just("dropped".to_string()),
            Just(".patch".to_string()),
            Just(".diff".to_string()),
            Just(".".to_string()),
            Just("/".to_string()),
            Just("\\".to_string()),
            Just(" ".to_string()),
            Just("\t".to_string()),
            Just("#".to_string()),
            Just("-p1".to_string()),
            Just("\n".to_string()),
            Just("\u{1b}[31m".to_string()),
            Just("\u{202e}".to_string()),
            Just("\u{a0}".to_string()),
            "[0-9]{4}-[a-z_.-]{1,12}".prop_map(|s| s),
            proptest::char::any().prop_map(|c| c.to_string()),
        ];
        proptest::collection::vec(piece, 1..6).prop_map(|v| v.concat())
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 600,
            failure_persistence: None,
            ..proptest::test_runner::Config::default()
        })]

        // issue #19 class 5, as a class: every accepted name is a `.patch` file without
        // control characters, none of the bundle's own names, and a real bundle folder holding
        // it and a series naming it loads back with exactly that patch in its series.
        #[test]
        fn an_accepted_trailer_name_always_loads_back_as_itself(name in trailer_name()) {
            match patch_file_name("commit c", &name) {
                Err(e) => proptest::prop_assert_eq!(e.exit_code(), 2),
                Ok(id) => {
                    proptest::prop_assert_eq!(id.as_str(), name.as_str());
                    proptest::prop_assert!(name.ends_with(".patch"));
                    proptest::prop_assert!(text::first_unsafe(&name).is_none());
                    proptest::prop_assert!(
                        !BUNDLE_OWN.iter().any(|o| o.eq_ignore_ascii_case(&name))
                    );
                    let dir = tempfile::tempdir().expect("tempdir");
                    std::fs::write(dir.path().join(&name), b"x\n").expect("write patch");
                    std::fs::write(dir.path().join("series"), format!("{name}\n"))
                        .expect("write series");
                    let b = Bundle::load(dir.path()).expect("the bundle loads");
                    proptest::prop_assert_eq!(b.series.len(), 1);
                    proptest::prop_assert_eq!(b.series[0].id.as_str(), name.as_str());
                    proptest::prop_assert!(b.files.contains_key(&id));
                }
            }
        }
    }
}
