//! Must-show 1 and 4 of issue 17: a user active in three communities is erased everywhere and
//! nobody else loses a byte; a tenant table without a user-data declaration blocks the inventory.

use std::collections::{BTreeMap, BTreeSet};

use activities::store::is_user_fenced_write;
use activities::taxonomy::derived_keys;
use activities::user::UserStore;
use demo::user::media_key;
use testkit::prelude::*;
use uuid::Uuid;

use super::{
    ThreeCommunities, ThreeCommunityCounts, fresh_pubkey, seed_three_communities, submit_user,
    without_user,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_is_erased_in_every_community_and_everyone_else_is_byte_identical() {
    let (stack, cli, _worker) = with_worker("user-erase", &[]).await;
    let user = fresh_pubkey();
    let other = fresh_pubkey();

    // A: member, allow-listed, an upload of their own and one shared with `other`.
    // B: member with two agents (`other` has one too). C: former member (events and keys left).
    let shared = b"a picture both of them uploaded".to_vec();
    let own = b"a picture only the user uploaded".to_vec();
    let counts = ThreeCommunityCounts {
        a_user_events: 3,
        user_keys: [2, 1, 1],
        b_other_keys: 0,
    };
    let ThreeCommunities { a, b, c, b_user } = seed_three_communities(
        &stack,
        "",
        (&user, &other),
        (std::slice::from_ref(&own), &shared),
        &counts,
    )
    .await;
    let (own_key, _) = media_key(a, &own);
    let (shared_key, _) = media_key(a, &shared);

    let mut before = BTreeMap::new();
    for community in [a, b, c] {
        before.insert(community, snapshot(&stack, community).await);
    }

    let submitted = submit_user(&cli, &user).await;
    let (id, digest) = (submitted.id.clone(), submitted.digest.clone());
    let inventory = &submitted.json["inventory"];
    assert_eq!(inventory["version"], 2, "{}", submitted.json);
    let roles: BTreeMap<String, String> = inventory["communities"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|entry| {
            (
                entry["community_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                entry["role"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        roles,
        BTreeMap::from([
            (a.to_string(), "participant".to_owned()),
            (b.to_string(), "participant".to_owned()),
            (c.to_string(), "former_participant".to_owned()),
        ]),
        "the inventory discovers where the user participates and where they used to"
    );
    let footprint_of = |community: Uuid| submitted.footprint(community);
    assert_eq!(footprint_of(a)["rows"]["buzz.events"], 3);
    assert_eq!(footprint_of(a)["media_objects"], 2);
    // Each upload's thumbnail and metadata document (the shared upload's too).
    assert_eq!(footprint_of(a)["derived_objects"], 4);
    assert_eq!(footprint_of(a)["user_keys"], 2);
    assert_eq!(footprint_of(b)["agents"], 2);
    assert_eq!(footprint_of(b)["agent_keys"], 4);
    assert_eq!(footprint_of(c)["rows"]["buzz.memberships"], 0);

    cli.user_approve(&id, "bob", &digest).await.expect_code(0);
    let ran = cli.user_run(&id).await;
    ran.expect_exit(0);

    for community in [a, b, c] {
        let erased: BTreeSet<String> = match community {
            x if x == a => BTreeSet::from([own_key.clone()]),
            _ => BTreeSet::new(),
        };
        let agents: &[Uuid] = if community == b { &b_user.agents } else { &[] };
        let expected = without_user(&before[&community], community, &user, &erased, agents);
        assert_ne!(
            expected, before[&community],
            "the user must have held something in {community} for the test to mean anything"
        );
        let after = snapshot(&stack, community).await;
        assert_identical(
            &expected,
            &after,
            &format!("community {community} after the deletion"),
        );
    }
    let shared_versions = object_versions(&stack, a).await;
    for key in
        std::iter::once(shared_key.clone()).chain(derived_keys(&shared_key).into_iter().flatten())
    {
        assert!(
            shared_versions.iter().any(|v| v.key == key),
            "{key}: the object the other user also uploaded is kept, with what derives from it"
        );
    }
    for key in derived_keys(&own_key).into_iter().flatten() {
        assert!(
            shared_versions.iter().all(|v| v.key != key),
            "{key}: what derives from the user's own upload is gone"
        );
    }

    let id: Uuid = id
        .parse()
        .unwrap_or_else(|e| panic!("request id {id}: {e}"));
    let rows = UserStore::new(stack.store.pool().clone())
        .stage_rows(id)
        .await
        .unwrap_or_else(|e| panic!("stage rows: {e}"));
    let path: Vec<(String, Option<Uuid>)> = rows
        .iter()
        .map(|r| (r.stage.clone(), r.community_id))
        .collect();
    assert_eq!(
        path.first(),
        Some(&("gate_user".to_owned(), None)),
        "{path:?}"
    );
    assert_eq!(
        path.iter()
            .filter(|(stage, _)| stage == "purge_agents")
            .collect::<Vec<_>>(),
        vec![&("purge_agents".to_owned(), Some(b))],
        "only the community where the user has agents takes the purge_agents branch: {path:?}"
    );
    assert_eq!(path.len(), 5, "{path:?}");
    for row in &rows {
        assert_eq!(row.status, "completed", "{row:?}");
    }
    let purge_a = rows
        .iter()
        .find(|r| r.stage == "purge_db" && r.community_id == Some(a))
        .and_then(|r| r.result.clone())
        .unwrap_or_default();
    assert_eq!(purge_a["media"]["deleted_objects"], 1, "{purge_a}");
    assert_eq!(purge_a["media"]["kept_shared"], 1, "{purge_a}");
    assert_eq!(
        purge_a["media"]["derived_objects_deleted"], 2,
        "the own upload's thumbnail and metadata go with it: {purge_a}"
    );
    assert_eq!(purge_a["has_agents"], false, "{purge_a}");
    assert_eq!(purge_a["erased"]["rows"]["buzz.events"], 3, "{purge_a}");
    assert_eq!(
        purge_a["verified"]["rows_left"]["buzz.events"], 0,
        "{purge_a}"
    );

    // Every community's purge is in the audit trail.
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM deletion.audit_events \
         WHERE request_id = $1 AND event = 'user.community_purged'",
    )
    .bind(id)
    .fetch_one(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("audit: {e}"));
    assert_eq!(audited, 4);

    // The user stays fenced: a late write as them is refused; `other` still writes.
    let late = sqlx::query(
        "INSERT INTO buzz.events (id, community_id, pubkey, kind, content) VALUES ($1, $2, $3, 1, 'late')",
    )
    .bind(fresh_pubkey())
    .bind(a)
    .bind(&user)
    .execute(stack.serving.pool())
    .await;
    assert!(
        late.as_ref().is_err_and(is_user_fenced_write),
        "a row written as the erased user must be refused: {late:?}"
    );
    sqlx::query(
        "INSERT INTO buzz.events (id, community_id, pubkey, kind, content) VALUES ($1, $2, $3, 1, 'still here')",
    )
    .bind(fresh_pubkey())
    .bind(a)
    .bind(&other)
    .execute(stack.serving.pool())
    .await
    .unwrap_or_else(|e| panic!("another user's write must pass: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_user_target_is_refused_with_what_to_write() {
    let queue = unique_queue("user-target");
    let cli = Cli::new(&queue);
    for (target, says) in [
        ("user:abc", "it has 3 characters, not 64"),
        ("user:XYZ", "not 64"),
        ("npub1someone", "names no kind of user"),
    ] {
        let refused = cli.user_submit_run(target, "alice").await;
        refused.expect_exit(2);
        assert!(
            refused.stderr.contains(says),
            "{target}: {}",
            refused.stderr
        );
    }
    let upper = format!("user:{}", fresh_pubkey().to_uppercase());
    let refused = cli.user_submit_run(&upper, "alice").await;
    refused.expect_exit(2);
    assert!(refused.stderr.contains("upper-case"), "{}", refused.stderr);
}
