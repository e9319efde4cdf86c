//! The user-deletion store's exclusion-proof guarantees on real Postgres, without Temporal: a
//! stale attempt cannot write, a replayed transition cannot duplicate a row, history cannot be
//! deleted.

use activities::user::{StageStart, UserStore, UserStoreError};
use serde_json::json;
use uuid::Uuid;
use workflows::user::policy::{
    Decision, NextStage, Transition, decide, initial_stage, successor_stage,
};
use workflows::user::{
    CommitTransitionInput, CommittedTransition, RegisterUserInput, StageKind, TransitionCommand,
    UserApprovalInput, UserApproveRequest, UserInventory, workflow_id,
};

use workflows::operator::{Action, Kind};

use testkit::user::migrated_store;

/// A registered, approved request with its initial `gate_user` row created.
async fn initialized_request(store: &UserStore) -> (Uuid, UserInventory, Uuid) {
    let id = Uuid::new_v4();
    let target = format!("demo:store-{}", id.simple());
    let inventory = UserInventory::demo(&target).unwrap();
    let requester = testkit::operators::operator("operator-a").await;
    let approver = testkit::operators::operator("operator-b").await;
    let signed = requester.sign(Action::Submit, Kind::User, id, &target, None);
    store
        .register(
            &RegisterUserInput {
                request_id: id,
                workflow_id: workflow_id(id),
                target: target.clone(),
                requested_by: "operator-a".into(),
                reason: None,
                inventory_digest: inventory.digest(),
                inventory: inventory.clone(),
                signed: Some(signed),
            },
            "store-test/register",
        )
        .await
        .unwrap();
    let digest = inventory.digest();
    let signed = approver.sign(Action::Approve, Kind::User, id, &target, Some(&digest));
    store
        .record_approval(
            &UserApprovalInput {
                request_id: id,
                approval: UserApproveRequest {
                    approved_by: "operator-b".into(),
                    inventory_digest: digest,
                    note: None,
                    signed: Some(signed),
                    child_deletions: Vec::new(),
                },
            },
            "store-test/approve",
        )
        .await
        .unwrap();
    let gate = initialize(store, id, &inventory)
        .await
        .unwrap()
        .current
        .expect("the initial row")
        .id;
    (id, inventory, gate)
}

/// Commits `Initialize` (the initial `gate_user` row) for request `id`.
async fn initialize(
    store: &UserStore,
    id: Uuid,
    inventory: &UserInventory,
) -> Result<CommittedTransition, UserStoreError> {
    store
        .commit_transition(&CommitTransitionInput {
            request_id: id,
            command: TransitionCommand::Initialize {
                first: initial_stage(inventory),
            },
        })
        .await
}

fn started(start: StageStart) -> i64 {
    match start {
        StageStart::Started { generation, .. } => generation,
        StageStart::AlreadyCompleted { .. } => panic!("the handler had not completed yet"),
    }
}

#[tokio::test]
async fn a_stale_handler_attempt_cannot_save_after_a_newer_attempt_started() {
    let store = migrated_store().await;
    let (id, _, gate) = initialized_request(&store).await;
    let zombie = started(store.start_stage(id, gate, Some("worker-a")).await.unwrap());
    let successor = started(store.start_stage(id, gate, Some("worker-b")).await.unwrap());
    assert!(successor > zombie);

    let late_result = store
        .save_stage_result(id, gate, zombie, &json!({"gated": true}))
        .await;
    assert!(
        matches!(late_result, Err(UserStoreError::StaleGeneration { .. })),
        "{late_result:?}"
    );
    let late_failure = store
        .save_stage_failure(id, gate, zombie, "late", std::time::Duration::from_secs(30))
        .await;
    assert!(matches!(
        late_failure,
        Err(UserStoreError::StaleGeneration { .. })
    ));
    let row = &store.stage_rows(id).await.unwrap()[0];
    assert_eq!(
        (row.status.as_str(), row.attempt, row.exec_generation),
        ("running", 2, Some(successor))
    );
    assert_eq!(
        (row.result.clone(), row.executor_id.as_deref()),
        (None, Some("worker-b"))
    );

    store
        .save_stage_result(id, gate, successor, &json!({"gated": true}))
        .await
        .unwrap();
    let generation = store
        .request_view(id)
        .await
        .unwrap()
        .unwrap()
        .exec_generation;
    assert_eq!(
        store.start_stage(id, gate, None).await.unwrap(),
        StageStart::AlreadyCompleted {
            result: json!({"gated": true}),
            run_token: None,
        },
        "a saved result is returned, never recomputed"
    );
    assert_eq!(
        store
            .request_view(id)
            .await
            .unwrap()
            .unwrap()
            .exec_generation,
        generation,
        "answering a saved result claims no generation"
    );
}

