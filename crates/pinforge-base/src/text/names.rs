//! The name rules, in one place: every name that becomes a path component (a recipe, variant,
//! toolchain or toolkit name) is checked here before any folder is made from it, as cargo keeps
//! its rules in `restricted_names.rs`.

/// Whether `s` may name a folder: `[A-Za-z0-9][A-Za-z0-9._-]*`, at most 64 characters (so
/// never `.`, `..`, empty, absolute, or holding a separator). Recipe, variant and toolchain
/// names all become paths (`build/RECIPE/VARIANT/`).
pub fn is_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// A toolkit name is one file-name-safe word (`cuda-13.1.1`): letters, digits, `-`, `_`, `.`,
/// starting with a letter, so that it can never name a path.
pub fn is_plain_name(n: &str) -> bool {
    n.starts_with(|c: char| c.is_ascii_alphabetic())
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && !n.contains("..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neither_rule_admits_a_path() {
        for bad in ["", ".", "..", "a/b", "/abs", "a b", "-x", "\u{e9}t\u{e9}"] {
            assert!(!is_identifier(bad), "{bad:?}");
            assert!(!is_plain_name(bad), "{bad:?}");
        }
        assert!(!is_plain_name("a..b"), "a toolkit name never holds `..`");
        assert!(is_plain_name("cuda-13.1.1"));
        assert!(
            !is_plain_name("13.1"),
            "a toolkit name starts with a letter"
        );
        assert!(
            is_identifier("13.1"),
            "a variant name may start with a digit"
        );
        assert!(!is_identifier(&"a".repeat(65)));
    }
}
