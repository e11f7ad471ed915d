//! From artifacts to a checked installation: the three-layer rollback root, the tiny test
//! model, smoke decodes of a build or an installed layer, and shipping builds through an OCI
//! registry (push, pull).

pub(crate) mod install;
pub(crate) mod model;
pub(crate) mod serve;
pub(crate) mod ship;
pub(crate) mod smoke;
