//! The row loop: one long-lived engine process per arm and worker (`--jobs`), rows handed out
//! by `row % jobs` (a row's outcome does not depend on its worker: see `engine::slot`), every row classified mechanically and sent back to be appended to the row
//! file as it arrives, with progress counted per outcome. An engine that dies is restarted
//! for the next row, but only after its verified libraries are found to be the same files.

use super::arm::{ArmRecord, FileId, ResolvedArm};
use super::engine::{Death, Engine, EngineArgs, Request, RowKind, Spawn, StartFailure, Symbols};
use super::rows::{self, Evidence, Observed, Outcome, Row, RowFile};
use super::run_dir::{Inputs, RunDir};
use super::Options;
use pinforge_base::digest::Sha256;
use pinforge_base::error::Result;
use pinforge_base::progress::Reporter;
use pinforge_deploy::smoke::{self, SmokeTarget};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

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

/// What the row loop leaves: every row of the run (recorded before and now) and this
/// invocation's figures.
pub(super) struct Ran {
    /// Every row in the row file.
    pub(super) rows: Vec<Row>,
    /// Rows found already recorded (resume).
    pub(super) resumed_rows: u64,
    /// Bytes of a torn last line cut off (resume).
    pub(super) torn_bytes: u64,
    /// Rows per second per arm, now.
    pub(super) throughput: BTreeMap<String, Throughput>,
}

/// Rows of one arm per outcome, indexed by the outcome itself: every outcome has its slot, so
/// no row can fall into another's count.
#[derive(Debug, Clone, Copy, Default)]
struct Counts([u64; Outcome::ALL.len()]);

impl Counts {
    fn add(&mut self, o: Outcome) {
        self.0[o.index()] += 1;
    }
}

/// Run every row not yet recorded, on both arms, and append each to `rows.jsonl`.
pub(super) fn run_rows(
    opts: &Options,
    arms: &[ResolvedArm],
    shims: Vec<PathBuf>,
    run: &RunDir,
    inputs: &Inputs,
    reporter: &dyn Reporter,
) -> Result<Ran> {
    let spawns: Vec<Spawn> = arms
        .iter()
        .zip(shims)
        .map(|(a, shim)| Spawn {
            target: a.target.clone(),
            args: EngineArgs {
                shim,
                model: run.settings.model.clone(),
                grammar: inputs.schema.as_ref().map(|_| run.grammar_path()),
                threads: opts.threads,
            },
            timeout: opts.timeout,
        })
        .collect();
    // Every recorded row must be one this run's settings give, before it counts as done.
    let rules = run.settings.row_rules(&inputs.prompts);
    let (mut file, recorded) = RowFile::open(&run.dir.join("rows.jsonl"), &rules)?;
    let done = recorded.done();
    let resumed_rows = recorded.rows.len() as u64;
    let torn_bytes = recorded.torn_bytes;
    let mut all_rows = recorded.rows;
    let mine = |r: &u64| opts.shard.is_none_or(|s| s.has(*r));
    let total = (0..opts.rows).filter(mine).count() as u64 * arms.len() as u64;

    let (tx, rx) = mpsc::channel::<(usize, Row)>();
    let started = Instant::now();
    let mut arm_last = vec![Duration::ZERO; arms.len()];
    let mut arm_rows = vec![0u64; arms.len()];
    std::thread::scope(|scope| -> Result<()> {
        for (ai, a) in arms.iter().enumerate() {
            for w in 0..opts.jobs as u64 {
                // Within a shard the rows are striped over the jobs by their place in the
                // shard, so every worker gets its share however the indices fall.
                let todo: Vec<u64> = (0..opts.rows)
                    .filter(mine)
                    .enumerate()
                    .filter(|(k, r)| {
                        *k as u64 % opts.jobs as u64 == w
                            && !done.contains(&(a.record.name.clone(), *r))
                    })
                    .map(|(_, r)| r)
                    .collect();
                if todo.is_empty() {
                    continue;
                }
                let worker = Worker {
                    ai,
                    arm: &a.record,
                    target: &a.target,
                    identity: &a.identity,
                    spawn: &spawns[ai],
                    prompts: &inputs.prompts,
                    budget: opts.budget,
                    grammar: inputs.schema.is_some(),
                    kind: opts.row_kind,
                };
                let tx = tx.clone();
                scope.spawn(move || worker.run(&todo, &tx));
            }
        }
        drop(tx);
        let mut counts = vec![Counts::default(); arms.len()];
        for r in &all_rows {
            if let Some(ai) = arms.iter().position(|a| a.record.name == r.arm) {
                counts[ai].add(r.outcome);
            }
        }
        let mut n_done = all_rows.len() as u64;
        reporter.progress(n_done, total, &progress_message(arms, &counts));
        for (ai, row) in rx {
            file.append(&row)?;
            counts[ai].add(row.outcome);
            arm_rows[ai] += 1;
            arm_last[ai] = started.elapsed();
            n_done += 1;
            reporter.progress(n_done, total, &progress_message(arms, &counts));
            all_rows.push(row);
        }
        Ok(())
    })?;
    reporter.finish();
    Ok(Ran {
        rows: all_rows,
        resumed_rows,
        torn_bytes,
        throughput: throughput(arms, &arm_rows, &arm_last),
    })
}

