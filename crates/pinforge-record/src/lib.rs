//! pinforge-record: provenance, and what a host needs to check it. It owns the manifest (an
//! in-toto Statement v1 with a SLSA provenance v1 predicate: subjects, resolved dependencies,
//! canonical input digest), its `verify` (outputs re-hashed, links read back, inputs re-hashed;
//! a git tree input through the caller's [`manifest::TreeCheck`]), the stated reproducibility
//! rule (`normalize`), the schema id of every document pinforge writes (`schema_id`), and signing (DSSE envelopes, SSHSIG, allowed-signers policy). It depends
//! on `pinforge-base` only and builds without libgit2, CMake or an HTTP client.
// Unit tests read the files they made with plain std::fs (clippy.toml's fs entries are about
// files data names); the library itself is still checked without this in the non-test build.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod manifest;
pub mod normalize;
pub mod schema_id;
pub mod sign;
