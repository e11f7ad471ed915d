//! A trial's record: the serialized documents ([`schema`]) and the record-folder helpers
//! ([`folder`]). The schema imports no trial logic, and the folder helpers only `base`, so the
//! soak and report code sits above both.

pub(crate) mod folder;
pub(crate) mod schema;

pub(crate) use folder::{claim_record_dir, commit_final, error_text, real_folder, write_json};
pub use folder::{AblateStep, FlipStep};
pub use schema::{
    AblationRecord, ArtifactRow, BuildSide, FlipRecord, Pair, SmokeSettings, SmokeSide,
    SubsetRecord, SCHEMA,
};
