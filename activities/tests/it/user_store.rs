//! The user-deletion store's bounds and refusals against a real PostgreSQL (`bash
//! deploy/local/up && source .state/env`): the approved inventory read back and verified, the
//! bounded stage-history read, the database-clock retry deadline, and `user list`'s filters.
//! The store runs as the worker role (DATABASE_URL); tampering is done as the schema owner
//! (BUZZ_OWNER_DATABASE_URL), the only role that can. Every test works on its own requests.

use crate::store_support;

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use activities::failure::{Classified, Severity};
use activities::identity::IdentityError;
use activities::store::RequestFilter;
use activities::user::faults::{FaultPoint, FaultPoints};
use activities::user::{StageStart, UserStore, UserStoreError};
use store_support::{operators, store, worker_store};
use uuid::Uuid;
use workflows::approval::TwoPersonRefusal;
use workflows::operator::{Action, Kind, SignatureRefusal};
use workflows::user::policy::{MAX_STAGES, decide, initial_stage, successor_stage};
use workflows::user::{
    CommitTransitionInput, RegisterUserInput, StoredInventoryError, TransitionCommand,
    UserApprovalInput, UserApproveRequest, UserInventory, workflow_id,
};

/// The store as the worker role, and the owner's pool for tampering.
async fn stores() -> (UserStore, sqlx::PgPool) {
    let owner = store().await.pool().clone();
    let worker = UserStore::new(worker_store().await.pool().clone());
    (worker, owner)
}

/// Registers request `id` for `target` with `inventory` and its digest, as operator-a signing
/// with `requester`'s key.
async fn register_request(
    store: &UserStore,
    id: Uuid,
    target: &str,
    inventory: &UserInventory,
    requester: &operators::TestOperator,
) {
    store
        .register(
            &RegisterUserInput {
                request_id: id,
                workflow_id: workflow_id(id),
                target: target.to_owned(),
                requested_by: "operator-a".into(),
                reason: None,
                inventory_digest: inventory.digest(),
                inventory: inventory.clone(),
                signed: Some(requester.sign(Action::Submit, Kind::User, id, target, None)),
            },
            "user-store-it/register",
        )
        .await
        .expect("registering the request");
}

/// An approval of `digest` for request `id` on `target`, by `label` signing with `key`.
fn approval_of(
    id: Uuid,
    target: &str,
    label: &str,
    key: &operators::TestOperator,
    digest: &str,
) -> UserApprovalInput {
    UserApprovalInput {
        request_id: id,
        approval: UserApproveRequest {
            approved_by: label.into(),
            inventory_digest: digest.into(),
            note: None,
            child_deletions: Vec::new(),
            signed: Some(key.sign(Action::Approve, Kind::User, id, target, Some(digest))),
        },
    }
}

/// A request registered with a demo inventory of `communities` communities and approved.
async fn approved_request(store: &UserStore, communities: u32) -> (Uuid, UserInventory) {
    let id = Uuid::new_v4();
    let target = format!("demo:bounds-{}", id.simple());
    let inventory = UserInventory::demo_sized(&target, communities).unwrap();
    let owner = store_support::store().await;
    let requester = operators::operator_in(owner.pool(), "operator-a").await;
    let approver = operators::operator_in(owner.pool(), "operator-b").await;
    let digest = inventory.digest();
    register_request(store, id, &target, &inventory, &requester).await;
    store
        .record_approval(
            &approval_of(id, &target, "operator-b", &approver, &digest),
            "user-store-it/approve",
        )
        .await
        .expect("approving the request");
    (id, inventory)
}

async fn initialize(store: &UserStore, id: Uuid, inventory: &UserInventory) -> Uuid {
    store
        .commit_transition(&CommitTransitionInput {
            request_id: id,
            command: TransitionCommand::Initialize {
                first: initial_stage(inventory),
            },
        })
        .await
        .expect("initializing the request")
        .current
        .expect("the initial row")
        .id
}

