//! The search of a bisect, apart from what a probe costs: given the marks so far over pins in
//! upstream order (oldest first), which pin to probe next, or what was found. As `git bisect`:
//! the oldest pin is expected to show the defect (`bad`), the newest to run clean (`good`);
//! both are probed first, then the midpoint of the open interval between the newest bad and
//! the oldest good pin. A pin that cannot decide is `skip`, and the probe moves to the
//! unprobed pin nearest the midpoint, so a skip costs one probe and never a verdict. Without
//! skips a range of `n` pins takes at most `ceil(log2 n) + 2` probes ([`bound`]).

use serde::Serialize;

/// What one probe showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Mark {
    /// Without the patch the pin shows the defect's declared signature.
    Bad,
    /// Without the patch the pin runs clean.
    Good,
    /// No answer: the pin did not build, the smoke failed otherwise, or another crash hid
    /// the defect (as `git bisect skip`).
    Skip,
}

impl Mark {
    /// The word `git bisect` uses, as the JSON writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mark::Bad => "bad",
            Mark::Good => "good",
            Mark::Skip => "skip",
        }
    }
}

/// The next step of the search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Probe the pin at this index.
    Probe(usize),
    /// The search is over.
    Done(Found),
}

/// What the search found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Found {
    /// `first_good` is the first pin without the defect; `last_bad`, right before it, shows it.
    Exact {
        /// The newest pin that shows the defect.
        last_bad: usize,
        /// The oldest pin after it that runs clean.
        first_good: usize,
    },
    /// The first pin without the defect is one of `last_bad + 1 ..= first_good`: the pins
    /// between could not decide (all skipped).
    Between {
        /// The newest pin that shows the defect.
        last_bad: usize,
        /// The oldest pin after it that runs clean.
        first_good: usize,
    },
    /// The oldest pin that decided already runs clean: the fix is older than the range.
    AlreadyFixed {
        /// The oldest pin that decided.
        first_good: usize,
    },
    /// The newest pin that decided still shows the defect: not fixed within the range.
    NotFixed {
        /// The newest pin that decided.
        last_bad: usize,
    },
    /// No pin decided.
    Undecided,
}

/// The most probes a range of `n` pins needs when no probe is skipped: both ends, then a
/// binary search over the `n - 2` pins between them.
pub fn bound(n: usize) -> usize {
    match n {
        0 => 0,
        1 => 1,
        _ => 2 + ceil_log2(n - 1),
    }
}

fn ceil_log2(n: usize) -> usize {
    let mut k = 0;
    while (1usize << k) < n {
        k += 1;
    }
    k
}

/// The next step given the marks so far (`None`: not probed), pins oldest first.
pub fn next(marks: &[Option<Mark>]) -> Step {
    let n = marks.len();
    // The oldest end: the first pin that decided, probing forward past skips.
    let mut lo = None;
    for (i, m) in marks.iter().enumerate() {
        match m {
            None => return Step::Probe(i),
            Some(Mark::Skip) => continue,
            Some(_) => {
                lo = Some(i);
                break;
            }
        }
    }
    let Some(lo) = lo else {
        return Step::Done(Found::Undecided);
    };
    if marks[lo] == Some(Mark::Good) {
        return Step::Done(Found::AlreadyFixed { first_good: lo });
    }
    // The newest end: the last pin that decided, probing backward past skips.
    let mut hi = lo;
    for i in (lo + 1..n).rev() {
        match marks[i] {
            None => return Step::Probe(i),
            Some(Mark::Skip) => continue,
            Some(_) => {
                hi = i;
                break;
            }
        }
    }
    if marks[hi] == Some(Mark::Bad) {
        return Step::Done(Found::NotFixed { last_bad: hi });
    }
    // Between the newest bad pin and the oldest good one after it.
    let g = (lo..=hi)
        .find(|&i| marks[i] == Some(Mark::Good))
        .unwrap_or(hi);
    let b = (lo..g)
        .rev()
        .find(|&i| marks[i] == Some(Mark::Bad))
        .unwrap_or(lo);
    let open: Vec<usize> = (b + 1..g).filter(|&i| marks[i].is_none()).collect();
    // The unprobed pin nearest the midpoint (the lower one on a tie); twice the midpoint
    // keeps it in integers.
    match open
        .iter()
        .copied()
        .min_by_key(|&i| ((2 * i).abs_diff(b + g), i))
    {
        Some(i) => Step::Probe(i),
        None if g == b + 1 => Step::Done(Found::Exact {
            last_bad: b,
            first_good: g,
        }),
        None => Step::Done(Found::Between {
            last_bad: b,
            first_good: g,
        }),
    }
}

