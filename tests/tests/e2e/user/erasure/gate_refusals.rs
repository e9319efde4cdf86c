//! Two safety checks of a real user deletion that block it before anything is deleted: an
//! upload row naming an object of another tenant, and data the user wrote in a community the
//! approved inventory does not list.

use demo::user::media_key;
use testkit::prelude::*;
use testkit::records::{as_owner, as_serving};
use uuid::Uuid;

use super::{
    events_of, fresh_pubkey, member_with_events, rows_left, run_until_blocked, seed_footprint,
    submit_user, unblock_and_run_to_end,
};

/// A fresh user who posted two events in a community named after `first`, and a second
/// community named after `second`, where the user has nothing (yet).
async fn user_and_two_communities(
    stack: &Stack,
    first: &str,
    second: &str,
) -> (String, Uuid, Uuid) {
    let user = fresh_pubkey();
    let first = small_community(stack, first).await;
    let second = small_community(stack, second).await;
    seed_footprint(stack, first, &user, &member_with_events(2)).await;
    (user, first, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_row_naming_another_tenants_object_blocks_before_anything_is_deleted() {
    let (stack, cli, _worker) = with_worker("user-foreign", &[]).await;
    let (user, home, other) = user_and_two_communities(&stack, "home", "other").await;
    // Another tenant's object, and an upload row of the user in `home` that names it.
    let body = b"another tenant's picture".to_vec();
    let (foreign_key, sha) = media_key(other, &body);
    let version = stack
        .objects
        .put_object(&foreign_key, body)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let row = Uuid::new_v4();
    let upload = sqlx::query(
        "INSERT INTO buzz.media_uploads (id, community_id, sha256, object_key, bytes, uploader_pubkey) \
         VALUES ($1, $2, $3, $4, 1, $5)",
    );
    let upload = upload
        .bind(row)
        .bind(home)
        .bind(&sha)
        .bind(&foreign_key)
        .bind(&user);
    as_serving(&stack, upload, "upload row").await;

    let submitted = submit_user(&cli, &user).await;
    cli.user_approve(&submitted.id, "bob", &submitted.digest)
        .await
        .expect_code(0);
    let reason = run_until_blocked(&stack, &cli, &submitted.id).await;
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
    assert_eq!(
        events_of(&stack, &user).await,
        2,
        "nothing of the user was deleted before the refusal"
    );

    // Remedy: the bad row goes (by the owner: the user is fenced), then unblock and run.
    let remove = sqlx::query("DELETE FROM buzz.media_uploads WHERE id = $1").bind(row);
    as_owner(&stack, remove, "the upload row").await;
    unblock_and_run_to_end(
        &cli,
        &submitted.id,
        "removed the upload row naming another tenant's object",
    )
    .await;
    stack
        .objects
        .get_object_version(&foreign_key, &version)
        .await
        .unwrap_or_else(|e| panic!("the other tenant's object is still untouched: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_written_in_a_community_the_inventory_does_not_list_blocks_at_the_gate() {
    let (stack, cli, _worker) = with_worker("user-uninventoried", &[]).await;
    let (user, listed, later) = user_and_two_communities(&stack, "listed", "later").await;
    let submitted = submit_user(&cli, &user).await;
    assert!(submitted.footprint(later).is_null(), "{}", submitted.json);
    // After the inventory was frozen, the user joins another community and posts there.
    seed_footprint(&stack, later, &user, &member_with_events(1)).await;
    cli.user_approve(&submitted.id, "bob", &submitted.digest)
        .await
        .expect_code(0);
    let reason = run_until_blocked(&stack, &cli, &submitted.id).await;
    assert!(reason.contains(&later.to_string()), "{reason}");
    assert!(reason.contains("does not list"), "{reason}");
    // Nothing was purged; the gate is reversible: abort lifts the fence.
    let left = rows_left(&stack, listed, &user).await;
    assert_eq!(left["buzz.events"], 2, "{left:?}");
    let aborted = cli
        .user_abort(&submitted.id, "alice", "resubmit with the new community")
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
