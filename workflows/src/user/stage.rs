//! The handlers a user deletion runs, and the status of one stage-history row.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One handler of a user deletion. `GateUser` runs once for the user; the other two run per
/// community of the frozen inventory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageKind {
    /// Stops the user from acting anywhere while the deletion runs.
    GateUser,
    /// Purges the user's rows in one community; its result says whether agents remain.
    PurgeDb,
    /// Purges the user's agents in one community (only reached when `purge_db` found some).
    PurgeAgents,
}

/// Gives a unit enum its stable names, saved in stage history: `ALL` (declaration order),
/// `as_str`, `Display`, and `FromStr`, which refuses any other name with `$unknown`.
macro_rules! stable_names {
    ($kind:ident { $($variant:ident = $name:literal),+ $(,)? } else $unknown:ident) => {
        impl $kind {
            /// Every value, in declaration order.
            pub const ALL: [$kind; [$($name),+].len()] = [$($kind::$variant),+];

            /// The stable name saved in stage history.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($kind::$variant => $name,)+
                }
            }
        }

        impl fmt::Display for $kind {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $kind {
            type Err = $unknown;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::ALL
                    .into_iter()
                    .find(|value| value.as_str() == s)
                    .ok_or_else(|| $unknown(s.to_string()))
            }
        }
    };
}

// In the order a community-free request could first reach them; the names are also what
// `--fail-stage` accepts.
stable_names!(StageKind {
    GateUser = "gate_user",
    PurgeDb = "purge_db",
    PurgeAgents = "purge_agents",
} else UnknownStage);

impl StageKind {
    /// Whether the stage works on one community (and so its row names one).
    pub fn is_per_community(self) -> bool {
        !matches!(self, StageKind::GateUser)
    }
}

/// A stage name that this version of the workflow does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown user-deletion stage {0:?} (known: gate_user, purge_db, purge_agents)")]
pub struct UnknownStage(pub String);

/// Execution status of one stage-history row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageStatus {
    /// Created by a transition; its handler has not started.
    Pending,
    /// A handler attempt started and has saved no outcome yet.
    Running,
    /// The handler's result is saved; the row may still be current until its transition commits.
    Completed,
    /// The handler failed; the row stays current and is retried after the saved deadline.
    Failed,
}

stable_names!(StageStatus {
    Pending = "pending",
    Running = "running",
    Completed = "completed",
    Failed = "failed",
} else UnknownStatus);

/// A status name the store returned that is not one of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown stage status {0:?}")]
pub struct UnknownStatus(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_names_round_trip_and_unknown_names_are_refused() {
        for stage in StageKind::ALL {
            assert_eq!(stage.as_str().parse::<StageKind>(), Ok(stage));
        }
        assert_eq!(
            "purge_media".parse::<StageKind>(),
            Err(UnknownStage("purge_media".into()))
        );
    }

    #[test]
    fn serde_names_match_the_saved_names() {
        for stage in StageKind::ALL {
            let json = serde_json::to_value(stage).unwrap();
            assert_eq!(json, serde_json::Value::String(stage.as_str().into()));
        }
    }
}
