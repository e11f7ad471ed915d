//! The CMake side of a recipe: cache keys and types, the variables pinforge reserves for itself,
//! and how a TOML value becomes a `-DVAR=value` string.

use super::At;
use pinforge_base::error::{Error, Result};
use std::collections::BTreeMap;
use toml::Spanned;

/// The variable name of a CMake cache key as a recipe writes it: `CMAKE_BUILD_TYPE:STRING`
/// names `CMAKE_BUILD_TYPE` (the `:TYPE` suffix of `-DVAR:TYPE=value`).
pub fn cmake_key_name(key: &str) -> &str {
    key.split_once(':').map(|(n, _)| n).unwrap_or(key)
}

/// The cache types `-DVAR:TYPE=value` accepts.
pub(super) const CMAKE_TYPES: &[&str] = &[
    "BOOL",
    "STRING",
    "PATH",
    "FILEPATH",
    "INTERNAL",
    "UNINITIALIZED",
];

/// CMake variables pinforge sets itself; a recipe setting them would silently lose.
const RESERVED_CMAKE: &[(&str, &str)] = &[
    ("CMAKE_BUILD_TYPE", "set `build-type` instead"),
    (
        "CMAKE_INSTALL_PREFIX",
        "pinforge installs into a fixed prefix and stages it",
    ),
    (
        "CMAKE_INSTALL_LIBDIR",
        "pinforge stages a standard prefix with lib/",
    ),
    (
        "CMAKE_INSTALL_RPATH",
        "pinforge keeps installed run paths $ORIGIN-relative",
    ),
    (
        "CMAKE_BUILD_RPATH_USE_ORIGIN",
        "pinforge keeps run paths $ORIGIN-relative",
    ),
    (
        "CMAKE_TOOLCHAIN_FILE",
        "set the toolchain's compilers instead",
    ),
    (
        "CMAKE_CUDA_ARCHITECTURES",
        "set the toolchain's `cuda-architectures` instead",
    ),
    (
        "CUDAToolkit_ROOT",
        "set the toolchain's `cuda-root` instead",
    ),
    ("GIT_EXE", "pinforge answers git queries from the pin"),
    ("CMAKE_C_COMPILER", "set the toolchain's `cc` instead"),
    ("CMAKE_CXX_COMPILER", "set the toolchain's `cxx` instead"),
    ("CMAKE_CUDA_COMPILER", "set the toolchain's `nvcc` instead"),
    ("CMAKE_MAKE_PROGRAM", "pinforge drives Ninja itself"),
    ("CMAKE_GENERATOR", "pinforge always uses Ninja"),
    ("LLAMA_BUILD_NUMBER", "set the pin's `build-number` instead"),
    ("LLAMA_BUILD_COMMIT", "set the pin's `build-commit` instead"),
];

pub(super) fn cmake_value(key: &str, v: &Spanned<toml::Value>, at: &At) -> Result<String> {
    match v.get_ref() {
        toml::Value::Boolean(b) => Ok(if *b { "ON" } else { "OFF" }.into()),
        // A NUL cannot be passed in an argument, and CMake's cache cannot hold a line break:
        // either would change what the value means on its way to CMake.
        toml::Value::String(s) if s.contains(['\0', '\n', '\r']) => Err(Error::input(
            at(Some(v.span())),
            format!("cmake option `{key}`: the value holds a NUL or a line break"),
        )),
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        _ => Err(Error::input(
            at(Some(v.span())),
            format!("cmake option `{key}` must be a string, boolean or integer"),
        )),
    }
}

/// A variant's `cmake` table: each key a cache key (`VAR` or `VAR:TYPE`), each variable set once,
/// none of those pinforge sets itself, each value one CMake can take.
pub(super) fn check_cmake_table(
    cmake: &BTreeMap<String, Spanned<toml::Value>>,
    name: &str,
    at: &At,
) -> Result<()> {
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for (key, value) in cmake {
        let var = cmake_key_name(key);
        let typed_ok = match key.split_once(':') {
            None => true,
            Some((_, ty)) => CMAKE_TYPES.contains(&ty),
        };
        let var_ok = !var.is_empty()
            && var
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.+-".contains(c));
        if !typed_ok || !var_ok {
            return Err(Error::input(
                at(Some(value.span())),
                format!("{name}: `{key}` is not a CMake cache key"),
            )
            .with_hint(format!(
                "write VAR or VAR:TYPE, VAR of letters, digits, `_`, `.`, `+`, `-`, TYPE one of {}",
                CMAKE_TYPES.join(", ")
            )));
        }
        if let Some(other) = seen.insert(var, key) {
            return Err(Error::input(
                at(Some(value.span())),
                format!("{name}: `{key}` and `{other}` set the same CMake variable `{var}`"),
            ));
        }
        if let Some((_, why)) = RESERVED_CMAKE.iter().find(|(k, _)| *k == var) {
            return Err(Error::input(
                at(Some(value.span())),
                format!("{name}: cmake option `{key}` is set by pinforge"),
            )
            .with_hint(*why));
        }
        cmake_value(key, value, at)?;
    }
    Ok(())
}
