//! `validate --shard I/N`: which rows one shard of a fleet soak runs, and where `I` comes from.
//!
//! A shard runs the rows whose index is ≡ I (mod N) — round-robin, not contiguous blocks — on
//! both arms, with the prompts of the whole run (the prompt of row `r` is the same in every
//! shard and in the unsharded run, so `prompts.jsonl` and its digest are too). Round-robin
//! because a soak's interesting rows are not spread evenly: a late onset (the #20093 signature
//! appeared after 20–40 sustained requests) or a slow drift of the machine would all land in
//! the last block of a contiguous split, and one host would carry the whole finding; striped,
//! every shard sees early and late rows alike, and each shard's wall time is about the same.
//! Row indices in a shard's `rows.jsonl` are the global ones, so shards merge by concatenation
//! ([`super::merge`]).
//!
//! Syntax: `--shard I/N` (0 ≤ I < N ≤ 10000), or `--shard /N`, which takes `I` from the batch
//! system: `JOB_COMPLETION_INDEX` (a Kubernetes Indexed Job, 0-based) or
//! `SLURM_ARRAY_TASK_ID` (a Slurm job array: give `--array=0-(N-1)`, so it is 0-based too).
//! Both set and different, or neither set, is an input error: a shard index is never guessed.

use pinforge_base::error::{Error, Result};
use pinforge_base::text::shown;
use serde::{Deserialize, Serialize};

/// One shard of a run: rows `r` with `r % count == index`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct Shard {
    /// This shard's index, 0 to count - 1.
    pub index: u64,
    /// How many shards the run is split into.
    pub count: u64,
}

/// The most shards a run may be split into (a fleet of this many hosts is already large;
/// the bound keeps a typo such as `/1000000` from making a million empty runs).
pub(crate) const MAX_SHARDS: u64 = 10_000;

/// The batch systems' index variables, in the order they are consulted.
pub(crate) const INDEX_VARS: [&str; 2] = ["JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID"];

impl Shard {
    /// Whether row `row` belongs to this shard.
    pub(crate) fn has(self, row: u64) -> bool {
        row % self.count == self.index
    }

    /// The rows of this shard among `0..rows`, in order.
    pub(crate) fn rows(self, rows: u64) -> impl Iterator<Item = u64> {
        (self.index..rows).step_by(self.count as usize)
    }

    /// Parse `--shard I/N` or `--shard /N`; `env` looks a variable up (the process
    /// environment in the command, a map in tests).
    pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Shard> {
        let what = format!("--shard {}", shown(text));
        let hint = "write --shard I/N (for example 0/4), or --shard /N inside a Kubernetes \
                    Indexed Job (JOB_COMPLETION_INDEX) or a Slurm array (SLURM_ARRAY_TASK_ID)";
        let Some((i, n)) = text.split_once('/') else {
            return Err(Error::input(&what, "expected I/N or /N").with_hint(hint));
        };
        let count = number(n.trim()).ok_or_else(|| {
            Error::input(&what, "N must be a whole number of shards").with_hint(hint)
        })?;
        if count == 0 || count > MAX_SHARDS {
            return Err(Error::input(
                &what,
                format!("N must be 1 to {MAX_SHARDS}, not {count}"),
            ));
        }
        let index = if i.trim().is_empty() {
            index_from_env(&what, env)?
        } else {
            number(i.trim())
                .ok_or_else(|| Error::input(&what, "I must be a whole number").with_hint(hint))?
        };
        if index >= count {
            return Err(Error::input(
                &what,
                format!("shard index {index} is not below the shard count {count}"),
            )
            .with_hint(
                "shard indices are 0-based: 0 to N-1 (a Slurm array for N shards is \
                 --array=0-(N-1))",
            ));
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// A decimal number without sign or spaces.
fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `I` from the batch system's variable: the one set, or both set to the same value.
fn index_from_env(what: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<u64> {
    let mut found: Option<(&str, u64)> = None;
    for var in INDEX_VARS {
        let Some(v) = env(var) else { continue };
        let n = number(v.trim()).ok_or_else(|| {
            Error::input(what, format!("{var}={} is not a shard index", shown(&v)))
        })?;
        match found {
            Some((other, m)) if m != n => {
                return Err(Error::input(
                    what,
                    format!("{other}={m} and {var}={n} disagree on the shard index"),
                )
                .with_hint("give the index explicitly: --shard I/N"))
            }
            _ => found = Some((var, n)),
        }
    }
    found.map(|(_, n)| n).ok_or_else(|| {
        Error::input(
            what,
            format!(
                "no shard index given, and neither {} is set",
                INDEX_VARS.join(" nor ")
            ),
        )
        .with_hint("give the index explicitly: --shard I/N")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn explicit_shards_parse_and_stripe_the_rows() {
        let s = Shard::parse("1/3", &env(&[])).expect("1/3");
        assert_eq!(s, Shard { index: 1, count: 3 });
        assert_eq!(s.rows(10).collect::<Vec<_>>(), vec![1, 4, 7]);
        assert!(s.has(7) && !s.has(8));
        assert_eq!(s.to_string(), "1/3");
        // Every row is in exactly one shard.
        for r in 0..50 {
            let n = (0..3)
                .filter(|i| {
                    Shard {
                        index: *i,
                        count: 3,
                    }
                    .has(r)
                })
                .count();
            assert_eq!(n, 1, "row {r}");
        }
    }

    #[test]
    fn the_index_comes_from_the_batch_system_when_omitted() {
        let s = Shard::parse("/4", &env(&[("JOB_COMPLETION_INDEX", "3")])).expect("k8s");
        assert_eq!(s.index, 3);
        let s = Shard::parse("/4", &env(&[("SLURM_ARRAY_TASK_ID", "2")])).expect("slurm");
        assert_eq!(s.index, 2);
        let both = env(&[("JOB_COMPLETION_INDEX", "1"), ("SLURM_ARRAY_TASK_ID", "1")]);
        assert_eq!(Shard::parse("/4", &both).expect("agree").index, 1);
    }

    #[test]
    fn bad_shards_are_input_errors_naming_the_value() {
        for (text, vars, why) in [
            ("3", vec![], "expected I/N"),
            ("1/0", vec![], "N must be 1"),
            ("4/4", vec![], "not below"),
            ("-1/4", vec![], "whole number"),
            ("x/4", vec![], "whole number"),
            ("/4", vec![], "neither"),
            ("/4", vec![("SLURM_ARRAY_TASK_ID", "4")], "not below"),
            (
                "/4",
                vec![("JOB_COMPLETION_INDEX", "a\u{202e}")],
                "not a shard index",
            ),
            (
                "/4",
                vec![("JOB_COMPLETION_INDEX", "1"), ("SLURM_ARRAY_TASK_ID", "2")],
                "disagree",
            ),
            ("1/99999", vec![], "N must be 1"),
        ] {
            let e = Shard::parse(text, &env(&vars)).expect_err(text);
            assert_eq!(e.exit_code(), 2, "{text}: {e}");
            assert!(e.to_string().contains(why), "{text}: {e}");
            assert!(!e.to_string().contains('\u{202e}'), "shown escaped: {e}");
        }
    }
}
