//! What the `status` query reports about a community deletion (and what the workflow returns).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::contracts::{
    AbortRequest, ApprovalRecord, DeleteProgress, InventorySummary, VerificationReport,
};
use super::phase::Phase;
use crate::operator::SignedAction;

/// A snapshot of one deletion request, as the `status` query returns it and as the workflow's
/// result on completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeletionStatus {
    /// The deletion request.
    pub request_id: Uuid,
    /// The community, once the host is registered.
    pub community_id: Option<Uuid>,
    /// The community's host name as requested.
    pub host: String,
    /// Operator who asked for the deletion.
    pub requested_by: String,
    /// The requester's signed `submit` statement.
    #[serde(default)]
    pub submitted: Option<SignedAction>,
    /// Where the deletion stands.
    pub phase: Phase,
    /// Set while a permanent failure waits for an operator's `unblock`.
    pub blocked: Option<BlockedInfo>,
    /// The last failure the workflow saw (kept after recovery, for the record).
    pub last_error: Option<String>,
    /// The approval the deletion runs under.
    pub approval: Option<ApprovalRecord>,
    /// The frozen inventory (digest, tables, prefixes, keys).
    pub inventory: Option<InventorySummary>,
    /// Counters of the destructive phases.
    pub progress: Progress,
    /// The fence generation recorded on the request.
    pub fence_generation: Option<u64>,
    /// The absence proof, once verified.
    pub verification: Option<VerificationReport>,
    /// The accepted abort, if any (actor `temporal-cancel` for a workflow cancellation).
    #[serde(default)]
    pub abort: Option<AbortRequest>,
    /// Number of the current run in the continue-as-new chain (the first run is 0).
    pub run_number: u32,
}

/// Why a deletion is blocked and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedInfo {
    /// The phase whose activity failed permanently; `unblock` retries it.
    pub phase: Phase,
    /// The failure as the activity reported it.
    pub reason: String,
    /// RFC 3339 workflow time the block began.
    pub since: String,
    /// An operator's unblock passed the rules and is being written to the audit trail; the
    /// phase runs again once it is (the block stays if that write fails). A watcher waits.
    #[serde(default)]
    pub unblocking: bool,
}

impl BlockedInfo {
    /// Blocked and nobody's unblock is on its way: the deletion waits for an operator.
    pub fn awaits_operator(&self) -> bool {
        !self.unblocking
    }
}

/// Counters of the destructive phases.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Chunks in the frozen manifest.
    pub chunks_total: u64,
    /// Chunks stamped deleted.
    pub chunks_done: u64,
    /// Versions in the frozen manifest.
    pub versions_total: u64,
    /// Versions acknowledged deleted.
    pub versions_deleted: u64,
    /// Rows deleted from tenant tables.
    pub rows_purged: u64,
    /// Redis keys unlinked.
    pub keys_purged: u64,
    /// Versions that appeared after the freeze, deleted as late manifest chunks after an
    /// unblock (0 unless that happened).
    #[serde(default)]
    pub late_versions_deleted: u64,
}

impl Progress {
    /// Takes over the object counters one `delete_chunks` call reported (they are totals, not
    /// increments, so a retried call never double counts).
    pub fn record_deletion(&mut self, deleted: &DeleteProgress) {
        self.chunks_total = deleted.chunks_total;
        self.chunks_done = deleted.chunks_done;
        self.versions_total = deleted.versions_total;
        self.versions_deleted = deleted.versions_deleted;
    }

    /// Whether every chunk of the manifest is stamped.
    pub fn objects_deleted(&self) -> bool {
        self.chunks_done >= self.chunks_total
    }
}

/// Formats `time` as RFC 3339 UTC with second precision (`2024-05-01T12:00:00Z`).
///
/// Workflow code gets its time from `ctx.workflow_time()`; this only renders it.
pub fn rfc3339(time: SystemTime) -> String {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Proleptic Gregorian date of `days` after 1970-01-01 (H. Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rfc3339_renders_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let leap_day = UNIX_EPOCH + Duration::from_secs(951_782_400 + 3_661);
        assert_eq!(rfc3339(leap_day), "2000-02-29T01:01:01Z");
        let new_year = UNIX_EPOCH + Duration::from_secs(1_704_067_199);
        assert_eq!(rfc3339(new_year), "2023-12-31T23:59:59Z");
    }

    #[test]
    fn deletion_counters_are_taken_over_not_added() {
        let mut progress = Progress::default();
        let report = DeleteProgress {
            chunks_total: 4,
            chunks_done: 2,
            versions_deleted: 20,
            versions_total: 40,
        };
        progress.record_deletion(&report);
        progress.record_deletion(&report);
        assert_eq!(progress.chunks_done, 2);
        assert_eq!(progress.versions_deleted, 20);
        assert!(!progress.objects_deleted());
    }
}
