//! `status`, `history` and `verify --installed`: read-only views of the install root (no
//! lock, no recovery, nothing created), and the last verification each entry's receipts
//! recorded.

use super::*;

/// What `status` reports.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Status {
    /// Install root.
    pub root: PathBuf,
    /// `{layer, digest, recipe, variant}` of current, or null.
    pub current: Option<StatusSlot>,
    /// Each layer or null.
    pub layers: BTreeMap<String, Option<StatusSlot>>,
    /// The unfinished transaction, or null.
    pub transaction: Option<Journal>,
    /// Generation.
    pub gen: u64,
    /// Earlier live entries (the rollback stack), most recent last.
    pub live_history: Vec<GenSlot>,
    /// Whether the entries were re-hashed now (`status --verify`).
    pub verified_now: bool,
}

/// What `status` knows of an entry's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VerificationState {
    /// Re-hashed (now, or in the last recorded verification) and equal to its record.
    Ok,
    /// Re-hashed and different from its record.
    Mismatch,
    /// Never verified since it was installed.
    Unverified,
}

impl VerificationState {
    /// The JSON spelling.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            VerificationState::Ok => "ok",
            VerificationState::Mismatch => "mismatch",
            VerificationState::Unverified => "unverified",
        }
    }

    fn of(ok: bool) -> VerificationState {
        if ok {
            VerificationState::Ok
        } else {
            VerificationState::Mismatch
        }
    }
}

impl std::fmt::Display for VerificationState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A layer in `status`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct StatusSlot {
    /// Layer name.
    pub layer: String,
    /// Output digest.
    pub digest: Sha256,
    /// Recipe.
    pub recipe: String,
    /// Variant.
    pub variant: String,
    /// `linked` (live: files shared with the rollback stack through the objects) or `own`
    /// (control, original: files of its own, sharing no inode).
    pub sharing: Sharing,
    /// The store entry's folder (`store/<digest>` or `store/<digest>.own`).
    pub entry: PathBuf,
    /// `ok`, `mismatch` or `unverified`: re-hashed now with `--verify`, otherwise the last
    /// verification recorded in a receipt.
    pub verification: VerificationState,
    /// When that verification ran (RFC 3339), or null when never.
    pub verified_at: Option<String>,
}

/// One transaction in [`Root::history`].
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct HistoryRow {
    /// The receipt's sequence number.
    pub seq: u64,
    /// The receipt file, relative to the root.
    pub receipt: String,
    /// The receipt itself (None when it could not be read; see `unreadable`).
    #[serde(rename = "record")]
    pub receipt_record: Option<Receipt>,
    /// Why the receipt could not be read.
    pub unreadable: Option<String>,
    /// The generation's whole state, while it is on disk.
    pub state: Option<GenState>,
    /// The input digest of each layer's build, from the store entries.
    pub input_digests: BTreeMap<Layer, Sha256>,
}

/// Result of `history`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct History {
    /// The root.
    pub root: PathBuf,
    /// The generation `state` shows now.
    pub committed_gen: u64,
    /// Oldest first.
    pub rows: Vec<HistoryRow>,
}

impl Root {
    /// The state as it is now (read-only: no lock, no recovery, nothing created; an
    /// unfinished transaction is reported, not resolved). With `verify`, every layer's entry
    /// is re-hashed now instead of showing the last verification a receipt recorded.
    pub fn status(&self, verify: bool) -> Result<Status> {
        let gen = self.committed_gen()?;
        let gs = self.read_gen(gen)?;
        let transaction = self.read_journal()?;
        let mut seen: BTreeMap<EntryKey, (VerificationState, Option<String>)> = BTreeMap::new();
        if verify {
            let now = pinforge_base::time::now_rfc3339();
            for s in gs.layers.values() {
                let dir = self.entry_dir(&s.key());
                let v = check_key(&dir, &s.key(), &dir)?;
                seen.insert(s.key(), (VerificationState::of(v.ok), Some(now.clone())));
            }
        } else {
            for (key, (ok, time)) in self.last_verifications()? {
                seen.insert(key, (VerificationState::of(ok), Some(time)));
            }
        }
        let show = |layer: Layer, s: &GenSlot| {
            let (verification, verified_at) = seen
                .get(&s.key())
                .cloned()
                .unwrap_or((VerificationState::Unverified, None));
            StatusSlot {
                layer: layer.to_string(),
                digest: s.digest,
                recipe: s.recipe.clone(),
                variant: s.variant.clone(),
                sharing: s.sharing,
                entry: self.entry_dir(&s.key()),
                verification,
                verified_at,
            }
        };
        Ok(Status {
            root: self.path.clone(),
            current: gs.current_slot().map(|(l, s)| show(l, s)),
            layers: Layer::ALL
                .iter()
                .map(|l| (l.to_string(), gs.layers.get(l).map(|s| show(*l, s))))
                .collect(),
            transaction,
            gen,
            live_history: gs.live_history.clone(),
            verified_now: verify,
        })
    }

