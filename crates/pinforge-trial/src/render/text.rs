//! The text and Markdown renderings of a report: the same sections as the page, for the
//! terminal and for pasting into an issue. The timeline is one character per row (`.` ok,
//! `X` crash, `B` token-budget, `M` mismatch, `E` error) with a `^` under the onset row.
//! Record strings are escaped for the medium: control and bidi characters as visible escapes
//! in both; in Markdown also `|`, `<`, `>`, `&` and backticks, so a value can neither break a
//! table nor become HTML where the issue tracker renders it.

use super::Report;
use crate::validate::rows::Outcome;
use crate::validate::summary::percentile;
use std::fmt::Write;

/// Which of the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// Plain text.
    Text,
    /// Markdown.
    Markdown,
}

/// Characters per timeline line.
const WRAP: usize = 100;

fn glyph(o: Outcome) -> char {
    match o {
        Outcome::Ok => '.',
        Outcome::Crash => 'X',
        Outcome::TokenBudget => 'B',
        Outcome::Mismatch => 'M',
        Outcome::Error => 'E',
    }
}

struct W {
    s: String,
    md: bool,
}

impl W {
    /// A record string for this medium.
    fn t(&self, v: &str) -> String {
        let line = pinforge_base::text::shown_line(v).into_owned();
        if !self.md {
            return line;
        }
        let mut out = String::with_capacity(line.len());
        for c in line.chars() {
            match c {
                '|' => out.push_str("\\|"),
                '<' => out.push_str("&lt;"),
                '>' => out.push_str("&gt;"),
                '&' => out.push_str("&amp;"),
                '`' => out.push_str("\\`"),
                '*' | '_' | '[' | ']' => {
                    out.push('\\');
                    out.push(c);
                }
                c => out.push(c),
            }
        }
        out
    }

    fn h(&mut self, title: &str) {
        if self.md {
            let _ = write!(self.s, "\n## {title}\n\n");
        } else {
            let _ = write!(self.s, "\n{title}\n{}\n", "-".repeat(title.chars().count()));
        }
    }

    /// A table: Markdown pipes, or aligned columns.
    fn table(&mut self, head: &[&str], rows: &[Vec<String>]) {
        if self.md {
            let _ = writeln!(self.s, "| {} |", head.join(" | "));
            let _ = writeln!(self.s, "|{}", "---|".repeat(head.len()));
            for r in rows {
                let _ = writeln!(self.s, "| {} |", r.join(" | "));
            }
            self.s.push('\n');
            return;
        }
        let mut width: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
        for r in rows {
            for (i, c) in r.iter().enumerate() {
                if let Some(w) = width.get_mut(i) {
                    *w = (*w).max(c.chars().count());
                }
            }
        }
        let line = |cells: Vec<&str>| {
            let mut l = String::new();
            for (i, c) in cells.iter().enumerate() {
                let pad = width.get(i).copied().unwrap_or(0)
                    - c.chars().count().min(width.get(i).copied().unwrap_or(0));
                l.push_str(c);
                if i + 1 < cells.len() {
                    l.push_str(&" ".repeat(pad + 2));
                }
            }
            l
        };
        let _ = writeln!(self.s, "{}", line(head.to_vec()));
        for r in rows {
            let _ = writeln!(self.s, "{}", line(r.iter().map(String::as_str).collect()));
        }
    }
}

/// The report as text or Markdown.
pub(crate) fn render(r: &Report, flavor: Flavor) -> String {
    let mut w = W {
        s: String::new(),
        md: flavor == Flavor::Markdown,
    };
    w.s.push_str(if w.md {
        "# pinforge report\n"
    } else {
        "pinforge report\n===============\n"
    });
    w.h("Inputs");
    let rows: Vec<Vec<String>> = r
        .inputs
        .iter()
        .map(|i| vec![w.t(&i.path), i.kind.as_str().to_string()])
        .collect();
    w.table(&["path", "kind"], &rows);
    w.h("Hypotheses and verdicts");
    if r.claims.is_empty() {
        w.s.push_str("No input states a hypothesis.\n");
    }
    for c in &r.claims {
        let title = w.t(&c.title);
        let _ = writeln!(
            w.s,
            "{}",
            if w.md {
                format!("### {title}\n")
            } else {
                title
            }
        );
        let mut items: Vec<(String, String)> = Vec::new();
        if let Some(h) = &c.hypothesis {
            items.push(("hypothesis".into(), h.clone()));
        }
        if let Some(p) = &c.prediction {
            items.push(("prediction".into(), p.clone()));
        }
        items.push(("verdict".into(), c.verdict.clone()));
        if let Some(why) = &c.reason {
            items.push(("reason".into(), why.clone()));
        }
        items.extend(c.facts.iter().cloned());
        for (k, v) in items {
            let (k, v) = (w.t(&k), w.t(&v));
            let _ = if w.md {
                writeln!(w.s, "- **{k}:** {v}")
            } else {
                writeln!(w.s, "  {k}: {v}")
            };
        }
        w.s.push('\n');
    }
    timeline(&mut w, r);
    counts(&mut w, r);
    served(&mut w, r);
    latency(&mut w, r);
    rest(&mut w, r);
    w.s
}

