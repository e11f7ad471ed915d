//! From artifacts to a checked installation: the three-layer rollback root, the tiny test
//! model, and smoke decodes of a build or an installed layer.

pub(crate) mod install;
pub(crate) mod model;
pub(crate) mod smoke;
