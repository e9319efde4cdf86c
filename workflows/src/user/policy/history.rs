//! History reconstruction: reading a request's saved stage rows back as progress, re-deriving
//! every saved decision with the transition rules and refusing any row that disagrees.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::transitions::{
    Decision, NextStage, PolicyError, Transition, decide, initial_stage, inventory_community,
    parse_stage, successor_stage,
};
use crate::user::contracts::StageRecord;
use crate::user::inventory::{MAX_INVENTORY_COMMUNITIES, UserInventory};
use crate::user::stage::StageKind;

/// Most stage rows reconstruction reads; a resource limit, far above the 1 + 2 per community a
/// request can reach.
pub const MAX_STAGES: usize = 10_000;

/// Where a request stands, as read from its stage history.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// The rows in chain order, initial stage first.
    pub chain: Vec<StageRecord>,
    /// Communities covered by a saved `community_complete` decision, in the order covered.
    pub covered: Vec<Uuid>,
    /// The request's position.
    pub position: Position,
}

/// The request's durable position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// No stage row exists yet.
    NotStarted,
    /// The last row of the chain is current (pending, running, failed, or completed awaiting its
    /// transition).
    Current,
    /// The last row was left with a decision that has no successor: the request is finished.
    Finished,
}

impl Progress {
    /// The current row, when the position is [`Position::Current`].
    pub fn current(&self) -> Option<&StageRecord> {
        match self.position {
            Position::Current => self.chain.last(),
            Position::NotStarted | Position::Finished => None,
        }
    }
}

/// Why saved history cannot be read as progress. Nothing is invented: any of these stops the
/// workflow until a person looks.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReconstructionError {
    /// More rows than [`MAX_STAGES`].
    #[error("{count} stage rows exceed the limit of {MAX_STAGES}")]
    TooManyStages {
        /// Rows found.
        count: usize,
    },
    /// More communities than [`MAX_INVENTORY_COMMUNITIES`].
    #[error(
        "the inventory lists {count} communities, more than the limit of {MAX_INVENTORY_COMMUNITIES}"
    )]
    InventoryTooLarge {
        /// Communities listed.
        count: usize,
    },
    /// No row without a predecessor.
    #[error("stage history has no initial stage (every row names a predecessor)")]
    NoInitialStage,
    /// More than one row without a predecessor.
    #[error("stage history has {} initial stages: {ids:?}", ids.len())]
    SeveralInitialStages {
        /// Their ids.
        ids: Vec<Uuid>,
    },
    /// A row names a predecessor that does not exist in this request's history.
    #[error(
        "broken chain: stage row {stage_id} names predecessor {previous_stage_id}, which does not exist"
    )]
    MissingPredecessor {
        /// The row.
        stage_id: Uuid,
        /// The missing predecessor.
        previous_stage_id: Uuid,
    },
    /// Two rows name the same predecessor.
    #[error("broken chain: stage row {stage_id} has more than one successor")]
    SeveralSuccessors {
        /// The row.
        stage_id: Uuid,
    },
    /// Some rows are not reachable from the initial stage.
    #[error(
        "broken chain: only {reachable} of {total} stage rows are reachable from the initial stage"
    )]
    Disconnected {
        /// Rows on the chain.
        reachable: usize,
        /// Rows saved.
        total: usize,
    },
    /// The initial row is not `gate_user`, or `gate_user` appears later.
    #[error("stage row {stage_id}: {stage} cannot be at position {position} of the chain")]
    StageOutOfPlace {
        /// The row.
        stage_id: Uuid,
        /// Its stage.
        stage: StageKind,
        /// Its position (0 = initial).
        position: usize,
    },
    /// A row's saved inputs are not what the approved inventory gives for its stage.
    #[error(
        "stage row {stage_id} ({stage}): its saved inputs {saved} are not what the approved inventory gives ({expected}); refusing to run inputs nobody approved"
    )]
    InputsDiffer {
        /// The row.
        stage_id: Uuid,
        /// Its stage.
        stage: StageKind,
        /// As saved.
        saved: serde_json::Value,
        /// As the approved inventory gives them.
        expected: serde_json::Value,
    },
    /// The `gate_user` row names a community.
    #[error("stage row {stage_id}: gate_user must not name a community")]
    GateNamesCommunity {
        /// The row.
        stage_id: Uuid,
    },
    /// A row that is not the last is current, or the chain was left without a saved decision.
    #[error(
        "stage row {stage_id} was left without a saved transition decision (or is current but not last)"
    )]
    LeftWithoutDecision {
        /// The row.
        stage_id: Uuid,
    },
    /// A saved decision cannot be parsed.
    #[error("stage row {stage_id}: saved transition decision is unreadable: {detail}")]
    UnreadableDecision {
        /// The row.
        stage_id: Uuid,
        /// The parse error.
        detail: String,
    },
    /// A saved decision is not what the rules decide for the saved result.
    #[error("stage row {stage_id}: saved decision {saved:?} differs from the rules' {expected:?}")]
    DecisionDiffers {
        /// The row.
        stage_id: Uuid,
        /// As saved.
        saved: Transition,
        /// As the rules decide it.
        expected: Transition,
    },
    /// The successor row is not the stage the saved decision names.
    #[error(
        "stage row {stage_id}: the saved decision leads to {expected:?}, but the successor row is {found_stage} in {found_community:?}"
    )]
    SuccessorDiffers {
        /// The row.
        stage_id: Uuid,
        /// What the decision names.
        expected: Option<NextStage>,
        /// The successor's stage name.
        found_stage: String,
        /// The successor's community.
        found_community: Option<Uuid>,
    },
    /// The rules refuse a row.
    #[error(transparent)]
    Policy(#[from] PolicyError),
}

