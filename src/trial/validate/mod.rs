//! `pinforge validate`: the A/B row harness. Two builds (installed layers or manifests), the
//! same rows in the same order on a long-lived engine process per arm (and per `--jobs`
//! worker), each row recorded as one JSON line with a mechanically classified outcome, a
//! summary computed from the row file alone, and an evidence manifest `verify` re-checks.
//!
//! Run folder `<workspace>/validate/<run-id>/`: `settings.json` (what the run compares; a
//! resume must match it), `prompts.jsonl` (the prompt of every row), `grammar.gbnf` and
//! `schema.json` (when constrained), `model.gguf` (the generated tiny model), `rows.jsonl`
//! (append-only, see [`rows`]), `summary.json` and `evidence.json` (written last).
//!
//! Trust: each arm's build is verified as smoke verifies it ([`smoke::target_from_manifest`],
//! [`smoke::target_from_installed`]) before the shim is compiled or anything is loaded; an
//! engine restart after a crash first re-checks that every verified library is still the
//! same file (device, inode, size, change times) and refuses to load one that is not.

pub mod engine;
pub mod grammar;
pub mod rows;
pub mod summary;

use crate::base::digest::Sha256;
use crate::base::error::{Error, IoContext, Result};
use crate::base::fsx;
use crate::base::progress::Reporter;
use crate::deploy::install::{Layer, Root};
use crate::deploy::model::{self, Arch};
use crate::deploy::smoke::{self, SmokeTarget};
use engine::{Engine, EngineArgs, Request, Spawn};
use rows::{Evidence, Observed, Outcome, Row, RowFile};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use summary::{ArmId, Derived};

/// Where an arm's build comes from.
#[derive(Debug, Clone)]
pub enum ArmSource {
    /// A layer of an install root.
    Installed {
        /// The install root.
        root: PathBuf,
        /// The layer.
        layer: Layer,
    },
    /// A manifest written by `pinforge build`.
    Manifest(PathBuf),
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Baseline, then candidate.
    pub arms: [ArmSource; 2],
    /// Rows per arm.
    pub rows: u64,
    /// A GGUF model (None: the tiny model of `arch`).
    pub model: Option<PathBuf>,
    /// Architecture of the tiny model.
    pub arch: Arch,
    /// Prompt generator seed.
    pub seed: u64,
    /// Prompts from a JSONL file instead of the generator (cycled over the rows).
    pub prompts: Option<PathBuf>,
    /// Token budget per row.
    pub budget: u32,
    /// JSON schema constraining every row.
    pub schema: Option<PathBuf>,
    /// Engine processes per arm.
    pub jobs: u32,
    /// Resume this run id.
    pub resume: Option<String>,
    /// Deadline per row.
    pub timeout: Duration,
    /// llama.cpp threads per engine.
    pub threads: i32,
    /// The workspace root.
    pub workspace: PathBuf,
}

/// An arm as recorded in the settings and the evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ArmRecord {
    /// Layer name or manifest variant (made unique).
    pub name: String,
    /// `installed:LAYER` or `manifest`.
    pub source: String,
    /// Store entry digest (installed) or the manifest's sha256.
    pub digest: Sha256,
    /// The manifest this arm's build is described by.
    pub manifest: PathBuf,
    /// Its sha256.
    pub manifest_sha256: Sha256,
    /// The verified libllama's sha256.
    pub libllama_sha256: Sha256,
    /// `recipe/variant`.
    pub build: String,
}

/// Everything that decides a run's rows (a resume must match it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Settings {
    /// Baseline, candidate.
    pub arms: Vec<ArmRecord>,
    /// Rows per arm.
    pub rows: u64,
    /// Generator seed (None with a prompt file).
    pub seed: Option<u64>,
    /// sha256 of prompts.jsonl.
    pub prompt_set_sha256: Sha256,
    /// Token budget.
    pub budget: u32,
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

/// One arm resolved and verified.
struct ResolvedArm {
    record: ArmRecord,
    target: SmokeTarget,
    identity: Vec<FileId>,
}

