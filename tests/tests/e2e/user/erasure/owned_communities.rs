//! Must-show 3 of issue 17: a user who owns a community that has other members blocks the
//! deletion, naming the community; once ownership is transferred and the request unblocked, it
//! completes and the community keeps its new owner. A community the user owns alone does not
//! block; the approver chooses to delete it as a child community deletion, which has its own
//! frozen inventory, digest and two-person approval, and removes the whole community.

use std::time::Duration;

use demo::user::UserSeed;
use testkit::poll;
use testkit::prelude::*;
use testkit::records::{as_serving, community_exists, read};
use uuid::Uuid;

use super::{
    fresh_pubkey, member_with_events, rows_left, seed_footprint, submit_user,
    unblock_and_run_to_end,
};

async fn role_of(stack: &Stack, community: Uuid, pubkey: &str) -> Option<String> {
    sqlx::query_scalar("SELECT role FROM buzz.memberships WHERE community_id = $1 AND pubkey = $2")
        .bind(community)
        .bind(pubkey)
        .fetch_optional(stack.store.pool())
        .await
        .unwrap_or_else(|e| panic!("membership: {e}"))
}

async fn set_role(stack: &Stack, community: Uuid, pubkey: &str, role: &str) {
    let sql = "UPDATE buzz.memberships SET role = $3 WHERE community_id = $1 AND pubkey = $2";
    let update = sqlx::query(sql).bind(community).bind(pubkey).bind(role);
    as_serving(stack, update, &format!("set role {role}")).await;
}

/// `user approve ID` by bob of `digest`, choosing the community of `host` (owned by the user)
/// for a child community deletion.
async fn approve_deleting_owned(cli: &Cli, id: &str, digest: &str, host: &str) -> CliRun {
    cli.run(&[
        "user",
        "approve",
        id,
        "--approved-by",
        "bob",
        "--inventory-digest",
        digest,
        "--delete-owned-community",
        host,
    ])
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_communities_block_until_transferred_or_go_as_a_child_community_deletion() {
    let (stack, cli, _worker) = with_worker("user-owner", &[]).await;
    let user = fresh_pubkey();
    let heir = fresh_pubkey();

    let owned_host = unique_host("owned");
    let owned = demo::create_community(&stack.serving, &owned_host)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .id;
    let owner = UserSeed {
        member: true,
        role: Some("owner".into()),
        events: 2,
        ..UserSeed::default()
    };
    seed_footprint(&stack, owned, &user, &owner).await;
    seed_footprint(&stack, owned, &heir, &member_with_events(1)).await;
    // A community the user owns alone.
    let alone = demo::create_community(&stack.serving, &unique_host("alone"))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .id;
    seed_footprint(&stack, alone, &user, &owner).await;

    let submitted = submit_user(&cli, &user).await;
    let footprint = |community: Uuid| submitted.footprint(community);
    assert_eq!(footprint(owned)["owner"], true, "{}", submitted.json);
    assert_eq!(footprint(owned)["other_members"], 1, "{}", submitted.json);
    assert_eq!(footprint(alone)["owner"], true, "{}", submitted.json);
    assert_eq!(footprint(alone)["other_members"], 0, "{}", submitted.json);
    let (id, digest) = (submitted.id.clone(), submitted.digest.clone());
    let alone_host = stack_host_alone(&stack, alone).await;
    // A community with other members cannot be chosen as a child deletion.
    let refused = approve_deleting_owned(&cli, &id, &digest, &owned_host).await;
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    assert!(refused.stderr.contains("alone"), "{}", refused.stderr);
    let approved = approve_deleting_owned(&cli, &id, &digest, &alone_host)
        .await
        .expect_code(0)
        .json();
    let child = approved["approval"]["child_deletions"][0].clone();
    assert_eq!(child["community_id"], alone.to_string(), "{approved}");
    let child_id: Uuid = child["request_id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no child request in {approved}"));
    // The child registers its own frozen inventory; it needs its own second operator (the
    // child's requester is the user deletion's approver, bob).
    let child_digest = poll::until_some(
        Duration::from_secs(60),
        Duration::from_millis(300),
        "the child never registered",
        async || {
            let request = read("the child request", stack.store.find_request(child_id)).await;
            request.and_then(|r| r.inventory_digest)
        },
    )
    .await;
    assert_ne!(child_digest, digest, "the child has a digest of its own");
    let child_id = child_id.to_string();
    cli.approve(&child_id, "bob", &child_digest)
        .await
        .expect_exit(1);
    cli.approve(&child_id, "alice", &child_digest)
        .await
        .expect_code(0);
    cli.watch_to_end(&child_id).await;
    assert!(
        !community_exists(&stack, alone).await,
        "the child deletion removed the community the user owned alone"
    );

    // Blocked at the gate, before anything is fenced, naming the community.
    let blocked = cli.user_run(&id).await;
    blocked.expect_exit(1);
    let said = format!("{}{}", blocked.stdout, blocked.stderr);
    assert!(said.contains(&owned_host), "{said}");
    assert!(said.contains("transfer ownership"), "{said}");
    let reason = testkit::refusal::blocked_reason(&stack, &id).await;
    assert!(reason.contains(&owned_host), "{reason}");
    assert!(
        !reason.contains(&alone_host),
        "the community the user owns alone does not block: {reason}"
    );
    let again = cli.user_run(&id).await;
    again.expect_exit(1);
    assert!(
        format!("{}{}", again.stdout, again.stderr).contains("blocked"),
        "a blocked request does not run until unblocked: {} {}",
        again.stdout,
        again.stderr
    );
    // Nothing was fenced or deleted: the user still writes and owns.
    assert_eq!(
        role_of(&stack, owned, &user).await.as_deref(),
        Some("owner")
    );

    // Remedy: transfer ownership, then unblock.
    set_role(&stack, owned, &heir, "owner").await;
    set_role(&stack, owned, &user, "member").await;
    unblock_and_run_to_end(&cli, &id, "ownership transferred to the heir").await;

    assert_eq!(role_of(&stack, owned, &user).await, None);
    assert_eq!(
        role_of(&stack, owned, &heir).await.as_deref(),
        Some("owner")
    );
    for community in [owned, alone] {
        let left = rows_left(&stack, community, &user).await;
        assert!(left.values().all(|n| *n == 0), "{community}: {left:?}");
    }
    let heir_left = rows_left(&stack, owned, &heir).await;
    assert_eq!(heir_left["buzz.events"], 1);
    assert_eq!(heir_left["buzz.memberships"], 1);
}

async fn stack_host_alone(stack: &Stack, community: Uuid) -> String {
    let row = read("community row", stack.store.community_by_id(community)).await;
    row.map(|c| c.host).unwrap_or_default()
}