fn stored_inventory_refusal(
    result: Result<impl std::fmt::Debug, UserStoreError>,
) -> UserStoreError {
    match result {
        Err(error @ UserStoreError::StoredInventory { .. }) => {
            assert_eq!(error.severity(), Severity::Permanent);
            error
        }
        other => panic!("the stored inventory must be refused, got {other:?}"),
    }
}

/// The store checks the one approval rule itself: the frozen digest exactly, and a second person
/// by key and by name. Every refusal changes nothing; a second operator then approves.
#[tokio::test]
async fn approval_refuses_another_digest_the_requesters_key_and_the_requesters_name() {
    let (store, _) = stores().await;
    let id = Uuid::new_v4();
    let target = format!("demo:rule-{}", id.simple());
    let inventory = UserInventory::demo_sized(&target, 2).unwrap();
    let owner = store_support::store().await;
    let requester = operators::operator_in(owner.pool(), "operator-a").await;
    let approver = operators::operator_in(owner.pool(), "operator-b").await;
    let digest = inventory.digest();
    register_request(&store, id, &target, &inventory, &requester).await;
    let approval = |label: &str, key: &operators::TestOperator, digest: &str| {
        approval_of(id, &target, label, key, digest)
    };
    let unchanged = || async {
        let stage: String = sqlx::query_scalar("SELECT stage FROM deletion.requests WHERE id = $1")
            .bind(id)
            .fetch_one(owner.pool())
            .await
            .unwrap();
        assert_eq!(stage, "inventoried");
        assert!(store.approval(id).await.unwrap().is_none());
    };

    let other_digest = "0".repeat(64);
    let wrong = store
        .record_approval(&approval("operator-b", &approver, &other_digest), "it/1")
        .await;
    assert!(
        matches!(&wrong, Err(UserStoreError::ApprovalRefused { reason, .. })
            if reason.contains("does not match the frozen digest")),
        "{wrong:?}"
    );
    unchanged().await;
    let own_key = store
        .record_approval(&approval("operator-b", &requester, &digest), "it/2")
        .await;
    assert!(
        matches!(
            &own_key,
            Err(UserStoreError::Identity(IdentityError::Statement(
                SignatureRefusal::SameOperator { .. }
            )))
        ),
        "{own_key:?}"
    );
    unchanged().await;
    let own_name = store
        .record_approval(&approval(" OPERATOR-A ", &approver, &digest), "it/3")
        .await;
    assert!(
        matches!(
            &own_name,
            Err(UserStoreError::Identity(IdentityError::SecondPerson(
                TwoPersonRefusal::SameName { .. }
            )))
        ),
        "{own_name:?}"
    );
    assert_eq!(own_name.unwrap_err().severity(), Severity::Permanent);
    unchanged().await;

    let record = store
        .record_approval(&approval("operator-b", &approver, &digest), "it/4")
        .await
        .expect("a second operator approves");
    assert_eq!(record.approved_by, "operator-b");
    assert_eq!(record.inventory_digest, digest);
}

#[tokio::test]
async fn the_approved_inventory_is_read_back_as_stored_up_to_a_thousand_communities() {
    let (store, _) = stores().await;
    let (id, inventory) = approved_request(&store, 1_000).await;
    let approved = store.load_approved_inventory(id).await.unwrap();
    assert_eq!(approved.inventory, inventory);
    assert_eq!(approved.inventory_digest, inventory.digest());
    assert_eq!(approved.inventory.communities.len(), 1_000);
}