/// Rows per second per arm, rounded as recorded.
fn throughput(
    arms: &[ResolvedArm],
    arm_rows: &[u64],
    arm_last: &[Duration],
) -> BTreeMap<String, Throughput> {
    arms.iter()
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
        .collect()
}

fn progress_message(arms: &[ResolvedArm], counts: &[Counts]) -> String {
    arms.iter()
        .zip(counts)
        .map(|(a, c)| {
            let parts: Vec<String> = Outcome::ALL
                .iter()
                .map(|o| format!("{} {}", o.as_str(), c.0[o.index()]))
                .collect();
            format!("{}: {}", a.record.name, parts.join(" "))
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Consecutive failed engine starts after which a worker stops trying (its rows are errors).
const MAX_START_FAILURES: u32 = 3;

/// One worker: its arm, the verified build and its identities, and the row settings.
struct Worker<'a> {
    ai: usize,
    arm: &'a ArmRecord,
    target: &'a SmokeTarget,
    identity: &'a [FileId],
    spawn: &'a Spawn,
    prompts: &'a [String],
    budget: u32,
    grammar: bool,
    kind: RowKind,
}

/// A worker's engine across its rows: the process (None until started, and after a death),
/// why it may no longer be started, and the frame names learnt from symbolized reports.
#[derive(Default)]
struct EngineSlot {
    engine: Option<Engine>,
    start_failures: u32,
    started_once: bool,
    untrusted: Option<String>,
    symbols: Symbols,
}

impl Worker<'_> {
    /// Run `todo` in order, sending each row as it is done; stop when nobody listens.
    fn run(&self, todo: &[u64], tx: &mpsc::Sender<(usize, Row)>) {
        let mut slot = EngineSlot::default();
        for &row in todo {
            let prompt = &self.prompts[row as usize];
            let mut rec = self.blank_row(row, prompt);
            let mut t0 = Instant::now();
            if slot.engine.is_none() && slot.untrusted.is_none() {
                self.start(&mut slot, &mut rec, &mut t0);
            }
            if let Some(u) = &slot.untrusted {
                rec.evidence.detail = Some(u.clone());
            } else if slot.start_failures >= MAX_START_FAILURES && rec.evidence.detail.is_none() {
                rec.evidence.detail = Some(format!(
                    "the engine failed to start {MAX_START_FAILURES} times in a row; rows of this worker are not run"
                ));
            }
            if let Some(e) = slot.engine.as_mut() {
                let req = Request {
                    kind: self.kind,
                    row,
                    prompt: prompt.clone(),
                    // What the row restores is row - 1's state, whoever ran row - 1 (an
                    // embedding row restores nothing).
                    previous: row
                        .checked_sub(1)
                        .filter(|_| self.kind == RowKind::PromptCache)
                        .and_then(|p| self.prompts.get(p as usize))
                        .cloned(),
                    budget: self.budget,
                };
                if !self.request(e, &mut slot.symbols, &req, &mut rec) {
                    slot.engine = None;
                }
            }
            let wall = t0.elapsed().as_secs_f64();
            rec.wall_ms = (wall * 1e6).round() / 1e3;
            rec.tokens_per_second = if wall > 0.0 {
                ((rec.tokens_out as f64 / wall) * 10.0).round() / 10.0
            } else {
                0.0
            };
            if tx.send((self.ai, rec)).is_err() {
                return;
            }
        }
    }

    /// A row that has not run yet: an `error` until something better is known.
    fn blank_row(&self, row: u64, prompt: &str) -> Row {
        Row {
            row,
            arm: self.arm.name.clone(),
            layer_digest: self.arm.digest,
            prompt_digest: Sha256::of_bytes(prompt.as_bytes()),
            tokens_in: 0,
            tokens_out: 0,
            wall_ms: 0.0,
            tokens_per_second: 0.0,
            outcome: Outcome::Error,
            evidence: Evidence {
                grammar: self.grammar,
                ..Default::default()
            },
        }
    }

    /// Start the engine for `rec`'s row (a restart only over the same verified files). A
    /// crash while loading is a crash row of this arm; any other failure is the row's detail.
    fn start(&self, slot: &mut EngineSlot, rec: &mut Row, t0: &mut Instant) {
        if slot.started_once {
            // A restart loads the libraries again: they must still be the verified files.
            match super::arm::file_ids(self.target) {
                Ok(now) if now == self.identity => {}
                Ok(_) | Err(_) => {
                    slot.untrusted = Some(format!(
                        "{}: a library under lib/ changed since it was verified; the engine was not restarted",
                        self.target.root.display()
                    ))
                }
            }
        }
        if slot.untrusted.is_some() || slot.start_failures >= MAX_START_FAILURES {
            return;
        }
        match Engine::start(self.spawn, slot.symbols.need) {
            Ok(Ok(e)) => {
                // A row's wall time is the row's, not the engine's start-up.
                *t0 = Instant::now();
                slot.engine = Some(e);
                slot.started_once = true;
                slot.start_failures = 0;
            }
            Ok(Err(StartFailure::Died(death))) if death.is_crash() => {
                // The engine crashed while loading: a crash row of this arm, with its
                // signature, not a harness error excluded from the comparison.
                slot.start_failures += 1;
                rec.outcome = Outcome::Crash;
                rec.evidence.signature = Some(signature_of(&mut slot.symbols, &death));
                rec.evidence.rows_since_restart = Some(0);
                rec.evidence.detail = Some(if death.stderr_tail.is_empty() {
                    "the engine crashed while loading".to_string()
                } else {
                    format!("the engine crashed while loading:\n{}", death.stderr_tail)
                });
            }
            Ok(Err(f)) => {
                slot.start_failures += 1;
                rec.evidence.detail = Some(format!("the engine did not start: {}", f.message()));
            }
            Err(e) => {
                slot.start_failures += 1;
                rec.evidence.detail = Some(format!("the engine did not start: {e}"));
            }
        }
    }

    /// Run one row on a started engine and classify it. False when the engine died (the
    /// row is then a crash row with the signature).
    fn request(&self, e: &mut Engine, symbols: &mut Symbols, req: &Request, rec: &mut Row) -> bool {
        let grammar = self.grammar;
        match e.request(req) {
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
                true
            }
            Err(death) => {
                rec.outcome = Outcome::Crash;
                rec.evidence.signature = Some(signature_of(symbols, &death));
                rec.evidence.rows_since_restart = Some(e.rows_run);
                rec.evidence.detail = (!death.stderr_tail.is_empty()).then_some(death.stderr_tail);
                false
            }
        }
    }
}

