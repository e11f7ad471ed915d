//! Lint of attribution headers: the rules follow the upstream status (a Backport names its
//! commit, Pending/Submitted name an issue or PR, every patch names a person), and every
//! field that is present must be well-formed. Findings carry the line they point at.

use super::header::{CheckSpec, Header, UpstreamStatus};
use serde::Serialize;

/// How serious a finding is: errors make `patch lint` exit 2 and block builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Blocks the patch.
    Error,
    /// Worth fixing; does not block.
    Warning,
}

/// One lint finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Finding {
    /// 1-based line the finding points at.
    pub line: usize,
    /// Error or warning.
    pub severity: Severity,
    /// Stable rule id (used by tests and for suppressing nothing: rules are not optional).
    pub rule: &'static str,
    /// What is wrong.
    pub message: String,
    /// How to fix it, where known.
    pub hint: Option<String>,
}

/// A reference to an upstream issue or pull request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct IssueRef {
    /// The number.
    pub number: u64,
    /// The full URL.
    pub url: String,
}

/// The validated attribution of one patch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Attribution {
    /// One-line summary (Subject without `[PATCH]`, or the first line of Description).
    pub summary: String,
    /// The long description, if any.
    pub description: String,
    /// The mail body between the header and the `---` separator (what `git am` puts under
    /// the subject), as written.
    pub body: String,
    /// Upstream status.
    pub status: UpstreamStatus,
    /// Upstream issues.
    pub issues: Vec<IssueRef>,
    /// Upstream pull requests.
    pub prs: Vec<IssueRef>,
    /// Upstream commit (abbreviated or full hex).
    pub commit: Option<String>,
    /// Upstream authors' handles.
    pub authors: Vec<String>,
    /// Reporters' handles.
    pub reporters: Vec<String>,
    /// `From:` as `Name <email>` (the git author of the carried commit).
    pub from: Option<String>,
    /// Origin URL (DEP-3 category prefix removed).
    pub origin: Option<String>,
    /// Where it landed upstream (tag, commit or URL).
    pub applied_upstream: Option<String>,
    /// Last-Update date (YYYY-MM-DD).
    pub last_update: Option<String>,
    /// `Date:` header as written (RFC 2822), used for deterministic commit times.
    pub date: Option<String>,
    /// `Pinforge-Check:`: the smoke that shows the defect without the fix (issue #26 §2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<CheckSpec>,
}

impl Attribution {
    /// Every handle named, authors first, without duplicates.
    pub(crate) fn handles(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for h in self.authors.iter().chain(&self.reporters) {
            if !out.contains(h) {
                out.push(h.clone());
            }
        }
        out
    }

    /// The URL that best cites this patch: Origin, else PR, else issue.
    pub(crate) fn url(&self) -> Option<String> {
        self.origin
            .clone()
            .or_else(|| self.prs.first().map(|p| p.url.clone()))
            .or_else(|| self.issues.first().map(|i| i.url.clone()))
    }

    /// Git trailers carrying the attribution into the commit message.
    pub(crate) fn trailers(&self) -> Vec<(String, String)> {
        let mut t = vec![("Upstream-Status".to_string(), self.status.to_string())];
        t.extend(
            self.issues
                .iter()
                .map(|i| ("Upstream-Issue".into(), i.url.clone())),
        );
        t.extend(
            self.prs
                .iter()
                .map(|p| ("Upstream-PR".into(), p.url.clone())),
        );
        if let Some(c) = &self.commit {
            t.push(("Upstream-Commit".into(), c.clone()));
        }
        t.extend(
            self.authors
                .iter()
                .map(|a| ("Upstream-Author".into(), a.clone())),
        );
        t.extend(
            self.reporters
                .iter()
                .map(|r| ("Reported-by".into(), r.clone())),
        );
        if let Some(o) = &self.origin {
            t.push(("Origin".into(), o.clone()));
        }
        if let Some(a) = &self.applied_upstream {
            t.push(("Applied-Upstream".into(), a.clone()));
        }
        if let Some(d) = &self.last_update {
            t.push(("Last-Update".into(), d.clone()));
        }
        t
    }
}

