//! The row file and the prompt set: one JSON line per (arm, row), appended whole and synced,
//! read back for `--resume` (a torn last line is cut off and its row redone; a damaged line
//! anywhere else is refused, never skipped), and the deterministic prompt generator.
//!
//! Write policy: each line is serialized in full, then handed to one `write(2)` on a file
//! opened with `O_APPEND` (a short write is an error: the file is cut back to where the line
//! began), then `fdatasync`. A row on disk is therefore either whole and durable or absent
//! (or a torn tail after a power loss, which resume removes).

use super::row_check::RowRules;
use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, IoContext, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A row's outcome, each by a mechanical rule (see [`classify`]).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Completed, and the restored continuation equals the uninterrupted one.
    Ok,
    /// The engine process died (signal, sanitizer report, exit) or hung.
    Crash,
    /// Under a grammar: the budget ran out before end-of-generation was sampled.
    TokenBudget,
    /// The restored continuation differs from the uninterrupted decode of the same tokens.
    Mismatch,
    /// The harness could not run the row (excluded from every comparison).
    Error,
}

impl Outcome {
    /// All outcomes in report order.
    pub const ALL: [Outcome; 5] = [
        Outcome::Ok,
        Outcome::Crash,
        Outcome::TokenBudget,
        Outcome::Mismatch,
        Outcome::Error,
    ];

    /// The outcome's place in [`Outcome::ALL`], for tables of counts indexed by outcome
    /// (total: every outcome has its own slot).
    pub(crate) fn index(self) -> usize {
        match self {
            Outcome::Ok => 0,
            Outcome::Crash => 1,
            Outcome::TokenBudget => 2,
            Outcome::Mismatch => 3,
            Outcome::Error => 4,
        }
    }

    /// The name used in rows, counts and the progress bar.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Crash => "crash",
            Outcome::TokenBudget => "token-budget",
            Outcome::Mismatch => "mismatch",
            Outcome::Error => "error",
        }
    }
}

/// One recorded row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Row {
    /// Row id (0-based; the same id is the same prompt on both arms).
    pub row: u64,
    /// Arm name (`control`, `live`, or a manifest's variant).
    pub arm: String,
    /// The arm's digest (store entry digest, or the manifest's sha256).
    pub layer_digest: Sha256,
    /// SHA-256 of the prompt text.
    pub prompt_digest: Sha256,
    /// Prompt tokens.
    pub tokens_in: u64,
    /// Generated tokens (restored path).
    pub tokens_out: u64,
    /// Wall time of the row as the harness saw it (request to answer or death).
    pub wall_ms: f64,
    /// tokens_out per wall second.
    pub tokens_per_second: f64,
    /// The outcome.
    pub outcome: Outcome,
    /// Why: the facts the rule looked at.
    pub evidence: Evidence,
}

/// The facts behind an outcome.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Evidence {
    /// Whether the slot's saved state was restored before this row.
    #[serde(default)]
    pub restored: bool,
    /// Tokens of the restored state kept as the common prefix.
    #[serde(default)]
    pub cached_prefix: u64,
    /// Bytes of the restored sequence state.
    #[serde(default)]
    pub state_bytes: u64,
    /// End-of-generation was sampled.
    #[serde(default)]
    pub eog: bool,
    /// The budget was used up.
    #[serde(default)]
    pub budget_exhausted: bool,
    /// A grammar constrained the row.
    #[serde(default)]
    pub grammar: bool,
    /// First differing token index (mismatch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diverged_at: Option<u64>,
    /// Crash signature (sanitizer summary, signal, exit, hang).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Rows this engine process ran before it died, this one included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_since_restart: Option<u64>,
    /// What failed (error rows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Time the engine spent on the row (restore, decode, reference, save).
    #[serde(default)]
    pub engine_ms: f64,
    /// Time of the bare decode loop alone (prompt decode + greedy generation, restored path).
    #[serde(default)]
    pub decode_ms: f64,
    /// The generated text (restored path), for reading a token-budget row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// What the engine answered for a row (or that it died), the input to [`classify`].
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Observed {
    /// The engine died or hung on this row: its signature.
    pub crash: Option<String>,
    /// The engine or harness reported a failure.
    pub error: Option<String>,
    /// Tokens of the restored path.
    pub restored: Vec<i32>,
    /// Tokens of the uninterrupted reference.
    pub reference: Vec<i32>,
    /// End-of-generation was sampled on the restored path.
    pub eog: bool,
    /// The restored path used the whole budget.
    pub budget_exhausted: bool,
    /// The row ran under a grammar.
    pub grammar: bool,
}

