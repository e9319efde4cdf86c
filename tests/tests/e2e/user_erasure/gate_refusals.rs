//! Two safety checks of a real user deletion that block it before anything is deleted: an
//! upload row naming an object of another tenant, and data the user wrote in a community the
//! approved inventory does not list.

use demo::user::{UserSeed, media_key};
use testkit::prelude::*;

use super::{fresh_pubkey, seed_footprint, submit_user};

async fn blocked_reason(stack: &Stack, id: &str) -> String {
    let reason: Option<String> =
        sqlx::query_scalar("SELECT blocked_reason FROM deletion.requests WHERE id = $1::uuid")
            .bind(id)
            .fetch_one(stack.store.pool())
            .await
            .unwrap_or_else(|e| panic!("blocked reason: {e}"));
    reason.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_row_naming_another_tenants_object_blocks_before_anything_is_deleted() {
    let _shared = outage_lock().read().await;
    let stack = stack().await;
    let queue = unique_queue("user-foreign");
    let _worker = WorkerProcess::start(&queue, &[]).await;
    let cli = Cli::new(&queue);
    let user = fresh_pubkey();
    let home = seed(&stack, &unique_host("home"), small_plan())
        .await
        .community_id;
    let other = seed(&stack, &unique_host("other"), small_plan())
        .await
        .community_id;
    seed_footprint(
        &stack,
        home,
        &user,
        &UserSeed {
            member: true,
            events: 2,
            ..UserSeed::default()
        },
    )
    .await;
    // Another tenant's object, and an upload row of the user in `home` that names it.
    let body = b"another tenant's picture".to_vec();
    let (foreign_key, sha) = media_key(other, &body);
    let version = stack
        .objects
        .put_object(&foreign_key, body)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let row = uuid::Uuid::new_v4();
    sqlx::query(
        "INSERT INTO buzz.media_uploads (id, community_id, sha256, object_key, bytes, uploader_pubkey) \
         VALUES ($1, $2, $3, $4, 1, $5)",
    )
    .bind(row)
    .bind(home)
    .bind(&sha)
    .bind(&foreign_key)
    .bind(&user)
    .execute(stack.serving.pool())
    .await
    .unwrap_or_else(|e| panic!("upload row: {e}"));

    let submitted = submit_user(&cli, &user).await;
    cli.user_approve(&submitted.id, "bob", &submitted.digest)
        .await
        .expect_code(0);
    cli.run(&["user", "run", &submitted.id])
        .await
        .expect_exit(1);
    let reason = blocked_reason(&stack, &submitted.id).await;
    assert!(reason.contains(&foreign_key), "{reason}");
    assert!(
        reason.contains("outside the community's prefix"),
        "{reason}"
    );
    stack
        .objects
        .get_object_version(&foreign_key, &version)
        .await
        .unwrap_or_else(|e| panic!("the other tenant's object must be untouched: {e}"));
    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM buzz.events WHERE pubkey = $1")
        .bind(&user)
        .fetch_one(stack.store.pool())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        events, 2,
        "nothing of the user was deleted before the refusal"
    );

    // Remedy: the bad row goes (by the owner: the user is fenced), then unblock and run.
    sqlx::query("DELETE FROM buzz.media_uploads WHERE id = $1")
        .bind(row)
        .execute(stack.store.pool())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    cli.run(&[
        "user",
        "unblock",
        &submitted.id,
        "--requested-by",
        "alice",
        "--reason",
        "removed the upload row naming another tenant's object",
    ])
    .await
    .expect_code(0);
    cli.run(&["user", "run", &submitted.id])
        .await
        .expect_exit(0);
    stack
        .objects
        .get_object_version(&foreign_key, &version)
        .await
        .unwrap_or_else(|e| panic!("the other tenant's object is still untouched: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_written_in_a_community_the_inventory_does_not_list_blocks_at_the_gate() {
    let _shared = outage_lock().read().await;
    let stack = stack().await;
    let queue = unique_queue("user-uninventoried");
    let _worker = WorkerProcess::start(&queue, &[]).await;
    let cli = Cli::new(&queue);
    let user = fresh_pubkey();
    let listed = seed(&stack, &unique_host("listed"), small_plan())
        .await
        .community_id;
    let later = seed(&stack, &unique_host("later"), small_plan())
        .await
        .community_id;
    seed_footprint(
        &stack,
        listed,
        &user,
        &UserSeed {
            member: true,
            events: 2,
            ..UserSeed::default()
        },
    )
    .await;
    let submitted = submit_user(&cli, &user).await;
    assert!(submitted.footprint(later).is_null(), "{}", submitted.json);
    // After the inventory was frozen, the user joins another community and posts there.
    seed_footprint(
        &stack,
        later,
        &user,
        &UserSeed {
            member: true,
            events: 1,
            ..UserSeed::default()
        },
    )
    .await;
    cli.user_approve(&submitted.id, "bob", &submitted.digest)
        .await
        .expect_code(0);
    cli.run(&["user", "run", &submitted.id])
        .await
        .expect_exit(1);
    let reason = blocked_reason(&stack, &submitted.id).await;
    assert!(reason.contains(&later.to_string()), "{reason}");
    assert!(reason.contains("does not list"), "{reason}");
    // Nothing was purged; the gate is reversible: abort lifts the fence.
    let left = stack
        .store
        .user_rows_left(listed, &user)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(left["buzz.events"], 2, "{left:?}");
    let aborted = cli
        .run(&[
            "user",
            "abort",
            &submitted.id,
            "--requested-by",
            "alice",
            "--reason",
            "resubmit with the new community",
        ])
        .await
        .expect_code(0)
        .json();
    assert_eq!(aborted["abort"]["fence_lifted"], true, "{aborted}");
    let resubmitted = submit_user(&cli, &user).await;
    assert_eq!(
        resubmitted.footprint(later)["rows"]["buzz.events"],
        1,
        "{}",
        resubmitted.json
    );
}