/// Fields pinforge understands, and fields it tolerates without comment (mail headers that
/// `git format-patch` writes, DEP-3 fields it does not use).
const KNOWN: &[&str] = &[
    "Description",
    "Subject",
    "Upstream-Status",
    "Upstream-Issue",
    "Upstream-PR",
    "Upstream-Commit",
    "Upstream-Author",
    "Reported-by",
    "Origin",
    "Applied-Upstream",
    "Last-Update",
    "From",
    "Author",
    "Date",
    "Pinforge-Check",
];
const TOLERATED: &[&str] = &[
    "Forwarded",
    "Bug",
    "Signed-off-by",
    "Reviewed-by",
    "Acked-by",
    "Tested-by",
    "Cc",
    "Message-Id",
    "MIME-Version",
    "Content-Type",
    "Content-Transfer-Encoding",
];
/// Fields that may appear once only.
const SINGLE: &[&str] = &[
    "Description",
    "Subject",
    "Upstream-Status",
    "Upstream-Commit",
    "Origin",
    "Applied-Upstream",
    "Last-Update",
    "From",
    "Date",
    "Pinforge-Check",
];

struct Lint {
    findings: Vec<Finding>,
}

impl Lint {
    fn error(&mut self, line: usize, rule: &'static str, message: String, hint: &str) {
        self.findings.push(Finding {
            line,
            severity: Severity::Error,
            rule,
            message,
            hint: (!hint.is_empty()).then(|| hint.to_string()),
        });
    }
    fn warn(&mut self, line: usize, rule: &'static str, message: String, hint: &str) {
        self.findings.push(Finding {
            line,
            severity: Severity::Warning,
            rule,
            message,
            hint: (!hint.is_empty()).then(|| hint.to_string()),
        });
    }
}

/// Check a parsed header; returns the attribution when there is no error, and all findings.
pub(crate) fn analyze(header: &Header) -> (Option<Attribution>, Vec<Finding>) {
    let mut lint = Lint {
        findings: Vec::new(),
    };
    // Where "missing field" findings point: the line after the last field (where it would go).
    let missing_line = header.fields.last().map(|f| f.line + 1).unwrap_or(1);
    check_fields(header, &mut lint);
    // Summary: Subject (minus [PATCH n/m]) or the first line of Description.
    let description = header.get("Description");
    let subject = header.get("Subject");
    let summary = subject
        .map(|s| super::mail::cleanup_subject(&s.mail))
        .or_else(|| description.map(|d| d.value.lines().next().unwrap_or("").to_string()))
        .unwrap_or_default();
    if description.is_none() && subject.is_none() {
        lint.error(
            missing_line,
            "missing-description",
            "no `Description:` (or `Subject:`) field".into(),
            "add `Description: <what the patch fixes and why>` to the header",
        );
    }

    let status = status(header, missing_line, &mut lint);
    let issues = refs(header, "Upstream-Issue", "issues", &mut lint);
    let prs = refs(header, "Upstream-PR", "pull", &mut lint);
    let commit = upstream_commit(header, &mut lint);
    let authors = handles(header, "Upstream-Author", &mut lint);
    let reporters = handles(header, "Reported-by", &mut lint);
    let from = header
        .get("From")
        .or_else(|| header.get("Author"))
        .map(|f| f.mail.trim().to_string())
        .filter(|v| !v.is_empty());
    if authors.is_empty() && reporters.is_empty() && from.is_none() {
        lint.error(
            missing_line,
            "missing-person",
            "the patch names no person (`Upstream-Author:`, `Reported-by:` or `From:`)".into(),
            "credit the upstream author or reporter by handle, e.g. `Reported-by: cmp-nct`",
        );
    }

    let origin = origin(header, missing_line, &mut lint);
    let last_update = last_update(header, &mut lint);
    let check = check(header, &mut lint);
    let applied_upstream = header
        .get("Applied-Upstream")
        .map(|f| f.value.trim().to_string())
        .filter(|v| !v.is_empty());

    if let Some((status, line)) = &status {
        status_rules(header, status, *line, &mut lint);
        if matches!(status, UpstreamStatus::Backport(_)) {
            backport_author(header, &authors, from.as_deref(), &mut lint);
        }
    }
    if header.diff_line.is_none() {
        lint.error(
            header.fields.last().map(|f| f.line).unwrap_or(1),
            "no-diff",
            "no diff found after the header".into(),
            "append the output of `git diff` or `git format-patch`",
        );
    }

    lint.findings
        .sort_by(|a, b| (a.line, a.severity, a.rule).cmp(&(b.line, b.severity, b.rule)));
    let has_error = lint.findings.iter().any(|f| f.severity == Severity::Error);
    let attribution = match (status, has_error) {
        (Some((status, _)), false) => Some(Attribution {
            summary,
            description: description.map(|d| d.value.clone()).unwrap_or_default(),
            body: header.body.clone(),
            status,
            issues,
            prs,
            commit,
            authors,
            reporters,
            from,
            origin,
            applied_upstream,
            last_update,
            date: header.get("Date").map(|f| f.value.clone()),
            check,
        }),
        _ => None,
    };
    (attribution, lint.findings)
}