/// The outcome rules, in order: a dead engine is `crash`; a harness failure `error`; restored
/// tokens that differ from the reference `mismatch` (an engine defect outranks budget); under
/// a grammar, a used-up budget without end-of-generation `token-budget`; else `ok`. Without a
/// grammar, reaching the budget is a normal end of a generation.
pub(crate) fn classify(o: &Observed) -> (Outcome, Option<u64>) {
    if o.crash.is_some() {
        return (Outcome::Crash, None);
    }
    if o.error.is_some() {
        return (Outcome::Error, None);
    }
    let diverged = o
        .restored
        .iter()
        .zip(&o.reference)
        .position(|(a, b)| a != b)
        .or_else(|| {
            (o.restored.len() != o.reference.len()).then(|| o.restored.len().min(o.reference.len()))
        });
    if let Some(i) = diverged {
        return (Outcome::Mismatch, Some(i as u64));
    }
    if o.grammar && o.budget_exhausted && !o.eog {
        return (Outcome::TokenBudget, None);
    }
    (Outcome::Ok, None)
}

/// The append-only row file.
#[derive(Debug)]
pub(crate) struct RowFile {
    path: PathBuf,
    file: std::fs::File,
}

/// The rows already on disk (resume).
#[derive(Debug, Default)]
pub(crate) struct Recorded {
    /// Every whole row, in file order.
    pub rows: Vec<Row>,
    /// Bytes of a torn last line that were cut off.
    pub torn_bytes: u64,
}

impl Recorded {
    /// The (arm, row) pairs done.
    pub(crate) fn done(&self) -> BTreeSet<(String, u64)> {
        self.rows.iter().map(|r| (r.arm.clone(), r.row)).collect()
    }
}

/// The longest row line read back (a row is a few hundred bytes; a signature a few KiB).
const MAX_LINE: usize = 1 << 20;

/// Parse a row file's bytes: whole lines must be rows (exactly once per arm and row); an
/// unterminated last line is torn and reported by its length, to be cut off.
pub(crate) fn parse_rows(bytes: &[u8], path: &Path) -> Result<Recorded> {
    let mut out = Recorded::default();
    let mut seen = BTreeSet::new();
    let whole_len = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(i) => i + 1,
        None => 0,
    };
    out.torn_bytes = (bytes.len() - whole_len) as u64;
    let whole = if whole_len == 0 {
        &bytes[..0]
    } else {
        &bytes[..whole_len - 1]
    };
    for (n, line) in whole.split(|&b| b == b'\n').enumerate() {
        if whole_len == 0 {
            break;
        }
        let at = format!("{}:{}", path.display(), n + 1);
        if line.len() > MAX_LINE {
            return Err(Error::input(at, "row line longer than 1 MiB; refused"));
        }
        let row: Row = serde_json::from_slice(line).map_err(|e| {
            Error::input(&at, format!("not a row: {e}")).with_hint(
                "the row file is damaged in the middle (only a torn last line is repaired); \
                 start a new run",
            )
        })?;
        if !seen.insert((row.arm.clone(), row.row)) {
            return Err(Error::input(
                &at,
                format!(
                    "row {} of arm `{}` is recorded twice",
                    row.row,
                    row.arm.escape_debug()
                ),
            )
            .with_hint("the row file was edited or merged; start a new run"));
        }
        out.rows.push(row);
    }
    Ok(out)
}

impl RowFile {
    /// Open (create) the row file for appending, after cutting off a torn last line; returns
    /// what was already recorded, every row of it checked against the run's `rules` first (a
    /// row that breaks one refuses the file, and nothing is cut or counted). A link in the
    /// row file's place is an input error naming it, never followed.
    pub(crate) fn open(path: &Path, rules: &RowRules) -> Result<(RowFile, Recorded)> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => Error::input(
                    path.display(),
                    "the row file is a symlink; it was not followed",
                )
                .with_hint(
                    "a run folder holds only regular files: remove the link, or start a new run",
                ),
                _ => Error::io("open the row file", path, e),
            })?;
        let meta = file.metadata().at("stat", path)?;
        if !meta.is_file() {
            return Err(Error::input(
                path.display(),
                "the row file is not a regular file",
            ));
        }
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes).at("read", path)?;
        let rec = parse_rows(&bytes, path)?;
        rules.check(&rec.rows, path)?;
        if rec.torn_bytes > 0 {
            let keep = bytes.len() as u64 - rec.torn_bytes;
            file.set_len(keep).at("cut the torn last line of", path)?;
            file.sync_data().at("fsync", path)?;
        }
        Ok((
            RowFile {
                path: path.to_path_buf(),
                file,
            },
            rec,
        ))
    }

    /// Append one row as one whole line, then sync it.
    pub(crate) fn append(&mut self, row: &Row) -> Result<()> {
        let mut line =
            serde_json::to_vec(row).map_err(|e| Error::Internal(format!("row JSON: {e}")))?;
        line.push(b'\n');
        let before = self.file.metadata().at("stat", &self.path)?.len();
        let n = self.file.write(&line).at("append to", &self.path)?;
        if n != line.len() {
            // Never leave a torn line behind a live writer: cut back to the line's start.
            let _ = self.file.set_len(before);
            return Err(Error::io(
                "append to",
                &self.path,
                std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    format!("short write ({n} of {} bytes)", line.len()),
                ),
            ));
        }
        self.file.sync_data().at("fsync", &self.path)
    }
}