    /// Every transaction the root records, oldest first: one row per receipt (the record of
    /// what each install and rollback did, kept forever), with the generation it committed
    /// and, while that generation is still on disk (gc removes old ones), the whole state it
    /// showed. A receipt that cannot be read is a row that says so, never a silent gap.
    pub fn history(&self) -> Result<History> {
        let committed = self.committed_gen()?;
        let mut names: Vec<(u64, String)> = self
            .names("receipts")?
            .into_iter()
            .filter_map(|n| parse_receipt_name(&n).map(|(seq, _)| (seq, n)))
            .collect();
        names.sort();
        let mut rows = Vec::new();
        for (seq, name) in names {
            let p = self.path.join("receipts").join(&name);
            let receipt = safe::read_limited(&p, RECORD_LIMIT)
                .map_err(|e| e.to_string())
                .and_then(|b| parse_receipt(&b).map_err(|e| e.to_string()));
            let (receipt, unreadable) = match receipt {
                Ok(r) => (Some(r), None),
                Err(why) => (None, Some(why)),
            };
            let state = receipt.as_ref().and_then(|r| {
                (safe::kind(&self.gen_dir(r.gen)).ok() == Some(Kind::Dir))
                    .then(|| self.read_gen(r.gen).ok())
                    .flatten()
            });
            let input_digests = state
                .iter()
                .flat_map(|gs| gs.layers.iter())
                .filter_map(|(l, s)| self.read_entry(&s.key()).ok().map(|e| (*l, e.input_digest)))
                .collect();
            rows.push(HistoryRow {
                seq,
                receipt: format!("receipts/{name}"),
                receipt_record: receipt,
                unreadable,
                state,
                input_digests,
            });
        }
        Ok(History {
            root: self.path.clone(),
            committed_gen: committed,
            rows,
        })
    }

    /// The last verification each entry got, from well-formed receipts in sequence order
    /// (unreadable or stray receipts are skipped: they are a record, not the state).
    fn last_verifications(&self) -> Result<BTreeMap<EntryKey, (bool, String)>> {
        let mut receipts: Vec<(u64, String)> = self
            .names("receipts")?
            .into_iter()
            .filter_map(|n| parse_receipt_name(&n).map(|(seq, _)| (seq, n)))
            .collect();
        receipts.sort();
        let mut out = BTreeMap::new();
        for (seq, name) in receipts {
            let p = self.path.join("receipts").join(name);
            let Ok(bytes) = safe::read_limited(&p, RECORD_LIMIT) else {
                continue;
            };
            let Ok(r) = parse_receipt(&bytes) else {
                continue;
            };
            if r.seq != seq {
                continue;
            }
            if let Some(to) = &r.to {
                if r.verification.files > 0 || r.verification.ok {
                    out.insert(to.key(), (r.verification.ok && !r.reverted, r.time.clone()));
                }
            }
        }
        Ok(out)
    }

    /// The store entry an installed layer (or `current`) shows, for a consumer that reads it
    /// (smoke, diff): resolved once like [`Root::verify_installed`], and handed out only when
    /// it re-hashes to its name, so a damaged or redirected entry is never used.
    pub(crate) fn layer_entry(&self, layer: Option<Layer>) -> Result<PathBuf> {
        let name = layer.map(|l| l.as_str()).unwrap_or("current");
        let nothing = || match layer {
            None => Error::input(self.path.display(), "nothing is installed")
                .with_hint("`pinforge install ...` first"),
            Some(l) => Error::input(format!("layer `{l}`"), "nothing is installed in that layer")
                .with_hint("`pinforge status` lists the layers"),
        };
        match self.resolve(name)? {
            Resolved::Empty => Err(nothing()),
            Resolved::Broken(why) => Err(damaged(self.path.join(name).display(), why)),
            Resolved::At { key, .. } => {
                let dir = self.entry_dir(&key);
                let v = check_key(&dir, &key, &self.path.join(name))?;
                if !v.ok {
                    return Err(mismatch_error(
                        &dir,
                        &format!("the {name} entry does not re-hash to its name"),
                        &v,
                    ));
                }
                Ok(dir)
            }
        }
    }

    /// Re-hash an installed layer (or `current`): its link chain is resolved once and that
    /// one entry is verified, so a concurrent swap cannot mix two entries into one answer.
    pub fn verify_installed(&self, layer: Option<Layer>) -> Result<Verification> {
        let name = layer.map(|l| l.as_str()).unwrap_or("current");
        self.verify_name(name, None)?.ok_or_else(|| match layer {
            None => Error::input(self.path.display(), "nothing is installed")
                .with_hint("`pinforge install ...` first"),
            Some(l) => Error::input(format!("layer `{l}`"), "nothing is installed in that layer"),
        })
    }
}