/// What a restart re-checks: the verified libraries are still the same files.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileId {
    path: PathBuf,
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

fn file_ids(target: &SmokeTarget) -> Result<Vec<FileId>> {
    use std::os::unix::fs::MetadataExt;
    let lib = target.root.join("lib");
    let mut out = Vec::new();
    let rd = std::fs::read_dir(&lib).at("list", &lib)?;
    let mut names: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains(".so"))
        .collect();
    names.sort();
    for p in names {
        let m = std::fs::symlink_metadata(&p).at("stat", &p)?;
        out.push(FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
            path: p,
        });
    }
    Ok(out)
}

fn resolve_arm(src: &ArmSource) -> Result<ResolvedArm> {
    let (target, source, digest, manifest) = match src {
        ArmSource::Installed { root, layer } => {
            let r = Root::open_existing(root)?;
            let target = smoke::target_from_installed(&r, Some(*layer))?;
            let digest: Sha256 = target
                .root
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| {
                    Error::Internal(format!(
                        "invariant: store entry {} is named by its digest",
                        target.root.display()
                    ))
                })?;
            let m = target.root.join("manifest.json");
            (target, format!("installed:{layer}"), Some(digest), m)
        }
        ArmSource::Manifest(p) => {
            let target = smoke::target_from_manifest(p)?;
            (target, "manifest".to_string(), None, fsx::absolute(p)?)
        }
    };
    let bytes = fsx::read(&manifest)?;
    let manifest_sha256 = Sha256::of_bytes(&bytes);
    let st = crate::artifact::manifest::Statement::parse(&bytes, &manifest)?;
    let name = match src {
        ArmSource::Installed { layer, .. } => layer.to_string(),
        ArmSource::Manifest(_) => st
            .predicate
            .build_definition
            .external_parameters
            .variant
            .clone(),
    };
    let identity = file_ids(&target)?;
    Ok(ResolvedArm {
        record: ArmRecord {
            name,
            source,
            digest: digest.unwrap_or(manifest_sha256),
            manifest,
            manifest_sha256,
            libllama_sha256: target.libllama_sha256,
            build: target.name.clone(),
        },
        target,
        identity,
    })
}

/// What one `validate` call did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Report {
    /// Run id.
    pub run: String,
    /// Run folder.
    pub run_dir: PathBuf,
    /// The summary (from the whole row file).
    #[serde(flatten)]
    pub derived: Derived,
    /// The evidence manifest.
    pub evidence: EvidenceRef,
    /// This invocation's throughput per arm (not part of the evidence).
    pub throughput: BTreeMap<String, Throughput>,
    /// Rows found already recorded (resume).
    pub resumed_rows: u64,
    /// Bytes of a torn last line cut off (resume).
    pub torn_bytes: u64,
}

/// Where the evidence manifest is.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct EvidenceRef {
    /// Path of evidence.json.
    pub manifest: PathBuf,
    /// Its sha256.
    pub sha256: Sha256,
}

/// Rows per second of one arm in this invocation.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Throughput {
    /// Rows run now.
    pub rows: u64,
    /// Seconds from the arm's start to its last row.
    pub seconds: f64,
    /// rows / seconds.
    pub rows_per_second: f64,
}

/// The evidence manifest.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EvidenceManifest {
    /// `pinforge.validate-evidence/v1`.
    pub schema: String,
    /// Run id.
    pub run: String,
    /// pinforge's version.
    pub pinforge_version: String,
    /// The settings (both arms' manifests and digests, model, prompt set, budget, grammar).
    pub settings: Settings,
    /// sha256 of every file of the run folder it covers.
    pub files: BTreeMap<String, Sha256>,
    /// Jobs used by the last invocation.
    pub jobs: u32,
}

/// Evidence schema id.
pub const EVIDENCE_SCHEMA: &str = "pinforge.validate-evidence/v1";

