//! Issue 30, part 4: a `demo:` request run by the production worker — the binary with S3 and
//! Redis configured and the real handlers registered, which chooses dummy or real handlers from
//! the stored target — changes nothing. The demo inventory's two communities exist here, each
//! holding a real user's footprint (rows, media with their derived objects, agents, per-user
//! keys); after the demo request completes, every row of the database, every object version and
//! key of those communities, and every fence and lease row are byte-identical.
//!
//! Runs on a database of its own, so "every row" can be compared whole; objects and keys are
//! per community on the shared stack.

use std::collections::BTreeMap;

use activities::store::Store;
use demo::user::UserSeed;
use testkit::db_scan::{every_row, relation_rows};
use testkit::prelude::*;
use testkit::private_db::PrivateStory;
use uuid::Uuid;
use workflows::user::inventory::{DEMO_FORMER_PARTICIPANT_COMMUNITY, DEMO_PARTICIPANT_COMMUNITY};

use super::{fresh_pubkey, member, seed_footprint};

/// The evidence tables a real handler would write first: fences and leases.
const FENCE_TABLES: [&str; 3] = [
    "deletion.community_fences",
    "deletion.user_fences",
    "deletion.serving_write_leases",
];

async fn fence_rows(store: &Store) -> BTreeMap<&'static str, Vec<String>> {
    let mut rows = BTreeMap::new();
    for table in FENCE_TABLES {
        rows.insert(table, relation_rows(store, table).await);
    }
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demo_request_on_the_production_worker_changes_nothing() {
    let _shared = outage_lock().read().await;
    // The lease reaper runs once at start-up and then not for an hour: it is the worker's own
    // housekeeping (tested in platform::lease_reaper), not something a demo request may do.
    let story = PrivateStory::start("demo_prod", &[("BUZZ_LEASE_REAP_SECS", "3600")]).await;
    let (stack, cli) = (&story.stack, &story.cli);

    // The communities the demo inventory names, with a real user's footprint in each.
    let user = fresh_pubkey();
    let communities: [Uuid; 2] = [
        DEMO_PARTICIPANT_COMMUNITY,
        DEMO_FORMER_PARTICIPANT_COMMUNITY,
    ];
    for community in communities {
        sqlx::query("INSERT INTO buzz.communities (id, host) VALUES ($1, $2)")
            .bind(community)
            .bind(unique_host("demo-prod"))
            .execute(stack.store.pool())
            .await
            .unwrap_or_else(|e| panic!("community {community}: {e}"));
        let footprint = UserSeed {
            allowlisted: true,
            uploads: vec![format!("{user} in {community}").into_bytes()],
            ..member(2, 1, 3)
        };
        seed_footprint(stack, community, &user, &footprint).await;
    }
    let mut before = BTreeMap::new();
    for community in communities {
        before.insert(community, snapshot(stack, community).await);
    }
    let rows_before = every_row(&stack.store).await;
    let fences_before = fence_rows(&stack.store).await;
    for community in communities {
        assert!(
            !before[&community].versions.is_empty() && !before[&community].keys.is_empty(),
            "the test needs objects and keys in {community}"
        );
    }

    let target = format!("demo:prod-{}", Uuid::new_v4().simple());
    let id = cli.user_submit_and_approve(&target, "alice", "bob").await;
    cli.user_run(&id).await.expect_exit(0);
    let status = cli
        .run(&["user", "status", &id])
        .await
        .expect_code(0)
        .json();
    assert_eq!(status["request"]["stage"], "completed", "{status}");
    assert_eq!(status["progress"]["state"], "finished", "{status}");

    for community in communities {
        assert_identical(
            &before[&community],
            &snapshot(stack, community).await,
            &format!("demo community {community}"),
        );
    }
    assert_eq!(
        every_row(&stack.store).await,
        rows_before,
        "every row of every table outside the evidence is unchanged"
    );
    assert_eq!(
        fence_rows(&stack.store).await,
        fences_before,
        "no fence or lease row was written"
    );
    story.end().await;
}