fn timeline(w: &mut W, r: &Report) {
    w.h("Timeline per arm");
    if r.timelines.is_empty() {
        w.s.push_str("No validation rows among the inputs.\n");
        return;
    }
    let _ = writeln!(
        w.s,
        "One character per row: . ok, X crash, B token-budget, M mismatch, E error; ^ marks the onset (first crash row).\n"
    );
    if w.md {
        w.s.push_str("```text\n");
    }
    for t in &r.timelines {
        let label = pinforge_base::text::shown_line(&t.label).into_owned();
        let span = t.span.max(t.marks.last().map(|m| m.0 + 1).unwrap_or(0)) as usize;
        let mut line: Vec<char> = vec![' '; span];
        for (row, o) in &t.marks {
            if let Some(c) = line.get_mut(*row as usize) {
                *c = glyph(*o);
            }
        }
        let _ = writeln!(
            w.s,
            "{label} ({} rows{})",
            t.marks.len(),
            t.onset
                .map(|o| format!(", onset row {o}"))
                .unwrap_or_default()
        );
        for (k, chunk) in line.chunks(WRAP).enumerate() {
            let start = k * WRAP;
            let _ = writeln!(w.s, "  {start:>6} {}", chunk.iter().collect::<String>());
            if let Some(on) = t
                .onset
                .map(|o| o as usize)
                .filter(|o| (start..start + WRAP).contains(o))
            {
                let _ = writeln!(w.s, "         {}^", " ".repeat(on - start));
            }
        }
    }
    if w.md {
        w.s.push_str("```\n");
    }
}

fn counts(w: &mut W, r: &Report) {
    w.h("Counts per outcome class");
    if r.counts.is_empty() {
        w.s.push_str("No rows.\n");
        return;
    }
    let mut head = vec!["arm"];
    head.extend(Outcome::ALL.iter().map(|o| o.as_str()));
    head.push("rows");
    let rows: Vec<Vec<String>> = r
        .counts
        .iter()
        .map(|c| {
            let mut v = vec![w.t(&c.label)];
            v.extend(c.counts.iter().map(|n| n.to_string()));
            v.push(c.counts.iter().sum::<u64>().to_string());
            v
        })
        .collect();
    w.table(&head, &rows);
}

/// Served runs' arms: classes apart, identities, and each crash's and stop's log lines.
fn served(w: &mut W, r: &Report) {
    if r.served.is_empty() {
        return;
    }
    w.h("Served arms");
    for a in &r.served {
        let label = w.t(&a.label);
        let _ = writeln!(w.s, "{label}");
        let head: Vec<&str> = a.counts.iter().map(|(c, _)| *c).chain(["onset"]).collect();
        let mut row: Vec<String> = a.counts.iter().map(|(_, n)| n.to_string()).collect();
        row.push(a.onset.map_or("none".into(), |o| o.to_string()));
        w.table(&head, &[row]);
        let ids: Vec<Vec<String>> = a
            .identity
            .iter()
            .map(|(r, k, v)| vec![w.t(r), w.t(k), w.t(v)])
            .collect();
        w.table(&["round", "what", "sha256 or value"], &ids);
        for (title, list) in [("crash", &a.crashes), ("router-stop", &a.stops)] {
            for x in list {
                let head = format!(
                    "{title} row {} ({}): {}",
                    x.row,
                    w.t(&x.preset),
                    w.t(&x.rule)
                );
                let _ = writeln!(w.s, "{head}");
                for l in &x.lines {
                    let l = w.t(l);
                    let _ = if w.md {
                        writeln!(w.s, "    {l}")
                    } else {
                        writeln!(w.s, "  | {l}")
                    };
                }
            }
        }
        w.s.push('\n');
    }
}