#[tokio::test]
async fn an_inventory_edited_in_postgres_after_approval_is_refused_naming_both_digests() {
    let (store, owner) = stores().await;
    let (id, inventory) = approved_request(&store, 2).await;
    // Drop community C from the stored copy; the frozen digest column is left as approved.
    sqlx::query(
        "UPDATE deletion.requests \
         SET inventory = jsonb_set(inventory, '{communities}', (inventory -> 'communities') - 1) \
         WHERE id = $1",
    )
    .bind(id)
    .execute(&owner)
    .await
    .unwrap();
    let mut edited = inventory.clone();
    edited.communities.pop();

    let refusal = stored_inventory_refusal(store.load_approved_inventory(id).await);
    let message = refusal.to_string();
    assert!(
        matches!(
            &refusal,
            UserStoreError::StoredInventory {
                source: StoredInventoryError::DigestMismatch { stored, approved },
                ..
            } if *stored == edited.digest() && *approved == inventory.digest()
        ),
        "{message}"
    );
    assert!(message.contains(&edited.digest()), "{message}");
    assert!(message.contains(&inventory.digest()), "{message}");
    assert!(message.contains("changed after approval"), "{message}");

    // Rewriting the frozen digest column to match the edit does not help: the approval decides.
    sqlx::query("UPDATE deletion.requests SET inventory_digest = $2 WHERE id = $1")
        .bind(id)
        .bind(edited.digest())
        .execute(&owner)
        .await
        .unwrap();
    stored_inventory_refusal(store.load_approved_inventory(id).await);
}

#[tokio::test]
async fn an_inventory_version_this_build_does_not_know_is_refused() {
    let (store, owner) = stores().await;
    let (id, _) = approved_request(&store, 2).await;
    sqlx::query(
        "UPDATE deletion.requests SET inventory = jsonb_set(inventory, '{version}', '3') \
         WHERE id = $1",
    )
    .bind(id)
    .execute(&owner)
    .await
    .unwrap();
    let refusal = stored_inventory_refusal(store.load_approved_inventory(id).await);
    assert!(
        refusal.to_string().contains(
            "inventory version 3 is not understood by this build (it knows [1, 2]); deploy a \
             build that knows it"
        ),
        "{refusal}"
    );
}

#[tokio::test]
async fn an_inventory_of_more_than_a_thousand_communities_is_refused() {
    let (store, owner) = stores().await;
    let (id, _) = approved_request(&store, 1_000).await;
    sqlx::query(
        "UPDATE deletion.requests \
         SET inventory = jsonb_set(inventory, '{communities}', (inventory -> 'communities') || \
             jsonb_build_array(jsonb_build_object('community_id', gen_random_uuid(), \
                                                  'role', 'participant'))) \
         WHERE id = $1",
    )
    .bind(id)
    .execute(&owner)
    .await
    .unwrap();
    let refusal = stored_inventory_refusal(store.load_approved_inventory(id).await);
    assert_matches!(
        refusal,
        UserStoreError::StoredInventory {
            source: StoredInventoryError::TooManyCommunities(1_001),
            ..
        },
        "{refusal}"
    );
    assert!(refusal.to_string().contains("more than the limit of 1000"));
}

/// Appends rows `first ..= first + count - 1` of a chain of left (completed, non-current) rows
/// to request `id`'s history, as the owner; row n names row n - 1 as its predecessor.
async fn insert_chain(owner: &sqlx::PgPool, id: Uuid, first: i64, count: i64) {
    sqlx::query(
        "INSERT INTO deletion.user_stage_history \
             (id, request_id, stage, status, is_current, attempt, first_started_at, started_at, \
              finished_at, inputs, result, transition, previous_stage_id) \
         SELECT md5($1::text || n)::uuid, $1, 'gate_user', 'completed', false, 1, now(), now(), \
                now(), '{}', '{}', '{}', \
                CASE WHEN n = 1 THEN NULL ELSE md5($1::text || (n - 1))::uuid END \
         FROM generate_series($2::bigint, $2::bigint + $3::bigint - 1) AS n",
    )
    .bind(id)
    .bind(first)
    .bind(count)
    .execute(owner)
    .await
    .expect("inserting stage rows as the owner");
}

