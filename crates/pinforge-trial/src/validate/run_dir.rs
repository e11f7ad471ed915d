//! The run folder `<workspace>/validate/<run-id>/` as one value, loaded and checked before it
//! is used: the inputs read (exit 2 before anything is written), the settings a resume must
//! match, the folder created with its input files (or reopened, its settings, grammar and
//! model checked against the record), and the canonical JSON every recorded file is written in.

use super::arm::{ArmRecord, ResolvedArm};
use super::row_check::RowRules;
use super::{engine, grammar, rows, Options};
use crate::record;
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::{fsx, text};
use pinforge_deploy::model;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Everything that decides a run's rows (a resume must match it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Settings {
    /// Baseline, candidate.
    pub arms: Vec<ArmRecord>,
    /// Rows per arm.
    pub rows: u64,
    /// The shard of the rows this run holds (absent: all of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<super::shard::Shard>,
    /// Generator seed (None with a prompt file).
    pub seed: Option<u64>,
    /// sha256 of prompts.jsonl.
    pub prompt_set_sha256: Sha256,
    /// Token budget.
    pub budget: u32,
    /// What each row drives (absent: the prompt-cache rows every run before it had).
    #[serde(default, skip_serializing_if = "engine::RowKind::is_default")]
    pub row_kind: engine::RowKind,
    /// sha256 of the schema file, when constrained.
    pub schema_sha256: Option<Sha256>,
    /// sha256 of the grammar converted from it.
    pub grammar_sha256: Option<Sha256>,
    /// The model: path and sha256.
    pub model: PathBuf,
    /// The model's sha256.
    pub model_sha256: Sha256,
    /// Model architecture.
    pub arch: String,
    /// Engine context.
    pub n_ctx: u64,
    /// pinforge's version.
    pub pinforge_version: String,
}

impl Settings {
    /// The arms as the summary names them, in run order.
    pub(crate) fn arm_ids(&self) -> Vec<super::summary::ArmId> {
        self.arms.iter().map(super::summary::ArmId::of).collect()
    }

    /// What these settings determine about every row of the run, over `prompts` (the
    /// prompt of each row index).
    pub(crate) fn row_rules(&self, prompts: &[String]) -> RowRules {
        RowRules::new(
            self.arms
                .iter()
                .map(|a| (a.name.clone(), a.digest))
                .collect(),
            self.rows,
            prompts,
            self.grammar_sha256.is_some(),
            self.budget,
        )
        .in_shard(self.shard)
    }
}

/// Check a run id from the command line: one plain path component.
pub(crate) fn check_run_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 100
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(Error::input(
            format!("--resume {}", id.escape_debug()),
            "a run id is one name of letters, digits, `-`, `_` and `.`",
        )
        .with_hint("the run id is printed when a run starts (the folder name under validate/)"))
    }
}

pub(super) fn canonical<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    // serde_json's maps are BTreeMaps here: sorted keys, one text per value.
    let v = serde_json::to_value(v).map_err(|e| Error::Internal(e.to_string()))?;
    let mut s = serde_json::to_vec_pretty(&v).map_err(|e| Error::Internal(e.to_string()))?;
    s.push(b'\n');
    Ok(s)
}

/// What a run reads before anything is written: the prompt of every row, the schema and the
/// grammar converted from it, and the model's bytes and architecture.
pub(super) struct Inputs {
    /// One prompt per row.
    pub(super) prompts: Vec<String>,
    /// prompts.jsonl as written.
    prompt_bytes: Vec<u8>,
    /// Its sha256.
    prompt_sha: Sha256,
    /// The schema text and its grammar, when constrained.
    pub(super) schema: Option<(String, String)>,
    /// The model file's bytes (the generated tiny model without `--model`).
    model_bytes: Vec<u8>,
    /// The model's architecture.
    arch: String,
}

