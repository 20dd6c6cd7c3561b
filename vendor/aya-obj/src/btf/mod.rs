//! BTF loading, parsing and relocation.

#[expect(clippy::module_inception, reason = "TODO")]
mod btf;
mod info;
mod relocation;
mod types;

pub use btf::*;
pub use info::*;
pub use relocation::{take_relocation_failures, BtfRelocationError, RelocationFailure};
pub use types::*;
