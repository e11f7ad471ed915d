//! `patch check-attribution`: the bundle's attribution claims checked against an upstream, not
//! only linted (issue #26 §3). Lint says a header is well-formed; this says whether it is true:
//! the `Upstream-Commit` exists in the upstream's history, its message names the PR the header
//! names, the first tag that contains it is the `Applied-Upstream` the header claims, the git
//! author is the commit's author, and a `Pending`/`Submitted` patch has not in fact landed.
//!
//! With a git pin (the upstream repository or a mirror) every claim is checked against the
//! history; a registry, tarball or folder pin has no history, so the report says so and checks
//! what content can show (whether each patch's change is already in that tree).

mod content;
mod history;

use crate::audit::Onto;
use crate::patch::Bundle;
use crate::recipe::{PinSource, Recipe};
use pinforge_base::error::Result;
use pinforge_base::workspace::Workspace;
use serde::Serialize;

pub(crate) use content::Content;

/// One claim found false (or unverifiable where it must be verifiable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Finding {
    /// 1-based line of the header field the claim is in (where it would go when absent).
    pub line: usize,
    /// The header field (`Upstream-Commit`, `Applied-Upstream`, `Upstream-PR`, `From`,
    /// `Upstream-Status`).
    pub field: String,
    /// What the header claims.
    pub claimed: String,
    /// What the upstream shows.
    pub found: String,
    /// How to fix the header.
    pub hint: String,
}

/// The checks of one patch.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PatchCheck {
    /// Patch file name.
    pub file: String,
    /// `Upstream-Commit` as written, if any.
    pub commit_claimed: Option<String>,
    /// Whether that commit is in the upstream's history (None: nothing claimed, or no history).
    pub commit_found: Option<bool>,
    /// Its full id, when found.
    pub commit: Option<String>,
    /// Its git author (`Name <email>`), when found: what `From:` should say for a backport.
    pub upstream_author: Option<String>,
    /// The earliest tag whose history contains the commit (what `git tag --contains` lists,
    /// earliest first), when found and tagged.
    pub first_tag: Option<String>,
    /// Whether the patch's change is in the upstream tree (checked without history only).
    pub content: Option<Content>,
    /// Claims found false, in header order.
    pub findings: Vec<Finding>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Report {
    /// The upstream as named (`git:URL@REV`, `crate:NAME@VERSION`, ...).
    pub upstream: String,
    /// What history was read, or why none could be.
    pub history: String,
    /// Per patch, in series order.
    pub patches: Vec<PatchCheck>,
}

impl Report {
    /// Number of false claims over all patches.
    pub fn false_claims(&self) -> usize {
        self.patches.iter().map(|p| p.findings.len()).sum()
    }
}

/// Check every patch of `bundle` against `upstream`.
pub fn check(ws: &Workspace, bundle: &Bundle, upstream: &Onto) -> Result<Report> {
    let patches = bundle.select(None)?;
    for p in &patches {
        p.require_attribution()?;
    }
    match &upstream.source {
        PinSource::Git { url, tag, commit } => {
            let rev = tag.as_deref().unwrap_or(commit);
            let h = history::History::open(ws, url, rev)?;
            let mut rows = Vec::new();
            for p in &patches {
                rows.push(h.check(p)?);
            }
            Ok(Report {
                upstream: upstream.spec.clone(),
                history: h.describe(),
                patches: rows,
            })
        }
        source => {
            // A registry crate of the default recipe's kind keeps the tree in the same subfolder
            // (`llama.cpp/`); any other pin is its own tree root.
            let frame = Recipe::embedded_default()?;
            let same_crate = matches!(
                (source, &frame.pin.source),
                (PinSource::Crate { name: a, .. }, PinSource::Crate { name: b, .. }) if a == b
            );
            let mut recipe = crate::audit::moved_recipe(&frame, source);
            if !same_crate {
                recipe.pin.subdir = None;
            }
            let tree = crate::upstream::pristine(ws, &recipe)?;
            let mut rows = Vec::new();
            for p in &patches {
                rows.push(content::check(&tree, p)?);
            }
            Ok(Report {
                upstream: upstream.spec.clone(),
                history: format!(
                    "{} has no git history: commits, PR numbers, authors and tags cannot be checked; \
                     only whether each change is already in the tree",
                    upstream.spec
                ),
                patches: rows,
            })
        }
    }
}

/// The line a finding about `field` points at: the field's own line, or the line after the
/// last field when it is absent.
pub(crate) fn field_line(p: &crate::patch::PatchFile, field: &str) -> usize {
    p.header
        .get(field)
        .map(|f| f.line)
        .or_else(|| p.header.fields.last().map(|f| f.line + 1))
        .unwrap_or(1)
}
