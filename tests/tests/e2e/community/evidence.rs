//! Evidence bound to the request, and abort decided by the database's irreversible marker,
//! through the real CLI and worker.
//!
//! The attacker modelled: someone (or a buggy job) with write access to `deletion.requests` who
//! re-points an approved request at a neighbouring community (its id and host). Every test
//! proves the tampering blocks the next destructive step naming the mismatch, and that nothing of
//! the neighbour (and nothing of the target, unless the deletion is legitimately resumed) is
//! touched.

use std::time::Duration;

use activities::serving::acquire_serving_write;
use activities::store::FenceState;
use serde_json::Value;
use uuid::Uuid;

use testkit::poll;
use testkit::prelude::*;
use testkit::records::fence_state;
use testkit::refusal::request_row;
use testkit::seed::ONE_VERSION_PER_CHUNK_SLOWLY;

/// Re-points the request row at `community` under `host` (the attack), or back (the repair).
async fn point_request(stack: &Stack, id: &str, community: Uuid, host: &str) {
    sqlx::query("UPDATE deletion.requests SET community_id = $2, host = $3 WHERE id = $1")
        .bind(id.parse::<Uuid>().unwrap_or_default())
        .bind(community)
        .bind(host)
        .execute(stack.store.pool())
        .await
        .unwrap_or_else(|e| panic!("update deletion.requests: {e}"));
}