#[tokio::test]
async fn the_stage_history_read_stops_at_ten_thousand_rows_and_refuses_more() {
    let (store, owner) = stores().await;
    let (id, _) = approved_request(&store, 2).await;
    let limit = i64::try_from(MAX_STAGES).unwrap();
    insert_chain(&owner, id, 1, limit).await;
    let progress = store.load_progress(id).await.expect("10,000 rows are read");
    assert_eq!(progress.stages.len(), MAX_STAGES);

    insert_chain(&owner, id, limit + 1, 1).await;
    let refusal = store.load_progress(id).await;
    match refusal {
        Err(error @ UserStoreError::TooManyStages { .. }) => {
            assert_eq!(error.severity(), Severity::Permanent);
            assert!(
                error.to_string().contains("more than 10000 stage rows"),
                "{error}"
            );
        }
        other => panic!("10,001 rows must be refused, got {other:?}"),
    }
    assert_matches!(
        store.stage_rows(id).await,
        Err(UserStoreError::TooManyStages { .. })
    );
}

#[tokio::test]
async fn the_store_refuses_a_handler_start_before_the_saved_retry_deadline_by_its_own_clock() {
    let (store, owner) = stores().await;
    let (id, inventory) = approved_request(&store, 2).await;
    let gate = initialize(&store, id, &inventory).await;
    let StageStart::Started { generation, .. } = store.start_stage(id, gate, None).await.unwrap()
    else {
        panic!("the gate had not completed");
    };
    let retry = store
        .save_stage_failure(id, gate, generation, "boom", Duration::from_secs(3_600))
        .await
        .unwrap();
    let before = (
        store.request_view(id).await.unwrap(),
        store.stage_rows(id).await.unwrap(),
    );

    // The caller has no say about time: the database's now() is before the saved deadline.
    let refusal = store.start_stage(id, gate, Some("early")).await;
    match refusal {
        Err(error @ UserStoreError::RetryNotDue { .. }) => {
            assert!(error.is_retry_not_due());
            assert_eq!(error.severity(), Severity::Permanent);
            let message = error.to_string();
            assert!(message.contains(&retry.next_attempt_at), "{message}");
            assert!(message.contains(&gate.to_string()), "{message}");
        }
        other => panic!("an early start must be refused, got {other:?}"),
    }
    assert_eq!(
        (
            store.request_view(id).await.unwrap(),
            store.stage_rows(id).await.unwrap()
        ),
        before,
        "a refused start changes nothing (no generation bump, no attempt)"
    );

    // Once the database's clock has passed the deadline, the same row starts again.
    sqlx::query(
        "UPDATE deletion.requests SET next_attempt_at = now() - interval '1 second' WHERE id = $1",
    )
    .bind(id)
    .execute(&owner)
    .await
    .unwrap();
    let StageStart::Started {
        row,
        generation: g2,
    } = store.start_stage(id, gate, Some("due")).await.unwrap()
    else {
        panic!("the failed gate must start again");
    };
    assert_eq!(row.attempt, 2);
    assert!(g2 > generation);
}