#[tokio::test]
async fn a_replayed_transition_creates_no_second_row_and_a_different_one_is_refused() {
    let store = migrated_store().await;
    let (id, inventory, gate) = initialized_request(&store).await;
    let again = initialize(&store, id, &inventory).await.unwrap();
    assert_eq!(
        again.current.map(|r| r.id),
        Some(gate),
        "a replayed Initialize returns its row"
    );

    let early = store
        .commit_transition(&advance(id, gate, &inventory, enter_b()))
        .await;
    assert!(
        matches!(early, Err(UserStoreError::TransitionConflict { .. })),
        "a row whose handler has not completed cannot be left: {early:?}"
    );

    let generation = started(store.start_stage(id, gate, None).await.unwrap());
    store
        .save_stage_result(id, gate, generation, &json!({"gated": true}))
        .await
        .unwrap();
    let record = store.load_progress(id).await.unwrap().stages[0].clone();
    let transition = decide(&inventory, &[], &record).unwrap();
    assert_eq!(transition, enter_b());
    let first = store
        .commit_transition(&advance(id, gate, &inventory, transition))
        .await
        .unwrap();
    let replayed = store
        .commit_transition(&advance(id, gate, &inventory, transition))
        .await
        .unwrap();
    assert_eq!(
        first, replayed,
        "a replayed Advance answers the row it created"
    );
    assert_eq!(store.stage_rows(id).await.unwrap().len(), 2);

    let different = Transition {
        decision: Decision::EnterCommunities,
        community_id: None,
        next: None,
    };
    let refused = store
        .commit_transition(&advance(id, gate, &inventory, different))
        .await;
    assert!(
        matches!(refused, Err(UserStoreError::TransitionConflict { .. })),
        "{refused:?}"
    );
    assert_eq!(store.stage_rows(id).await.unwrap().len(), 2);
}

#[tokio::test]
async fn stage_history_rows_cannot_be_deleted() {
    let store = migrated_store().await;
    let (id, _, _) = initialized_request(&store).await;
    let deleted = sqlx::query("DELETE FROM deletion.user_stage_history WHERE request_id = $1")
        .bind(id)
        .execute(store.pool())
        .await;
    let code = match deleted {
        Err(sqlx::Error::Database(db)) => db.code().map(|c| c.into_owned()),
        other => panic!("deleting stage history must fail, got {other:?}"),
    };
    assert_eq!(code.as_deref(), Some("BZ002"));
    assert_eq!(store.stage_rows(id).await.unwrap().len(), 1);
}

fn enter_b() -> Transition {
    Transition {
        decision: Decision::EnterCommunities,
        community_id: None,
        next: Some(NextStage {
            stage: StageKind::PurgeDb,
            community_id: workflows::user::inventory::DEMO_PARTICIPANT_COMMUNITY,
        }),
    }
}

fn advance(
    request_id: Uuid,
    from: Uuid,
    inventory: &UserInventory,
    transition: Transition,
) -> CommitTransitionInput {
    CommitTransitionInput {
        request_id,
        command: TransitionCommand::Advance {
            from_stage_id: from,
            transition,
            successor: transition
                .next
                .map(|next| successor_stage(inventory, &next)),
        },
    }
}