/// A dead engine's crash signature: the sanitizer report with frame names (learnt ones where
/// this report was not symbolized), else the death's own signature. A symbolized report
/// teaches the names, so the next engine need not symbolize again.
fn signature_of(symbols: &mut Symbols, death: &Death) -> String {
    if death.symbolized {
        symbols.need = false;
    }
    let text = symbols.process(&death.stderr, death.symbolized);
    smoke::asan_signature(&text)
        .map(|s| unsymbolized_summary(&s))
        .unwrap_or_else(|| death.signature.clone())
}

/// The signature with its SUMMARY line cut after the `(module+offset)`: a symbolized report
/// (an engine's first) appends ` in FUNCTION(ARGS)` there and a later one does not (its frame
/// names are learnt), and a row's signature must not depend on which engine ran it, or how
/// many crashes that engine had seen (issue #21: shards merged equal the unsharded run).
fn unsymbolized_summary(sig: &str) -> String {
    sig.lines()
        .map(|l| match l.find(") in ") {
            Some(i) if l.starts_with("SUMMARY: ") => &l[..=i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::unsymbolized_summary;

    #[test]
    fn a_signature_does_not_depend_on_whether_its_report_was_symbolized() {
        let head = "heap-buffer-overflow in f (allocated in g)\nframes: f <- h";
        let bare =
            format!("{head}\nSUMMARY: AddressSanitizer: heap-buffer-overflow (/x/lib.so+0x34)");
        let named = format!("{bare} in f(slot_info const&, ubatch const&)");
        assert_eq!(unsymbolized_summary(&named), bare);
        assert_eq!(unsymbolized_summary(&bare), bare);
        // Only the SUMMARY line is cut: a frame line's ` in ` stays.
        let other = "frames: a) in b\nSUMMARY: x (m+0x1)";
        assert_eq!(unsymbolized_summary(other), other);
    }
}