fn latency(w: &mut W, r: &Report) {
    w.h("Latency distribution");
    if r.latency.iter().all(|l| l.wall_ms.is_empty()) {
        w.s.push_str("No timed rows.\n");
        return;
    }
    let rows: Vec<Vec<String>> = r
        .latency
        .iter()
        .map(|l| {
            let p = |q| format!("{:.1}", percentile(&l.wall_ms, q));
            vec![
                w.t(&l.label),
                l.wall_ms.len().to_string(),
                p(50.0),
                p(90.0),
                p(99.0),
                format!("{:.1}", l.wall_ms.last().copied().unwrap_or(0.0)),
            ]
        })
        .collect();
    w.table(
        &["arm", "rows", "p50 ms", "p90 ms", "p99 ms", "max ms"],
        &rows,
    );
}

/// The diff, the patches, the evidence and the coverage.
fn rest(w: &mut W, r: &Report) {
    w.h("Artifact diff");
    if r.diffs.is_empty() {
        w.s.push_str("No two builds to compare among the inputs.\n");
    }
    for d in &r.diffs {
        let _ = writeln!(
            w.s,
            "{} (from {}): {} rows the same, {} not.\n",
            w.t(&d.title),
            w.t(&d.source),
            d.same,
            d.rows.len()
        );
        let rows: Vec<Vec<String>> = d
            .rows
            .iter()
            .map(|x| {
                vec![
                    x.section.clone(),
                    w.t(&x.name),
                    w.t(&x.a),
                    w.t(&x.b),
                    w.t(&x.change),
                ]
            })
            .collect();
        if !rows.is_empty() {
            w.table(&["section", "name", "A", "B", "change"], &rows);
        }
    }
    w.h("Patch set");
    let rows: Vec<Vec<String>> = r
        .patches
        .iter()
        .map(|p| {
            let mut links: Vec<String> = p
                .links
                .iter()
                .map(|l| format!("{}: {}", w.t(&l.field), w.t(&l.url)))
                .collect();
            if let Some(n) = &p.note {
                links.push(w.t(n));
            }
            vec![
                w.t(&p.build),
                p.order.to_string(),
                w.t(&p.id),
                w.t(&p.status),
                w.t(&p.people.join(", ")),
                links.join("; "),
            ]
        })
        .collect();
    if rows.is_empty() {
        w.s.push_str("No patched build among the inputs.\n");
    } else {
        w.table(
            &["build", "#", "patch", "status", "people", "attribution"],
            &rows,
        );
    }
    w.h("Evidence index");
    let _ = writeln!(
        w.s,
        "Re-checked when this report was made: {} of {} fail.\n",
        r.failing(),
        r.evidence.len()
    );
    let rows: Vec<Vec<String>> = r
        .evidence
        .iter()
        .map(|e| {
            vec![
                w.t(&e.path),
                w.t(&e.role),
                e.sha256.chars().take(16).collect(),
                e.status.as_str().to_string(),
                w.t(&e.detail),
            ]
        })
        .collect();
    w.table(&["file", "what", "sha256", "verify now", "detail"], &rows);
    w.h("Not tested");
    for c in &r.coverage {
        let _ = writeln!(w.s, "- {}", w.t(c));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::Timeline;

    #[test]
    fn the_text_timeline_marks_each_row_and_the_onset_and_markdown_escapes_cells() {
        let r = Report {
            timelines: vec![Timeline {
                label: "run · a|b".into(),
                span: 4,
                marks: vec![
                    (0, Outcome::Ok),
                    (1, Outcome::TokenBudget),
                    (2, Outcome::Crash),
                    (3, Outcome::Crash),
                ],
                onset: Some(2),
                names: Default::default(),
            }],
            coverage: vec!["<img src=x onerror=alert(1)>\u{1b}[31m".into()],
            ..Report::default()
        };
        let t = render(&r, Flavor::Text);
        assert!(t.contains("       0 .BXX\n           ^\n"), "{t}");
        assert!(!t.contains('\u{1b}'), "{t}");
        let md = render(&r, Flavor::Markdown);
        assert!(md.contains("&lt;img src=x onerror=alert(1)&gt;"), "{md}");
        assert!(!md.contains("<img"), "{md}");
    }
}
