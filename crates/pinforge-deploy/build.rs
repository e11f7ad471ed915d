//! Build script: records the target triple, which the smoke shim is compiled for at run time.
fn main() {
    if let Ok(target) = std::env::var("TARGET") {
        println!("cargo:rustc-env=PINFORGE_TARGET={target}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
