//! The stage rules of a user deletion, and the reconstruction of progress from saved history.
//!
//! Pure code: the workflow feeds it the rows it loaded and saves what it returns. The rules
//! (inventory version 1):
//!
//! | stage | saved result read | decision | next |
//! | --- | --- | --- | --- |
//! | `gate_user` | — | `enter_communities` | `purge_db` of the first uncovered community |
//! | `purge_db` | `has_agents: true` | `purge_agents` | `purge_agents` of the same community |
//! | `purge_db` | `has_agents: false` | `community_complete` | `purge_db` of the next uncovered community |
//! | `purge_agents` | — | `community_complete` | `purge_db` of the next uncovered community |
//!
//! When no community is left uncovered, `next` is empty and the request completes. A `purge_db`
//! result without a boolean `has_agents` is an error, never an implicit skip.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use super::contracts::{StageRecord, StageSpec};
use super::inventory::{MAX_INVENTORY_COMMUNITIES, UserInventory};
use super::stage::{StageKind, StageStatus, UnknownStage};

/// Most stage rows reconstruction reads; a resource limit, far above the 1 + 2 per community a
/// request can reach.
pub const MAX_STAGES: usize = 10_000;

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

fn parse_stage(record: &StageRecord) -> Result<StageKind, PolicyError> {
    record
        .stage
        .parse()
        .map_err(|source| PolicyError::UnknownStage {
            stage_id: record.id,
            source,
        })
}