impl Inputs {
    /// Read and check every input: a bad prompt file, schema or model is an input error
    /// before the builds are even looked at.
    pub(super) fn load(opts: &Options) -> Result<Inputs> {
        let prompts: Vec<String> = match &opts.prompts {
            Some(p) => {
                let set = rows::read_prompts(p)?;
                (0..opts.rows)
                    .map(|i| set[(i % set.len() as u64) as usize].clone())
                    .collect()
            }
            None => (0..opts.rows)
                .map(|i| rows::generated_prompt(opts.seed, i))
                .collect(),
        };
        let (prompt_bytes, prompt_sha) = rows::prompt_set_bytes(&prompts);
        let schema = match &opts.schema {
            Some(p) => {
                let text = fsx::read_to_string(p)?;
                let g = grammar::schema_to_gbnf(&text, p)?;
                Some((text, g))
            }
            None => None,
        };
        let model_bytes = match &opts.model {
            Some(m) => {
                let mut f = fsx::open_regular(m, "model file", true)?;
                let mut b = Vec::new();
                std::io::Read::read_to_end(&mut f, &mut b).at("read", m)?;
                b
            }
            None => model::tiny(opts.arch, 1).to_bytes(),
        };
        let arch = match &opts.model {
            Some(m) => model::architecture(m)?,
            None => opts.arch.name().to_string(),
        };
        Ok(Inputs {
            prompts,
            prompt_bytes,
            prompt_sha,
            schema,
            model_bytes,
            arch,
        })
    }

    /// The settings of a run over these inputs and arms, with the model at `model_path`.
    fn settings(&self, opts: &Options, arms: &[ResolvedArm], model_path: PathBuf) -> Settings {
        Settings {
            arms: arms.iter().map(|a| a.record.clone()).collect(),
            rows: opts.rows,
            shard: opts.shard,
            seed: opts.prompts.is_none().then_some(opts.seed),
            prompt_set_sha256: self.prompt_sha,
            budget: opts.budget,
            row_kind: opts.row_kind,
            schema_sha256: self
                .schema
                .as_ref()
                .map(|(t, _)| Sha256::of_bytes(t.as_bytes())),
            grammar_sha256: self
                .schema
                .as_ref()
                .map(|(_, g)| Sha256::of_bytes(g.as_bytes())),
            model: model_path,
            model_sha256: Sha256::of_bytes(&self.model_bytes),
            arch: self.arch.clone(),
            n_ctx: engine::N_CTX as u64,
            pinforge_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// A run folder ready for rows: created with its inputs written, or a resumed one whose
/// recorded settings, grammar and model match this command.
pub(super) struct RunDir {
    /// The run id (the folder's name).
    pub(super) id: String,
    /// The folder.
    pub(super) dir: PathBuf,
    /// The settings it records.
    pub(super) settings: Settings,
    /// The run folder's lock, held until the command ends: two commands appending rows to one
    /// run (a `--resume` while the run is still going, or two resumes) would write the same
    /// row twice and make the run unreadable. None for a folder no other command can know of
    /// yet (a merge's staging folder).
    pub(super) _lock: Option<fsx::DirLock>,
}

/// Remove the temp files (`.pinforge-tmp-…`) a killed writer of this run left in its folder.
/// The caller holds the run's lock, so no live writer owns one; left there, a resumed run's
/// evidence would not list it and `verify` would call it a file added after the run.
fn drop_dead_temp_files(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir).at("list", dir)? {
        let entry = entry.at("list", dir)?;
        let is_temp = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(".pinforge-tmp-"));
        if is_temp && entry.file_type().at("inspect", &entry.path())?.is_file() {
            std::fs::remove_file(entry.path()).at("remove", &entry.path())?;
        }
    }
    Ok(())
}

/// The lock of run `id`'s folder, or exit 2 when another pinforge works in it now.
fn lock_run(dir: &Path, id: &str) -> Result<fsx::DirLock> {
    fsx::DirLock::try_acquire(dir)?.ok_or_else(|| {
        Error::input(
            format!("run {id}"),
            format!(
                "another pinforge is writing this run now ({})",
                dir.display()
            ),
        )
        .with_hint("wait for it to end, then `--resume` it if it did not finish")
    })
}

impl RunDir {
    /// Create the run folder under `<workspace>/validate/`, or reopen `--resume ID`.
    /// `served`: the run is a served one (`validate --serve`/`--endpoint`); a resume of a
    /// folder of the other mode is refused, so neither writes its files into the other's.
    pub(super) fn open(
        opts: &Options,
        ws_root: &Path,
        inputs: &Inputs,
        arms: &[ResolvedArm],
        served: bool,
    ) -> Result<RunDir> {
        let vroot = check_folder(ws_root, opts.resume.as_deref())?;
        match &opts.resume {
            Some(id) => {
                check_mode(&vroot.join(id), id, served)?;
                RunDir::resume(opts, &vroot, id, inputs, arms)
            }
            None => RunDir::create(opts, &vroot, inputs, arms),
        }
    }