/// The run folder files an evidence manifest may name (never a path taken from the file).
const RUN_FILES: &[&str] = &[
    "settings.json",
    "prompts.jsonl",
    "rows.jsonl",
    "summary.json",
    "grammar.gbnf",
    "schema.json",
    "model.gguf",
];

/// Check a run id from the command line: one plain path component.
pub fn check_run_id(id: &str) -> Result<()> {
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

fn canonical<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    // serde_json's maps are BTreeMaps here: sorted keys, one text per value.
    let v = serde_json::to_value(v).map_err(|e| Error::Internal(e.to_string()))?;
    let mut s = serde_json::to_vec_pretty(&v).map_err(|e| Error::Internal(e.to_string()))?;
    s.push(b'\n');
    Ok(s)
}

/// Run (or resume) a validation.
pub fn run(opts: &Options, reporter: &dyn Reporter) -> Result<Report> {
    if opts.rows == 0 || opts.rows > 1_000_000 {
        return Err(Error::input(
            format!("--rows {}", opts.rows),
            "must be 1 to 1000000",
        ));
    }
    if opts.budget == 0 || opts.budget as usize > engine::N_CTX / 2 {
        return Err(Error::input(
            format!("--budget {}", opts.budget),
            format!("must be 1 to {} tokens", engine::N_CTX / 2),
        ));
    }
    if opts.jobs == 0 || opts.jobs > 64 {
        return Err(Error::input(
            format!("--jobs {}", opts.jobs),
            "must be 1 to 64",
        ));
    }
    if let Some(id) = &opts.resume {
        check_run_id(id)?;
    }
    // Inputs first (exit 2 before anything is written), then the builds.
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
    let mut arms = vec![resolve_arm(&opts.arms[0])?, resolve_arm(&opts.arms[1])?];
    if arms[0].record.name == arms[1].record.name {
        arms[0].record.name.push_str("#1");
        arms[1].record.name.push_str("#2");
    }
    let ws = crate::base::workspace::Workspace::new(&opts.workspace)?;
    // The shims compile before the run folder exists: a build whose llama.h the shim does not
    // cover is an input error that leaves nothing behind.
    let cache = ws.root().join("build").join(".smoke");
    let shims: Vec<PathBuf> = arms
        .iter()
        .map(|a| smoke::shim_for(&a.target, &cache))
        .collect::<Result<_>>()?;
    let vroot = ws.root().join("validate");
    let settings = |model_path: PathBuf| Settings {
        arms: arms.iter().map(|a| a.record.clone()).collect(),
        rows: opts.rows,
        seed: opts.prompts.is_none().then_some(opts.seed),
        prompt_set_sha256: prompt_sha,
        budget: opts.budget,
        schema_sha256: schema.as_ref().map(|(t, _)| Sha256::of_bytes(t.as_bytes())),
        grammar_sha256: schema.as_ref().map(|(_, g)| Sha256::of_bytes(g.as_bytes())),
        model: model_path,
        model_sha256: Sha256::of_bytes(&model_bytes),
        arch: arch.clone(),
        n_ctx: engine::N_CTX as u64,
        pinforge_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let (run_id, run_dir, settings) = match &opts.resume {
        Some(id) => {
            let dir = vroot.join(id);
            let sp = dir.join("settings.json");
            let old: Settings = match std::fs::symlink_metadata(&sp) {
                Err(_) => {
                    return Err(Error::input(
                        format!("--resume {id}"),
                        format!("no run here ({})", dir.display()),
                    )
                    .with_hint("`ls validate/` in the workspace lists the runs"))
                }
                Ok(_) => serde_json::from_slice(&fsx::read(&sp)?).map_err(|e| {
                    Error::input(sp.display(), format!("not a run's settings: {e}"))
                })?,
            };
            let model_path = old.model.clone();
            let new = settings(match &opts.model {
                Some(m) => fsx::absolute(m)?,
                None => model_path,
            });
            if new != old {
                let a = serde_json::to_value(&old).unwrap_or_default();
                let b = serde_json::to_value(&new).unwrap_or_default();
                let differ: Vec<String> = match (a, b) {
                    (serde_json::Value::Object(a), serde_json::Value::Object(b)) => a
                        .iter()
                        .filter(|(k, v)| b.get(*k) != Some(*v))
                        .map(|(k, _)| k.clone())
                        .collect(),
                    _ => vec![],
                };
                return Err(Error::input(
                    format!("--resume {id}"),
                    format!(
                        "this command's settings differ from the run's in: {}",
                        differ.join(", ")
                    ),
                )
                .with_hint(
                    "resume with the same arms, rows, seed/prompts, budget, schema and model",
                ));
            }
            (id.clone(), dir, new)
        }
        None => {
            fsx::create_dir_all(&vroot)?;
            let stamp = crate::artifact::manifest::now_rfc3339().replace([':', '-'], "");
            let digest = Sha256::of_bytes(&canonical(&settings(PathBuf::new()))?);
            let mut n = 0;
            loop {
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
                        break (id, dir, settings(model_path));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 100 => n += 1,
                    Err(e) => return Err(Error::io("create", &dir, e)),
                }
            }
        }
    };
    if opts.resume.is_none() {
        fsx::write_atomic(&run_dir.join("prompts.jsonl"), &prompt_bytes)?;
        if let Some((text, g)) = &schema {
            fsx::write_atomic(&run_dir.join("schema.json"), text.as_bytes())?;
            fsx::write_atomic(&run_dir.join("grammar.gbnf"), g.as_bytes())?;
        }
        if opts.model.is_none() {
            fsx::write_atomic(&run_dir.join("model.gguf"), &model_bytes)?;
        }
        fsx::write_atomic(&run_dir.join("settings.json"), &canonical(&settings)?)?;
    } else {
        // The engine loads the run's grammar file: it must still be the grammar the run
        // recorded (and the schema it came from), or resumed rows would run under another
        // constraint than the recorded ones.
        for (name, want) in [
            ("grammar.gbnf", settings.grammar_sha256),
            ("schema.json", settings.schema_sha256),
        ] {
            let Some(want) = want else { continue };
            let p = run_dir.join(name);
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
        // The engine loads the run's own model copy: it must still be the recorded bytes.
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
    }
    reporter.stage(
        "validate",
        &format!(
            "run {run_id}: {} rows per arm, {} vs {} (candidate), jobs {}",
            opts.rows, arms[0].record.name, arms[1].record.name, opts.jobs
        ),
    );

    let mut spawns = Vec::new();
    for (a, shim) in arms.iter().zip(shims) {
        spawns.push(Spawn {
            target: a.target.clone(),
            args: EngineArgs {
                shim,
                model: settings.model.clone(),
                grammar: schema.as_ref().map(|_| run_dir.join("grammar.gbnf")),
                threads: opts.threads,
            },
            timeout: opts.timeout,
        });
    }

    let rows_path = run_dir.join("rows.jsonl");
    let (mut file, recorded) = RowFile::open(&rows_path)?;
    let done = recorded.done();
    let resumed_rows = recorded.rows.len() as u64;
    let torn_bytes = recorded.torn_bytes;
    let mut all_rows = recorded.rows;
    let total = opts.rows * 2;

    let (tx, rx) = mpsc::channel::<(usize, Row)>();
    let started = Instant::now();
    let mut arm_last = [Duration::ZERO; 2];
    let mut arm_rows = [0u64; 2];
    std::thread::scope(|scope| -> Result<()> {
        for (ai, a) in arms.iter().enumerate() {
            for w in 0..opts.jobs as u64 {
                let todo: Vec<u64> = (0..opts.rows)
                    .filter(|r| {
                        r % opts.jobs as u64 == w && !done.contains(&(a.record.name.clone(), *r))
                    })
                    .collect();
                if todo.is_empty() {
                    continue;
                }
                let tx = tx.clone();
                let spawn = &spawns[ai];
                let prompts = &prompts;
                let arm = &a.record;
                let identity = &a.identity;
                let target = &a.target;
                let budget = opts.budget;
                let grammar = schema.is_some();
                scope.spawn(move || {
                    worker(
                        ai, arm, target, identity, spawn, prompts, &todo, budget, grammar, &tx,
                    )
                });
            }
        }
        drop(tx);
        let mut counts = [[0u64; 5]; 2];
        for r in &all_rows {
            if let Some(ai) = arms.iter().position(|a| a.record.name == r.arm) {
                counts[ai][outcome_index(r.outcome)] += 1;
            }
        }
        let mut n_done = all_rows.len() as u64;
        reporter.progress(n_done, total, &progress_message(&arms, &counts));
        for (ai, row) in rx {
            file.append(&row)?;
            counts[ai][outcome_index(row.outcome)] += 1;
            arm_rows[ai] += 1;
            arm_last[ai] = started.elapsed();
            n_done += 1;
            reporter.progress(n_done, total, &progress_message(&arms, &counts));
            all_rows.push(row);
        }
        Ok(())
    })?;
    reporter.finish();

    let ids: Vec<ArmId> = arms
        .iter()
        .map(|a| ArmId {
            name: a.record.name.clone(),
            digest: a.record.digest,
        })
        .collect();
    let derived = summary::derive(&ids, &all_rows);
    fsx::write_atomic(&run_dir.join("summary.json"), &canonical(&derived)?)?;
    let mut files = BTreeMap::new();
    for name in RUN_FILES {
        let p = run_dir.join(name);
        if p.is_file() {
            files.insert(name.to_string(), Sha256::of_file(&p)?.0);
        }
    }
    let evidence = EvidenceManifest {
        schema: EVIDENCE_SCHEMA.into(),
        run: run_id.clone(),
        pinforge_version: env!("CARGO_PKG_VERSION").into(),
        settings,
        files,
        jobs: opts.jobs,
    };
    let ev_bytes = canonical(&evidence)?;
    let ev_path = run_dir.join("evidence.json");
    fsx::write_atomic(&ev_path, &ev_bytes)?;
    let throughput = arms
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let s = arm_last[i].as_secs_f64();
            (
                a.record.name.clone(),
                Throughput {
                    rows: arm_rows[i],
                    seconds: (s * 1000.0).round() / 1000.0,
                    rows_per_second: if s > 0.0 {
                        ((arm_rows[i] as f64 / s) * 100.0).round() / 100.0
                    } else {
                        0.0
                    },
                },
            )
        })
        .collect();
    Ok(Report {
        run: run_id,
        run_dir,
        derived,
        evidence: EvidenceRef {
            manifest: ev_path,
            sha256: Sha256::of_bytes(&ev_bytes),
        },
        throughput,
        resumed_rows,
        torn_bytes,
    })
}

