//! Issue 19, items 4 to 7, end to end: every run takes its inventory from the approved copy in
//! Postgres (an edited inventory or an unknown version blocks before any handler runs), each
//! resource bound is reached and answered (1,000 communities at submit, 100 handlers per run,
//! 10,000 stage rows), the store refuses a start before the saved deadline whatever the
//! workflow's clock says, and `user list` filters by state.

use std::time::Duration;

use serde_json::{Value, json};
use uuid::Uuid;
use workflows::user::inventory::DEMO_PARTICIPANT_COMMUNITY as B;
use workflows::user::{RunOutcome, UserPhase};

use super::{
    B_AGENTS, B_DB, GATE, assert_no_handler_ran, assert_positions, run, submit, target, up_to,
    with_approved, with_one_worker, with_stack,
};
use testkit::user::{ApprovedRequest, UserStack, approve, submit_and_approve};

/// Submits with `--demo-communities n` and approves; returns the id and the submit document.
async fn submit_sized_and_approve(stack: &UserStack, label: &str, n: u32) -> (Uuid, Value) {
    let n = n.to_string();
    let submitted = submit(stack, &target(label), &["--demo-communities", &n]).await;
    submitted.expect_exit(0);
    let document = submitted.json();
    let id: Uuid = document["request_id"].as_str().unwrap().parse().unwrap();
    let digest = document["inventory_digest"].as_str().unwrap();
    approve(stack, id, "operator-b", digest)
        .await
        .expect_exit(0);
    (id, document)
}

/// Someone with owner rights drops community C from the stored inventory after approval.
const DROP_C_FROM_INVENTORY: &str = "UPDATE deletion.requests \
     SET inventory = jsonb_set(inventory, '{communities}', (inventory -> 'communities') - 1) \
     WHERE id = $1";

/// The stored inventory claims version 3, which this build does not know.
const INVENTORY_VERSION_3: &str = "UPDATE deletion.requests \
     SET inventory = jsonb_set(inventory, '{version}', '3') WHERE id = $1";

/// 10,001 left rows in one chain.
const TEN_THOUSAND_AND_ONE_ROWS: &str = "INSERT INTO deletion.user_stage_history \
         (id, request_id, stage, status, is_current, attempt, first_started_at, \
          started_at, finished_at, inputs, result, transition, previous_stage_id) \
     SELECT md5($1::text || n)::uuid, $1, 'gate_user', 'completed', false, 1, now(), \
            now(), now(), '{}', '{}', '{}', \
            CASE WHEN n = 1 THEN NULL ELSE md5($1::text || (n - 1))::uuid END \
     FROM generate_series(1, 10001) AS n";

/// The request row says it is running.
const SET_RUNNING: &str = "UPDATE deletion.requests SET stage = 'running' WHERE id = $1";

/// The saved retry deadline moved an hour forward.
const DEADLINE_AN_HOUR_LATER: &str = "UPDATE deletion.requests \
     SET next_attempt_at = next_attempt_at + interval '1 hour' WHERE id = $1";

/// The saved retry deadline passed a second ago.
const DEADLINE_PASSED: &str = "UPDATE deletion.requests \
     SET next_attempt_at = now() - interval '1 second' WHERE id = $1";

/// The stored inventory claims version 7, which this build does not know.
const INVENTORY_VERSION_7: &str = "UPDATE deletion.requests \
     SET inventory = jsonb_set(inventory, '{version}', '7') WHERE id = $1";

/// The current row's inputs give its community the role of a former participant.
const FORMER_ROLE_ON_CURRENT_ROW: &str = "UPDATE deletion.user_stage_history \
     SET inputs = jsonb_set(inputs, '{role}', '\"former_participant\"') \
     WHERE request_id = $1 AND is_current";

async fn owner_execute(stack: &UserStack, sql: &'static str, id: Uuid) {
    sqlx::query(sql)
        .bind(id)
        .execute(stack.store.pool())
        .await
        .unwrap_or_else(|e| panic!("owner statement failed ({e}): {sql}"));
}

