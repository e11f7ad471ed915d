//! Files and trees: the checked file operations every layer uses (`fsx`), the digests of
//! files and folders (`hashing`), the ELF reader (`elf`), exclusive locks that name their
//! holder while they wait (`lock`), and the extraction of untrusted
//! trees (`archive`, checked against `tree`'s model before anything is written).

pub mod archive;
pub mod elf;
pub mod fsx;
pub mod hashing;
pub mod lock;
pub mod tree;