fn inventory_community(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::user::inventory::{
        DEMO_FORMER_PARTICIPANT_COMMUNITY as C, DEMO_PARTICIPANT_COMMUNITY as B,
    };

    fn inventory() -> UserInventory {
        UserInventory::demo("demo:alice").unwrap()
    }

    fn row(n: u128, spec: &StageSpec, previous: Option<Uuid>) -> StageRecord {
        StageRecord {
            id: Uuid::from_u128(0x1000 + n),
            stage: spec.stage.as_str().into(),
            community_id: spec.community_id,
            status: StageStatus::Pending,
            is_current: true,
            attempt: 0,
            inputs: spec.inputs.clone(),
            result: None,
            transition: None,
            previous_stage_id: previous,
        }
    }

    fn dummy_result(record: &StageRecord, has_agents: &dyn Fn(Uuid) -> bool) -> serde_json::Value {
        match record.stage.as_str() {
            "purge_db" => json!({"has_agents": has_agents(record.community_id.unwrap())}),
            _ => json!({"dummy": true}),
        }
    }

    /// Runs the rules the way the workflow does — reconstruct, complete the current row, decide,
    /// save — and returns the history after each transition.
    fn run_to_end(has_agents: &dyn Fn(Uuid) -> bool) -> Vec<Vec<StageRecord>> {
        let inventory = inventory();
        let mut rows = vec![row(0, &initial_stage(&inventory), None)];
        let mut snapshots = Vec::new();
        for n in 1..20 {
            let progress = reconstruct(&inventory, &rows).unwrap();
            let Some(current) = progress.current().cloned() else {
                return snapshots;
            };
            let mut done = current.clone();
            done.status = StageStatus::Completed;
            done.result = Some(dummy_result(&done, has_agents));
            let transition = decide(&inventory, &progress.covered, &done).unwrap();
            done.is_current = false;
            done.transition = Some(serde_json::to_value(transition).unwrap());
            let last = rows.len() - 1;
            rows[last] = done;
            if let Some(next) = transition.next {
                rows.push(row(
                    n,
                    &successor_stage(&inventory, &next),
                    Some(current.id),
                ));
            }
            snapshots.push(rows.clone());
        }
        panic!("the rules did not finish within 20 transitions");
    }

    fn positions(rows: &[StageRecord]) -> Vec<(String, Option<Uuid>, StageStatus, bool)> {
        rows.iter()
            .map(|r| (r.stage.clone(), r.community_id, r.status, r.is_current))
            .collect()
    }

    #[test]
    fn agents_everywhere_visit_gate_then_b_db_b_agents_c_db_c_agents() {
        let snapshots = run_to_end(&|_| true);
        assert_eq!(snapshots.len(), 5, "five handler invocations");
        let current: Vec<Option<(String, Option<Uuid>)>> = snapshots
            .iter()
            .map(|rows| {
                rows.iter()
                    .find(|r| r.is_current)
                    .map(|r| (r.stage.clone(), r.community_id))
            })
            .collect();
        assert_eq!(
            current,
            vec![
                Some(("purge_db".into(), Some(B))),
                Some(("purge_agents".into(), Some(B))),
                Some(("purge_db".into(), Some(C))),
                Some(("purge_agents".into(), Some(C))),
                None,
            ]
        );
        let finished = reconstruct(&inventory(), snapshots.last().unwrap()).unwrap();
        assert_eq!(finished.position, Position::Finished);
        assert_eq!(finished.covered, vec![B, C]);
    }

    #[test]
    fn no_agents_in_c_finishes_after_c_db_with_community_complete() {
        let rows = run_to_end(&|c| c != C).pop().unwrap();
        assert_eq!(
            positions(&rows),
            vec![
                ("gate_user".into(), None, StageStatus::Completed, false),
                ("purge_db".into(), Some(B), StageStatus::Completed, false),
                (
                    "purge_agents".into(),
                    Some(B),
                    StageStatus::Completed,
                    false
                ),
                ("purge_db".into(), Some(C), StageStatus::Completed, false),
            ]
        );
        let c_decision: Transition =
            serde_json::from_value(rows[3].transition.clone().unwrap()).unwrap();
        assert_eq!(
            c_decision,
            Transition {
                decision: Decision::CommunityComplete,
                community_id: Some(C),
                next: None
            }
        );
    }

    #[test]
    fn no_agents_in_b_goes_from_b_db_straight_to_c_db() {
        let rows = run_to_end(&|c| c != B).pop().unwrap();
        let stages: Vec<(String, Option<Uuid>)> = rows
            .iter()
            .map(|r| (r.stage.clone(), r.community_id))
            .collect();
        assert_eq!(
            stages,
            vec![
                ("gate_user".into(), None),
                ("purge_db".into(), Some(B)),
                ("purge_db".into(), Some(C)),
                ("purge_agents".into(), Some(C)),
            ]
        );
    }

    #[test]
    fn saved_no_agents_decision_for_b_keeps_b_covered_on_resume() {
        // B's purge_db saved has_agents=false and community_complete; a resumed run reads that
        // saved decision, so B is covered and no B purge_agents row can follow.
        let rows_after_b = run_to_end(&|c| c != B)[1].clone();
        let progress = reconstruct(&inventory(), &rows_after_b).unwrap();
        assert_eq!(progress.covered, vec![B]);
        assert_eq!(
            progress
                .current()
                .map(|r| (r.stage.as_str(), r.community_id)),
            Some(("purge_db", Some(C)))
        );
    }

    #[test]
    fn missing_has_agents_is_an_error_not_a_skip() {
        let inventory = inventory();
        let spec = successor_stage(
            &inventory,
            &NextStage {
                stage: StageKind::PurgeDb,
                community_id: B,
            },
        );
        let mut record = row(1, &spec, Some(Uuid::from_u128(0x1000)));
        record.status = StageStatus::Completed;
        record.result = Some(json!({"rows_deleted": 0}));
        assert_eq!(
            decide(&inventory, &[], &record),
            Err(PolicyError::MissingHasAgents {
                stage_id: record.id
            })
        );
        record.result = Some(json!({"has_agents": "yes"}));
        assert!(matches!(
            decide(&inventory, &[], &record),
            Err(PolicyError::MissingHasAgents { .. })
        ));
    }

    #[test]
    fn a_row_whose_handler_has_not_completed_cannot_be_left() {
        let inventory = inventory();
        let mut record = row(0, &initial_stage(&inventory), None);
        record.status = StageStatus::Failed;
        assert!(matches!(
            decide(&inventory, &[], &record),
            Err(PolicyError::NotCompleted { .. })
        ));
    }

    #[test]
    fn reconstruction_follows_the_chain_not_the_row_order() {
        let rows = run_to_end(&|_| true)[2].clone();
        let mut shuffled = rows.clone();
        shuffled.reverse();
        shuffled.swap(0, 2);
        assert_eq!(
            reconstruct(&inventory(), &shuffled).unwrap(),
            reconstruct(&inventory(), &rows).unwrap()
        );
    }

    #[test]
    fn empty_history_has_not_started() {
        let progress = reconstruct(&inventory(), &[]).unwrap();
        assert_eq!(progress.position, Position::NotStarted);
        assert!(progress.current().is_none());
    }

    #[test]
    fn unknown_stage_fails_reconstruction() {
        let mut rows = run_to_end(&|_| true)[1].clone();
        rows[2].stage = "purge_media".into();
        assert!(matches!(
            reconstruct(&inventory(), &rows),
            Err(ReconstructionError::Policy(
                PolicyError::UnknownStage { .. }
            ))
        ));
    }

    #[test]
    fn missing_predecessor_fails_reconstruction() {
        let mut rows = run_to_end(&|_| true)[2].clone();
        rows.remove(1);
        assert!(matches!(
            reconstruct(&inventory(), &rows),
            Err(ReconstructionError::MissingPredecessor { .. })
        ));
    }

    #[test]
    fn forked_or_doubly_rooted_history_fails_reconstruction() {
        let rows = run_to_end(&|_| true)[1].clone();
        let mut forked = rows.clone();
        let mut twin = rows[2].clone();
        twin.id = Uuid::from_u128(0x9999);
        forked.push(twin);
        assert!(matches!(
            reconstruct(&inventory(), &forked),
            Err(ReconstructionError::SeveralSuccessors { .. })
        ));
        let mut two_roots = rows.clone();
        two_roots[1].previous_stage_id = None;
        assert!(matches!(
            reconstruct(&inventory(), &two_roots),
            Err(ReconstructionError::SeveralInitialStages { .. })
        ));
    }

    #[test]
    fn cycle_unreachable_from_the_gate_fails_reconstruction() {
        let mut rows = run_to_end(&|_| true)[2].clone();
        // B purge_agents and C purge_db point at each other: neither is reachable from the gate.
        rows[2].previous_stage_id = Some(rows[3].id);
        assert!(matches!(
            reconstruct(&inventory(), &rows),
            Err(ReconstructionError::Disconnected { .. })
        ));
    }

    #[test]
    fn a_saved_decision_that_contradicts_the_saved_result_fails_reconstruction() {
        let mut rows = run_to_end(&|_| true)[2].clone();
        // B's purge_db says has_agents=true and led to purge_agents; rewrite its result.
        rows[1].result = Some(json!({"has_agents": false}));
        assert!(matches!(
            reconstruct(&inventory(), &rows),
            Err(ReconstructionError::DecisionDiffers { .. })
        ));
    }

    #[test]
    fn a_current_row_before_the_end_fails_reconstruction() {
        let mut rows = run_to_end(&|_| true)[1].clone();
        rows[0].is_current = true;
        assert!(matches!(
            reconstruct(&inventory(), &rows),
            Err(ReconstructionError::LeftWithoutDecision { .. })
        ));
    }

    #[test]
    fn community_outside_the_inventory_fails_reconstruction() {
        let mut rows = run_to_end(&|_| true)[1].clone();
        rows[2].community_id = Some(Uuid::from_u128(0xd));
        assert!(matches!(
            reconstruct(&inventory(), &rows),
            Err(ReconstructionError::Policy(
                PolicyError::CommunityNotInInventory { .. }
            ))
        ));
    }

    #[test]
    fn inputs_that_differ_from_the_approved_inventory_fail_reconstruction_naming_the_row() {
        let rows = run_to_end(&|_| true)[2].clone();
        assert!(reconstruct(&inventory(), &rows).is_ok());

        let mut other_role = rows.clone();
        other_role[2].inputs["role"] = json!("former_participant");
        let refusal = reconstruct(&inventory(), &other_role).unwrap_err();
        assert!(
            matches!(refusal, ReconstructionError::InputsDiffer { stage_id, .. } if stage_id == rows[2].id),
            "{refusal}"
        );
        assert!(refusal.to_string().contains(&rows[2].id.to_string()));

        let mut other_target = rows.clone();
        other_target[0].inputs["target"] = json!("demo:mallory");
        assert!(matches!(
            reconstruct(&inventory(), &other_target),
            Err(ReconstructionError::InputsDiffer { .. })
        ));

        // The same rows read against another approved inventory (another target) are refused.
        let bob = UserInventory::demo("demo:bob").unwrap();
        assert!(matches!(
            reconstruct(&bob, &rows),
            Err(ReconstructionError::InputsDiffer { .. })
        ));
    }
}