/// Every field: unreadable lines, unknown, empty and duplicated fields.
fn check_fields(header: &Header, lint: &mut Lint) {
    // A line that cannot be read is an error at that line: nothing is guessed from it.
    for p in &header.problems {
        lint.error(
            p.line,
            "unreadable-header",
            p.message.clone(),
            "write header fields in UTF-8 (or as RFC 2047 encoded words, `=?UTF-8?q?...?=`)",
        );
    }

    for f in &header.fields {
        let known = KNOWN.iter().any(|k| k.eq_ignore_ascii_case(&f.name));
        let tolerated = TOLERATED.iter().any(|k| k.eq_ignore_ascii_case(&f.name))
            || f.name.to_ascii_lowercase().starts_with("x-")
            || f.name.to_ascii_lowercase().starts_with("bug-");
        if !known && !tolerated {
            lint.warn(
                f.line,
                "unknown-field",
                format!("unknown field `{}`", f.name),
                "pinforge reads Description, Upstream-Status, Upstream-Issue, Upstream-PR, \
                 Upstream-Commit, Upstream-Author, Reported-by, Origin, Applied-Upstream, Last-Update, \
                 Pinforge-Check",
            );
        }
        if known && f.value.trim().is_empty() {
            lint.error(
                f.line,
                "empty-field",
                format!("`{}` is empty", f.name),
                "give it a value or remove the line",
            );
        }
    }
    for name in SINGLE {
        let mut seen = header.all(name);
        if let (Some(_), Some(dup)) = (seen.next(), seen.next()) {
            lint.error(
                dup.line,
                "duplicate-field",
                format!("`{name}` appears more than once"),
                "keep one; list several issues or handles in one field separated by commas",
            );
        }
    }
}

/// `Upstream-Status` and the line it is on; None when missing, empty or malformed.
fn status(
    header: &Header,
    missing_line: usize,
    lint: &mut Lint,
) -> Option<(UpstreamStatus, usize)> {
    match header.get("Upstream-Status") {
        None => {
            lint.error(
                missing_line,
                "missing-status",
                "no `Upstream-Status:` field".into(),
                "add `Upstream-Status: Pending | Submitted [where] | Backport [ref] | Accepted | Inappropriate [reason] | Denied`",
            );
            None
        }
        Some(f) if f.value.is_empty() => None,
        Some(f) => match UpstreamStatus::parse(&f.value) {
            Ok(s) => Some((s, f.line)),
            Err(why) => {
                lint.error(
                    f.line,
                    "malformed-status",
                    format!("Upstream-Status: {why}"),
                    "",
                );
                None
            }
        },
    }
}

