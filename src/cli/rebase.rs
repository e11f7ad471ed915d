//! placeholder
#[derive(Debug, clap::Args)]
pub struct RebaseArgs {}
pub(super) fn run(_c: &super::Ctx, _a: RebaseArgs) -> crate::error::Result<i32> {
    Ok(0)
}
