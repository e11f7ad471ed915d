//! What a run's settings determine about each of its rows, checked on every row read back:
//! by `validate --resume` before a recorded row counts as done, and by `verify` of the
//! evidence before a recomputed summary can say ok. One place for both, so that a row file
//! edited (or merged from another run) can neither be resumed over nor re-sealed.
//!
//! A row must name an arm of the run with that arm's digest, have an index inside the run's
//! range, carry the digest of the run's prompt at that index, say it ran under a grammar
//! exactly when the run is constrained, stay within the token budget, and have the outcome
//! the mechanical rule ([`super::rows::classify`]) gives for the evidence it records. (The
//! row file's structure, one whole JSON row per line and each (arm, row) once, is
//! [`super::rows::parse_rows`]'s.)

use super::rows::{Outcome, Row};
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, Result};
use pinforge_base::text::shown;
use std::path::Path;

/// The settings' view of a row: the arms with their digests, the prompt digest of every row
/// index, whether rows are constrained, and the token budget.
#[derive(Debug, Clone)]
pub(crate) struct RowRules {
    /// (name, digest) of each arm, baseline first.
    arms: Vec<(String, Sha256)>,
    /// Rows per arm: indices run from 0 to `rows - 1`.
    rows: u64,
    /// sha256 of the prompt of each row index.
    prompts: Vec<Sha256>,
    /// Whether a grammar constrains every row.
    grammar: bool,
    /// Token budget per row.
    budget: u64,
    /// The shard whose rows alone the run holds (`--shard I/N`), if any.
    shard: Option<super::shard::Shard>,
}

impl RowRules {
    /// The rules of a run of `rows` rows per arm over `prompts` (one per row index).
    pub(crate) fn new(
        arms: Vec<(String, Sha256)>,
        rows: u64,
        prompts: &[String],
        grammar: bool,
        budget: u32,
    ) -> RowRules {
        RowRules {
            arms,
            rows,
            prompts: prompts
                .iter()
                .map(|p| Sha256::of_bytes(p.as_bytes()))
                .collect(),
            grammar,
            budget: u64::from(budget),
            shard: None,
        }
    }

    /// The same rules for a run that holds only `shard`'s rows: a row of another shard is
    /// then as foreign as a row of another run.
    pub(crate) fn in_shard(mut self, shard: Option<super::shard::Shard>) -> RowRules {
        self.shard = shard;
        self
    }

    /// Check every row of the file at `path` (row `i` is on line `i + 1`: every whole line is
    /// a row); the first row that breaks a rule is an input error naming its line.
    pub(crate) fn check(&self, rows: &[Row], path: &Path) -> Result<()> {
        for (i, row) in rows.iter().enumerate() {
            if let Err(why) = self.fits(row) {
                return Err(
                    Error::input(format!("{}:{}", path.display(), i + 1), why).with_hint(
                        "the row file was edited, or holds rows of another run; it is not \
                         resumed or re-sealed over: restore it, or start a new run",
                    ),
                );
            }
        }
        Ok(())
    }

