//! The verifying phase with its one remedy: object versions that appeared after the manifest
//! was frozen.
//!
//! `Verify` that finds a version no manifest chunk holds fails with the
//! [`LATE_OBJECT_VERSION_FAILURE_TYPE`] failure. Like any permanent failure it blocks the request
//! (naming key, version id and kind), but the operator's unblock does not simply retry
//! verification — that would block again on the same version. It first runs
//! `DeleteLateVersions`, which appends the late versions to the request's manifest as late chunks
//! and deletes and stamps them, and only then verifies again. Other permanent failures block and
//! retry verification as every phase does.

use temporalio_common::error::IncomingError;
use temporalio_sdk::{ActivityExecutionError, WorkflowContext};

use super::{CommunityDeletion, PhaseOutput, Stop, failure_reason};
use crate::community::contracts::{DeleteLateVersions, LateVersionsReport, RequestRef, Verify};
use crate::community::phase::Phase;
use crate::contract::LATE_OBJECT_VERSION_FAILURE_TYPE;

impl CommunityDeletion {
    /// Runs `Verify` until it proves absence; a late object version blocks, and its unblock
    /// deletes the late versions (`DeleteLateVersions`) before verification runs again.
    pub(super) async fn verify_absence(
        ctx: &WorkflowContext<Self>,
        request: RequestRef,
    ) -> Result<(), Stop> {
        Self::enter_unless_aborted(ctx, Phase::Verifying)?;
        loop {
            match Self::attempt(ctx, Verify, request.clone()).await? {
                Ok(()) => return Ok(()),
                Err(failure) => {
                    let late = is_late_object_version(&failure);
                    Self::block(ctx, Phase::Verifying, failure_reason(&failure)).await?;
                    if late {
                        let input = request.clone();
                        Self::stage(ctx, Phase::Verifying, DeleteLateVersions, input).await?;
                    }
                }
            }
        }
    }
}

/// Whether verification failed on an object version that no manifest chunk holds (decided by
/// the failure's type, never its message).
fn is_late_object_version(failure: &ActivityExecutionError) -> bool {
    matches!(
        failure.cause(),
        Some(IncomingError::Application(app))
            if app.type_name() == Some(LATE_OBJECT_VERSION_FAILURE_TYPE)
    )
}

impl PhaseOutput for LateVersionsReport {
    fn record(self, state: &mut CommunityDeletion) {
        state.progress.late_versions_deleted = self.late_versions_deleted;
    }
}