#[tokio::test]
async fn user_list_filters_by_state_newest_first() {
    let (store, owner) = stores().await;
    let (open, open_inventory) = approved_request(&store, 2).await;
    let (blocked, _) = approved_request(&store, 2).await;
    let (completed, _) = approved_request(&store, 2).await;
    store
        .record_blocked(blocked, "stage history is unreadable")
        .await
        .unwrap();
    sqlx::query(
        "UPDATE deletion.requests SET stage = 'completed', completed_at = now() WHERE id = $1",
    )
    .bind(completed)
    .execute(&owner)
    .await
    .unwrap();
    // A request blocked once and then advanced by a successful transition is no longer blocked.
    store.record_blocked(open, "transient block").await.unwrap();
    initialize(&store, open, &open_inventory).await;

    let ids = async |filter| -> Vec<Uuid> {
        store
            .list_requests(filter, 1_000)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .filter(|id| [open, blocked, completed].contains(id))
            .collect()
    };
    assert_eq!(
        ids(RequestFilter::All).await,
        vec![completed, blocked, open]
    );
    assert_eq!(ids(RequestFilter::Open).await, vec![blocked, open]);
    assert_eq!(ids(RequestFilter::Blocked).await, vec![blocked]);
    assert_eq!(ids(RequestFilter::Completed).await, vec![completed]);
    assert_eq!(
        store
            .list_requests(RequestFilter::All, 1)
            .await
            .unwrap()
            .len(),
        1
    );

    let listed = store
        .list_requests(RequestFilter::Open, 1_000)
        .await
        .unwrap();
    let open_row = listed.iter().find(|r| r.id == open).unwrap();
    assert_eq!(open_row.stage, "running");
    assert_eq!(open_row.stage_rows, 1);
    assert_eq!(open_row.current_stage.as_deref(), Some("gate_user"));
    assert_eq!(open_row.approved_by.as_deref(), Some("operator-b"));
    assert_eq!(open_row.blocked_reason, None);
    let blocked_row = listed.iter().find(|r| r.id == blocked).unwrap();
    assert_eq!(
        blocked_row.blocked_reason.as_deref(),
        Some("stage history is unreadable")
    );

    // `community list` lists community requests only, also when a user request is blocked.
    let community_listed = worker_store()
        .await
        .list_requests(RequestFilter::All, 1_000)
        .await
        .unwrap();
    assert!(
        community_listed
            .iter()
            .all(|r| ![open, blocked, completed].contains(&r.id)),
        "community list shows user requests"
    );
}

/// A hook panicking at `point`, as a worker dying there would end the transaction.
fn crash_at(point: FaultPoint) -> FaultPoints {
    FaultPoints::new(Arc::new(move |at| {
        async move {
            if at == point {
                panic!("crash injected at {at:?}");
            }
        }
        .boxed()
    }))
}

/// Issue 30, part 4: a fault inside `commit_transition` — after the current row was left with
/// its decision but before its successor is written, and after everything is written but before
/// the commit — leaves the old row current and nothing else changed; the same transition then
/// commits once.
#[tokio::test]
async fn a_fault_inside_commit_transition_leaves_the_old_row_current() {
    for point in [
        FaultPoint::TransitionRowLeft,
        FaultPoint::TransitionBeforeCommit,
    ] {
        let (store, _owner) = stores().await;
        let (id, inventory) = approved_request(&store, 2).await;
        let gate = initialize(&store, id, &inventory).await;
        let StageStart::Started { generation, .. } =
            store.start_stage(id, gate, None).await.unwrap()
        else {
            panic!("the gate had not completed");
        };
        store
            .save_stage_result(id, gate, generation, &serde_json::json!({"gated": true}))
            .await
            .unwrap();
        let progress = store.load_progress(id).await.unwrap();
        let completed = progress
            .stages
            .iter()
            .find(|r| r.id == gate)
            .cloned()
            .expect("the gate row");
        let transition = decide(&inventory, &[], &completed).unwrap();
        let input = CommitTransitionInput {
            request_id: id,
            command: TransitionCommand::Advance {
                from_stage_id: gate,
                transition,
                successor: transition
                    .next
                    .map(|next| successor_stage(&inventory, &next)),
            },
        };
        let before = (
            store.request_view(id).await.unwrap(),
            store.stage_rows(id).await.unwrap(),
        );

        let faulty = store.clone().with_faults(crash_at(point));
        let crashed = {
            let input = input.clone();
            tokio::spawn(async move { faulty.commit_transition(&input).await }).await
        };
        assert!(
            crashed.as_ref().is_err_and(|e| e.is_panic()),
            "{point:?}: the hook must have fired inside the transaction: {crashed:?}"
        );
        let after = (
            store.request_view(id).await.unwrap(),
            store.stage_rows(id).await.unwrap(),
        );
        assert_eq!(
            after, before,
            "{point:?}: nothing of the transition is kept"
        );
        assert!(
            after.1.iter().any(|r| r.id == gate && r.is_current),
            "{point:?}: the old row is still current"
        );

        let committed = store.commit_transition(&input).await.unwrap();
        let successor = committed.current.expect("the successor row");
        let rows = store.stage_rows(id).await.unwrap();
        assert_eq!(rows.len(), 2, "{point:?}: one successor, once");
        assert!(rows.iter().any(|r| r.id == gate && !r.is_current));
        assert!(rows.iter().any(|r| r.id == successor.id && r.is_current));
    }
}

