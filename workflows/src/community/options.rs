//! How long each community activity may run, whether it heartbeats, and how it is retried.

use std::time::Duration;

use temporalio_common::ActivityDefinition;
use temporalio_sdk::{ActivityOptions, WorkflowCancellationToken};

use super::contracts::{
    Abort, AcceptAbort, Complete, DeleteChunks, DeleteLateVersions, Drain, Fence, FreezeManifest,
    Inventory, Preflight, PurgeCache, PurgePostgres, RecordApproval, RecordEvent, Register, Verify,
};
use super::input::Tuning;
use crate::contract::{
    ABORT_REFUSED_FAILURE_TYPE, LATE_OBJECT_VERSION_FAILURE_TYPE, PERMANENT_FAILURE_TYPE,
};

/// Start-to-close limit of a bookkeeping activity (a few statements, no heartbeat). It is also
/// how long a deletion waits when such an attempt is lost (its worker was killed, or its result
/// never reached the server): the chaos run found deletions stalled for the whole former 10
/// minutes after a dropped completion. Each of these activities is idempotent, so a retry after
/// a minute is safe.
const SHORT_RUN: Duration = Duration::from_secs(60);
/// Start-to-close limit of a store-walking activity; its heartbeats detect a dead worker long
/// before this.
const LONG_RUN: Duration = Duration::from_secs(2 * 60 * 60);

/// Whether an activity is bookkeeping or walks a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// A few statements: 1 minute, no heartbeat.
    Short,
    /// Walks a store: 2 hours, heartbeats every `heartbeat_timeout_secs` at most.
    Heartbeating,
}

/// An activity contract with its pace.
pub trait Paced: ActivityDefinition + Copy {
    /// The pace of this activity.
    const PACE: Pace;
}

macro_rules! paced {
    ($pace:ident: $($marker:ty),+) => {
        $(impl Paced for $marker {
            const PACE: Pace = Pace::$pace;
        })+
    };
}

paced!(Short: Register, RecordApproval, RecordEvent, Preflight, Complete, Abort, AcceptAbort);
paced!(Heartbeating: Inventory, Fence, Drain, FreezeManifest, DeleteChunks, PurgePostgres, PurgeCache, Verify);
paced!(Heartbeating: DeleteLateVersions);

/// Options of one activity call: transient failures retried forever with exponential backoff
/// (from `retry_initial_secs`, doubling, capped at `retry_max_secs`); permanent failures and
/// abort refusals not retried, so the workflow sees them. A stale generation is retried like a
/// transient failure: the retry re-claims the request (see `contract`). `cancellation`
/// detaches the call from workflow cancellation: the workflow decides what a cancellation means.
pub fn activity_options(
    pace: Pace,
    tuning: &Tuning,
    cancellation: WorkflowCancellationToken,
) -> ActivityOptions {
    let retry = crate::retry::until_success(
        Duration::from_secs(tuning.retry_initial_secs.max(1)),
        Duration::from_secs(tuning.retry_max_secs.max(tuning.retry_initial_secs).max(1)),
        [
            PERMANENT_FAILURE_TYPE,
            ABORT_REFUSED_FAILURE_TYPE,
            LATE_OBJECT_VERSION_FAILURE_TYPE,
        ],
    );
    match pace {
        Pace::Short => ActivityOptions::with_start_to_close_timeout(SHORT_RUN)
            .retry_policy(retry)
            .cancellation_token(cancellation)
            .build(),
        Pace::Heartbeating => ActivityOptions::with_start_to_close_timeout(LONG_RUN)
            .heartbeat_timeout(Duration::from_secs(tuning.heartbeat_timeout_secs.max(1)))
            .retry_policy(retry)
            .cancellation_token(cancellation)
            .build(),
    }
}