/// `Upstream-Commit`, lower-cased, when it is a commit id.
fn upstream_commit(header: &Header, lint: &mut Lint) -> Option<String> {
    header.get("Upstream-Commit").and_then(|f| {
        let v = f.value.trim();
        if v.is_empty() {
            return None;
        }
        if (7..=40).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_hexdigit()) {
            Some(v.to_ascii_lowercase())
        } else {
            lint.error(
                f.line,
                "malformed-commit",
                format!("Upstream-Commit `{v}` is not a commit id (7 to 40 hex digits)"),
                "use the upstream commit id, e.g. `Upstream-Commit: 99bd67c9b`",
            );
            None
        }
    })
}

/// The `Origin` URL (DEP-3 allows a category before it).
fn origin(header: &Header, missing_line: usize, lint: &mut Lint) -> Option<String> {
    let origin = header.get("Origin").and_then(|f| {
        // DEP-3 allows a category before the URL: "upstream, https://...".
        let v = f.value.trim();
        let url = v.rsplit(", ").next().unwrap_or(v).trim();
        if is_url(url) {
            Some(url.to_string())
        } else {
            if !v.is_empty() {
                lint.error(
                    f.line,
                    "malformed-origin",
                    format!("Origin `{v}` has no http(s) URL"),
                    "write `Origin: https://...` (optionally `upstream, https://...`)",
                );
            }
            None
        }
    });
    if header.get("Origin").is_none() {
        lint.warn(
            missing_line,
            "missing-origin",
            "no `Origin:` URL; the bibliography falls back to the PR or issue".into(),
            "",
        );
    }
    origin
}

/// `Pinforge-Check` when it is well-formed (the field may be folded: read unfolded, as mail).
fn check(header: &Header, lint: &mut Lint) -> Option<CheckSpec> {
    let f = header.get("Pinforge-Check")?;
    if f.mail.trim().is_empty() {
        return None;
    }
    match CheckSpec::parse(&f.mail) {
        Ok(c) => Some(c),
        Err(why) => {
            lint.error(
                f.line,
                "malformed-check",
                format!("Pinforge-Check: {why}"),
                "write `Pinforge-Check: variant=unpatched-asan arch=qwen2vl tokens=16 signature=\"heap-buffer-overflow in llama_kv_cache::apply_ubatch\"` (arch or model=FILE; the signature smoke reports without the fix)",
            );
            None
        }
    }
}

/// `Last-Update` when it is a date.
fn last_update(header: &Header, lint: &mut Lint) -> Option<String> {
    header.get("Last-Update").and_then(|f| {
        let v = f.value.trim();
        if is_date(v) {
            Some(v.to_string())
        } else {
            if !v.is_empty() {
                lint.error(
                    f.line,
                    "malformed-date",
                    format!("Last-Update `{v}` is not a date (YYYY-MM-DD)"),
                    "",
                );
            }
            None
        }
    })
}

/// The rules that follow the status: what a Backport, a Pending or an Inappropriate patch
/// must also name.
fn status_rules(header: &Header, status: &UpstreamStatus, line: usize, lint: &mut Lint) {
    match status {
        // A present but malformed Upstream-Commit is already reported as malformed.
        UpstreamStatus::Backport(_) | UpstreamStatus::Accepted
            if header.get("Upstream-Commit").is_none() =>
        {
            lint.error(
                line,
                "status-needs-commit",
                format!("a {} patch must name its upstream commit", status.word()),
                "add `Upstream-Commit: <id>` (the commit it was taken from)",
            );
        }
        UpstreamStatus::Pending | UpstreamStatus::Submitted(_)
            if header.get("Upstream-Issue").is_none() && header.get("Upstream-PR").is_none() =>
        {
            lint.error(
                line,
                "status-needs-issue",
                format!(
                    "a {} patch must name an upstream issue or PR",
                    status.word()
                ),
                "add `Upstream-Issue: https://.../issues/N` or `Upstream-PR: https://.../pull/N`",
            );
        }
        UpstreamStatus::Inappropriate(None) => {
            lint.error(
                line,
                "status-needs-reason",
                "`Inappropriate` must give its reason: `Inappropriate [reason]`".into(),
                "",
            );
        }
        _ => {}
    }
}

