//! The schema id of every `--json` document pinforge prints, each written once: the command
//! line's print sites (`print_json(schema_id::BUILD, …)`) and its schema registry
//! (`pinforge __schemas`) name these constants, and the library writes the ids of its own
//! record files (flip, ablate) from here too, so an id cannot be misspelled at one of its
//! uses. A leaf: it imports nothing, so every layer and every command may import it, and the
//! registry, which imports the commands' document types, is imported by no command.

/// `build --json`, one line per variant.
pub const BUILD: &str = "pinforge.build/v1";
/// `verify MANIFEST --json`.
pub const VERIFY: &str = "pinforge.verify/v1";
/// `verify MANIFEST --allowed-signers F --json`: the verify report and its signer.
pub const VERIFY_SIGNED: &str = "pinforge.verify-signed/v1";
/// `sign --json`.
pub const SIGN: &str = "pinforge.sign/v1";
/// `verify --installed --json`.
pub const VERIFY_INSTALLED: &str = "pinforge.verify-installed/v1";
/// `verify --installed --allowed-signers F --json`: the layer's re-hash and its signer.
pub const VERIFY_INSTALLED_SIGNED: &str = "pinforge.verify-installed-signed/v1";
/// `diff --json`.
pub const DIFF: &str = "pinforge.diff/v1";
/// `install --json`.
pub const INSTALL: &str = "pinforge.install/v1";
/// `rollback --json`.
pub const ROLLBACK: &str = "pinforge.rollback/v1";
/// `status --json`.
pub const STATUS: &str = "pinforge.status/v1";
/// `history --json`.
pub const HISTORY: &str = "pinforge.history/v1";
/// `gc --json`.
pub const GC: &str = "pinforge.gc/v1";
/// `repair --json`, and the report a repair writes (`repairs/<n>.json`).
pub const REPAIR: &str = "pinforge.repair/v1";
/// `smoke --json` (and the smoke report of a gated `install --json`).
pub const SMOKE: &str = "pinforge.smoke/v1";
/// `patch lint --json`.
pub const PATCH_LINT: &str = "pinforge.patch-lint/v1";
/// `patch apply --json`.
pub const PATCH_APPLY: &str = "pinforge.patch-apply/v1";
/// `patch check-attribution --json`.
pub const PATCH_CHECK_ATTRIBUTION: &str = "pinforge.patch-check-attribution/v1";
/// `patch list --json`.
pub const PATCH_LIST: &str = "pinforge.patch-list/v1";
/// `patch bundle --json`.
pub const PATCH_BUNDLE: &str = "pinforge.patch-bundle/v1";
/// `model tiny --json`.
pub const MODEL_TINY: &str = "pinforge.model-tiny/v1";
/// `vendor digest --json`.
pub const VENDOR_DIGEST: &str = "pinforge.vendor-digest/v1";
/// `toolkit --json`. The on-disk `toolkit.json` is a record of another shape, with an id
/// of its own (`pinforge_build::cudakit`'s record schema, `pinforge.toolkit-record/v1`).
pub const TOOLKIT: &str = "pinforge.toolkit/v1";
/// `patch export --json`.
pub const PATCH_EXPORT: &str = "pinforge.patch-export/v1";
/// `rebase --json`.
pub const REBASE: &str = "pinforge.rebase/v1";
/// `audit --json`.
pub const AUDIT: &str = "pinforge.audit/v1";
/// `bisect --json` and the bisect log `build/.bisect/RECIPE/PATCH.json`.
pub const BISECT: &str = "pinforge.bisect/v1";
/// `validate --json`.
pub const VALIDATE: &str = "pinforge.validate/v1";
/// `validate --serve --json` and `validate --endpoint URL --json`.
pub const VALIDATE_SERVE: &str = "pinforge.validate-serve/v1";
/// `validate merge --json`.
pub const VALIDATE_MERGE: &str = "pinforge.validate-merge/v1";
/// `verify EVIDENCE --json` (a validate run's evidence.json or its run folder).
pub const VERIFY_EVIDENCE: &str = "pinforge.verify-evidence/v1";
/// `verify RECORD --json` (a soak flip's or soak ablation's record.json or its folder).
pub const SOAK_CHECK: &str = "pinforge.verify-soak/v1";
/// `flip --json` and the flip record file.
pub const FLIP: &str = "pinforge.flip/v1";
/// `ablate --json` and the ablation record file.
pub const ABLATE: &str = "pinforge.ablate/v1";
/// `push --json`.
pub const PUSH: &str = "pinforge.push/v1";
/// `pull --json`.
pub const PULL: &str = "pinforge.pull/v1";
/// `report --json`: the inputs and their kinds, and where the page went.
pub const REPORT: &str = "pinforge.report/v1";
