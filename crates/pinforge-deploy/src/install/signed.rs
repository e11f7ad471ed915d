//! `verify --installed --allowed-signers F` (issue #24): what a layer shows must have been put
//! there by an install whose receipt an allowed principal signed. The layer is resolved once
//! (the entry digest its link chain names), the newest install receipt that committed that
//! entry to that layer (not reverted) is found, and its signature is checked with the same
//! verifier as `verify FILE --allowed-signers`. The receipt names the entry's digest and the
//! re-hash of the layer checks the bytes against it, so the two together say "an allowed
//! signer installed exactly these bytes here". Anything else is a check failure (exit 1)
//! naming why: nothing installed is an input error as for plain `verify --installed`.

use super::verify::Resolved;
use super::{parse_receipt, parse_receipt_name, safe, Layer, Op, Root, RECORD_LIMIT};
use pinforge_base::error::{Error, Result};
use pinforge_record::sign::{self, Policy};

impl Root {
    /// The signer of the receipt that installed what `layer` (or `current`) shows.
    pub fn verify_layer_signed(
        &self,
        layer: Option<Layer>,
        policy: &Policy,
    ) -> Result<(std::path::PathBuf, sign::Verified)> {
        let name = layer.map(|l| l.as_str()).unwrap_or("current");
        let subject = format!("{}/{name}", self.path.display());
        let digest = match self.resolve(name)? {
            Resolved::At { key, .. } => key.digest,
            Resolved::Empty => {
                return Err(Error::input(subject, "nothing is installed there")
                    .with_hint("`pinforge install ... --sign KEY` first"))
            }
            Resolved::Broken(why) => return Err(Error::check(subject, why)),
        };
        let mut receipts: Vec<(u64, String)> = self
            .names("receipts")?
            .into_iter()
            .filter_map(|n| parse_receipt_name(&n).map(|(seq, _)| (seq, n)))
            .collect();
        receipts.sort();
        for (seq, file) in receipts.into_iter().rev() {
            let p = self.path.join("receipts").join(&file);
            let Ok(r) = safe::read_limited(&p, RECORD_LIMIT).and_then(|b| parse_receipt(&b)) else {
                continue;
            };
            let installed_here = r.seq == seq
                && r.op == Op::Install
                && !r.reverted
                && layer.is_none_or(|l| l == r.layer)
                && r.to.as_ref().is_some_and(|t| t.digest == digest);
            if installed_here {
                let v = sign::verify_signed(&p, policy)?;
                return Ok((p, v));
            }
        }
        Err(Error::check(
            subject,
            format!(
                "no install receipt shows entry sha256:{} put there, so no signature can vouch for it",
                digest.short(16)
            ),
        )
        .with_hint("install it again with --sign KEY"))
    }
}
