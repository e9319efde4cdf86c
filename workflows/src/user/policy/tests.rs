use serde_json::json;
use uuid::Uuid;

use super::*;
use crate::user::contracts::{StageRecord, StageSpec};
use crate::user::inventory::{
    DEMO_FORMER_PARTICIPANT_COMMUNITY as C, DEMO_PARTICIPANT_COMMUNITY as B, UserInventory,
};
use crate::user::stage::{StageKind, StageStatus};

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

/// How a test breaks a saved history, and whether reconstruction refused it as it must.
type Alteration = fn(&mut Vec<StageRecord>);
type Expected = fn(&ReconstructionError) -> bool;

#[test]
fn broken_histories_fail_reconstruction() {
    use ReconstructionError as E;
    let cases: [(&str, usize, Alteration, Expected); 8] = [
        (
            "an unknown stage",
            1,
            |rows| rows[2].stage = "purge_media".into(),
            |e| matches!(e, E::Policy(PolicyError::UnknownStage { .. })),
        ),
        (
            "a missing predecessor",
            2,
            |rows| drop(rows.remove(1)),
            |e| matches!(e, E::MissingPredecessor { .. }),
        ),
        (
            "a forked history",
            1,
            |rows| {
                let mut twin = rows[2].clone();
                twin.id = Uuid::from_u128(0x9999);
                rows.push(twin);
            },
            |e| matches!(e, E::SeveralSuccessors { .. }),
        ),
        (
            "a doubly rooted history",
            1,
            |rows| rows[1].previous_stage_id = None,
            |e| matches!(e, E::SeveralInitialStages { .. }),
        ),
        (
            // B purge_agents and C purge_db point at each other: neither is reachable from the
            // gate.
            "a cycle unreachable from the gate",
            2,
            |rows| rows[2].previous_stage_id = Some(rows[3].id),
            |e| matches!(e, E::Disconnected { .. }),
        ),
        (
            // B's purge_db says has_agents=true and led to purge_agents; rewrite its result.
            "a saved decision that contradicts the saved result",
            2,
            |rows| rows[1].result = Some(json!({"has_agents": false})),
            |e| matches!(e, E::DecisionDiffers { .. }),
        ),
        (
            "a current row before the end",
            1,
            |rows| rows[0].is_current = true,
            |e| matches!(e, E::LeftWithoutDecision { .. }),
        ),
        (
            "a community outside the inventory",
            1,
            |rows| rows[2].community_id = Some(Uuid::from_u128(0xd)),
            |e| matches!(e, E::Policy(PolicyError::CommunityNotInInventory { .. })),
        ),
    ];
    for (what, transitions, alter, expected) in cases {
        let mut rows = run_to_end(&|_| true)[transitions].clone();
        alter(&mut rows);
        let refused = reconstruct(&inventory(), &rows);
        assert!(refused.as_ref().is_err_and(expected), "{what}: {refused:?}");
    }
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