/// A backport keeps git's author, as `git cherry-pick` does: `From:` (what `git log`, `git
/// blame` and every forge show) is the upstream author the header names, not the bundle's
/// maintainer, who is the committer. A `From:` that names none of the `Upstream-Author`
/// handles (in its name or e-mail) is a warning; `patch check-attribution --upstream` says
/// what the commit's author really is.
fn backport_author(header: &Header, authors: &[String], from: Option<&str>, lint: &mut Lint) {
    if authors.is_empty() {
        return;
    }
    let from_lower = from.unwrap_or("").to_ascii_lowercase();
    if authors
        .iter()
        .any(|h| from_lower.contains(&h.to_ascii_lowercase()))
    {
        return;
    }
    let line = header
        .get("From")
        .or_else(|| header.get("Upstream-Author"))
        .map(|f| f.line)
        .unwrap_or(1);
    lint.warn(
        line,
        "backport-author",
        format!(
            "a Backport's `From:` ({}) is not its upstream author ({})",
            from.unwrap_or("none"),
            authors.join(", ")
        ),
        "write the upstream commit's author as `From: Name <email>` (git's author); the bundle maintainer stays the committer. `pinforge patch check-attribution --upstream PIN` shows the commit's author",
    );
}

fn is_url(s: &str) -> bool {
    (s.starts_with("https://") || s.starts_with("http://"))
        && s.len() > "https://".len()
        && !s.contains(char::is_whitespace)
}

fn is_date(s: &str) -> bool {
    pinforge_base::time::parse_ymd(s).is_some()
}

/// Parse comma-separated issue or PR URLs: `https://host/owner/repo/<kind>/N`.
fn refs(header: &Header, name: &str, kind: &str, lint: &mut Lint) -> Vec<IssueRef> {
    let mut out = Vec::new();
    for f in header.all(name) {
        for item in f.value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match parse_ref(item, kind) {
                Some(r) => out.push(r),
                None => lint.error(
                    f.line,
                    if kind == "issues" {
                        "malformed-issue"
                    } else {
                        "malformed-pr"
                    },
                    format!("{name} `{item}` is not a URL ending in /{kind}/<number>"),
                    &format!("write the full URL, e.g. `{name}: https://github.com/ggml-org/llama.cpp/{kind}/20093`"),
                ),
            }
        }
    }
    out
}

fn parse_ref(item: &str, kind: &str) -> Option<IssueRef> {
    if !is_url(item) {
        return None;
    }
    let trimmed = item.trim_end_matches('/');
    let mut segs = trimmed.rsplit('/');
    let number: u64 = segs.next()?.parse().ok()?;
    (segs.next()? == kind).then(|| IssueRef {
        number,
        url: trimmed.to_string(),
    })
}

fn handles(header: &Header, name: &str, lint: &mut Lint) -> Vec<String> {
    let mut out = Vec::new();
    for f in header.all(name) {
        for item in f.value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let h = item.trim_start_matches('@');
            if valid_handle(h) {
                out.push(h.to_string());
            } else {
                lint.error(
                    f.line,
                    "malformed-handle",
                    format!("{name} `{item}` is not a handle"),
                    "use the person's upstream handle (letters, digits, `-`, `_`, `.`), e.g. `ggerganov`",
                );
            }
        }
    }
    out
}

