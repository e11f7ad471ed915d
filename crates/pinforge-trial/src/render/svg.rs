//! The report's two figures as inline SVG: the timeline (one lane per arm, one mark per row
//! coloured by outcome class, the onset row marked) and the latency distribution (a histogram
//! per arm on one shared axis, with its p50, p90 and p99). Fills are attributes rather than
//! page CSS, so a figure copied out of the page keeps its colours. Every label is escaped.

use super::html::esc;
use super::{Latency, Timeline};
use crate::validate::rows::Outcome;
use crate::validate::summary::percentile;
use std::fmt::Write;

/// The colour of an outcome class (the same in every figure and in the count table).
pub(crate) fn colour(o: Outcome) -> &'static str {
    match o {
        Outcome::Ok => "#2e7d32",
        Outcome::Crash => "#c62828",
        Outcome::TokenBudget => "#ef8f00",
        Outcome::Mismatch => "#6a1b9a",
        Outcome::Error => "#757575",
    }
}

const WIDTH: f64 = 960.0;
const LEFT: f64 = 230.0;
const PLOT: f64 = WIDTH - LEFT - 20.0;
const LANE: f64 = 22.0;
const GAP: f64 = 18.0;

/// The most characters a label line holds left of the plot (12 px system-ui in 222 px).
const LINE_CHARS: usize = 34;

/// One label line that fits left of the plot: the end kept, the start elided. Only a part
/// longer than a whole line is cut; the whole label stays in the label's `<title>`.
fn fit(part: &str) -> String {
    let n = part.chars().count();
    if n <= LINE_CHARS {
        return part.to_string();
    }
    let tail: String = part.chars().skip(n - (LINE_CHARS - 1)).collect();
    format!("…{tail}")
}

/// A lane's label left of the plot at `y` (its baseline when on one line): a label that fits
/// is one line; a longer one (`run · arm`) is set on two, the run above the arm, so that the
/// run id is not clipped away (issue #35); the full text is the label's tooltip either way.
fn lane_label(s: &mut String, x: f64, y: f64, label: &str) {
    let full = esc(label);
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" class="lbl" text-anchor="end"><title>{full}</title>"#,
        f(x),
        f(y)
    );
    match label.split_once(" · ") {
        Some((run, arm)) if label.chars().count() > LINE_CHARS => {
            let _ = write!(
                s,
                r#"<tspan x="{x}" dy="-6">{}</tspan><tspan x="{x}" dy="13">{}</tspan>"#,
                esc(&fit(run)),
                esc(&fit(&format!("· {arm}"))),
                x = f(x)
            );
        }
        _ => s.push_str(&esc(&fit(label))),
    }
    s.push_str("</text>");
}

fn f(x: f64) -> String {
    format!("{:.2}", x)
}

/// The legend of the outcome colours.
fn legend(s: &mut String, y: f64) {
    let mut x = LEFT;
    for o in Outcome::ALL {
        let _ = write!(
            s,
            r#"<rect x="{}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{}" class="lbl">{}</text>"#,
            f(x),
            f(y),
            colour(o),
            f(x + 16.0),
            f(y + 11.0),
            o.as_str()
        );
        x += 120.0;
    }
}

/// The timeline figure: every timeline one lane, x the row index over the run's rows.
pub(crate) fn timeline(lines: &[Timeline]) -> String {
    let height = 40.0 + lines.len() as f64 * (LANE + GAP) + 40.0;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="timeline" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="rows per arm, coloured by outcome">"#,
        w = WIDTH,
        h = f(height)
    );
    legend(&mut s, 8.0);
    for (i, t) in lines.iter().enumerate() {
        let y = 40.0 + i as f64 * (LANE + GAP) + GAP / 2.0;
        let span = t
            .span
            .max(t.marks.last().map(|m| m.0 + 1).unwrap_or(1))
            .max(1) as f64;
        let w = (PLOT / span).max(1.0);
        let _ = write!(s, r##"<g class="lane">"##);
        lane_label(&mut s, LEFT - 8.0, y + LANE / 2.0 + 4.0, &t.label);
        let _ = write!(
            s,
            r##"<rect x="{}" y="{}" width="{}" height="{}" fill="#f2f2f2"/>"##,
            f(LEFT),
            f(y),
            f(PLOT),
            f(LANE)
        );
        for (row, o) in &t.marks {
            let x = LEFT + (*row as f64 / span) * PLOT;
            let _ = write!(
                s,
                r#"<rect class="mark" data-outcome="{o}" x="{}" y="{}" width="{}" height="{}" fill="{}"><title>row {row}: {name}</title></rect>"#,
                f(x),
                f(y),
                f(w),
                f(LANE),
                colour(*o),
                o = o.as_str(),
                name = t.names.get(row).copied().unwrap_or(o.as_str())
            );
        }
        if let Some(on) = t.onset {
            let x = LEFT + (on as f64 / span) * PLOT + w / 2.0;
            let _ = write!(
                s,
                r##"<line class="onset" x1="{x}" x2="{x}" y1="{}" y2="{}" stroke="#000" stroke-width="2" stroke-dasharray="3 2"/><text x="{}" y="{}" class="lbl onset-lbl">onset row {on}</text>"##,
                f(y - 5.0),
                f(y + LANE + 3.0),
                f(x + 3.0),
                f(y - 6.0),
                x = f(x)
            );
        }
        s.push_str("</g>");
    }
    axis(&mut s, height - 28.0, lines);
    s.push_str("</svg>");
    s
}

