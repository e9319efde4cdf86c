//! Operator identity (the registry, SSHSIG verification and one-time consumption live in the
//! store crate's `identity`), and who consumes a signature when an activity acts on it.

pub use store::identity::*;

use temporalio_sdk::activities::ActivityContext;

/// Who consumes a signature: the workflow run and the activity acting on it. A retry of the
/// same activity presents the same consumer and is an idempotent repeat, anything else a replay.
pub fn consumer_of(ctx: &ActivityContext) -> String {
    let info = ctx.info();
    format!(
        "{}/{}/{}",
        info.workflow_id.as_deref().unwrap_or("-"),
        info.workflow_run_id.as_deref().unwrap_or("-"),
        info.activity_id
    )
}