/// A pin marked `good` older than one marked `bad`: the defect came back (or the order is not
/// upstream's), so the answer is one transition, not the only one. The pair, oldest first.
pub fn non_monotone(marks: &[Option<Mark>]) -> Option<(usize, usize)> {
    let g = marks.iter().position(|m| m == &Some(Mark::Good))?;
    let b = marks.iter().rposition(|m| m == &Some(Mark::Bad))?;
    (g < b).then_some((g, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Run the search to its end against `truth` (the mark each pin would show).
    fn run(truth: &[Mark]) -> (Found, usize) {
        let mut marks = vec![None; truth.len()];
        let mut probes = 0;
        loop {
            match next(&marks) {
                Step::Probe(i) => {
                    assert!(marks[i].is_none(), "probed {i} twice: {marks:?}");
                    marks[i] = Some(truth[i]);
                    probes += 1;
                }
                Step::Done(f) => return (f, probes),
            }
        }
    }

    #[test]
    fn the_bound_is_both_ends_and_a_binary_search_between() {
        assert_eq!(
            (0..=9).map(bound).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4, 4, 5, 5, 5, 5]
        );
        // issue #39: 8 crate versions, at most log2(8) + 2 = 5 builds.
        assert_eq!(bound(8), 5);
    }

    #[test]
    fn ends_that_do_not_bracket_the_fix_say_so() {
        use Mark::*;
        assert_eq!(
            run(&[Good, Good, Good]),
            (Found::AlreadyFixed { first_good: 0 }, 1)
        );
        assert_eq!(run(&[Bad, Bad, Bad]), (Found::NotFixed { last_bad: 2 }, 2));
        assert_eq!(run(&[Skip, Skip]), (Found::Undecided, 2));
        assert_eq!(run(&[Bad]), (Found::NotFixed { last_bad: 0 }, 1));
        // A skipped end moves inward.
        assert_eq!(
            run(&[Skip, Bad, Good, Skip]),
            (
                Found::Exact {
                    last_bad: 1,
                    first_good: 2
                },
                4
            )
        );
    }

    #[test]
    fn skips_between_leave_a_range_not_a_verdict() {
        use Mark::*;
        let (f, _) = run(&[Bad, Skip, Skip, Good]);
        assert_eq!(
            f,
            Found::Between {
                last_bad: 0,
                first_good: 3
            }
        );
        let (f, _) = run(&[Bad, Skip, Good, Good, Good]);
        assert_eq!(
            f,
            Found::Between {
                last_bad: 0,
                first_good: 2
            }
        );
    }

    #[test]
    fn a_good_pin_older_than_a_bad_one_is_named() {
        use Mark::*;
        let marks = [Some(Bad), Some(Good), None, Some(Bad), Some(Good)];
        assert_eq!(non_monotone(&marks), Some((1, 3)));
        assert_eq!(non_monotone(&[Some(Bad), Some(Good)]), None);
    }

    proptest! {
        // Any single transition in a range of up to 64 pins is found exactly, within the bound.
        #[test]
        fn one_transition_is_found_within_the_bound(n in 2usize..64, t in 0usize..64) {
            let t = t % (n + 1);
            let truth: Vec<Mark> = (0..n).map(|i| if i < t { Mark::Bad } else { Mark::Good }).collect();
            let (found, probes) = run(&truth);
            prop_assert!(probes <= bound(n), "{probes} > {} for n={n} t={t}", bound(n));
            let want = match t {
                0 => Found::AlreadyFixed { first_good: 0 },
                t if t == n => Found::NotFixed { last_bad: n - 1 },
                t => Found::Exact { last_bad: t - 1, first_good: t },
            };
            prop_assert_eq!(found, want);
        }

        // With skips anywhere the search ends, never probes a pin twice, and an exact answer
        // is a real adjacent bad/good pair of the truth.
        #[test]
        fn skips_never_make_a_false_exact_answer(
            n in 1usize..40, t in 0usize..40, skips in proptest::collection::vec(any::<bool>(), 40)
        ) {
            let t = t % (n + 1);
            let truth: Vec<Mark> = (0..n)
                .map(|i| if skips[i] { Mark::Skip } else if i < t { Mark::Bad } else { Mark::Good })
                .collect();
            let (found, probes) = run(&truth);
            prop_assert!(probes <= n);
            if let Found::Exact { last_bad, first_good } = found {
                prop_assert_eq!(first_good, last_bad + 1);
                prop_assert_eq!(truth[last_bad], Mark::Bad);
                prop_assert_eq!(truth[first_good], Mark::Good);
            }
        }
    }
}