/// A prompt of the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Prompt {
    /// The prompt text.
    pub prompt: String,
}

/// The words the generator draws from: ones the tiny vocabulary spells in few tokens.
const WORDS: &[&str] = &[
    "the", "a", "cat", "hat", "mat", "dog", "sat", "on", "in", "and", "it", "is", "to", "of",
    "red", "tree", "sun", "rain", "near", "under", "there", "then", "ran", "sea", "star", "stone",
];

/// The shared head of every generated prompt: the cached prefix a prompt cache keeps between
/// rows (a server's system prompt).
pub(crate) const SYSTEM: &str = "the cat is in the hat and it is on the mat";

/// Row `i`'s prompt for `seed`: the shared head plus 3–24 words from a per-row xorshift.
pub(crate) fn generated_prompt(seed: u64, i: u64) -> String {
    let mut x = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(i.wrapping_mul(0xBF58_476D_1CE4_E5B9))
        | 1;
    let mut next = || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33
    };
    let n = 3 + next() % 22;
    let mut p = SYSTEM.to_string();
    for _ in 0..n {
        p.push(' ');
        p.push_str(WORDS[(next() % WORDS.len() as u64) as usize]);
    }
    p
}

/// The largest prompt accepted from a file (the tiny context holds 256 tokens anyway).
pub(crate) const MAX_PROMPT_BYTES: usize = 4096;

/// Read `--prompts FILE.jsonl`: one `{"prompt": "..."}` per line, blank lines refused.
pub(crate) fn read_prompts(path: &Path) -> Result<Vec<String>> {
    let text = pinforge_base::fsx::read_to_string(path).map_err(|e| match e {
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            Error::input(path.display(), "prompt file not found")
        }
        other => other,
    })?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let at = format!("{}:{}", path.display(), n + 1);
        let p: Prompt = serde_json::from_str(line)
            .map_err(|e| Error::input(&at, format!("expected {{\"prompt\": \"...\"}}: {e}")))?;
        if p.prompt.trim().is_empty() {
            return Err(Error::input(at, "empty prompt"));
        }
        if p.prompt.len() > MAX_PROMPT_BYTES || p.prompt.contains('\0') {
            return Err(Error::input(
                at,
                format!("a prompt must be under {MAX_PROMPT_BYTES} bytes, without NUL"),
            ));
        }
        out.push(p.prompt);
    }
    if out.is_empty() {
        return Err(Error::input(path.display(), "no prompts in the file"));
    }
    Ok(out)
}

