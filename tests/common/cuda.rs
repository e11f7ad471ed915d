//! What the fast (`tests/cli/cuda.rs`) and slow (`tests/llama/cuda.rs`) tests share.

/// The manifest's `build_path` byproduct.
pub(crate) fn build_path(m: &serde_json::Value) -> &serde_json::Value {
    m["predicate"]["runDetails"]["byproducts"]
        .as_array()
        .expect("byproducts")
        .iter()
        .find(|r| r["name"] == "build_path")
        .expect("a build_path record")
}
