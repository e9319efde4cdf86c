//! The transition rules: how a completed stage row is left (the table in `policy`), and the
//! rows a request's stages are created with.

use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use crate::user::contracts::{StageRecord, StageSpec};
use crate::user::inventory::UserInventory;
use crate::user::stage::{StageKind, StageStatus, UnknownStage};

/// The decision saved on a row when the workflow leaves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The user is gated: enter the first uncovered community (or finish if there is none).
    EnterCommunities,
    /// `purge_db` found agents: purge them in the same community.
    PurgeAgents,
    /// The community is covered: go to the next uncovered one, or finish.
    CommunityComplete,
}

impl Decision {
    /// The stable name saved in the `transition` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::EnterCommunities => "enter_communities",
            Decision::PurgeAgents => "purge_agents",
            Decision::CommunityComplete => "community_complete",
        }
    }
}

/// The stage a transition leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextStage {
    /// The successor's stage.
    pub stage: StageKind,
    /// The successor's community.
    pub community_id: Uuid,
}

/// A transition decision, saved verbatim (as JSON) on the row it leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// What was decided.
    pub decision: Decision,
    /// The community the decision is about (none for `enter_communities`).
    pub community_id: Option<Uuid>,
    /// Where the request goes next; none when it is finished.
    pub next: Option<NextStage>,
}

/// Why no decision can be taken for a row.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The saved stage name is not one this version knows.
    #[error("stage row {stage_id}: {source}")]
    UnknownStage {
        /// The row.
        stage_id: Uuid,
        /// The unknown name.
        source: UnknownStage,
    },
    /// Only a completed row can be left.
    #[error("stage row {stage_id} is {status:?}, not completed: no transition can leave it")]
    NotCompleted {
        /// The row.
        stage_id: Uuid,
        /// Its status.
        status: StageStatus,
    },
    /// A per-community stage row names no community of the inventory.
    #[error(
        "stage row {stage_id} ({stage}) names community {community_id:?}, which the inventory does not list"
    )]
    CommunityNotInInventory {
        /// The row.
        stage_id: Uuid,
        /// Its stage.
        stage: StageKind,
        /// The community it names.
        community_id: Option<Uuid>,
    },
    /// `purge_db` saved no boolean `has_agents`: the branch cannot be chosen.
    #[error(
        "purge_db row {stage_id} saved no boolean has_agents in its result; refusing to guess the branch"
    )]
    MissingHasAgents {
        /// The row.
        stage_id: Uuid,
    },
}

/// Decides how to leave the completed row `record`, given the communities already `covered`
/// before it.
pub fn decide(
    inventory: &UserInventory,
    covered: &[Uuid],
    record: &StageRecord,
) -> Result<Transition, PolicyError> {
    let stage = parse_stage(record)?;
    if record.status != StageStatus::Completed {
        return Err(PolicyError::NotCompleted {
            stage_id: record.id,
            status: record.status,
        });
    }
    let complete = |community_id: Uuid| {
        let mut now_covered = covered.to_vec();
        now_covered.push(community_id);
        Transition {
            decision: Decision::CommunityComplete,
            community_id: Some(community_id),
            next: first_uncovered(inventory, &now_covered),
        }
    };
    match stage {
        StageKind::GateUser => Ok(Transition {
            decision: Decision::EnterCommunities,
            community_id: None,
            next: first_uncovered(inventory, covered),
        }),
        StageKind::PurgeDb => {
            let community_id = inventory_community(inventory, record, stage)?;
            let has_agents = record
                .result
                .as_ref()
                .and_then(|result| result.get("has_agents"))
                .and_then(serde_json::Value::as_bool)
                .ok_or(PolicyError::MissingHasAgents {
                    stage_id: record.id,
                })?;
            if has_agents {
                Ok(Transition {
                    decision: Decision::PurgeAgents,
                    community_id: Some(community_id),
                    next: Some(NextStage {
                        stage: StageKind::PurgeAgents,
                        community_id,
                    }),
                })
            } else {
                Ok(complete(community_id))
            }
        }
        StageKind::PurgeAgents => Ok(complete(inventory_community(inventory, record, stage)?)),
    }
}

/// The `purge_db` of the first inventory community not in `covered`.
fn first_uncovered(inventory: &UserInventory, covered: &[Uuid]) -> Option<NextStage> {
    inventory
        .communities
        .iter()
        .find(|c| !covered.contains(&c.community_id))
        .map(|c| NextStage {
            stage: StageKind::PurgeDb,
            community_id: c.community_id,
        })
}

pub(super) fn parse_stage(record: &StageRecord) -> Result<StageKind, PolicyError> {
    record
        .stage
        .parse()
        .map_err(|source| PolicyError::UnknownStage {
            stage_id: record.id,
            source,
        })
}

pub(super) fn inventory_community(
    inventory: &UserInventory,
    record: &StageRecord,
    stage: StageKind,
) -> Result<Uuid, PolicyError> {
    record
        .community_id
        .filter(|id| inventory.community(*id).is_some())
        .ok_or(PolicyError::CommunityNotInInventory {
            stage_id: record.id,
            stage,
            community_id: record.community_id,
        })
}

/// The row to create for the first stage of a request.
pub fn initial_stage(inventory: &UserInventory) -> StageSpec {
    StageSpec {
        stage: StageKind::GateUser,
        community_id: None,
        inputs: json!({
            "target": inventory.target,
            "inventory_version": inventory.version,
        }),
    }
}

/// The row to create for `next`, with the inputs its handler reads.
pub fn successor_stage(inventory: &UserInventory, next: &NextStage) -> StageSpec {
    let role = inventory
        .community(next.community_id)
        .map(|c| c.role.as_str());
    StageSpec {
        stage: next.stage,
        community_id: Some(next.community_id),
        inputs: json!({
            "target": inventory.target,
            "community_id": next.community_id,
            "role": role,
        }),
    }
}
