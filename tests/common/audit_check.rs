//! What the fast (`tests/cli/audit_check.rs`) and slow (`tests/llama/audit_check.rs`) tests share.

use crate::repo_root;

/// A copy of the shipped recipe and bundle (tests rewrite the copy, never the repository).
pub(crate) fn shipped_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for sub in ["recipes", "patches", "patches-current"] {
        std::fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
        for e in std::fs::read_dir(repo_root().join(sub)).expect("read") {
            let e = e.expect("entry");
            if e.path().is_file() {
                std::fs::copy(e.path(), dir.path().join(sub).join(e.file_name())).expect("copy");
            }
        }
    }
    dir
}
