//! The JSON Schema of every `--json` document, generated from the Rust types that serialize
//! it (schemars reads the same serde attributes), so a schema cannot drift from the output.
//! The committed copies live in `schemas/` (one file per id, `pinforge.build.v1.json` for
//! `pinforge.build/v1`); `pinforge __schemas --out schemas` regenerates them, and the
//! integration tests fail when a committed file is stale and validate real command output
//! against it.
//!
//! A new command joins in two steps:
//! 1. its `--json` document is a named type deriving `serde::Serialize` and
//!    `schemars::JsonSchema` (no ad-hoc `serde_json::json!`), its id a constant in the leaf
//!    `pinforge_record::schema_id` (`pub const NAME: &str = "pinforge.NAME/v1"`), printed
//!    with `print_json(schema_id::NAME, &doc)` (or `print_json_line`);
//! 2. one line in [`DOCUMENTS`] below: `doc::<Type>(id::NAME)`; then run
//!    `cargo run -- __schemas --out schemas` and commit the new file. The `schemas` test
//!    module's output cases should run the command once and validate it.
//!
//! The `schema` member that `print_json` adds to every document is added here too, as a
//! required constant.

use crate::outln;
use pinforge_base::error::{Error, Result};
use pinforge_record::schema_id as id;
use schemars::{JsonSchema, Schema};
use std::path::{Path, PathBuf};

/// One JSON document kind: its schema id and the schema of its type.
pub struct Document {
    /// `pinforge.COMMAND/v1`.
    pub id: &'static str,
    schema: fn() -> Schema,
}

fn schema_of<T: JsonSchema>() -> Schema {
    schemars::schema_for!(T)
}

const fn doc<T: JsonSchema>(id: &'static str) -> Document {
    Document {
        id,
        schema: schema_of::<T>,
    }
}

/// Every `--json` document pinforge prints: (schema id, type). One line per document kind.
pub const DOCUMENTS: &[Document] = &[
    doc::<super::build::BuildLine<'static>>(id::BUILD),
    doc::<pinforge_record::manifest::VerifyReport>(id::VERIFY),
    doc::<super::verify::VerifySigned<'static>>(id::VERIFY_SIGNED),
    doc::<pinforge_record::sign::Signed>(id::SIGN),
    doc::<pinforge_deploy::install::Verification>(id::VERIFY_INSTALLED),
    doc::<super::verify::VerifyInstalledSigned<'static>>(id::VERIFY_INSTALLED_SIGNED),
    doc::<pinforge_build::diff::ManifestDiff>(id::DIFF),
    doc::<pinforge_trial::render::Written>(id::REPORT),
    doc::<super::install::InstallJson<'static>>(id::INSTALL),
    doc::<pinforge_deploy::install::RollbackOutcome>(id::ROLLBACK),
    doc::<pinforge_deploy::install::Status>(id::STATUS),
    doc::<pinforge_deploy::install::History>(id::HISTORY),
    doc::<pinforge_deploy::install::GcOutcome>(id::GC),
    doc::<pinforge_deploy::install::RepairOutcome>(id::REPAIR),
    doc::<pinforge_deploy::smoke::SmokeReport>(id::SMOKE),
    doc::<super::patch::LintReport<'static>>(id::PATCH_LINT),
    doc::<pinforge_source::attribution::Report>(id::PATCH_CHECK_ATTRIBUTION),
    doc::<super::patch::ApplyReport>(id::PATCH_APPLY),
    doc::<super::patch::PatchList<'static>>(id::PATCH_LIST),
    doc::<super::patch::BundleWritten>(id::PATCH_BUNDLE),
    doc::<super::model::ModelWritten<'static>>(id::MODEL_TINY),
    doc::<super::vendor::VendorDigest>(id::VENDOR_DIGEST),
    doc::<super::toolkit::ToolkitOut<'static>>(id::TOOLKIT),
    doc::<super::patch::ExportReport<'static>>(id::PATCH_EXPORT),
    doc::<super::rebase::RebaseOut<'static>>(id::REBASE),
    doc::<pinforge_source::audit::Audit>(id::AUDIT),
    doc::<pinforge_trial::bisect::BisectReport>(id::BISECT),
    doc::<pinforge_trial::validate::Report>(id::VALIDATE),
    doc::<pinforge_trial::validate::merge::MergeReport>(id::VALIDATE_MERGE),
    doc::<pinforge_trial::validate::served::ServeReport>(id::VALIDATE_SERVE),
    doc::<pinforge_trial::validate::EvidenceCheck>(id::VERIFY_EVIDENCE),
    doc::<pinforge_trial::soak::verify::SoakCheck>(id::SOAK_CHECK),
    doc::<pinforge_trial::flip::FlipRecord>(id::FLIP),
    doc::<pinforge_trial::ablate::AblationRecord>(id::ABLATE),
    doc::<pinforge_deploy::ship::PushOutcome>(id::PUSH),
    doc::<pinforge_deploy::ship::PullOutcome>(id::PULL),
];