    /// Why `r` cannot be a row of this run, if it cannot.
    fn fits(&self, r: &Row) -> std::result::Result<(), String> {
        let names = || {
            self.arms
                .iter()
                .map(|(n, _)| format!("`{}`", shown(n)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some((_, digest)) = self.arms.iter().find(|(n, _)| *n == r.arm) else {
            return Err(format!(
                "row {} names arm `{}`, which is not an arm of this run ({})",
                r.row,
                shown(&r.arm),
                names()
            ));
        };
        let what = format!("row {} of arm `{}`", r.row, shown(&r.arm));
        if r.layer_digest != *digest {
            return Err(format!(
                "{what} records layer digest {}, but the run's arm has {digest}",
                r.layer_digest
            ));
        }
        if r.row >= self.rows {
            return Err(format!(
                "{what}: the index is outside the run, whose rows are 0 to {}",
                self.rows.saturating_sub(1)
            ));
        }
        if let Some(s) = self.shard.filter(|s| !s.has(r.row)) {
            return Err(format!("{what}: the row is not in this run's shard {s}"));
        }
        match self.prompts.get(r.row as usize) {
            Some(p) if *p == r.prompt_digest => {}
            Some(p) => {
                return Err(format!(
                    "{what} records prompt digest {}, but the run's prompt {} has {p}",
                    r.prompt_digest, r.row
                ))
            }
            None => return Err(format!("{what}: the run has no prompt {}", r.row)),
        }
        if r.evidence.grammar != self.grammar || (r.evidence.text.is_some() && !self.grammar) {
            return Err(format!(
                "{what} says it ran {} a grammar, but the run's rows are {}",
                if r.evidence.grammar {
                    "under"
                } else {
                    "without"
                },
                if self.grammar {
                    "constrained"
                } else {
                    "not constrained"
                }
            ));
        }
        if r.tokens_out > self.budget {
            return Err(format!(
                "{what} generated {} tokens, more than the run's budget of {}",
                r.tokens_out, self.budget
            ));
        }
        outcome_fits(r).map_err(|why| format!("{what}: {why}"))
    }
}

/// Whether the recorded outcome is the one the rule gives for the recorded evidence (an
/// `error` row may hold any evidence: it is left out of every comparison).
fn outcome_fits(r: &Row) -> std::result::Result<(), String> {
    let e = &r.evidence;
    let diverged = e.diverged_at.is_some();
    let short_of_budget = e.grammar && e.budget_exhausted && !e.eog;
    let fits = match r.outcome {
        Outcome::Error => true,
        Outcome::Crash => e.signature.is_some(),
        Outcome::Mismatch => diverged,
        Outcome::TokenBudget => !diverged && e.signature.is_none() && short_of_budget,
        Outcome::Ok => !diverged && e.signature.is_none() && !short_of_budget,
    };
    if fits {
        Ok(())
    } else {
        Err(format!(
            "the outcome `{}` is not what its evidence gives (signature {}, diverged_at {}, \
             grammar {}, budget_exhausted {}, eog {})",
            r.outcome.as_str(),
            if e.signature.is_some() {
                "present"
            } else {
                "absent"
            },
            e.diverged_at
                .map_or_else(|| "none".to_string(), |d| d.to_string()),
            e.grammar,
            e.budget_exhausted,
            e.eog
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::super::arm::ArmRecord;
    use super::super::rows::{self, Evidence, RowFile};
    use super::super::run_dir::{canonical, RunDir, Settings};
    use super::super::{evidence, summary};
    use super::*;
    use proptest::prelude::*;
    use std::path::PathBuf;

    const ROWS: u64 = 6;
    const SEED: u64 = 5;

    fn prompts() -> Vec<String> {
        (0..ROWS).map(|i| rows::generated_prompt(SEED, i)).collect()
    }

    fn arm(name: &str) -> ArmRecord {
        super::super::arm::test_record(name)
    }

    fn settings(model: PathBuf) -> Settings {
        let (_, prompt_sha) = rows::prompt_set_bytes(&prompts());
        Settings {
            arms: vec![arm("control"), arm("live")],
            rows: ROWS,
            shard: None,
            seed: Some(SEED),
            prompt_set_sha256: prompt_sha,
            budget: 16,
            row_kind: Default::default(),
            schema_sha256: None,
            grammar_sha256: None,
            model,
            model_sha256: Sha256::of_bytes(b"model"),
            arch: "qwen2vl".into(),
            n_ctx: 256,
            pinforge_version: "test".into(),
        }
    }

    /// The rows a run of [`settings`] records, in the shapes the harness gives them: ok rows
    /// on the live arm; on the control arm a crash from row 2 on (restarted engine), one
    /// mismatch and one harness error.
    fn good_rows() -> Vec<Row> {
        let p = prompts();
        let mut out = Vec::new();
        for r in 0..ROWS {
            for name in ["control", "live"] {
                let mut row = Row {
                    row: r,
                    arm: name.into(),
                    layer_digest: Sha256::of_bytes(name.as_bytes()),
                    prompt_digest: Sha256::of_bytes(p[r as usize].as_bytes()),
                    tokens_in: 20,
                    tokens_out: 16,
                    wall_ms: 4.5,
                    tokens_per_second: 3555.6,
                    outcome: Outcome::Ok,
                    evidence: Evidence {
                        restored: r > 0,
                        cached_prefix: 12,
                        state_bytes: 4096,
                        budget_exhausted: true,
                        engine_ms: 4.0,
                        decode_ms: 3.0,
                        ..Evidence::default()
                    },
                };
                if name == "control" {
                    match r {
                        1 => {
                            row.outcome = Outcome::Mismatch;
                            row.evidence.diverged_at = Some(3);
                        }
                        2 | 4 => {
                            row.outcome = Outcome::Crash;
                            row.tokens_out = 0;
                            row.evidence = Evidence {
                                signature: Some("heap-buffer-overflow in llama_decode".into()),
                                rows_since_restart: Some(2),
                                ..Evidence::default()
                            };
                        }
                        5 => {
                            row.outcome = Outcome::Error;
                            row.tokens_out = 0;
                            row.evidence = Evidence {
                                detail: Some("the engine did not start".into()),
                                ..Evidence::default()
                            };
                        }
                        _ => {}
                    }
                }
                out.push(row);
            }
        }
        out
    }

    fn rules() -> RowRules {
        settings(PathBuf::from("/m")).row_rules(&prompts())
    }

    /// A row file as the harness writes it (appended and synced row by row).
    fn written(dir: &Path, rows: &[Row]) -> PathBuf {
        let p = dir.join("rows.jsonl");
        let (mut f, rec) = RowFile::open(&p, &rules()).expect("create");
        assert!(rec.rows.is_empty());
        for r in rows {
            f.append(r).expect("append");
        }
        p
    }

    /// One way to damage a row file: the kinds issue #19 names, and their kin.
    #[derive(Debug, Clone, Copy)]
    enum Damage {
        LayerDigest,
        PromptDigest,
        IndexOutOfRange,
        Duplicate,
        TruncatedLine,
        NonUtf8,
        UnknownArm,
        Grammar,
        OverBudget,
        CrashRelabelledOk,
    }

    const DAMAGES: [Damage; 10] = [
        Damage::LayerDigest,
        Damage::PromptDigest,
        Damage::IndexOutOfRange,
        Damage::Duplicate,
        Damage::TruncatedLine,
        Damage::NonUtf8,
        Damage::UnknownArm,
        Damage::Grammar,
        Damage::OverBudget,
        Damage::CrashRelabelledOk,
    ];

    /// The file's lines with `damage` done at line `k` (0-based; `n` picks a value), and the
    /// 1-based line the refusal must name.
    fn damaged(lines: &[Vec<u8>], damage: Damage, k: usize, n: u64) -> (Vec<u8>, usize) {
        let mut lines = lines.to_vec();
        let mut k = k % lines.len();
        let edit = |line: &[u8], f: &dyn Fn(&mut Row)| -> Vec<u8> {
            let mut r: Row = serde_json::from_slice(line).expect("row");
            f(&mut r);
            serde_json::to_vec(&r).expect("json")
        };
        let mut at = k + 1;
        match damage {
            Damage::LayerDigest => {
                lines[k] = edit(&lines[k], &|r| {
                    r.layer_digest = Sha256::of_bytes(&n.to_le_bytes())
                })
            }
            Damage::PromptDigest => {
                lines[k] = edit(&lines[k], &|r| {
                    r.prompt_digest = Sha256::of_bytes(&n.to_le_bytes())
                })
            }
            Damage::IndexOutOfRange => {
                lines[k] = edit(&lines[k], &|r| r.row = ROWS + n % 1_000_000)
            }
            Damage::Duplicate => {
                let copy = lines[k].clone();
                let to = k + 1 + (n as usize % (lines.len() - k));
                lines.insert(to, copy);
                at = to + 1;
            }
            Damage::TruncatedLine => {
                let len = lines[k].len();
                lines[k].truncate(n as usize % len);
            }
            Damage::NonUtf8 => {
                let line = &lines[k];
                let start = line
                    .windows(7)
                    .position(|w| w == b"\"arm\":\"")
                    .expect("arm key")
                    + 7;
                lines[k].insert(start + (n as usize % 3), 0xff);
            }
            Damage::UnknownArm => lines[k] = edit(&lines[k], &|r| r.arm = format!("arm{n}")),
            Damage::Grammar => lines[k] = edit(&lines[k], &|r| r.evidence.grammar = true),
            Damage::OverBudget => lines[k] = edit(&lines[k], &|r| r.tokens_out = 17 + n % 1000),
            Damage::CrashRelabelledOk => {
                // The verdict-flipping edit: a crash row said to be ok, its signature kept.
                let crash = lines
                    .iter()
                    .position(|l| {
                        serde_json::from_slice::<Row>(l).is_ok_and(|r| r.outcome == Outcome::Crash)
                    })
                    .expect("a crash row");
                k = crash;
                at = k + 1;
                lines[k] = edit(&lines[k], &|r| r.outcome = Outcome::Ok);
            }
        }
        let mut out = Vec::new();
        for l in lines {
            out.extend(l);
            out.push(b'\n');
        }
        (out, at)
    }

    #[test]
    fn the_rows_a_run_records_fit_its_rules() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = written(dir.path(), &good_rows());
        let (_, rec) = RowFile::open(&p, &rules()).expect("resume");
        assert_eq!(rec.rows, good_rows());
        assert_eq!(rec.done().len() as u64, 2 * ROWS);
    }

    #[test]
    fn a_row_of_another_arm_digest_or_outside_the_run_is_refused_with_its_line() {
        // Issue #19's two examples, by hand: another layer digest, and a third row of a
        // 2-row arm.
        let dir = tempfile::tempdir().expect("tempdir");
        let mut rows = good_rows();
        rows[3].layer_digest = Sha256::of_bytes(b"another build");
        let p = written(dir.path(), &[]);
        std::fs::write(
            &p,
            rows.iter()
                .map(|r| serde_json::to_string(r).expect("json") + "\n")
                .collect::<String>(),
        )
        .expect("write");
        let e = RowFile::open(&p, &rules()).expect_err("other digest");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(
            e.to_string()
                .starts_with(&format!("{}:4: row 1 of arm `live`", p.display())),
            "{e}"
        );
        assert!(e.to_string().contains("layer digest"), "{e}");
        let two = RowRules::new(
            vec![("control".into(), Sha256::of_bytes(b"control"))],
            2,
            &prompts()[..2],
            false,
            16,
        );
        let control: Vec<Row> = good_rows()
            .into_iter()
            .filter(|r| r.arm == "control")
            .take(3)
            .collect();
        let e = two.check(&control, &p).expect_err("third row");
        assert!(e.to_string().contains(":3: row 2 of arm `control`"), "{e}");
        assert!(e.to_string().contains("outside the run"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Issue #19 class 7: every random damage of a real row file is refused, exit 2,
        /// naming rows.jsonl and the damaged line; nothing is cut or counted, and the file is
        /// left as it was.
        #[test]
        fn every_damaged_row_file_is_refused_naming_its_line_and_left_alone(
            which in 0usize..DAMAGES.len(),
            k in 0usize..64,
            n in any::<u64>(),
        ) {
            let dir = tempfile::tempdir().expect("tempdir");
            let p = written(dir.path(), &good_rows());
            let good = std::fs::read(&p).expect("read");
            let lines: Vec<Vec<u8>> = good
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .map(<[u8]>::to_vec)
                .collect();
            let (bad, line) = damaged(&lines, DAMAGES[which], k, n);
            std::fs::write(&p, &bad).expect("damage");
            let e = RowFile::open(&p, &rules()).expect_err("a damaged row file resumes");
            prop_assert_eq!(e.exit_code(), 2, "{}", e);
            let want = format!("{}:{line}:", p.display());
            prop_assert!(e.to_string().starts_with(&want), "{:?}: {} (want {})", DAMAGES[which], e, want);
            prop_assert_eq!(std::fs::read(&p).expect("read"), bad, "the refused file is untouched");
        }
    }

    /// A torn last line (a row cut before its newline, as a kill leaves it) is no row: cut
    /// off and redone, never counted.
    #[test]
    fn a_torn_last_row_is_not_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = written(dir.path(), &good_rows());
        let mut bytes = std::fs::read(&p).expect("read");
        bytes.truncate(bytes.len() - 10);
        std::fs::write(&p, &bytes).expect("tear");
        let (_, rec) = RowFile::open(&p, &rules()).expect("resume");
        assert_eq!(rec.rows.len() as u64, 2 * ROWS - 1);
        assert!(!rec.done().contains(&("live".to_string(), ROWS - 1)));
    }

    /// Issue #19 class 7: evidence re-sealed over a bad row (summary recomputed, every hash
    /// of evidence.json rewritten, as a resume would have) does not verify: the row is named.
    #[test]
    fn evidence_sealed_over_a_bad_row_does_not_verify() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run_dir = dir.path().join("run");
        std::fs::create_dir(&run_dir).expect("mkdir");
        let model = run_dir.join("model.gguf");
        std::fs::write(&model, b"model").expect("model");
        let s = settings(model);
        let (prompt_bytes, _) = rows::prompt_set_bytes(&prompts());
        std::fs::write(run_dir.join("prompts.jsonl"), prompt_bytes).expect("prompts");
        std::fs::write(run_dir.join("settings.json"), canonical(&s).expect("json"))
            .expect("settings");
        let seal = |rows: &[Row]| {
            let text: String = rows
                .iter()
                .map(|r| serde_json::to_string(r).expect("json") + "\n")
                .collect();
            std::fs::write(run_dir.join("rows.jsonl"), text).expect("rows");
            let derived = summary::derive(&s.arm_ids(), rows);
            std::fs::write(
                run_dir.join("summary.json"),
                canonical(&derived).expect("json"),
            )
            .expect("summary");
            let run = RunDir {
                id: "run".into(),
                dir: run_dir.clone(),
                settings: s.clone(),
                _lock: None,
            };
            evidence::write(&run, 1, &pinforge_record::sign::record::Signer::none())
                .expect("evidence")
                .manifest
        };
        let ev = seal(&good_rows());
        let ok = evidence::verify_evidence(&ev).expect("verify");
        assert!(ok.ok, "{:?}", ok.mismatches);
        // The control arm's crashes said to be ok, with the digest of another build: the
        // verdict flips, and everything is re-sealed.
        let mut bad = good_rows();
        for r in bad.iter_mut().filter(|r| r.arm == "control") {
            if r.outcome == Outcome::Crash {
                r.outcome = Outcome::Ok;
                r.evidence = Evidence::default();
                r.layer_digest = Sha256::of_bytes(b"another build");
            }
        }
        let ev = seal(&bad);
        let c = evidence::verify_evidence(&ev).expect("verify");
        assert!(!c.ok, "re-sealed over bad rows and still ok");
        let m = c
            .mismatches
            .iter()
            .find(|m| m.role == "rows")
            .expect("the rows are the mismatch");
        assert!(
            m.actual.contains("rows.jsonl:5: row 2 of arm `control`"),
            "{m:?}"
        );
        // Another prompt set under the same settings is a mismatch of its own.
        std::fs::write(run_dir.join("prompts.jsonl"), b"{\"prompt\":\"x\"}\n").expect("prompts");
        let ev = seal(&good_rows());
        let c = evidence::verify_evidence(&ev).expect("verify");
        assert!(c.mismatches.iter().any(|m| m.role == "prompt set"), "{c:?}");
    }
}