    /// The run's grammar file, which the engine loads when the rows are constrained.
    pub(super) fn grammar_path(&self) -> PathBuf {
        self.dir.join("grammar.gbnf")
    }

    /// A fresh folder `STAMP-DIGEST[-N]` (claimed with one `mkdir`) with the run's inputs.
    fn create(
        opts: &Options,
        vroot: &Path,
        inputs: &Inputs,
        arms: &[ResolvedArm],
    ) -> Result<RunDir> {
        if !record::real_folder(vroot)? {
            fsx::create_dir_all(vroot)?;
        }
        let stamp = pinforge_record::manifest::now_rfc3339().replace([':', '-'], "");
        let digest = Sha256::of_bytes(&canonical(&inputs.settings(opts, arms, PathBuf::new()))?);
        let mut n = 0;
        let run = loop {
            let id = if n == 0 {
                format!("{stamp}-{}", digest.short(8))
            } else {
                format!("{stamp}-{}-{n}", digest.short(8))
            };
            let dir = vroot.join(&id);
            match std::fs::create_dir(&dir) {
                Ok(()) => {
                    let model_path = match &opts.model {
                        Some(m) => fsx::absolute(m)?,
                        None => dir.join("model.gguf"),
                    };
                    let settings = inputs.settings(opts, arms, model_path);
                    let lock = Some(lock_run(&dir, &id)?);
                    break RunDir {
                        id,
                        dir,
                        settings,
                        _lock: lock,
                    };
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 100 => n += 1,
                Err(e) => return Err(Error::io("create", &dir, e)),
            }
        };
        fsx::write_atomic(&run.dir.join("prompts.jsonl"), &inputs.prompt_bytes)?;
        if let Some((text, g)) = &inputs.schema {
            fsx::write_atomic(&run.dir.join("schema.json"), text.as_bytes())?;
            fsx::write_atomic(&run.grammar_path(), g.as_bytes())?;
        }
        if opts.model.is_none() {
            fsx::write_atomic(&run.dir.join("model.gguf"), &inputs.model_bytes)?;
        }
        fsx::write_atomic(&run.dir.join("settings.json"), &canonical(&run.settings)?)?;
        Ok(run)
    }

    /// Reopen run `id`: its recorded settings must equal this command's, and the grammar,
    /// schema and model it loads must still be the recorded files.
    fn resume(
        opts: &Options,
        vroot: &Path,
        id: &str,
        inputs: &Inputs,
        arms: &[ResolvedArm],
    ) -> Result<RunDir> {
        let dir = vroot.join(id);
        let sp = dir.join("settings.json");
        let no_run = || {
            Error::input(
                format!("--resume {id}"),
                format!("no run here ({})", dir.display()),
            )
            .with_hint("`ls validate/` in the workspace lists the runs")
        };
        // check_folder found the folder real and its entries regular files (or absent).
        if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            return Err(no_run());
        }
        let lock = Some(lock_run(&dir, id)?);
        drop_dead_temp_files(&dir)?;
        if std::fs::symlink_metadata(&sp).is_err() {
            return Err(no_run());
        }
        let old: Settings = serde_json::from_slice(&fsx::read(&sp)?)
            .map_err(|e| Error::input(sp.display(), format!("not a run's settings: {e}")))?;
        let model_path = old.model.clone();
        let new = inputs.settings(
            opts,
            arms,
            match &opts.model {
                Some(m) => fsx::absolute(m)?,
                None => model_path,
            },
        );
        if new != old {
            return Err(Error::input(
                format!("--resume {id}"),
                format!(
                    "this command's settings differ from the run's in: {}",
                    differing_keys(&old, &new).join(", ")
                ),
            )
            .with_hint(
                "resume with the same arms, rows, seed/prompts, budget, row kind, schema and model",
            ));
        }
        let run = RunDir {
            id: id.to_string(),
            dir,
            settings: new,
            _lock: lock,
        };
        run.check_recorded_files()?;
        Ok(run)
    }

