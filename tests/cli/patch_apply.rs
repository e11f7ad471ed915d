//! Applying patches as `git apply` does: moved hunks, differential tests against git, encoded headers, non-UTF-8 bytes.
