//! The HTML rendering: one self-contained page (inline CSS and SVG; no script, no font, no
//! image, nothing fetched), with a Content-Security-Policy that forbids every load and every
//! script, so that even a string that escaped escaping could not run or reach the network.
//! Every string from a record goes through [`esc`]; only `http://` and `https://` URLs from
//! a patch's attribution become links (a `javascript:` value stays text).

use super::{svg, Claim, Report};
use crate::validate::rows::Outcome;
use crate::validate::summary::percentile;
use std::fmt::Write;

/// Text for HTML element content or a quoted attribute: `& < > " '` as entities, control and
/// other unsafe characters (bidi overrides, zero-width) as visible escapes.
pub(crate) fn esc(s: &str) -> String {
    let shown = pinforge_base::text::shown_lines(s);
    let mut out = String::with_capacity(shown.len());
    for c in shown.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Whether a value may be an `href`: an absolute http(s) URL without spaces or quotes.
pub(crate) fn is_link(url: &str) -> bool {
    (url.starts_with("https://") || url.starts_with("http://"))
        && !url
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '<')
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1000px;color:#222}\
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;margin:8px 0;max-width:100%}td,th{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}\
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}code,.d{font-family:ui-monospace,monospace;font-size:12px;overflow-wrap:anywhere}\
.pass{color:#2e7d32;font-weight:600}.FAIL{color:#c62828;font-weight:700}.absent{color:#777}\
.verdict{font-weight:700}.claim{border:1px solid #ccc;padding:8px 12px;margin:10px 0;background:#fafafa}\
svg .lbl{font:12px system-ui,sans-serif;fill:#222}svg .small{font-size:10px}svg .onset-lbl{font-weight:700}\
.sw{display:inline-block;width:10px;height:10px;margin-right:4px}";

/// The whole page.
pub(crate) fn page(r: &Report) -> String {
    let mut s = String::new();
    s.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    s.push_str("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">");
    s.push_str("<meta name=\"viewport\" content=\"width=device-width\">");
    s.push_str("<title>pinforge report</title><style>");
    s.push_str(STYLE);
    s.push_str("</style></head><body>\n<h1>pinforge report</h1>\n");
    inputs(&mut s, r);
    s.push_str("<h2 id=\"claims\">Hypotheses and verdicts</h2>\n");
    for c in &r.claims {
        claim(&mut s, c);
    }
    if r.claims.is_empty() {
        s.push_str("<p>No input states a hypothesis.</p>\n");
    }
    s.push_str("<h2 id=\"timeline\">Timeline per arm</h2>\n");
    if r.timelines.is_empty() {
        s.push_str("<p>No validation rows among the inputs.</p>\n");
    } else {
        s.push_str("<p>One mark per row, coloured by outcome class; the dashed line marks the first crash row.</p>\n");
        s.push_str(&svg::timeline(&r.timelines));
    }
    counts(&mut s, r);
    served(&mut s, r);
    latency(&mut s, r);
    diffs(&mut s, r);
    patches(&mut s, r);
    evidence(&mut s, r);
    s.push_str("<h2 id=\"coverage\">Not tested</h2>\n<ul>\n");
    for c in &r.coverage {
        let _ = writeln!(s, "<li>{}</li>", esc(c));
    }
    s.push_str("</ul>\n</body></html>\n");
    s
}

fn inputs(s: &mut String, r: &Report) {
    s.push_str("<h2 id=\"inputs\">Inputs</h2>\n<table><tr><th>path</th><th>kind</th></tr>\n");
    for i in &r.inputs {
        let _ = writeln!(
            s,
            "<tr><td class=\"d\">{}</td><td>{}</td></tr>",
            esc(&i.path),
            i.kind.as_str()
        );
    }
    s.push_str("</table>\n");
}

fn claim(s: &mut String, c: &Claim) {
    let _ = write!(s, "<div class=\"claim\"><h3>{}</h3><table>", esc(&c.title));
    let mut row = |k: &str, v: &str, class: &str| {
        let _ = write!(
            s,
            "<tr><th>{}</th><td{}>{}</td></tr>",
            esc(k),
            class,
            esc(v)
        );
    };
    if let Some(h) = &c.hypothesis {
        row("hypothesis", h, "");
    }
    if let Some(p) = &c.prediction {
        row("prediction", p, "");
    }
    row("verdict", &c.verdict, " class=\"verdict\"");
    if let Some(why) = &c.reason {
        row("reason", why, "");
    }
    for (k, v) in &c.facts {
        row(k, v, "");
    }
    s.push_str("</table></div>\n");
}

fn counts(s: &mut String, r: &Report) {
    s.push_str("<h2 id=\"counts\">Counts per outcome class</h2>\n");
    if r.counts.is_empty() {
        // A served run's classes are finer than the engine's (follow-on, router-stop, …):
        // its counts are the Served arms table, not "no rows".
        if r.served.is_empty() {
            s.push_str("<p>No rows.</p>\n");
        } else {
            s.push_str("<p>No in-process rows; each served arm counts its classes under <a href=\"#served\">Served arms</a>.</p>\n");
        }
        return;
    }
    s.push_str("<p>crash (the engine died) and token-budget (a constrained row ran out of budget) are separate classes; error rows are harness failures, left out of every comparison.</p>\n<table><tr><th>arm</th>");
    for o in Outcome::ALL {
        let _ = write!(
            s,
            "<th><span class=\"sw\" style=\"background:{}\"></span>{}</th>",
            svg::colour(o),
            o.as_str()
        );
    }
    s.push_str("<th>rows</th></tr>\n");
    for c in &r.counts {
        let _ = write!(s, "<tr><td>{}</td>", esc(&c.label));
        for n in c.counts {
            let _ = write!(s, "<td class=\"n\">{n}</td>");
        }
        let _ = writeln!(
            s,
            "<td class=\"n\">{}</td></tr>",
            c.counts.iter().sum::<u64>()
        );
    }
    s.push_str("</table>\n");
}

/// Served runs' arms: every class apart, the identity of each round, and the log lines that
/// are each crash's and each router stop's evidence.
fn served(s: &mut String, r: &Report) {
    if r.served.is_empty() {
        return;
    }
    s.push_str("<h2 id=\"served\">Served arms</h2>\n<p>A crash is a death with evidence (a sanitizer report, a signal or non-zero exit of a child, a child gone that the router did not stop). follow-on rows saw the same death again; router-stop rows were cut by the router's own stop of a fresh child; token-budget rows ran out of budget: none of these is a death.</p>\n");
    for a in &r.served {
        let _ = writeln!(s, "<h3>{}</h3>", esc(&a.label));
        s.push_str("<table class=\"served-counts\"><tr>");
        for (c, _) in &a.counts {
            let _ = write!(s, "<th>{}</th>", esc(c));
        }
        s.push_str("<th>onset row</th></tr><tr>");
        for (_, n) in &a.counts {
            let _ = write!(s, "<td class=\"n\">{n}</td>");
        }
        let onset = a.onset.map_or("none".to_string(), |o| o.to_string());
        let _ = writeln!(s, "<td class=\"n\">{onset}</td></tr></table>");
        s.push_str("<table class=\"identity\"><tr><th>round</th><th>what</th><th>sha256 or value</th></tr>\n");
        for (round, what, value) in &a.identity {
            let _ = writeln!(
                s,
                "<tr><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                esc(round),
                esc(what),
                esc(value)
            );
        }
        s.push_str("</table>\n");
        for (title, list) in [("crash", &a.crashes), ("router-stop", &a.stops)] {
            for x in list {
                let _ = writeln!(
                    s,
                    "<details class=\"{title}\"><summary>{title} row {} ({}): {}</summary><pre>{}</pre></details>",
                    x.row,
                    esc(&x.preset),
                    esc(&x.rule),
                    esc(&x.lines.join("\n"))
                );
            }
        }
    }
}

fn latency(s: &mut String, r: &Report) {
    s.push_str("<h2 id=\"latency\">Latency distribution</h2>\n");
    if r.latency.iter().all(|l| l.wall_ms.is_empty()) {
        s.push_str("<p>No timed rows.</p>\n");
        return;
    }
    s.push_str("<p>Wall time per row as the harness saw it (harness-error rows left out).</p>\n");
    s.push_str(&svg::latency(&r.latency));
    s.push_str("<table><tr><th>arm</th><th>rows</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th></tr>\n");
    for l in &r.latency {
        let p = |q| percentile(&l.wall_ms, q);
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.1}</td><td class=\"n\">{:.1}</td><td class=\"n\">{:.1}</td><td class=\"n\">{:.1}</td></tr>",
            esc(&l.label),
            l.wall_ms.len(),
            p(50.0),
            p(90.0),
            p(99.0),
            l.wall_ms.last().copied().unwrap_or(0.0)
        );
    }
    s.push_str("</table>\n");
}

fn diffs(s: &mut String, r: &Report) {
    s.push_str("<h2 id=\"diff\">Artifact diff</h2>\n");
    if r.diffs.is_empty() {
        s.push_str("<p>No two builds to compare among the inputs.</p>\n");
    }
    for d in &r.diffs {
        let _ = writeln!(
            s,
            "<h3>{}</h3><p>From {}; {} rows the same, {} not.</p>",
            esc(&d.title),
            esc(&d.source),
            d.same,
            d.rows.len()
        );
        if d.rows.is_empty() {
            continue;
        }
        s.push_str(
            "<table><tr><th>section</th><th>name</th><th>A</th><th>B</th><th>change</th></tr>\n",
        );
        for row in &d.rows {
            let _ = writeln!(
                s,
                "<tr><td>{}</td><td class=\"d\">{}</td><td class=\"d\">{}</td><td class=\"d\">{}</td><td>{}</td></tr>",
                esc(&row.section),
                esc(&row.name),
                esc(&row.a),
                esc(&row.b),
                esc(&row.change)
            );
        }
        s.push_str("</table>\n");
    }
}

fn patches(s: &mut String, r: &Report) {
    s.push_str("<h2 id=\"patches\">Patch set</h2>\n");
    if r.patches.is_empty() {
        s.push_str("<p>No patched build among the inputs.</p>\n");
        return;
    }
    s.push_str("<table><tr><th>build</th><th>#</th><th>patch</th><th>status</th><th>people</th><th>attribution</th><th>sha256</th></tr>\n");
    for p in &r.patches {
        let mut links = String::new();
        for l in &p.links {
            if is_link(&l.url) {
                let _ = write!(
                    links,
                    "{}: <a href=\"{u}\" rel=\"noreferrer\">{u}</a><br>",
                    esc(&l.field),
                    u = esc(&l.url)
                );
            } else {
                let _ = write!(links, "{}: {}<br>", esc(&l.field), esc(&l.url));
            }
        }
        if let Some(n) = &p.note {
            let _ = write!(links, "<span class=\"absent\">{}</span>", esc(n));
        }
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"d\">{}</td><td>{}</td><td>{}</td><td>{links}</td><td class=\"d\">{}</td></tr>",
            esc(&p.build),
            p.order,
            esc(&p.id),
            esc(&p.status),
            esc(&p.people.join(", ")),
            esc(&short(&p.sha256))
        );
    }
    s.push_str("</table>\n");
}

fn short(hex: &str) -> String {
    hex.chars().take(16).collect()
}

fn evidence(s: &mut String, r: &Report) {
    let _ = writeln!(
        s,
        "<h2 id=\"evidence\">Evidence index</h2>\n<p>Every evidence file with its recorded sha256, re-checked when this report was made: {} of {} fail.</p>",
        r.failing(),
        r.evidence.len()
    );
    s.push_str("<table><tr><th>file</th><th>what</th><th>sha256</th><th>verify now</th><th>detail</th></tr>\n");
    for e in &r.evidence {
        let _ = writeln!(
            s,
            "<tr><td class=\"d\">{}</td><td>{}</td><td class=\"d\">{}</td><td class=\"{st}\">{st}</td><td>{}</td></tr>",
            esc(&e.path),
            esc(&e.role),
            esc(&short(&e.sha256)),
            esc(&e.detail),
            st = e.status.as_str()
        );
    }
    s.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_strings_cannot_open_a_tag_or_an_attribute() {
        let hostile = "</script><img src=x onerror=alert(1)>\"' \u{202e}\u{7}";
        let e = esc(hostile);
        assert!(!e.contains('<') && !e.contains('>') && !e.contains('"') && !e.contains('\''));
        assert!(e.contains("&lt;/script&gt;&lt;img"));
        assert!(!e.contains('\u{202e}'), "{e}");
        assert!(is_link(
            "https://github.com/ggml-org/llama.cpp/issues/20093"
        ));
        assert!(!is_link("javascript:alert(1)"));
        assert!(!is_link("https://x\" onmouseover=\"y"));
    }
}