/// A stage row's predecessor belongs to the same request. The store refuses to advance request
/// B from request A's completed row, and the database refuses, even to the schema owner, a row
/// of B that names A's row as its `previous_stage_id` (the composite foreign key); the same row
/// naming B's own predecessor is accepted, so nothing but the foreign request is refused.
#[tokio::test]
async fn a_predecessor_of_another_request_is_refused_by_the_store_and_the_database() {
    let (store, owner) = stores().await;
    let (a, inventory_a) = approved_request(&store, 2).await;
    let (b, inventory_b) = approved_request(&store, 2).await;
    let gate_a = initialize(&store, a, &inventory_a).await;
    let gate_b = initialize(&store, b, &inventory_b).await;
    let StageStart::Started { generation, .. } = store.start_stage(a, gate_a, None).await.unwrap()
    else {
        panic!("A's gate had not completed");
    };
    store
        .save_stage_result(a, gate_a, generation, &serde_json::json!({"gated": true}))
        .await
        .unwrap();
    let completed = store.load_progress(a).await.unwrap().stages[0].clone();
    let transition = decide(&inventory_a, &[], &completed).unwrap();
    let before = (
        store.stage_rows(a).await.unwrap(),
        store.stage_rows(b).await.unwrap(),
        store.request_view(b).await.unwrap(),
    );

    let refused = store
        .commit_transition(&CommitTransitionInput {
            request_id: b,
            command: TransitionCommand::Advance {
                from_stage_id: gate_a,
                transition,
                successor: transition
                    .next
                    .map(|next| successor_stage(&inventory_b, &next)),
            },
        })
        .await;
    assert!(
        matches!(
            &refused,
            Err(UserStoreError::NotCurrent { request_id, stage_id })
                if *request_id == b && *stage_id == gate_a
        ),
        "advancing B from A's row must be refused: {refused:?}"
    );
    assert_eq!(
        (
            store.stage_rows(a).await.unwrap(),
            store.stage_rows(b).await.unwrap(),
            store.request_view(b).await.unwrap(),
        ),
        before,
        "the refusal changed neither request"
    );

    // Below the store: a left row of B, otherwise valid, naming `previous` as its predecessor.
    let insert = |previous: Uuid| {
        sqlx::query(
            "INSERT INTO deletion.user_stage_history \
                 (id, request_id, stage, status, is_current, attempt, first_started_at, \
                  started_at, finished_at, inputs, result, transition, previous_stage_id) \
             VALUES ($1, $2, 'purge_db', 'completed', false, 1, now(), now(), now(), \
                     '{}', '{}', '{}', $3)",
        )
        .bind(Uuid::new_v4())
        .bind(b)
        .bind(previous)
    };
    let mut tx = owner.begin().await.unwrap();
    match insert(gate_a).execute(&mut *tx).await {
        Err(sqlx::Error::Database(db)) => {
            assert_eq!(db.code().as_deref(), Some("23503"), "{db}");
            assert!(
                db.constraint()
                    .is_some_and(|c| c.contains("previous_stage_id")),
                "the refusal names the predecessor key: {:?}",
                db.constraint()
            );
        }
        other => panic!("a predecessor of another request must be refused: {other:?}"),
    }
    tx.rollback().await.unwrap();
    let mut tx = owner.begin().await.unwrap();
    insert(gate_b)
        .execute(&mut *tx)
        .await
        .expect("the same row naming B's own row is accepted");
    tx.rollback().await.unwrap();
    assert_eq!(store.stage_rows(b).await.unwrap(), before.1);
}
