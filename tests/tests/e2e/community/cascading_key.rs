//! A foreign key `ON DELETE CASCADE` from a table outside the tenant model into a tenant table
//! would let the purge delete rows nobody approved. Added after approval, it blocks the request
//! at preflight, naming the constraint, before anything irreversible; the operator drops it and
//! unblocks; the deletion completes and the outside table keeps every row.
//!
//! The story needs a committed cascading key, which would block every other deletion in the same
//! database, so it runs on a database of its own (worker and CLI get its `DATABASE_URL`); objects
//! and Redis keys are per community and stay on the shared stack.

use activities::store::Store;

use testkit::prelude::*;
use testkit::private_db::PrivateStory;
use testkit::refusal::request_row;

async fn exec(store: &Store, sql: &str) {
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(store.pool())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn notes(store: &Store) -> Vec<String> {
    sqlx::query_scalar("SELECT n::text FROM public.channel_notes n ORDER BY id")
        .fetch_all(store.pool())
        .await
        .unwrap_or_else(|e| panic!("notes: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cascading_key_into_tenant_data_blocks_until_dropped_then_the_deletion_completes() {
    let _shared = outage_lock().read().await;
    let story = PrivateStory::start("cascade", &[]).await;
    let (stack, cli) = (&story.stack, &story.cli);

    let host = unique_host("cascade");
    let target = seed(stack, &host, small_plan()).await;
    let neighbour = seed(stack, &unique_host("kept"), small_plan()).await;
    let neighbour_before = snapshot(stack, neighbour.community_id).await;

    // Someone else's table: notes on channels, of both communities.
    exec(
        &stack.store,
        "CREATE TABLE public.channel_notes (id bigserial PRIMARY KEY, channel_id uuid, note text)",
    )
    .await;
    exec(
        &stack.store,
        "INSERT INTO public.channel_notes (channel_id, note) \
         SELECT id, 'note on ' || name FROM buzz.channels ORDER BY id",
    )
    .await;
    let notes_before = notes(&stack.store).await;
    assert!(notes_before.len() >= 2, "{notes_before:?}");

    let (id, digest) = cli.submit(&host, "alice", &[]).await;
    // After approval-time inventory, the cascading key appears.
    exec(
        &stack.store,
        "ALTER TABLE public.channel_notes ADD CONSTRAINT channel_notes_channel_fk \
         FOREIGN KEY (channel_id) REFERENCES buzz.channels (id) ON DELETE CASCADE",
    )
    .await;
    cli.approve(&id, "bob", &digest).await.expect_code(0);
    let status = cli.wait_status(&id, 120, |s| !s["blocked"].is_null()).await;
    let reason = status["blocked"]["reason"].as_str().unwrap_or_default();
    for named in [
        "channel_notes_channel_fk",
        "public.channel_notes",
        "buzz.channels",
        "CASCADE",
    ] {
        assert!(
            reason.contains(named),
            "the block must name {named}: {status}"
        );
    }
    let request = request_row(stack, id.parse().unwrap_or_default()).await;
    assert!(
        request.irreversible_at.is_none(),
        "blocked before the irreversible point"
    );
    let target_now = snapshot(stack, target.community_id).await;
    assert!(
        target_now.row_count() > 0 && !target_now.versions.is_empty(),
        "nothing of the target was deleted while blocked"
    );
    assert_eq!(notes(&stack.store).await, notes_before);

    // The operator drops the constraint and unblocks: the phase re-runs, the deletion completes.
    exec(
        &stack.store,
        "ALTER TABLE public.channel_notes DROP CONSTRAINT channel_notes_channel_fk",
    )
    .await;
    cli.unblock_and_finish(&id, "carol", "dropped channel_notes_channel_fk")
        .await;

    let after = snapshot(stack, target.community_id).await;
    after.assert_gone("the target");
    assert_unchanged(
        stack,
        neighbour.community_id,
        &neighbour_before,
        "the neighbour",
    )
    .await;
    assert_eq!(
        notes(&stack.store).await,
        notes_before,
        "the non-tenant table keeps every row, byte for byte"
    );
    story.end().await;
}
