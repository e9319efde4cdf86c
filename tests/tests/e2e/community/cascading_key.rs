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
use testkit::private_db::{PrivateStory, exec};
use testkit::refusal::request_row;

/// The cascading key the story adds after approval, and its name.
const CASCADING_KEY: &str = "ALTER TABLE public.channel_notes \
     ADD CONSTRAINT channel_notes_channel_fk \
     FOREIGN KEY (channel_id) REFERENCES buzz.channels (id) ON DELETE CASCADE";
const KEY_NAME: &str = "channel_notes_channel_fk";

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

    let target = Tenant::seed(stack, "cascade", small_plan()).await;
    let neighbour = Tenant::seed(stack, "kept", small_plan()).await;
    let neighbour_before = neighbour.kept(stack).await;

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

    let (id, digest) = cli.submit(&target.host, "alice", &[]).await;
    // After approval-time inventory, the cascading key appears.
    exec(&stack.store, CASCADING_KEY).await;
    cli.approve(&id, "bob", &digest).await.expect_code(0);
    let status = cli.wait_status(&id, 120, |s| !s["blocked"].is_null()).await;
    let reason = status["blocked"]["reason"].as_str().unwrap_or_default();
    for named in [KEY_NAME, "public.channel_notes", "buzz.channels", "CASCADE"] {
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
    let target_now = snapshot(stack, target.id).await;
    assert!(
        target_now.row_count() > 0 && !target_now.versions.is_empty(),
        "nothing of the target was deleted while blocked"
    );
    assert_eq!(notes(&stack.store).await, notes_before);

    // The operator drops the constraint and unblocks: the phase re-runs, the deletion completes.
    let drop_key = format!("ALTER TABLE public.channel_notes DROP CONSTRAINT {KEY_NAME}");
    exec(&stack.store, &drop_key).await;
    let remediation = format!("dropped {KEY_NAME}");
    cli.unblock_and_finish(&id, "carol", &remediation).await;

    target.assert_gone(stack, "the target").await;
    neighbour_before
        .assert_unchanged(stack, "the neighbour")
        .await;
    assert_eq!(
        notes(&stack.store).await,
        notes_before,
        "the non-tenant table keeps every row, byte for byte"
    );
    story.end().await;
}
