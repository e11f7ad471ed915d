//! Moved from tests/cli/schemas.rs: shared by both test tiers.

use crate::repo_root;
use serde_json::Value;

pub(crate) fn schema_file(id: &str) -> std::path::PathBuf {
    repo_root()
        .join("schemas")
        .join(format!("{}.json", id.replace('/', ".")))
}

/// Validate one document against the committed schema its `schema` member names; returns
/// the id.
pub(crate) fn validate(doc: &Value) -> String {
    let id = doc["schema"]
        .as_str()
        .unwrap_or_else(|| panic!("a document without a schema id: {doc}"))
        .to_string();
    let path = schema_file(&id);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{id}: no schema file {} ({e})", path.display()));
    let schema: Value = serde_json::from_str(&text).expect("schema JSON");
    let validator = jsonschema::validator_for(&schema)
        .unwrap_or_else(|e| panic!("{}: not a valid schema: {e}", path.display()));
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{id} output does not match {}:\n{}\n{doc:#}",
        path.display(),
        errors.join("\n")
    );
    id
}