async fn approved_digest(stack: &UserStack, id: Uuid) -> String {
    stack
        .snapshot(id)
        .await
        .approval
        .expect("an approval")
        .inventory_digest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inventory_edited_in_postgres_after_approval_blocks_and_no_handler_runs() {
    with_approved("tampered", async |stack, id| {
        let approved = approved_digest(stack, id).await;
        run(stack, id, &["--next-step"]).await.expect_exit(0);

        owner_execute(stack, DROP_C_FROM_INVENTORY, id).await;
        let edited_digest = {
            let inventory: workflows::user::UserInventory =
                serde_json::from_value(stack.snapshot(id).await.request.inventory.unwrap())
                    .unwrap();
            assert_eq!(inventory.communities.len(), 1);
            inventory.digest()
        };
        let before = stack.snapshot(id).await;

        // The refusal names the approved digest and the stored one.
        let named = ["changed after approval", &approved, &edited_digest];
        run(stack, id, &[])
            .await
            .expect_refusal_naming_all(1, &named);
        let after = stack.snapshot(id).await;
        assert_eq!(after.rows, before.rows, "no handler ran and no row moved");
        assert_eq!(
            after.request.exec_generation, before.request.exec_generation,
            "nothing was started"
        );
        assert!(
            after
                .request
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains(&approved) && e.contains(&edited_digest)),
            "the reason is saved for `user status`: {:?}",
            after.request.last_error
        );
        assert_eq!(stack.workflow_status(id).await.phase, UserPhase::Blocked);

        // A second run is refused the same way: the stored copy is re-read every time.
        run(stack, id, &[]).await.expect_exit(1);
        assert_eq!(stack.snapshot(id).await.rows, before.rows);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inventory_version_this_build_does_not_know_blocks_before_the_first_stage() {
    with_approved("version", async |stack, id| {
        owner_execute(stack, INVENTORY_VERSION_3, id).await;
        let blocked = run(stack, id, &["--next-step"]).await;
        blocked.expect_refusal_naming(
            1,
            "inventory version 3 is not understood by this build (it knows [1, 2]); deploy a \
             build that knows it",
        );
        let after = stack.snapshot(id).await;
        assert!(after.rows.is_empty(), "no stage row was created");
        assert_eq!(after.request.stage, "approved");
        assert_eq!(stack.workflow_status(id).await.phase, UserPhase::Blocked);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_freezes_at_most_a_thousand_communities_and_a_thousand_run() {
    with_one_worker(async |stack| {
        let refused = submit(stack, &target("too-big"), &["--demo-communities", "1001"]).await;
        refused.expect_refusal_naming_all(2, &["--demo-communities 1001", "1 to 1000 communities"]);

        let (id, document) = submit_sized_and_approve(stack, "thousand", 1_000).await;
        let communities = document["inventory"]["communities"].as_array().unwrap();
        assert_eq!(communities.len(), 1_000);
        assert_eq!(communities[0]["community_id"], json!(B));
        run(stack, id, &["--next-step"]).await.expect_exit(0);
        run(stack, id, &["--next-step"]).await.expect_exit(0);
        let read_and_run = "the 1,000-community approved inventory is read and run";
        let b_agents_next = up_to(&[GATE, B_DB], B_AGENTS, "pending");
        assert_positions(stack, id, b_agents_next, read_and_run).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_over_fifty_one_communities_pauses_after_exactly_one_hundred_handlers() {
    with_stack(async |stack| {
        // A caching worker: without a cache every one of the ~600 workflow tasks of these runs
        // replays the whole history (minutes in a debug build, not what a deployed worker does).
        let worker = stack.spawn_worker_with_cache("worker-a", 10);
        // 1 gate + 2 handlers in each of 51 communities = 103 handlers.
        let (id, _) = submit_sized_and_approve(stack, "budget", 51).await;
        let first = run(stack, id, &["--output", "table"]).await;
        first.expect_exit(0);
        let paused = stack.snapshot(id).await;
        assert_eq!(paused.rows.len(), 101);
        assert!(
            paused.rows[..100]
                .iter()
                .all(|r| r.status == "completed" && !r.is_current)
        );
        let current = &paused.rows[100];
        assert_eq!(
            (current.status.as_str(), current.is_current),
            ("pending", true)
        );
        // The operator is told why the run stopped and what to do.
        let community = current.community_id.expect("a per-community row");
        assert!(
            first.stdout.contains(&format!(
                "run: paused after 100 handlers, the budget of one run; current stage {} in \
                 {community} (pending); run again to continue",
                current.stage
            )),
            "{}",
            first.stdout
        );
        let workflow = stack.workflow_status(id).await;
        assert_eq!(workflow.phase, UserPhase::Paused);
        assert_eq!(
            workflow.last_run.map(|r| (r.handlers_run, r.outcome)),
            Some((
                100,
                RunOutcome::HandlerBudgetReached {
                    limit: 100,
                    stage_id: current.id,
                    stage: current.stage.clone(),
                    community_id: Some(community),
                }
            ))
        );

        let second = run(stack, id, &[]).await;
        second.expect_exit(0);
        assert_eq!(second.json()["run"]["handlers_run"], json!(3));
        assert_eq!(
            second.json()["run"]["outcome"]["outcome"],
            json!("completed")
        );
        let finished = stack.snapshot(id).await;
        assert_eq!(finished.rows.len(), 103);
        assert!(
            finished
                .rows
                .iter()
                .all(|r| r.status == "completed" && r.attempt == 1)
        );
        assert_eq!(finished.request.stage, "completed");
        worker.shutdown();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_than_ten_thousand_stage_rows_block_the_request_and_nothing_runs() {
    with_approved("stages", async |stack, id| {
        // Written directly as the owner.
        owner_execute(stack, TEN_THOUSAND_AND_ONE_ROWS, id).await;
        owner_execute(stack, SET_RUNNING, id).await;
        let counts = async || -> (i64, i64, i64) {
            sqlx::query_as(
                "SELECT count(*), sum(h.attempt)::bigint, max(r.exec_generation) \
                 FROM deletion.user_stage_history h JOIN deletion.requests r \
                   ON r.id = h.request_id WHERE h.request_id = $1",
            )
            .bind(id)
            .fetch_one(stack.store.pool())
            .await
            .unwrap()
        };
        let before = counts().await;
        assert_eq!(before.0, 10_001);

        let too_many = "more than 10000 stage rows";
        run(stack, id, &[]).await.expect_refusal_naming(1, too_many);
        assert_eq!(counts().await, before, "no row added, no handler started");
        let request = stack.store.request_view(id).await.unwrap().unwrap();
        assert!(
            request
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains(too_many)),
            "{:?}",
            request.last_error
        );
        assert_eq!(stack.workflow_status(id).await.phase, UserPhase::Blocked);

        let status = stack.cli(&["user", "status", &id.to_string()]).await;
        status.expect_refusal_naming(1, too_many);
        let listed = stack
            .cli(&["user", "list", "--state", "blocked", "--limit", "1000"])
            .await;
        listed.expect_exit(0);
        assert!(listed.stdout.contains(&id.to_string()));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_refuses_an_early_start_even_when_the_workflow_clock_says_the_deadline_passed() {
    with_approved("early", async |stack, id| {
        run(stack, id, &["--fail-stage", "purge_db"])
            .await
            .expect_exit(1);
        let failed = stack.snapshot(id).await;
        let first_deadline = failed.request.next_attempt_at.unwrap();

        // The deadline moves an hour forward in Postgres; the workflow still knows the old one.
        owner_execute(stack, DEADLINE_AN_HOUR_LATER, id).await;
        let moved = stack.snapshot(id).await;
        let moved_deadline =
            activities::user::store::rfc3339(moved.request.next_attempt_at.unwrap());
        assert_eq!(
            stack
                .workflow_status(id)
                .await
                .retry
                .unwrap()
                .next_attempt_at,
            activities::user::store::rfc3339(first_deadline)
        );
        stack.skip_time(Duration::from_secs(31)).await;

        let early = run(stack, id, &[]).await;
        // Refused with the saved deadline.
        let early =
            early.expect_refusal_naming_all(1, &["retry deadline has not passed", &moved_deadline]);
        let report = &early.json()["run"];
        assert_eq!(report["outcome"]["outcome"], json!("retry_not_due"));
        assert_eq!(
            report["outcome"]["retry"]["next_attempt_at"],
            json!(moved_deadline)
        );
        assert_eq!(report["handlers_run"], json!(0));
        let after = stack.snapshot(id).await;
        assert_eq!(
            after.rows, moved.rows,
            "the failed row was not started again"
        );
        assert_eq!(after.rows[1].attempt, 1);
        assert_eq!(after.request.exec_generation, moved.request.exec_generation);
        let workflow = stack.workflow_status(id).await;
        assert_eq!(workflow.phase, UserPhase::RetryWait);
        assert_eq!(
            workflow.retry.unwrap().next_attempt_at,
            moved_deadline,
            "the workflow now gates runs on the database's deadline"
        );

        // When both clocks have passed the deadline, the same row resumes and the request ends.
        owner_execute(stack, DEADLINE_PASSED, id).await;
        stack.skip_time(Duration::from_secs(3_700)).await;
        run(stack, id, &[]).await.expect_exit(0);
        let finished = stack.snapshot(id).await;
        assert_eq!(finished.rows[1].id, failed.rows[1].id);
        assert_eq!(finished.rows[1].attempt, 2);
        assert_eq!(finished.request.stage, "completed");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_list_filters_by_state_like_community_list() {
    with_one_worker(async |stack| {
        let ApprovedRequest { id: open } = submit_and_approve(stack, &target("list-open")).await;
        let ApprovedRequest { id: done } = submit_and_approve(stack, &target("list-done")).await;
        run(stack, done, &[]).await.expect_exit(0);
        let ApprovedRequest { id: blocked } =
            submit_and_approve(stack, &target("list-blocked")).await;
        owner_execute(stack, INVENTORY_VERSION_7, blocked).await;
        run(stack, blocked, &[]).await.expect_exit(1);

        let listed = async |state: &str| -> Vec<Uuid> {
            let out = stack
                .cli(&["user", "list", "--state", state, "--limit", "1000"])
                .await;
            out.expect_exit(0);
            out.json()
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["request_id"].as_str().unwrap().parse().unwrap())
                .filter(|id| [open, done, blocked].contains(id))
                .collect()
        };
        assert_eq!(
            listed("all").await,
            vec![blocked, done, open],
            "newest first"
        );
        assert_eq!(listed("open").await, vec![blocked, open]);
        assert_eq!(listed("blocked").await, vec![blocked]);
        assert_eq!(listed("completed").await, vec![done]);

        let table = stack
            .cli(&["--output", "table", "user", "list", "--state", "blocked"])
            .await;
        table.expect_exit(0);
        assert!(
            table.stdout.contains(&blocked.to_string()),
            "{}",
            table.stdout
        );
        assert!(
            table.stdout.contains("inventory version 7"),
            "{}",
            table.stdout
        );
        let bad = stack.cli(&["user", "list", "--state", "stuck"]).await;
        bad.expect_exit(2);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_row_whose_inputs_are_not_the_approved_inventorys_blocks_naming_the_row() {
    with_approved("inputs", async |stack, id| {
        run(stack, id, &["--next-step"]).await.expect_exit(0);
        // The pending B purge_db row is given a role the approved inventory does not give B.
        owner_execute(stack, FORMER_ROLE_ON_CURRENT_ROW, id).await;
        let before = stack.snapshot(id).await;
        let tampered = before.rows[1].clone();
        assert_eq!(
            (tampered.stage.as_str(), tampered.community_id),
            ("purge_db", Some(B))
        );

        // The refusal names the row.
        let named = [
            &tampered.id.to_string(),
            "are not what the approved inventory gives",
        ];
        run(stack, id, &[])
            .await
            .expect_refusal_naming_all(1, &named);
        assert_no_handler_ran(stack, id, &before, "the row's handler did not run").await;
        assert_eq!(stack.workflow_status(id).await.phase, UserPhase::Blocked);
    })
    .await;
}
