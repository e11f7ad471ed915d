//! The artifact's one layer: a deterministic, uncompressed tar of a build's staged prefix.
//! Entries are the manifest's subjects (regular files) and its link byproducts, under one top
//! folder `prefix/`, sorted by name, with mtime 0, uid/gid 0, no owner names, mode 0755 or
//! 0644 (the executable bit is the only mode the store records), and no folder entries: the
//! same build always gives the same layer digest. Only what the manifest names is shipped,
//! and only after `verify` found every byte as recorded.

use pinforge_base::digest::Sha256;
use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use pinforge_record::manifest::{annotation, Statement};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// The top folder of every layer (stripped on unpack).
pub(crate) const TOP: &str = "prefix";

enum Entry {
    File { executable: bool },
    Link(String),
}

/// Write the layer of `statement` (artifacts under `root`) to `out`; returns its digest and
/// size.
pub(crate) fn write(statement: &Statement, root: &Path, out: &Path) -> Result<(Sha256, u64)> {
    let mut entries = BTreeMap::new();
    for s in &statement.subject {
        let p = root.join(&s.name);
        let meta = std::fs::symlink_metadata(&p).at("stat", &p)?;
        use std::os::unix::fs::PermissionsExt;
        entries.insert(
            s.name.clone(),
            Entry::File {
                executable: meta.permissions().mode() & 0o111 != 0,
            },
        );
    }
    for b in &statement.predicate.run_details.byproducts {
        if let Some(t) = b
            .annotations
            .get(annotation::LINK_TARGET)
            .and_then(|t| t.as_str())
        {
            entries.insert(b.name.clone(), Entry::Link(t.to_string()));
        }
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(out)
        .at("create", out)?;
    let mut tar = tar::Builder::new(std::io::BufWriter::with_capacity(1 << 20, file));
    tar.mode(tar::HeaderMode::Deterministic);
    for (name, e) in &entries {
        let path = format!("{TOP}/{name}");
        let mut h = tar::Header::new_gnu();
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        match e {
            Entry::File { executable } => {
                let src = root.join(name);
                let f = fsx::open_regular(&src, "artifact", false)?;
                let len = f.metadata().at("stat", &src)?.len();
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(if *executable { 0o755 } else { 0o644 });
                h.set_size(len);
                tar.append_data(&mut h, &path, f).at("write layer", out)?;
            }
            Entry::Link(target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                tar.append_link(&mut h, &path, target)
                    .at("write layer", out)?;
            }
        }
    }
    let mut w = tar.into_inner().at("write layer", out)?;
    w.flush().at("write layer", out)?;
    let f = w
        .into_inner()
        .map_err(|e| Error::io("write layer", out, e.into_error()))?;
    f.sync_all().at("fsync", out)?;
    drop(f);
    Sha256::of_file(out)
}