fn outcome_index(o: Outcome) -> usize {
    Outcome::ALL.iter().position(|x| *x == o).unwrap_or(4)
}

fn progress_message(arms: &[ResolvedArm], counts: &[[u64; 5]; 2]) -> String {
    arms.iter()
        .zip(counts)
        .map(|(a, c)| {
            let parts: Vec<String> = Outcome::ALL
                .iter()
                .zip(c)
                .map(|(o, n)| format!("{} {n}", o.as_str()))
                .collect();
            format!("{}: {}", a.record.name, parts.join(" "))
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Consecutive failed engine starts after which a worker stops trying (its rows are errors).
const MAX_START_FAILURES: u32 = 3;

#[allow(clippy::too_many_arguments)]
fn worker(
    ai: usize,
    arm: &ArmRecord,
    target: &SmokeTarget,
    identity: &[FileId],
    spawn: &Spawn,
    prompts: &[String],
    todo: &[u64],
    budget: u32,
    grammar: bool,
    tx: &mpsc::Sender<(usize, Row)>,
) {
    let mut engine: Option<Engine> = None;
    let mut start_failures = 0u32;
    let mut started_once = false;
    let mut untrusted: Option<String> = None;
    let mut symbols = engine::Symbols::default();
    for &row in todo {
        let prompt = &prompts[row as usize];
        let mut rec = Row {
            row,
            arm: arm.name.clone(),
            layer_digest: arm.digest,
            prompt_digest: Sha256::of_bytes(prompt.as_bytes()),
            tokens_in: 0,
            tokens_out: 0,
            wall_ms: 0.0,
            tokens_per_second: 0.0,
            outcome: Outcome::Error,
            evidence: Evidence {
                grammar,
                ..Default::default()
            },
        };
        let mut t0 = Instant::now();
        if engine.is_none() && untrusted.is_none() {
            if started_once {
                // A restart loads the libraries again: they must still be the verified files.
                match file_ids(target) {
                    Ok(now) if now == identity => {}
                    Ok(_) | Err(_) => {
                        untrusted = Some(format!(
                            "{}: a library under lib/ changed since it was verified; the engine was not restarted",
                            target.root.display()
                        ))
                    }
                }
            }
            if untrusted.is_none() && start_failures < MAX_START_FAILURES {
                match Engine::start(spawn, symbols.need) {
                    Ok(Ok(e)) => {
                        // A row's wall time is the row's, not the engine's start-up.
                        t0 = Instant::now();
                        engine = Some(e);
                        started_once = true;
                        start_failures = 0;
                    }
                    Ok(Err(engine::StartFailure::Died(death))) if death.is_crash() => {
                        // The engine crashed while loading: a crash row of this arm, with its
                        // signature, not a harness error excluded from the comparison.
                        start_failures += 1;
                        if death.symbolized {
                            symbols.need = false;
                        }
                        let text = symbols.process(&death.stderr, death.symbolized);
                        let signature = smoke::asan_signature(&text).unwrap_or(death.signature);
                        rec.outcome = Outcome::Crash;
                        rec.evidence.signature = Some(signature);
                        rec.evidence.rows_since_restart = Some(0);
                        rec.evidence.detail = Some(if death.stderr_tail.is_empty() {
                            "the engine crashed while loading".to_string()
                        } else {
                            format!("the engine crashed while loading:\n{}", death.stderr_tail)
                        });
                    }
                    Ok(Err(f)) => {
                        start_failures += 1;
                        rec.evidence.detail =
                            Some(format!("the engine did not start: {}", f.message()));
                    }
                    Err(e) => {
                        start_failures += 1;
                        rec.evidence.detail = Some(format!("the engine did not start: {e}"));
                    }
                }
            }
        }
        if let Some(u) = &untrusted {
            rec.evidence.detail = Some(u.clone());
        } else if start_failures >= MAX_START_FAILURES && rec.evidence.detail.is_none() {
            rec.evidence.detail = Some(format!(
                "the engine failed to start {MAX_START_FAILURES} times in a row; rows of this worker are not run"
            ));
        }
        if let Some(e) = engine.as_mut() {
            let req = Request {
                row,
                prompt: prompt.clone(),
                budget,
            };
            match e.request(&req) {
                Ok(resp) => {
                    let obs = Observed {
                        crash: None,
                        error: resp.error.clone(),
                        restored: resp.restored.clone(),
                        reference: resp.reference.clone(),
                        eog: resp.eog,
                        budget_exhausted: resp.budget_exhausted,
                        grammar,
                    };
                    let (outcome, diverged) = rows::classify(&obs);
                    rec.outcome = outcome;
                    rec.tokens_in = resp.tokens_in;
                    rec.tokens_out = resp.restored.len() as u64;
                    rec.evidence = Evidence {
                        restored: resp.restored_state,
                        cached_prefix: resp.cached_prefix,
                        state_bytes: resp.state_bytes,
                        eog: resp.eog,
                        budget_exhausted: resp.budget_exhausted,
                        grammar,
                        diverged_at: diverged,
                        signature: None,
                        rows_since_restart: None,
                        detail: resp.error,
                        engine_ms: (resp.engine_ms * 1000.0).round() / 1000.0,
                        decode_ms: (resp.decode_ms * 1000.0).round() / 1000.0,
                        text: grammar.then_some(resp.text),
                    };
                }
                Err(death) => {
                    rec.outcome = Outcome::Crash;
                    if death.symbolized {
                        symbols.need = false;
                    }
                    let text = symbols.process(&death.stderr, death.symbolized);
                    let signature = smoke::asan_signature(&text).unwrap_or(death.signature);
                    rec.evidence.signature = Some(signature);
                    rec.evidence.rows_since_restart = Some(e.rows_run);
                    rec.evidence.detail =
                        (!death.stderr_tail.is_empty()).then_some(death.stderr_tail);
                    engine = None;
                }
            }
        }
        let wall = t0.elapsed().as_secs_f64();
        rec.wall_ms = (wall * 1e6).round() / 1e3;
        rec.tokens_per_second = if wall > 0.0 {
            ((rec.tokens_out as f64 / wall) * 10.0).round() / 10.0
        } else {
            0.0
        };
        if tx.send((ai, rec)).is_err() {
            return;
        }
    }
}

/// What `verify` found in a run's evidence.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct EvidenceCheck {
    /// Everything matched.
    pub ok: bool,
    /// Run id.
    pub run: String,
    /// What was re-checked.
    pub checked: Vec<String>,
    /// What differs.
    pub mismatches: Vec<EvidenceMismatch>,
    /// Recorded files no longer on disk (not a mismatch: a layer's manifest after a gc).
    pub absent: Vec<String>,
}

/// One difference.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct EvidenceMismatch {
    /// The file.
    pub path: String,
    /// What it is.
    pub role: String,
    /// Recorded.
    pub expected: String,
    /// Found.
    pub actual: String,
}

/// Whether `path` is a validate evidence manifest (or a run folder holding one).
pub fn is_evidence(path: &Path) -> bool {
    let p = if path.is_dir() {
        path.join("evidence.json")
    } else {
        path.to_path_buf()
    };
    let Ok(f) = fsx::open_regular(&p, "file", true) else {
        return false;
    };
    let mut head = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::Read::take(f, 1 << 20), &mut head);
    serde_json::from_slice::<serde_json::Value>(&head)
        .ok()
        .and_then(|v| {
            v.get("schema")
                .and_then(|s| s.as_str())
                .map(|s| s == EVIDENCE_SCHEMA)
        })
        .unwrap_or(false)
}