/// Reads `records` (any order) as progress by following `previous_stage_id` from the initial
/// stage. Every saved decision is re-derived from its saved result and must match; a row the
/// chain does not reach, an unknown stage or a dangling predecessor fails the reconstruction.
pub fn reconstruct(
    inventory: &UserInventory,
    records: &[StageRecord],
) -> Result<Progress, ReconstructionError> {
    if inventory.communities.len() > MAX_INVENTORY_COMMUNITIES {
        return Err(ReconstructionError::InventoryTooLarge {
            count: inventory.communities.len(),
        });
    }
    if records.len() > MAX_STAGES {
        return Err(ReconstructionError::TooManyStages {
            count: records.len(),
        });
    }
    if records.is_empty() {
        return Ok(Progress {
            chain: Vec::new(),
            covered: Vec::new(),
            position: Position::NotStarted,
        });
    }
    let chain = order_by_predecessor(records)?;

    for (position, record) in chain.iter().enumerate() {
        check_placement(inventory, record, position)?;
    }

    let mut covered = Vec::new();
    let last = chain.len() - 1;
    for (position, record) in chain.iter().enumerate() {
        if position == last && record.is_current {
            return Ok(Progress {
                chain,
                covered,
                position: Position::Current,
            });
        }
        if record.is_current {
            return Err(ReconstructionError::LeftWithoutDecision {
                stage_id: record.id,
            });
        }
        let saved = saved_transition(record)?;
        let expected = decide(inventory, &covered, record)?;
        if saved != expected {
            return Err(ReconstructionError::DecisionDiffers {
                stage_id: record.id,
                saved,
                expected,
            });
        }
        let successor = chain.get(position + 1);
        let leads_to_successor = match (expected.next, successor) {
            (None, None) => true,
            (Some(next), Some(row)) => {
                row.stage == next.stage.as_str() && row.community_id == Some(next.community_id)
            }
            _ => false,
        };
        if !leads_to_successor {
            return Err(ReconstructionError::SuccessorDiffers {
                stage_id: record.id,
                expected: expected.next,
                found_stage: successor.map(|r| r.stage.clone()).unwrap_or_default(),
                found_community: successor.and_then(|r| r.community_id),
            });
        }
        if let (Decision::CommunityComplete, Some(community_id)) =
            (expected.decision, expected.community_id)
        {
            covered.push(community_id);
        }
    }
    Ok(Progress {
        chain,
        covered,
        position: Position::Finished,
    })
}

/// Orders the rows from the single initial stage along `previous_stage_id`.
fn order_by_predecessor(records: &[StageRecord]) -> Result<Vec<StageRecord>, ReconstructionError> {
    let ids: BTreeSet<Uuid> = records.iter().map(|r| r.id).collect();
    let mut successor_of: BTreeMap<Uuid, &StageRecord> = BTreeMap::new();
    let mut initial = Vec::new();
    for record in records {
        match record.previous_stage_id {
            None => initial.push(record),
            Some(previous) if !ids.contains(&previous) => {
                return Err(ReconstructionError::MissingPredecessor {
                    stage_id: record.id,
                    previous_stage_id: previous,
                });
            }
            Some(previous) => {
                if successor_of.insert(previous, record).is_some() {
                    return Err(ReconstructionError::SeveralSuccessors { stage_id: previous });
                }
            }
        }
    }
    let first = match initial.as_slice() {
        [] => return Err(ReconstructionError::NoInitialStage),
        [only] => *only,
        several => {
            return Err(ReconstructionError::SeveralInitialStages {
                ids: several.iter().map(|r| r.id).collect(),
            });
        }
    };
    let mut chain = vec![first.clone()];
    while let Some(next) = chain.last().and_then(|r| successor_of.get(&r.id)) {
        // A cycle cannot include the initial stage, so it is caught by the reachability count.
        if chain.len() >= records.len() {
            break;
        }
        chain.push((*next).clone());
    }
    if chain.len() != records.len() {
        return Err(ReconstructionError::Disconnected {
            reachable: chain.len(),
            total: records.len(),
        });
    }
    Ok(chain)
}

/// `gate_user` only first and without a community; community stages only later, naming an
/// inventory community; every row's inputs exactly what the approved inventory gives its stage.
fn check_placement(
    inventory: &UserInventory,
    record: &StageRecord,
    position: usize,
) -> Result<(), ReconstructionError> {
    let stage = parse_stage(record)?;
    if (position == 0) != (stage == StageKind::GateUser) {
        return Err(ReconstructionError::StageOutOfPlace {
            stage_id: record.id,
            stage,
            position,
        });
    }
    let expected = if stage.is_per_community() {
        let community_id = inventory_community(inventory, record, stage)?;
        successor_stage(
            inventory,
            &NextStage {
                stage,
                community_id,
            },
        )
        .inputs
    } else if record.community_id.is_some() {
        return Err(ReconstructionError::GateNamesCommunity {
            stage_id: record.id,
        });
    } else {
        initial_stage(inventory).inputs
    };
    if record.inputs != expected {
        return Err(ReconstructionError::InputsDiffer {
            stage_id: record.id,
            stage,
            saved: record.inputs.clone(),
            expected,
        });
    }
    Ok(())
}

fn saved_transition(record: &StageRecord) -> Result<Transition, ReconstructionError> {
    let value = record
        .transition
        .clone()
        .ok_or(ReconstructionError::LeftWithoutDecision {
            stage_id: record.id,
        })?;
    serde_json::from_value(value).map_err(|e| ReconstructionError::UnreadableDecision {
        stage_id: record.id,
        detail: e.to_string(),
    })
}
