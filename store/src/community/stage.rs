//! The stages a community deletion request moves through, as the database spells them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A community request's durable stage. Mirrors the `stage_belongs_to_kind` CHECK constraint of
/// `deletion.requests`; the order of the variants is the lifecycle order, with `Aborted` the only
/// exit before `RetentionPending`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Registered; the inventory is not frozen yet.
    Submitted,
    /// Inventory and digest frozen; waiting for approval.
    Inventoried,
    /// Approval evidence recorded.
    Approved,
    /// Serving writes quiesced and the community fenced.
    Fenced,
    /// Serving writes drained; destructive manifest bound.
    Drained,
    /// Every manifest chunk stamped: the community's object versions are gone.
    BindingsRemoved,
    /// Every tenant row and the community row deleted.
    PostgresPurged,
    /// The Redis namespace unlinked.
    CachePurged,
    /// Absence proven in all three stores.
    LogicallyVerified,
    /// Done (terminal).
    RetentionPending,
    /// Ended by an operator before the irreversible point (terminal).
    Aborted,
}

impl Stage {
    /// Every stage, in lifecycle order.
    pub const ALL: [Stage; 11] = [
        Stage::Submitted,
        Stage::Inventoried,
        Stage::Approved,
        Stage::Fenced,
        Stage::Drained,
        Stage::BindingsRemoved,
        Stage::PostgresPurged,
        Stage::CachePurged,
        Stage::LogicallyVerified,
        Stage::RetentionPending,
        Stage::Aborted,
    ];

    /// The spelling stored in `deletion.requests.stage`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Submitted => "submitted",
            Stage::Inventoried => "inventoried",
            Stage::Approved => "approved",
            Stage::Fenced => "fenced",
            Stage::Drained => "drained",
            Stage::BindingsRemoved => "bindings_removed",
            Stage::PostgresPurged => "postgres_purged",
            Stage::CachePurged => "cache_purged",
            Stage::LogicallyVerified => "logically_verified",
            Stage::RetentionPending => "retention_pending",
            Stage::Aborted => "aborted",
        }
    }

    /// Whether the request has ended (and no longer counts as the community's open request).
    pub fn is_terminal(self) -> bool {
        matches!(self, Stage::RetentionPending | Stage::Aborted)
    }

    /// Whether object versions may already have been deleted at this stage, so abort is refused.
    pub fn is_past_irreversible_point(self) -> bool {
        matches!(
            self,
            Stage::BindingsRemoved
                | Stage::PostgresPurged
                | Stage::CachePurged
                | Stage::LogicallyVerified
                | Stage::RetentionPending
        )
    }

    /// The next stage in the forward lifecycle (`None` for terminal stages).
    pub fn next(self) -> Option<Stage> {
        match self {
            Stage::Submitted => Some(Stage::Inventoried),
            Stage::Inventoried => Some(Stage::Approved),
            Stage::Approved => Some(Stage::Fenced),
            Stage::Fenced => Some(Stage::Drained),
            Stage::Drained => Some(Stage::BindingsRemoved),
            Stage::BindingsRemoved => Some(Stage::PostgresPurged),
            Stage::PostgresPurged => Some(Stage::CachePurged),
            Stage::CachePurged => Some(Stage::LogicallyVerified),
            Stage::LogicallyVerified => Some(Stage::RetentionPending),
            Stage::RetentionPending | Stage::Aborted => None,
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stage name that is not a community stage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown community deletion stage {0:?}")]
pub struct UnknownStage(pub String);

impl FromStr for Stage {
    type Err = UnknownStage;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Stage::ALL
            .into_iter()
            .find(|stage| stage.as_str() == name)
            .ok_or_else(|| UnknownStage(name.to_owned()))
    }
}

/// `a|b|c`, for error messages naming the stages a call accepts.
pub(crate) fn stage_list(stages: &[Stage]) -> String {
    stages
        .iter()
        .map(|stage| stage.as_str())
        .collect::<Vec<_>>()
        .join("|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_round_trips_through_its_database_spelling() {
        for stage in Stage::ALL {
            assert_eq!(stage.as_str().parse::<Stage>(), Ok(stage));
        }
        assert!("running".parse::<Stage>().is_err());
    }

    #[test]
    fn forward_lifecycle_visits_every_non_abort_stage_once_in_order() {
        let mut seen = vec![Stage::Submitted];
        while let Some(next) = seen.last().and_then(|stage| stage.next()) {
            seen.push(next);
        }
        let expected: Vec<Stage> = Stage::ALL
            .into_iter()
            .filter(|stage| *stage != Stage::Aborted)
            .collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn irreversible_point_is_after_drained() {
        assert!(!Stage::Drained.is_past_irreversible_point());
        assert!(Stage::BindingsRemoved.is_past_irreversible_point());
        assert!(!Stage::Aborted.is_past_irreversible_point());
    }
}