/// The prompt set as stored in the run folder (canonical JSON Lines), and its digest.
pub(crate) fn prompt_set_bytes(prompts: &[String]) -> (Vec<u8>, Sha256) {
    let mut out = Vec::new();
    for p in prompts {
        let line = serde_json::to_string(&Prompt { prompt: p.clone() })
            .expect("invariant: a string serializes");
        out.extend(line.as_bytes());
        out.push(b'\n');
    }
    let d = Sha256::of_bytes(&out);
    (out, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_indexes_its_own_place_in_all() {
        for (i, o) in Outcome::ALL.iter().enumerate() {
            assert_eq!(o.index(), i, "{o:?}");
        }
    }

    /// The rules the rows below are made to fit: arms `control`, `live` and `a`, each with
    /// the digest of its name, ten rows whose prompt is `p`, no grammar.
    pub(super) fn rules() -> RowRules {
        let arms = ["control", "live", "a"]
            .iter()
            .map(|a| (a.to_string(), Sha256::of_bytes(a.as_bytes())))
            .collect();
        RowRules::new(arms, 10, &vec!["p".to_string(); 10], false, 64)
    }

    pub(super) fn row(arm: &str, id: u64, outcome: Outcome) -> Row {
        let evidence = Evidence {
            signature: (outcome == Outcome::Crash).then(|| "SIGSEGV".to_string()),
            diverged_at: (outcome == Outcome::Mismatch).then_some(1),
            ..Evidence::default()
        };
        Row {
            row: id,
            arm: arm.into(),
            layer_digest: Sha256::of_bytes(arm.as_bytes()),
            prompt_digest: Sha256::of_bytes(b"p"),
            tokens_in: 12,
            tokens_out: 8,
            wall_ms: 3.5,
            tokens_per_second: 2285.7,
            outcome,
            evidence,
        }
    }

    #[test]
    fn outcome_rules_are_mechanical_and_ordered() {
        let base = Observed {
            restored: vec![1, 2, 3],
            reference: vec![1, 2, 3],
            ..Default::default()
        };
        assert_eq!(classify(&base), (Outcome::Ok, None));
        let budget = Observed {
            grammar: true,
            budget_exhausted: true,
            ..base.clone()
        };
        assert_eq!(classify(&budget).0, Outcome::TokenBudget);
        // Reaching the budget without a grammar is a normal end.
        let plain = Observed {
            grammar: false,
            ..budget.clone()
        };
        assert_eq!(classify(&plain).0, Outcome::Ok);
        // EOG sampled on the last budget token: complete.
        let eog = Observed {
            eog: true,
            ..budget.clone()
        };
        assert_eq!(classify(&eog).0, Outcome::Ok);
        let mism = Observed {
            restored: vec![1, 9, 3],
            ..budget.clone()
        };
        assert_eq!(classify(&mism), (Outcome::Mismatch, Some(1)));
        let short = Observed {
            restored: vec![1, 2],
            ..base.clone()
        };
        assert_eq!(classify(&short), (Outcome::Mismatch, Some(2)));
        let err = Observed {
            error: Some("x".into()),
            ..mism.clone()
        };
        assert_eq!(classify(&err).0, Outcome::Error);
        let crash = Observed {
            crash: Some("heap-buffer-overflow".into()),
            ..err
        };
        assert_eq!(classify(&crash).0, Outcome::Crash);
    }

    #[test]
    fn a_torn_last_line_is_cut_off_and_its_row_is_not_done() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("rows.jsonl");
        {
            let (mut f, rec) = RowFile::open(&p, &rules()).expect("create");
            assert!(rec.rows.is_empty());
            f.append(&row("control", 0, Outcome::Ok)).expect("append");
            f.append(&row("live", 0, Outcome::Crash)).expect("append");
        }
        let mut bytes = std::fs::read(&p).expect("read");
        let whole = bytes.len();
        let third = serde_json::to_vec(&row("control", 1, Outcome::Ok)).expect("json");
        bytes.extend(&third[..third.len() / 2]);
        std::fs::write(&p, &bytes).expect("tear");
        let (mut f, rec) = RowFile::open(&p, &rules()).expect("reopen");
        assert_eq!(rec.rows.len(), 2);
        assert_eq!(rec.torn_bytes as usize, third.len() / 2);
        assert_eq!(
            rec.done(),
            [("control".to_string(), 0), ("live".to_string(), 0)]
                .into_iter()
                .collect()
        );
        assert_eq!(std::fs::read(&p).expect("read").len(), whole, "cut back");
        f.append(&row("control", 1, Outcome::Ok)).expect("redo");
        let (_, rec) = RowFile::open(&p, &rules()).expect("reopen");
        assert_eq!(rec.rows.len(), 3);
        assert_eq!(rec.rows[2], row("control", 1, Outcome::Ok));
    }

    #[test]
    fn a_damaged_or_duplicated_middle_line_is_refused_with_its_line_number() {
        let good = serde_json::to_string(&row("a", 0, Outcome::Ok)).expect("json");
        let text = format!("{good}\n{{\"row\": oops}}\n{good}\n");
        let e = parse_rows(text.as_bytes(), Path::new("rows.jsonl")).expect_err("damaged");
        assert!(e.to_string().starts_with("rows.jsonl:2:"), "{e}");
        let text = format!("{good}\n{good}\n");
        let e = parse_rows(text.as_bytes(), Path::new("rows.jsonl")).expect_err("twice");
        assert!(e.to_string().contains("recorded twice"), "{e}");
        assert_eq!(
            parse_rows(b"", Path::new("r")).expect("empty").rows.len(),
            0
        );
    }

    #[test]
    fn the_row_file_refuses_a_fifo_and_a_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("c");
        assert_eq!(pinforge_sys::mkfifo(c.as_c_str(), 0o644), 0);
        assert!(RowFile::open(&fifo, &rules()).is_err());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &link).expect("link");
        assert!(RowFile::open(&link, &rules()).is_err());
        assert!(!dir.path().join("elsewhere").exists());
    }

    #[test]
    fn generated_prompts_are_deterministic_and_share_the_cached_head() {
        let a: Vec<String> = (0..50).map(|i| generated_prompt(7, i)).collect();
        let b: Vec<String> = (0..50).map(|i| generated_prompt(7, i)).collect();
        assert_eq!(a, b);
        assert!(a.iter().all(|p| p.starts_with(SYSTEM)));
        assert!(a.iter().collect::<BTreeSet<_>>().len() > 45, "rows differ");
        assert_ne!(generated_prompt(8, 0), generated_prompt(7, 0));
        let (bytes, d) = prompt_set_bytes(&a);
        assert_eq!(Sha256::of_bytes(&bytes), d);
        assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 50);
    }
}