impl Document {
    /// The schema of the whole document: the type's schema, plus the `schema` member.
    pub fn schema(&self) -> Result<serde_json::Value> {
        let mut v = (self.schema)().to_value();
        let obj = v.as_object_mut().ok_or_else(|| {
            Error::Internal(format!("{}: a document schema must be an object", self.id))
        })?;
        obj.insert("$id".into(), self.id.into());
        let props = obj
            .entry("properties")
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
        if let Some(p) = props.as_object_mut() {
            p.insert(
                "schema".into(),
                serde_json::json!({ "description": "the document's schema id", "const": self.id }),
            );
        }
        let required = obj
            .entry("required")
            .or_insert_with(|| serde_json::Value::Array(Vec::new()));
        if let Some(r) = required.as_array_mut() {
            // A type may have its own `schema` member (a record file's id, which
            // `print_json` replaces): required once, first.
            r.retain(|m| m != "schema");
            r.insert(0, "schema".into());
        }
        Ok(v)
    }

    /// The file name under `schemas/`: the id with `/` as `.`, then `.json`.
    pub fn file_name(&self) -> String {
        format!("{}.json", self.id.replace('/', "."))
    }
}

/// The schema of a document id.
pub fn find(id: &str) -> Option<&'static Document> {
    DOCUMENTS.iter().find(|d| d.id == id)
}

/// Arguments of the hidden `__schemas` command.
#[derive(Debug, clap::Args)]
pub struct SchemasArgs {
    /// Folder to write one `ID.json` per document into (created); without it, the ids
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Run `__schemas`: write every schema file, or list the ids.
pub(super) fn run(a: SchemasArgs) -> Result<pinforge_base::error::ExitCode> {
    match a.out {
        Some(dir) => write_all(&dir)?,
        None => {
            for d in DOCUMENTS {
                outln!("{}  {}", d.id, d.file_name());
            }
        }
    }
    Ok(pinforge_base::error::ExitCode::Ok)
}

fn write_all(dir: &Path) -> Result<()> {
    pinforge_base::fsx::create_dir_all(dir)?;
    for d in DOCUMENTS {
        let mut text = serde_json::to_string_pretty(&d.schema()?)
            .map_err(|e| Error::Internal(e.to_string()))?;
        text.push('\n');
        pinforge_base::fsx::write_atomic(&dir.join(d.file_name()), text.as_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_document_id_is_unique_and_names_an_object_schema_with_its_id() {
        let mut ids: Vec<&str> = DOCUMENTS.iter().map(|d| d.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), DOCUMENTS.len(), "duplicate schema ids");
        for d in DOCUMENTS {
            assert!(
                d.id.starts_with("pinforge.") && d.id.ends_with("/v1"),
                "{}",
                d.id
            );
            let s = d.schema().expect("schema");
            assert_eq!(s["properties"]["schema"]["const"], d.id);
            assert_eq!(s["required"][0], "schema");
            assert_eq!(s["type"], "object", "{}: a document is an object", d.id);
        }
    }
}
