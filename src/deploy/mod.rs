//! From artifacts to a checked installation: the three-layer rollback root, the tiny test
//! model, and smoke decodes of a build or an installed layer.

pub mod install;
pub mod model;
pub mod smoke;