    /// The engine loads the run's grammar file and its own model copy: they must still be the
    /// grammar (and the schema it came from) and the model bytes the run recorded, or resumed
    /// rows would run under another constraint or model than the recorded ones.
    fn check_recorded_files(&self) -> Result<()> {
        let (settings, run_id) = (&self.settings, &self.id);
        for (name, want) in [
            ("grammar.gbnf", settings.grammar_sha256),
            ("schema.json", settings.schema_sha256),
        ] {
            let Some(want) = want else { continue };
            let p = self.dir.join(name);
            let (got, _) = Sha256::of_file(&p)?;
            if got != want {
                return Err(Error::input(
                    p.display(),
                    format!("has sha256 {got}, the run recorded {want}: it changed since the run started"),
                )
                .with_hint(format!(
                    "restore {name} of run {run_id}, or start a new run instead of --resume"
                )));
            }
        }
        let (got, _) = Sha256::of_file(&settings.model)?;
        if got != settings.model_sha256 {
            return Err(Error::check(
                settings.model.display(),
                format!(
                    "the model has sha256 {got}, the run recorded {}",
                    settings.model_sha256
                ),
            ));
        }
        Ok(())
    }
}

/// The run folders' shape, before anything in them is read or written: `validate/` (and,
/// resuming, `validate/ID`) must be a real folder or absent, never a link (the check flip and
/// ablate make of their record folders, [`record::real_folder`]), and every entry of a
/// resumed run folder must be a regular file: a link there (`rows.jsonl` to anywhere) is an
/// input error naming it, not followed. Returns `validate/`.
pub(crate) fn check_folder(ws_root: &Path, resume: Option<&str>) -> Result<PathBuf> {
    let vroot = ws_root.join("validate");
    let vroot_there = record::real_folder(&vroot)?;
    let Some(id) = resume else {
        return Ok(vroot);
    };
    let dir = vroot.join(id);
    if !vroot_there || !record::real_folder(&dir)? {
        return Err(Error::input(
            format!("--resume {id}"),
            format!("no run here ({})", dir.display()),
        )
        .with_hint("`ls validate/` in the workspace lists the runs"));
    }
    let entries = std::fs::read_dir(&dir).at("list", &dir)?;
    for entry in entries {
        let entry = entry.at("list", &dir)?;
        let path = entry.path();
        let ft = entry.file_type().at("inspect", &path)?;
        if ft.is_file() {
            continue;
        }
        let kind = if ft.is_symlink() {
            "a symlink"
        } else if ft.is_dir() {
            "a folder"
        } else {
            fsx::special_kind(&ft).unwrap_or("not a regular file")
        };
        // The entry's name is anyone's: shown escaped, never raw.
        return Err(Error::input(
            text::shown(&path.display().to_string()),
            format!(
                "is {kind}: a run folder holds only regular files, and no link in it is followed"
            ),
        )
        .with_hint(format!(
            "restore the run's own file in its place, or start a new run instead of --resume {id}"
        )));
    }
    Ok(vroot)
}

/// A resumed folder must be of the mode that resumes it: a served run's files
/// (`serve-settings.json`, `serve-rows.jsonl`) or an in-process run's (`rows.jsonl`,
/// `evidence.json`) name it.
fn check_mode(dir: &Path, id: &str, served: bool) -> Result<()> {
    let has = |n: &str| std::fs::symlink_metadata(dir.join(n)).is_ok();
    let is_served = has("serve-settings.json") || has("serve-rows.jsonl");
    let is_in_process = has("rows.jsonl") || has("evidence.json");
    let refuse = |what: &str, hint: &str| {
        Err(Error::input(format!("--resume {id}"), format!("is {what}"))
            .with_hint(hint.to_string()))
    };
    match (served, is_served, is_in_process) {
        (true, _, true) => refuse(
            "an in-process validate run, not a served one",
            "resume it without --serve/--endpoint",
        ),
        (false, true, _) => refuse(
            "a served run (validate --serve or --endpoint)",
            "resume it with the same --serve/--endpoint options",
        ),
        _ => Ok(()),
    }
}

/// The top-level settings keys whose values differ, for the resume refusal.
pub(super) fn differing_keys(old: &Settings, new: &Settings) -> Vec<String> {
    let a = serde_json::to_value(old).unwrap_or_default();
    let b = serde_json::to_value(new).unwrap_or_default();
    match (a, b) {
        // Both sides' keys: a setting recorded only when not its default (`row_kind`) is
        // absent from one side when the other names it.
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            keys.into_iter()
                .filter(|k| a.get(*k) != b.get(*k))
                .cloned()
                .collect()
        }
        _ => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_folder_or_run_file_that_is_a_link_is_refused_naming_it() {
        let ws = tempfile::tempdir().expect("ws");
        let outside = tempfile::tempdir().expect("outside");
        // No validate/ yet: a fresh run may create it; a resume finds no run.
        assert!(check_folder(ws.path(), None).is_ok());
        let e = check_folder(ws.path(), Some("r1")).expect_err("no run");
        assert!(e.to_string().contains("no run here"), "{e}");
        // validate/ itself a link: refused for a fresh run too.
        std::os::unix::fs::symlink(outside.path(), ws.path().join("validate")).expect("link");
        let e = check_folder(ws.path(), None).expect_err("validate/ is a link");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().contains("symlink"), "{e}");
        std::fs::remove_file(ws.path().join("validate")).expect("unlink");
        // The run folder a link to a real run outside the workspace.
        let vroot = ws.path().join("validate");
        std::fs::create_dir(&vroot).expect("mkdir");
        std::fs::write(outside.path().join("settings.json"), b"{}").expect("settings");
        std::os::unix::fs::symlink(outside.path(), vroot.join("r1")).expect("link");
        let e = check_folder(ws.path(), Some("r1")).expect_err("run folder is a link");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(
            e.to_string()
                .starts_with(&format!("{}: is a symlink", vroot.join("r1").display())),
            "{e}"
        );
        // A real run folder whose rows.jsonl (or any file) is a link, or a FIFO.
        let run = vroot.join("r2");
        std::fs::create_dir(&run).expect("mkdir");
        std::fs::write(run.join("settings.json"), b"{}").expect("settings");
        assert!(check_folder(ws.path(), Some("r2")).is_ok());
        std::os::unix::fs::symlink(outside.path().join("rows.jsonl"), run.join("rows.jsonl"))
            .expect("link");
        let e = check_folder(ws.path(), Some("r2")).expect_err("rows.jsonl is a link");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(
            e.to_string().starts_with(&format!(
                "{}: is a symlink",
                run.join("rows.jsonl").display()
            )),
            "{e}"
        );
        std::fs::remove_file(run.join("rows.jsonl")).expect("unlink");
        let fifo = run.join("summary.json");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("c");
        assert_eq!(pinforge_sys::mkfifo(c.as_c_str(), 0o644), 0);
        let e = check_folder(ws.path(), Some("r2")).expect_err("FIFO");
        assert!(e.to_string().contains("a FIFO"), "{e}");
        assert_eq!(
            std::fs::read_dir(outside.path()).expect("ls").count(),
            1,
            "nothing written outside"
        );
    }
}