fn valid_handle(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 64
        && h.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && h.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "From: A <a@b.c>\nSubject: [PATCH 1/3] fix it\nDescription: long\nUpstream-Status: Pending\nUpstream-Issue: https://github.com/o/r/issues/20093\nReported-by: cmp-nct\nOrigin: https://github.com/o/r/issues/20093\nLast-Update: 2026-11-30\n\n---\ndiff --git a/x b/x\n";

    fn rules(text: &str) -> Vec<(&'static str, usize)> {
        analyze(&Header::parse(text.as_bytes()))
            .1
            .into_iter()
            .filter(|f| f.severity == Severity::Error)
            .map(|f| (f.rule, f.line))
            .collect()
    }

    #[test]
    fn good_header_has_no_findings_and_full_attribution() {
        let (a, findings) = analyze(&Header::parse(GOOD.as_bytes()));
        assert!(findings.is_empty(), "{findings:?}");
        let a = a.expect("attribution");
        assert_eq!(a.summary, "fix it");
        assert_eq!(a.issues[0].number, 20093);
        assert_eq!(a.handles(), vec!["cmp-nct".to_string()]);
        assert_eq!(
            a.url().as_deref(),
            Some("https://github.com/o/r/issues/20093")
        );
    }

    #[test]
    fn each_rule_fires_with_its_line() {
        let without = |field: &str| {
            GOOD.lines()
                .filter(|l| !l.starts_with(field))
                .map(|l| format!("{l}\n"))
                .collect::<String>()
        };
        let no_desc = without("Subject").replace("Description: long\n", "");
        assert_eq!(rules(&no_desc), vec![("missing-description", 7)]);
        assert_eq!(
            rules(&without("Upstream-Status")),
            vec![("missing-status", 8)]
        );
        assert_eq!(
            rules(&GOOD.replace("Upstream-Status: Pending", "Upstream-Status: Merged")),
            vec![("malformed-status", 4)]
        );
        assert_eq!(
            rules(&without("Upstream-Issue")),
            vec![("status-needs-issue", 4)]
        );
        let backport = GOOD.replace("Upstream-Status: Pending", "Upstream-Status: Backport [x]");
        assert_eq!(rules(&backport), vec![("status-needs-commit", 4)]);
        let inappropriate =
            GOOD.replace("Upstream-Status: Pending", "Upstream-Status: Inappropriate");
        assert_eq!(rules(&inappropriate), vec![("status-needs-reason", 4)]);
        let nobody = without("Reported-by").replace("From: A <a@b.c>\n", "");
        assert_eq!(rules(&nobody), vec![("missing-person", 7)]);
        assert_eq!(
            rules(&GOOD.replace("issues/20093\nRep", "issue/20093\nRep")),
            vec![("malformed-issue", 5)]
        );
        assert_eq!(
            rules(&GOOD.replace(
                "Reported-by: cmp-nct",
                "Upstream-PR: https://x.y/o/r/pulls/1\nReported-by: cmp-nct"
            )),
            vec![("malformed-pr", 6)]
        );
        assert_eq!(
            rules(&GOOD.replace("Reported-by: cmp-nct", "Reported-by: cmp nct")),
            vec![("malformed-handle", 6)]
        );
        assert_eq!(
            rules(&GOOD.replace("Origin: https://", "Origin: www.")),
            vec![("malformed-origin", 7)]
        );
        assert_eq!(
            rules(&GOOD.replace("2026-11-30", "30/11/2026")),
            vec![("malformed-date", 8)]
        );
        assert_eq!(
            rules(&GOOD.replace(
                "Last-Update: 2026-11-30",
                "Last-Update: 2026-11-30\nUpstream-Commit: xyz"
            )),
            vec![("malformed-commit", 9)]
        );
        assert_eq!(
            rules(&GOOD.replace(
                "Last-Update: 2026-11-30",
                "Last-Update: 2026-11-30\nOrigin: https://a.b"
            )),
            vec![("duplicate-field", 9)]
        );
        assert_eq!(
            rules(&GOOD.replace(
                "Reported-by: cmp-nct",
                "Reported-by: cmp-nct\nUpstream-Commit:"
            )),
            vec![("empty-field", 7)]
        );
        assert_eq!(
            rules(&GOOD.replace("---\ndiff --git a/x b/x\n", "")),
            vec![("no-diff", 8)]
        );
    }

    // issue #26 §2: the check field is linted at its line, once, and carried in the attribution.
    #[test]
    fn the_check_field_is_linted_and_carried() {
        let with = |v: &str| {
            GOOD.replace(
                "Last-Update: 2026-11-30",
                &format!("Last-Update: 2026-11-30\nPinforge-Check: {v}"),
            )
        };
        let good = with("variant=unpatched-asan arch=qwen2vl tokens=8\n signature=\"heap-buffer-overflow in llama_kv_cache::apply_ubatch\"");
        let (a, findings) = analyze(&Header::parse(good.as_bytes()));
        assert!(findings.is_empty(), "{findings:?}");
        let c = a.and_then(|a| a.check).expect("check");
        assert_eq!((c.variant.as_str(), c.tokens), ("unpatched-asan", 8));
        assert_eq!(
            rules(&with("variant=v arch=qwen2vl")),
            vec![("malformed-check", 9)]
        );
        assert_eq!(
            rules(&with("arch=qwen2vl signature=\"a in f\"")),
            vec![("malformed-check", 9)]
        );
        assert_eq!(rules(&with("")), vec![("empty-field", 9)]);
        let twice = with("variant=v arch=qwen2 signature=\"a in f\"\nPinforge-Check: variant=v arch=qwen2 signature=\"a in f\"");
        assert_eq!(rules(&twice), vec![("duplicate-field", 10)]);
        // No check is no finding: a patch whose defect no smoke shows says nothing.
        assert!(analyze(&Header::parse(GOOD.as_bytes()))
            .0
            .expect("a")
            .check
            .is_none());
    }

    #[test]
    fn a_backport_authored_by_the_bundle_warns() {
        let backport = |from: &str| {
            format!("From: {from}\nSubject: fix\nUpstream-Status: Backport\nUpstream-Commit: 99bd67c9b\nUpstream-Author: ggerganov\nOrigin: https://github.com/o/r/pull/1\nLast-Update: 2026-11-30\n\n---\ndiff --git a/x b/x\n")
        };
        let all = |text: &str| -> Vec<(&'static str, usize)> {
            analyze(&Header::parse(text.as_bytes()))
                .1
                .into_iter()
                .map(|f| (f.rule, f.line))
                .collect()
        };
        let warned = all(&backport(
            "pinforge bundle maintainers <bundle@pinforge.invalid>",
        ));
        assert_eq!(warned, vec![("backport-author", 1)]);
        assert!(all(&backport("Georgi Gerganov <ggerganov@gmail.com>")).is_empty());
        // A Pending patch's From: is whoever wrote the fix text: no rule about it.
        assert!(all(GOOD).is_empty());
    }

    #[test]
    fn unknown_fields_and_missing_origin_only_warn() {
        let text = GOOD.replace(
            "Origin: https://github.com/o/r/issues/20093\n",
            "Colour: blue\n",
        );
        let (a, findings) = analyze(&Header::parse(text.as_bytes()));
        assert!(a.is_some());
        let warned: Vec<_> = findings.iter().map(|f| (f.rule, f.severity)).collect();
        assert!(warned.contains(&("unknown-field", Severity::Warning)));
        assert!(warned.contains(&("missing-origin", Severity::Warning)));
    }

    #[test]
    fn trailers_carry_everything() {
        let (a, _) = analyze(&Header::parse(GOOD.as_bytes()));
        let t = a.expect("attribution").trailers();
        assert_eq!(t[0], ("Upstream-Status".into(), "Pending".into()));
        assert!(t.contains(&("Reported-by".into(), "cmp-nct".into())));
    }
}
