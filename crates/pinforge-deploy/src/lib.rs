//! pinforge-deploy: from artifacts to a checked installation. It owns the three-layer rollback
//! root (store, layers, journal, transactions, recovery, gc, status, verify), the tiny test
//! model, smoke decodes of a build or an installed layer, the server a served build runs, and
//! shipping builds through an OCI registry (push, pull). It depends on `pinforge-base`,
//! `pinforge-sys` and `pinforge-record` only: installing needs neither git nor CMake.
// Unit tests read the files they made with plain std::fs (clippy.toml's fs entries are about
// files data names); the library itself is still checked without this in the non-test build.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod install;
pub mod model;
pub mod serve;
pub mod ship;
pub mod smoke;
