//! The journal (`journal.json`): written before the commit point and removed after the
//! receipt, it is what recovery reads to finish or undo an interrupted transaction. Parsing
//! accepts only values the protocol can have written.

use super::*;

/// A transaction's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// `install`.
    Install,
    /// `rollback`.
    Rollback,
}

impl Op {
    pub(super) fn as_str(&self) -> &'static str {
        match self {
            Op::Install => "install",
            Op::Rollback => "rollback",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a transaction was when the journal was last written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Before the commit point.
    Staging,
    /// The commit (the rename) may have happened.
    Commit,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Staging => "staging",
            Phase::Commit => "commit",
        })
    }
}

/// The journal: written before the commit point, removed after the receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Journal {
    /// Transaction id (also the receipt's sequence number).
    pub txid: u64,
    /// install | rollback.
    pub op: Op,
    /// Generation before.
    pub from_gen: u64,
    /// Generation being created: always `from_gen + 1`.
    pub to_gen: u64,
    /// Staging folder (installs): always `store/.stage-<txid>`, recorded for readers; the
    /// path used is derived from `txid`, never this text.
    pub staging: Option<String>,
    /// Entry being added (installs).
    pub entry: Option<Sha256>,
    /// How that entry holds its files (`own` in the known-good layers); absent in journals
    /// written before issue #36, whose entries all link.
    #[serde(default, skip_serializing_if = "Sharing::is_linked")]
    pub entry_sharing: Sharing,
    /// Whether that entry already existed (then undo must not remove it).
    pub entry_preexisted: bool,
    /// staging | commit.
    pub phase: Phase,
    /// Layer concerned.
    pub layer: Layer,
}

impl Journal {
    /// The entry being added, as a store name.
    pub(super) fn entry_key(&self) -> Option<EntryKey> {
        self.entry.map(|digest| EntryKey {
            digest,
            sharing: self.entry_sharing,
        })
    }
}

pub(super) fn staging_name(txid: u64) -> String {
    format!(".stage-{txid}")
}

/// Parse and validate a journal: every field must be one the protocol can have written.
pub(crate) fn parse_journal(bytes: &[u8]) -> Result<Journal> {
    let j: Journal = serde_json::from_slice(bytes)
        .map_err(|e| Error::input("journal.json", format!("journal unreadable: {e}")))?;
    let bad = |why: String| {
        Err(Error::input(
            "journal.json",
            format!("journal refused: {why}"),
        ))
    };
    if j.txid == 0 {
        return bad("transaction id 0".into());
    }
    if j.from_gen.checked_add(1) != Some(j.to_gen) {
        return bad(format!(
            "generation {} -> {} is not one step forward",
            j.from_gen, j.to_gen
        ));
    }
    if let Some(s) = &j.staging {
        let expected = format!("store/{}", staging_name(j.txid));
        if *s != expected {
            return bad(format!(
                "staging `{}` is not `{expected}`",
                s.escape_debug()
            ));
        }
    }
    if j.op == Op::Rollback && (j.staging.is_some() || j.entry.is_some()) {
        return bad("a rollback stages nothing".into());
    }
    if j.entry_sharing == Sharing::Own && (j.entry.is_none() || j.layer == Layer::Live) {
        return bad("only a control or original install adds an own entry".into());
    }
    Ok(j)
}

impl Root {
    pub(super) fn journal_path(&self) -> PathBuf {
        self.path.join("journal.json")
    }

    pub(super) fn read_journal(&self) -> Result<Option<Journal>> {
        let p = self.journal_path();
        let hint = "the journal is written atomically, so this is outside damage; inspect it, \
                    then remove it only if `state` is known good";
        match safe::kind(&p)? {
            Kind::Missing => Ok(None),
            Kind::Special(what) => Err(safe::special_error(&p, what)),
            Kind::File => {
                let bytes = safe::read_limited(&p, RECORD_LIMIT)?;
                parse_journal(&bytes).map(Some).map_err(|e| {
                    Error::input(p.display(), format!("damaged install root: {e}")).with_hint(hint)
                })
            }
            _ => Err(Error::input(
                p.display(),
                "damaged install root: the journal is not a file",
            )
            .with_hint(hint)),
        }
    }

    pub(super) fn write_journal(&self, j: &Journal) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(j).map_err(|e| Error::Internal(e.to_string()))?;
        fsx::write_atomic(&self.journal_path(), &bytes)
    }

    pub(super) fn remove_journal(&self) -> Result<()> {
        let p = self.journal_path();
        match std::fs::remove_file(&p) {
            Ok(()) => fsx::sync_dir(&self.path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("remove", &p, e)),
        }
    }
}
