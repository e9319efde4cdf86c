//! `TaxonomySweep`: lists the whole bucket (up to an object cap), counts the keys that match no
//! known writer shape, keeps a sample of them and records the result in Postgres.
//!
//! The sweep is observational: nothing reads its record to decide anything, so it can never block
//! or allow a deletion. It exists so an operator learns about a writer that stores keys outside
//! the taxonomy before a deletion has to deal with them (under a tenant prefix such a key blocks
//! the deletion; elsewhere it would silently escape it).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use temporalio_macros::{workflow, workflow_methods};
use temporalio_sdk::{ActivityOptions, WorkflowContext, WorkflowResult};
use uuid::Uuid;

use crate::activity_contract;

/// Most objects one sweep lists unless told otherwise (fleet-sized: ten million).
pub const DEFAULT_SWEEP_OBJECT_CAP: u64 = 10_000_000;

/// Most unknown keys a sweep record keeps verbatim; larger requests are clamped to this.
pub const SWEEP_UNKNOWN_KEY_SAMPLE: u32 = 100;

/// Workflow-id prefix of scheduled sweeps (the server appends the scheduled time).
pub const SWEEP_WORKFLOW_ID_PREFIX: &str = "buzz-taxonomy-sweep";

/// What one sweep should do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepInput {
    /// Stop listing after this many objects (at least 1).
    pub object_cap: u64,
    /// Keep at most this many unknown keys verbatim (clamped to [`SWEEP_UNKNOWN_KEY_SAMPLE`]).
    pub unknown_sample: u32,
}

impl Default for SweepInput {
    fn default() -> Self {
        Self {
            object_cap: DEFAULT_SWEEP_OBJECT_CAP,
            unknown_sample: SWEEP_UNKNOWN_KEY_SAMPLE,
        }
    }
}

/// A recorded sweep, as stored in `deletion.taxonomy_sweeps` (same field names as the row, so
/// `sweep run` and `sweep list` print the same shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepRecord {
    /// Row id.
    pub id: Uuid,
    /// When listing began (RFC 3339, UTC).
    pub started_at: String,
    /// When the record was written (RFC 3339, UTC).
    pub finished_at: String,
    /// The cap the sweep ran with.
    pub object_cap: u64,
    /// Objects listed.
    pub listed_objects: u64,
    /// Objects whose key is not an exact writer shape under its own tenant prefix.
    pub unknown_object_count: u64,
    /// The first unknown keys in listing order, verbatim.
    pub unknown_key_sample: Vec<String>,
    /// Whether listing stopped at the cap with objects left unlisted.
    pub reached_cap: bool,
}

activity_contract!(
    /// Lists the bucket page by page (heartbeating after each page), classifies every key and
    /// records the sweep.
    ScanBucket = "sweep.scan_bucket": SweepInput => SweepRecord
);

/// How long one listing attempt may take: ten million keys at a thousand per page is ten
/// thousand LIST calls.
const SCAN_TIMEOUT: Duration = Duration::from_secs(6 * 60 * 60);
/// A worker that stops heartbeating for this long is presumed dead and the attempt retried.
const SCAN_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(60);

/// One bucket-wide taxonomy sweep; returns its record.
#[workflow]
#[derive(Default)]
pub struct TaxonomySweep;

#[workflow_methods]
impl TaxonomySweep {
    /// Runs the scan activity once (retried on transient failures) and returns its record.
    #[run]
    pub async fn run(
        ctx: &mut WorkflowContext<Self>,
        input: SweepInput,
    ) -> WorkflowResult<SweepRecord> {
        let options = ActivityOptions::with_start_to_close_timeout(SCAN_TIMEOUT)
            .heartbeat_timeout(SCAN_HEARTBEAT_TIMEOUT)
            .retry_policy(
                // Observational: a few spaced retries, then the run fails and the next one
                // (scheduled or manual) starts afresh.
                crate::retry::a_few_times(Duration::from_secs(30), 5),
            )
            .build();
        Ok(ctx.execute_activity(ScanBucket, input, options).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use temporalio_common::ActivityDefinition;

    #[test]
    fn the_scan_contract_is_named_for_the_sweep_namespace() {
        assert_eq!(ScanBucket.name(), "sweep.scan_bucket");
    }
}
