//! Part 4 of issue 17: the per-user fence is lifted on abort before the irreversible point (the
//! first purge), and an abort after it is refused.

use activities::store::is_user_fenced_write;
use testkit::prelude::*;
use uuid::Uuid;

use super::{events_of, fresh_pubkey, member, seed_footprint};

/// Writes one event as `pubkey` in `community` as the serving role.
async fn write_as(stack: &Stack, community: Uuid, pubkey: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO buzz.events (id, community_id, pubkey, kind, content) VALUES ($1, $2, $3, 1, 'x')",
    )
    .bind(fresh_pubkey())
    .bind(community)
    .bind(pubkey)
    .execute(stack.serving.pool())
    .await
    .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_after_the_gate_lifts_the_fence_and_abort_after_a_purge_started_is_refused() {
    let (stack, cli, _worker) = with_worker("user-abort", &[]).await;
    let user = fresh_pubkey();
    let community = small_community(&stack, "abort").await;
    // An agent: after purge_db, purge_agents is still to run, so the request is open.
    seed_footprint(&stack, community, &user, &member(3, 1, 1)).await;
    let target = format!("user:{user}");

    // Gate only: the user is fenced.
    let id = cli.user_submit_and_approve(&target, "alice", "bob").await;
    cli.run(&["user", "run", &id, "--next-step"])
        .await
        .expect_exit(0);
    let refused = write_as(&stack, community, &user).await;
    assert!(
        refused.as_ref().is_err_and(is_user_fenced_write),
        "{refused:?}"
    );

    let aborted = cli
        .user_abort(&id, "alice", "wrong user")
        .await
        .expect_code(0)
        .json();
    assert_eq!(aborted["abort"]["fence_lifted"], true, "{aborted}");
    assert_eq!(aborted["request"]["stage"], "aborted", "{aborted}");
    write_as(&stack, community, &user)
        .await
        .unwrap_or_else(|e| panic!("after the abort the user writes again: {e}"));
    assert_eq!(
        events_of(&stack, &user).await,
        4,
        "nothing of the user was deleted"
    );
    let again = cli.user_run(&id).await;
    assert_ne!(
        again.code, 0,
        "an aborted request does not run: {}",
        again.stdout
    );

    // A new request: once purge_db started, abort is refused and the deletion runs to the end.
    let id = cli.user_submit_and_approve(&target, "alice", "bob").await;
    cli.run(&["user", "run", &id, "--next-step"])
        .await
        .expect_exit(0);
    cli.run(&["user", "run", &id, "--next-step"])
        .await
        .expect_exit(0);
    let refused = cli.user_abort(&id, "alice", "too late").await;
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    assert!(
        refused.stderr.contains("irreversible point is passed"),
        "{}",
        refused.stderr
    );
    let refused_write = write_as(&stack, community, &user).await;
    assert!(
        refused_write.as_ref().is_err_and(is_user_fenced_write),
        "the fence stays after a refused abort: {refused_write:?}"
    );
    cli.user_run(&id).await.expect_exit(0);
    assert_eq!(events_of(&stack, &user).await, 0);
}