/// Row ticks under the lanes (for the longest run).
fn axis(s: &mut String, y: f64, lines: &[Timeline]) {
    let span = lines.iter().map(|t| t.span).max().unwrap_or(0).max(1);
    let _ = write!(
        s,
        r##"<line x1="{}" x2="{}" y1="{y}" y2="{y}" stroke="#555"/>"##,
        f(LEFT),
        f(LEFT + PLOT),
        y = f(y)
    );
    for k in 0..=4u64 {
        let row = span * k / 4;
        let x = LEFT + (row as f64 / span as f64) * PLOT;
        let _ = write!(
            s,
            r##"<line x1="{x}" x2="{x}" y1="{}" y2="{}" stroke="#555"/><text x="{x}" y="{}" class="lbl" text-anchor="middle">{row}</text>"##,
            f(y),
            f(y + 5.0),
            f(y + 18.0),
            x = f(x)
        );
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" class="lbl" text-anchor="end">row</text>"#,
        f(LEFT - 8.0),
        f(y + 18.0)
    );
}

/// Bins of the latency histogram.
const BINS: usize = 30;

/// The latency figure: one histogram per arm over the same ms axis, percentiles marked.
pub(crate) fn latency(arms: &[Latency]) -> String {
    let max = arms
        .iter()
        .filter_map(|a| a.wall_ms.last().copied())
        .fold(0.0f64, f64::max)
        .max(1e-3);
    let lane = 46.0;
    let height = 20.0 + arms.len() as f64 * (lane + 14.0) + 34.0;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="latency" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="latency per arm">"#,
        w = WIDTH,
        h = f(height)
    );
    for (i, a) in arms.iter().enumerate() {
        let y = 20.0 + i as f64 * (lane + 14.0);
        let mut bins = [0u64; BINS];
        for v in &a.wall_ms {
            let b = ((v / max) * BINS as f64) as usize;
            bins[b.min(BINS - 1)] += 1;
        }
        let top = bins.iter().copied().max().unwrap_or(0).max(1) as f64;
        let _ = write!(s, r#"<g class="hist">"#);
        lane_label(&mut s, LEFT - 8.0, y + lane / 2.0, &a.label);
        let bw = PLOT / BINS as f64;
        for (k, n) in bins.iter().enumerate() {
            if *n == 0 {
                continue;
            }
            let h = lane * (*n as f64 / top);
            let _ = write!(
                s,
                r##"<rect class="bar" x="{}" y="{}" width="{}" height="{}" fill="#1565c0"><title>{n} rows, {:.1}–{:.1} ms</title></rect>"##,
                f(LEFT + k as f64 * bw),
                f(y + lane - h),
                f((bw - 1.0).max(0.5)),
                f(h),
                max * k as f64 / BINS as f64,
                max * (k + 1) as f64 / BINS as f64
            );
        }
        for (p, name) in [(50.0, "p50"), (90.0, "p90"), (99.0, "p99")] {
            if a.wall_ms.is_empty() {
                break;
            }
            let v = percentile(&a.wall_ms, p);
            let x = LEFT + (v / max) * PLOT;
            let _ = write!(
                s,
                r##"<line x1="{x}" x2="{x}" y1="{}" y2="{}" stroke="#000"/><text x="{x}" y="{}" class="lbl small">{name}</text>"##,
                f(y - 2.0),
                f(y + lane),
                f(y - 3.0),
                x = f(x)
            );
        }
        s.push_str("</g>");
    }
    let y = height - 28.0;
    let _ = write!(
        s,
        r##"<line x1="{}" x2="{}" y1="{y}" y2="{y}" stroke="#555"/>"##,
        f(LEFT),
        f(LEFT + PLOT),
        y = f(y)
    );
    for k in 0..=4 {
        let v = max * k as f64 / 4.0;
        let x = LEFT + PLOT * k as f64 / 4.0;
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" class="lbl" text-anchor="middle">{:.0} ms</text>"#,
            f(x),
            f(y + 18.0),
            v
        );
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeline_has_one_mark_per_row_and_marks_the_onset() {
        let t = Timeline {
            label: "<run> & arm".into(),
            span: 5,
            marks: vec![
                (0, Outcome::Ok),
                (1, Outcome::Ok),
                (2, Outcome::Crash),
                (3, Outcome::TokenBudget),
                (4, Outcome::Crash),
            ],
            onset: Some(2),
            names: Default::default(),
        };
        let s = timeline(&[t]);
        assert_eq!(s.matches(r#"class="mark""#).count(), 5);
        assert_eq!(s.matches(r#"class="onset""#).count(), 1);
        assert!(s.contains("onset row 2"));
        assert!(s.contains("&lt;run&gt; &amp; arm"));
        assert!(!s.contains("<run>"));
    }

    #[test]
    fn a_long_run_label_keeps_the_run_id_on_a_line_of_its_own() {
        let run = "20261207T091500Z-3f9a2c7e-from#1";
        let label = format!("{run} · unpatched-asan");
        let t = Timeline {
            label: label.clone(),
            span: 1,
            marks: vec![(0, Outcome::Ok)],
            onset: None,
            names: Default::default(),
        };
        let s = timeline(&[t]);
        assert!(s.contains(&format!(">{run}</tspan>")), "{s}");
        assert!(s.contains(">· unpatched-asan</tspan>"), "{s}");
        assert!(
            s.contains(&format!("<title>{}</title>", esc(&label))),
            "{s}"
        );
        assert!(!s.contains('…'), "nothing of the label is cut: {s}");
        // A short label stays on one line; a part longer than a line keeps its end.
        let mut one = String::new();
        lane_label(&mut one, 1.0, 2.0, "r · a");
        assert!(one.ends_with("</title>r · a</text>"), "{one}");
        assert_eq!(fit(&"x".repeat(40)).chars().count(), LINE_CHARS);
    }
}
