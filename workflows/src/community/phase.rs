//! The phases of a community deletion, in the order the workflow runs them.

use serde::{Deserialize, Serialize};

/// Where a community deletion stands. The order of the variants is the order of the phase table
/// in DESIGN.md 3.1; `Aborted` is the only way out before `RetentionPending`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The request row is being registered and its inventory taken.
    Submitted,
    /// The inventory is frozen; waiting for a second operator to approve its digest.
    AwaitingApproval,
    /// Approved; checking permissions and catalog drift.
    Approved,
    /// Quiescing serving writes, then fencing once none is live.
    Fencing,
    /// Disconnecting relays, waiting for serving writes to drain, freezing the manifest.
    Draining,
    /// Deleting every frozen object version. Irreversible from here.
    DeletingObjects,
    /// Deleting the community's rows in every tenant table, then the community row.
    PurgingRows,
    /// Unlinking the community's Redis namespace.
    PurgingCache,
    /// Proving absence in all three stores.
    Verifying,
    /// Done: every row, version and key of the community is gone.
    RetentionPending,
    /// Ended by an operator before the irreversible point; the community is served again.
    Aborted,
}

impl Phase {
    /// The stable name used in search attributes, CLI output and the runbook.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Submitted => "submitted",
            Phase::AwaitingApproval => "awaiting_approval",
            Phase::Approved => "approved",
            Phase::Fencing => "fencing",
            Phase::Draining => "draining",
            Phase::DeletingObjects => "deleting_objects",
            Phase::PurgingRows => "purging_rows",
            Phase::PurgingCache => "purging_cache",
            Phase::Verifying => "verifying",
            Phase::RetentionPending => "retention_pending",
            Phase::Aborted => "aborted",
        }
    }

    /// Whether an abort (or a workflow cancellation) certainly still ends the request: before
    /// object deletion starts, nothing irreversible can have happened.
    pub fn abort_allowed(self) -> bool {
        self < Phase::DeletingObjects
    }

    /// Whether only the database can tell if an abort is still possible: while deleting objects
    /// the irreversible marker (`irreversible_at`, set under the request lock once S3 has
    /// acknowledged the first deletion or upload abort) decides, and the workflow accepts an
    /// abort tentatively.
    pub fn abort_undecided(self) -> bool {
        self == Phase::DeletingObjects
    }

    /// Whether the workflow has ended in this phase.
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::RetentionPending | Phase::Aborted)
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abort_is_allowed_exactly_before_object_deletion() {
        assert!(Phase::Draining.abort_allowed());
        assert!(Phase::AwaitingApproval.abort_allowed());
        assert!(!Phase::DeletingObjects.abort_allowed());
        assert!(!Phase::Verifying.abort_allowed());
        assert!(!Phase::RetentionPending.abort_allowed());
        assert!(Phase::DeletingObjects.abort_undecided());
        assert!(!Phase::Draining.abort_undecided());
        assert!(!Phase::PurgingRows.abort_undecided());
    }

    #[test]
    fn phase_names_round_trip_through_serde() {
        for phase in [
            Phase::Submitted,
            Phase::DeletingObjects,
            Phase::RetentionPending,
        ] {
            let json = serde_json::to_string(&phase).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", phase.as_str()));
        }
    }
}