/// Re-check a run's evidence manifest: every run file it names re-hashed, the model and both
/// arms' manifests re-hashed where they still are, and the summary recomputed from the rows.
pub fn verify_evidence(path: &Path) -> Result<EvidenceCheck> {
    let ev_path = if path.is_dir() {
        path.join("evidence.json")
    } else {
        path.to_path_buf()
    };
    let dir = fsx::parent_of(&fsx::absolute(&ev_path)?);
    let ev: EvidenceManifest = serde_json::from_slice(&fsx::read(&ev_path)?).map_err(|e| {
        Error::input(
            ev_path.display(),
            format!("not a validate evidence manifest: {e}"),
        )
    })?;
    let mut out = EvidenceCheck {
        ok: true,
        run: ev.run.clone(),
        checked: Vec::new(),
        mismatches: Vec::new(),
        absent: Vec::new(),
    };
    // `required`: a file of the run's own set, whose loss is a mismatch; only the arms' build
    // manifests (which gc may remove) may be absent.
    let check = |p: &Path,
                 role: &str,
                 want: Sha256,
                 required: bool,
                 out: &mut EvidenceCheck|
     -> Result<()> {
        match std::fs::symlink_metadata(p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if required {
                    out.mismatches.push(EvidenceMismatch {
                        path: p.display().to_string(),
                        role: role.into(),
                        expected: want.to_string(),
                        actual: "missing".into(),
                    });
                } else {
                    out.absent.push(p.display().to_string());
                }
                return Ok(());
            }
            _ => {}
        }
        let f = fsx::open_regular(p, role, false)?;
        let (got, _) = Sha256::of_reader(f, p)?;
        out.checked.push(p.display().to_string());
        if got != want {
            out.mismatches.push(EvidenceMismatch {
                path: p.display().to_string(),
                role: role.into(),
                expected: want.to_string(),
                actual: got.to_string(),
            });
        }
        Ok(())
    };
    for (name, want) in &ev.files {
        if !RUN_FILES.contains(&name.as_str()) {
            return Err(Error::input(
                ev_path.display(),
                format!("names `{}`, which is not a run file", name.escape_debug()),
            ));
        }
        check(&dir.join(name), name, *want, true, &mut out)?;
    }
    // The grammar, schema and model the engine used must be the ones the settings record,
    // not only the ones the manifest lists.
    for (name, want) in [
        ("grammar.gbnf", ev.settings.grammar_sha256),
        ("schema.json", ev.settings.schema_sha256),
    ] {
        if let Some(want) = want.filter(|w| ev.files.get(name) != Some(w)) {
            check(&dir.join(name), name, want, true, &mut out)?;
        }
    }
    for required in [
        "rows.jsonl",
        "summary.json",
        "settings.json",
        "prompts.jsonl",
    ] {
        if !ev.files.contains_key(required) {
            return Err(Error::check(
                ev_path.display(),
                format!("does not cover {required}"),
            ));
        }
    }
    let model_listed = ev
        .files
        .iter()
        .any(|(n, w)| dir.join(n) == ev.settings.model && *w == ev.settings.model_sha256);
    if !model_listed {
        check(
            &ev.settings.model,
            "model",
            ev.settings.model_sha256,
            true,
            &mut out,
        )?;
    }
    for a in &ev.settings.arms {
        check(
            &a.manifest,
            &format!("manifest of arm {}", a.name),
            a.manifest_sha256,
            false,
            &mut out,
        )?;
    }
    // Without these there is nothing to recompute: the missing file is the finding.
    if ["settings.json", "rows.jsonl", "summary.json"]
        .iter()
        .any(|n| !dir.join(n).exists())
    {
        out.ok = false;
        return Ok(out);
    }
    // The settings file must be the settings the evidence states.
    let settings_file: Settings =
        serde_json::from_slice(&fsx::read(&dir.join("settings.json"))?)
            .map_err(|e| Error::input(dir.join("settings.json").display(), e.to_string()))?;
    if settings_file != ev.settings {
        out.mismatches.push(EvidenceMismatch {
            path: dir.join("settings.json").display().to_string(),
            role: "settings".into(),
            expected: "the evidence's settings".into(),
            actual: "other settings".into(),
        });
    }
    // The summary is a function of the rows: recompute it.
    let rows_bytes = fsx::read(&dir.join("rows.jsonl"))?;
    let rec = rows::parse_rows(&rows_bytes, &dir.join("rows.jsonl"))?;
    let ids: Vec<ArmId> = ev
        .settings
        .arms
        .iter()
        .map(|a| ArmId {
            name: a.name.clone(),
            digest: a.digest,
        })
        .collect();
    let recomputed = summary::derive(&ids, &rec.rows);
    let stored: Derived = serde_json::from_slice(&fsx::read(&dir.join("summary.json"))?)
        .map_err(|e| Error::input(dir.join("summary.json").display(), e.to_string()))?;
    out.checked
        .push("summary recomputed from rows.jsonl".into());
    if canonical(&recomputed)? != canonical(&stored)? {
        out.mismatches.push(EvidenceMismatch {
            path: dir.join("summary.json").display().to_string(),
            role: "summary".into(),
            expected: format!("recomputed: {}", recomputed.verdict),
            actual: format!("stored: {}", stored.verdict),
        });
    }
    out.ok = out.mismatches.is_empty();
    Ok(out)
}
