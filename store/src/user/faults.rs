//! Crash points of the user activities, for the end-to-end tests that kill a worker at an exact
//! point of a step. A worker built without a hook (every production worker) passes each point
//! without doing anything; a test's hook typically parks the attempt and has the worker killed,
//! which to Temporal is a worker that died right there.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;

/// A point of a step where a test may kill the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultPoint {
    /// `user.execute_stage` started the row (generation bumped, row running) and the handler is
    /// about to run.
    HandlerStarted,
    /// `user.execute_stage` saved the handler's result; the activity has not completed yet.
    ResultSaved,
    /// `user.commit_transition` committed; the activity has not completed yet.
    TransitionCommitted,
    /// Inside `commit_transition`'s transaction: the current row was left with its decision,
    /// its successor (or the completion) not yet written.
    TransitionRowLeft,
    /// Inside `commit_transition`'s transaction: everything written, not yet committed.
    TransitionBeforeCommit,
}

/// What a test runs at each [`FaultPoint`].
pub type FaultHook = Arc<dyn Fn(FaultPoint) -> BoxFuture<'static, ()> + Send + Sync>;

/// The optional hook of one activities instance.
#[derive(Clone, Default)]
pub struct FaultPoints(Option<FaultHook>);

impl FaultPoints {
    /// Points that run `hook`.
    pub fn new(hook: FaultHook) -> Self {
        FaultPoints(Some(hook))
    }

    /// Passes `point`: runs the hook, if any.
    pub async fn pass(&self, point: FaultPoint) {
        if let Some(hook) = &self.0 {
            hook(point).await;
        }
    }
}

impl fmt::Debug for FaultPoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "FaultPoints(hooked)"
        } else {
            "FaultPoints(none)"
        })
    }
}
