//! The ledger (`ledger.toml` in the bundle folder): one `[[dropped]]` table per patch that left
//! the series, append-only. Before a rebase appends to it, the ledger is parsed and validated as
//! a ledger (exit 2 naming the line of a hand edit that broke it, issue #19); the new tables are
//! appended with `toml_edit`, never by matching lines, and the result is parsed again before it
//! is staged.

use super::text::at_span;
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use serde::Deserialize;
use std::path::Path;

/// The header a new ledger starts with.
const HEADER: &str =
    "# pinforge ledger: patches that left the series, append-only (one [[dropped]] table per patch).\n";

/// One ledger entry (`[[dropped]]`) to append.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub file: String,
    pub sha256: Sha256,
    pub verdict: String,
    pub applied_upstream: String,
    pub from: String,
    pub onto: String,
    pub date: String,
    pub kept_as: String,
    pub evidence: Vec<String>,
}

/// A ledger as read: what every entry must hold, with the types it must have.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    #[serde(default)]
    dropped: Vec<toml::Spanned<EntryIn>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[allow(
    dead_code,
    reason = "read to check each entry's shape; only some fields are used"
)]
struct EntryIn {
    file: String,
    sha256: Sha256,
    verdict: String,
    applied_upstream: String,
    from: String,
    onto: String,
    date: String,
    kept_as: String,
    evidence: Vec<String>,
}

/// Parse and validate the ledger text: TOML, every entry of the ledger's shape, and every
/// `kept-as` a file directly under `dropped/`. Errors name `path:line:column`.
pub(super) fn validate(path: &Path, text: &str) -> Result<()> {
    let hint = "the ledger is append-only and written by `pinforge rebase`; undo the hand edit \
                (version control has it), then run the rebase again";
    let doc: Doc = toml::from_str(text).map_err(|e| {
        Error::input(
            at_span(path, text, e.span()),
            format!("not a valid ledger: {}", e.message()),
        )
        .with_hint(hint)
    })?;
    for d in &doc.dropped {
        let kept = d.get_ref().kept_as.as_str();
        let name = kept.strip_prefix("dropped/").unwrap_or("");
        let plain = !name.is_empty() && !name.contains('/') && !name.starts_with('.');
        if !plain {
            return Err(Error::input(
                at_span(path, text, Some(d.span())),
                format!(
                    "not a valid ledger: kept-as {} is not a file under dropped/",
                    pinforge_base::text::shown(kept)
                ),
            )
            .with_hint(hint));
        }
    }
    Ok(())
}

/// The ledger text (the old one, validated, or a new header) with `entries` appended as
/// `[[dropped]]` tables, parsed again before it is returned.
pub(super) fn appended(path: &Path, old: Option<&str>, entries: &[Entry]) -> Result<String> {
    let old = match old {
        Some(text) => {
            validate(path, text)?;
            text.to_string()
        }
        None => HEADER.to_string(),
    };
    let doc: toml_edit::DocumentMut = old
        .parse()
        .map_err(|e: toml_edit::TomlError| Error::input(path.display(), e.message().to_string()))?;
    let mut new_tables = toml_edit::ArrayOfTables::new();
    for e in entries {
        new_tables.push(table(e));
    }
    // A fresh document holds only the new tables; appended as text after the old document,
    // which is kept byte for byte (the ledger is append-only).
    let mut tail = toml_edit::DocumentMut::new();
    tail.insert("dropped", toml_edit::Item::ArrayOfTables(new_tables));
    let mut text = old.clone();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push('\n');
    text.push_str(&tail.to_string());
    // The new text must still be a ledger, and its entries the old ones plus ours.
    validate(path, &text)?;
    let after: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| Error::Internal(format!("{}: {e}", path.display())))?;
    if count(&after) != count(&doc) + entries.len() {
        return Err(Error::Internal(format!(
            "{}: the appended ledger does not hold the old entries plus the new ones",
            path.display()
        )));
    }
    Ok(text)
}

fn count(doc: &toml_edit::DocumentMut) -> usize {
    doc.get("dropped")
        .and_then(|i| i.as_array_of_tables())
        .map(|a| a.len())
        .unwrap_or(0)
}

fn table(e: &Entry) -> toml_edit::Table {
    let mut t = toml_edit::Table::new();
    t.insert("file", toml_edit::value(e.file.as_str()));
    t.insert("sha256", toml_edit::value(e.sha256.to_string()));
    t.insert("verdict", toml_edit::value(e.verdict.as_str()));
    t.insert(
        "applied-upstream",
        toml_edit::value(e.applied_upstream.as_str()),
    );
    t.insert("from", toml_edit::value(e.from.as_str()));
    t.insert("onto", toml_edit::value(e.onto.as_str()));
    t.insert("date", toml_edit::value(e.date.as_str()));
    t.insert("kept-as", toml_edit::value(e.kept_as.as_str()));
    let ev: toml_edit::Array = e.evidence.iter().map(String::as_str).collect();
    t.insert("evidence", toml_edit::value(ev));
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(file: &str) -> Entry {
        Entry {
            file: file.into(),
            sha256: Sha256::of_bytes(b"p"),
            verdict: "merged".into(),
            applied_upstream: "commit abc".into(),
            from: "v1".into(),
            onto: "v2".into(),
            date: "2026-12-02".into(),
            kept_as: format!("dropped/{file}"),
            evidence: vec!["strong history: x".into()],
        }
    }

    #[test]
    fn entries_are_appended_after_the_old_text_kept_byte_for_byte_with_its_comments() {
        let p = Path::new("patches/ledger.toml");
        let first = appended(p, None, &[entry("0001-a.patch")]).expect("first");
        let edited = format!("{first}# a comment a person added\n");
        let second = appended(p, Some(&edited), &[entry("0002-b.patch")]).expect("second");
        assert!(second.starts_with(&edited), "{second}");
        let v: toml::Value = toml::from_str(&second).expect("toml");
        assert_eq!(v["dropped"].as_array().expect("dropped").len(), 2);
    }

    // issue #19 class 4: a hand-edited ledger that is not a ledger is never appended to.
    #[test]
    fn a_ledger_with_a_wrong_type_or_a_syntax_error_is_refused_naming_its_line() {
        let p = Path::new("patches/ledger.toml");
        let good = appended(p, None, &[entry("0001-a.patch")]).expect("first");
        let wrong_type = good.replace("verdict = \"merged\"", "verdict = 7");
        let line = wrong_type
            .lines()
            .position(|l| l.starts_with("verdict = 7"))
            .expect("line")
            + 1;
        let e = appended(p, Some(&wrong_type), &[entry("0002-b.patch")]).expect_err("type");
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.to_string().contains(&format!("ledger.toml:{line}:")),
            "{e}"
        );
        let syntax = format!("{good}[[dropped]\n");
        let e = appended(p, Some(&syntax), &[entry("0002-b.patch")]).expect_err("syntax");
        let line = syntax.lines().count();
        assert!(
            e.to_string().contains(&format!("ledger.toml:{line}:")),
            "{e}"
        );
        let escape = good.replace("dropped/0001-a.patch", "../../etc/passwd");
        let e = appended(p, Some(&escape), &[]).expect_err("kept-as");
        assert!(e.to_string().contains("kept-as"), "{e}");
    }
}
