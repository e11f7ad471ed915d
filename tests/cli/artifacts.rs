//! Build artifacts are what the project installs: staged `cmake --install`, the file API cross-check, consumers of an installed layer, recipe values that must not escape their meaning.