fn blocked_reason(status: &Value) -> String {
    status["blocked"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn has_event(events: &[Value], name: &str) -> bool {
    events.iter().any(|e| e["event"] == name)
}

/// The state of the community's fence; serving when it never had one.
async fn fence(stack: &Stack, community: Uuid) -> FenceState {
    let state = fence_state(stack, community).await;
    state.unwrap_or(FenceState::Serving)
}

/// The two communities of every story: the target, and the neighbour the tampering points at.
struct Communities {
    target: Tenant,
    neighbour: Tenant,
    neighbour_before: Kept,
}

impl Communities {
    /// Seeds both (hosts named after `tag`) and snapshots the neighbour.
    async fn seed(stack: &Stack, tag: &str) -> Communities {
        let target = Tenant::seed(stack, &format!("{tag}-target"), small_plan()).await;
        let neighbour = Tenant::seed(stack, &format!("{tag}-neighbour"), small_plan()).await;
        let neighbour_before = neighbour.kept(stack).await;
        Communities {
            target,
            neighbour,
            neighbour_before,
        }
    }

    /// The attack: the request row re-pointed at the neighbour.
    async fn repoint(&self, stack: &Stack, id: &str) {
        point_request(stack, id, self.neighbour.id, &self.neighbour.host).await;
    }

    /// The remediation: the row restored from the approved evidence and unblocked by `actor`;
    /// the deletion then completes, the target gone and the neighbour untouched, byte for byte.
    async fn restore_and_finish(&self, stack: &Stack, cli: &Cli, id: &str, actor: &str) {
        point_request(stack, id, self.target.id, &self.target.host).await;
        cli.unblock_and_finish(id, actor, "restored the request row")
            .await;
        self.target.assert_gone(stack, "the target").await;
        let untouched = "the neighbour is untouched, byte for byte";
        self.neighbour_before
            .assert_unchanged(stack, untouched)
            .await;
    }
}

/// Asserts the community is served again: a serving write is admitted and a row write succeeds.
async fn assert_served(stack: &Stack, community: Uuid) {
    let guard = acquire_serving_write(&stack.store, community, "after_abort")
        .await
        .unwrap_or_else(|e| panic!("serving writes must be admitted again: {e}"));
    guard.finish().await.unwrap_or_else(|e| panic!("{e}"));
    demo::seed_rows(&stack.store, community, 1)
        .await
        .unwrap_or_else(|e| panic!("row writes must succeed again: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_repointed_at_a_neighbour_blocks_the_fence_naming_the_mismatch() {
    let (stack, cli, _worker) = with_worker("evidence", &[("BUZZ_FENCE_WAIT_SECS", "1")]).await;
    let communities = Communities::seed(&stack, "evidence").await;
    let (target, neighbour) = (&communities.target, &communities.neighbour);
    let target_before = target.kept(&stack).await;
    let (id, digest) = cli.submit(&target.host, "alice", &[]).await;

    // A serving write in flight holds the fence back while the row is tampered with.
    let lease = acquire_serving_write(&stack.store, target.id, "slow_upload")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    cli.approve(&id, "bob", &digest).await.expect_code(0);
    cli.wait_status(&id, 60, |s| s["phase"] == "fencing").await;
    communities.repoint(&stack, &id).await;
    lease.finish().await.unwrap_or_else(|e| panic!("{e}"));

    let status = cli.wait_status(&id, 90, |s| !s["blocked"].is_null()).await;
    let reason = blocked_reason(&status);
    assert_eq!(status["phase"], "fencing", "{status}");
    assert!(
        reason.contains("evidence does not match")
            && reason.contains(&neighbour.id.to_string())
            && reason.contains(&target.id.to_string())
            && reason.contains("tampered with or a bug"),
        "the block names what differs: {reason}"
    );
    assert_eq!(
        fence(&stack, neighbour.id).await,
        FenceState::Serving,
        "the neighbour is never quiesced or fenced"
    );
    let neighbour_before = &communities.neighbour_before;
    neighbour_before.assert_unchanged(&stack, "neighbour").await;
    target_before.assert_unchanged(&stack, "target").await;
    let request = request_row(&stack, id.parse().unwrap_or_default()).await;
    assert!(
        request
            .blocked_reason
            .unwrap_or_default()
            .contains("evidence does not match"),
        "the reason is persisted in Postgres"
    );

    // Remediation: the row is restored from the approved evidence, then unblocked.
    communities
        .restore_and_finish(&stack, &cli, &id, "carol")
        .await;
}

/// A trigger rewrites the request row in the very transaction that binds the destructive
/// manifest, so the tampering lands between freezing the manifest and the first delete: the
/// deletion blocks in `deleting_objects` before the irreversible marker, and the abort is
/// accepted and returns the community to service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_in_object_deletion_before_the_marker_can_be_aborted() {
    let (stack, cli, _worker) = with_worker("abort-before-marker", &[]).await;
    let communities = Communities::seed(&stack, "marker").await;
    let (target, neighbour) = (&communities.target, &communities.neighbour);
    let target_before = snapshot(&stack, target.id).await;
    let (id, digest) = cli.submit(&target.host, "alice", &[]).await;

    let function = format!("deletion.tamper_{}", Uuid::new_v4().simple());
    let trigger = format!("tamper_{}", Uuid::new_v4().simple());
    let install = [
        format!(
            "CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             NEW.community_id := '{}'; NEW.host := '{}'; RETURN NEW; END $$",
            neighbour.id, neighbour.host
        ),
        format!(
            "CREATE TRIGGER {trigger} BEFORE UPDATE ON deletion.requests FOR EACH ROW \
             WHEN (OLD.id = '{id}' AND OLD.stage = 'fenced' AND NEW.stage = 'drained') \
             EXECUTE FUNCTION {function}()"
        ),
    ];
    for sql in install {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(stack.store.pool())
            .await
            .unwrap_or_else(|e| panic!("install the tampering trigger: {e}"));
    }

    cli.approve(&id, "bob", &digest).await.expect_code(0);
    let status = cli.wait_status(&id, 90, |s| !s["blocked"].is_null()).await;
    for sql in [
        format!("DROP TRIGGER {trigger} ON deletion.requests"),
        format!("DROP FUNCTION {function}()"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(stack.store.pool())
            .await
            .unwrap_or_else(|e| panic!("drop the tampering trigger: {e}"));
    }
    assert_eq!(status["phase"], "deleting_objects", "{status}");
    let reason = blocked_reason(&status);
    assert!(
        reason.contains("evidence does not match") && reason.contains(&neighbour.id.to_string()),
        "{reason}"
    );
    let request = request_row(&stack, id.parse().unwrap_or_default()).await;
    assert_eq!(request.irreversible_at, None, "blocked before the marker");
    assert_eq!(fence(&stack, target.id).await, FenceState::Fenced);

    let aborted = cli
        .abort(&id, "carol", "request row tampered with")
        .await
        .expect_code(0);
    assert_eq!(aborted.json(), "aborted", "{}", aborted.stdout);
    let status = cli.wait_status(&id, 60, |s| s["phase"] == "aborted").await;
    assert_eq!(status["abort"]["actor"], "carol");
    assert_served(&stack, target.id).await;

    let target_after = snapshot(&stack, target.id).await;
    assert_eq!(
        target_after.versions, target_before.versions,
        "no version deleted"
    );
    assert_eq!(target_after.keys, target_before.keys);
    for (before, after) in target_before.rows.iter().zip(&target_after.rows) {
        assert!(
            before.rows.iter().all(|row| after.rows.contains(row)),
            "every row of {} kept",
            before.table
        );
    }
    let neighbour_before = &communities.neighbour_before;
    neighbour_before.assert_unchanged(&stack, "neighbour").await;
    assert_eq!(fence(&stack, neighbour.id).await, FenceState::Serving);
    let events = cli.inspected_audit(&id).await;
    assert!(!has_event(&events, "irreversible"), "{events:?}");
    assert!(has_event(&events, "aborted"), "{events:?}");
}

/// Deletion is paced slowly; once the marker is set the row is tampered with, which blocks at
/// the next delete. The abort is refused (and audited), the block stays, and after the row is
/// restored and unblocked the deletion completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_marker_an_abort_is_refused_audited_and_the_deletion_completes_after_unblock() {
    let (stack, cli, _worker) =
        with_worker("abort-after-marker", &ONE_VERSION_PER_CHUNK_SLOWLY).await;
    let communities = Communities::seed(&stack, "late").await;
    let (id, digest) = cli
        .submit(
            &communities.target.host,
            "alice",
            &["--delete-parallelism", "1"],
        )
        .await;
    let request_id: Uuid = id.parse().unwrap_or_default();

    cli.approve(&id, "bob", &digest).await.expect_code(0);
    let every = Duration::from_millis(100);
    let marked = poll::until(Duration::from_secs(90), every, async || {
        let request = request_row(&stack, request_id).await;
        match request.irreversible_at {
            Some(_) => Ok(request),
            None => Err("the marker was never set".to_owned()),
        }
    })
    .await;
    assert_eq!(
        marked.stage, "drained",
        "the deletion must still be running"
    );
    communities.repoint(&stack, &id).await;
    let status = cli.wait_status(&id, 60, |s| !s["blocked"].is_null()).await;
    assert_eq!(status["phase"], "deleting_objects", "{status}");
    assert!(
        blocked_reason(&status).contains("evidence does not match"),
        "{status}"
    );

    let refused = cli
        .abort(&id, "carol", "changed my mind")
        .await
        .expect_code(1);
    assert!(
        refused.stderr.contains("abort refused") && refused.stderr.contains("irreversible point"),
        "{}",
        refused.stderr
    );
    let events = cli.inspected_audit(&id).await;
    let refusal = events
        .iter()
        .find(|e| e["event"] == "abort_refused")
        .unwrap_or_else(|| panic!("the refusal is in the audit trail: {events:?}"));
    assert_eq!(refusal["actor"], "carol");
    let still = cli.status(&id, 1).await;
    assert!(
        !still["blocked"].is_null(),
        "blocked stays blocked: {still}"
    );
    assert!(still["abort"].is_null(), "{still}");

    communities
        .restore_and_finish(&stack, &cli, &id, "dave")
        .await;
}
