//! Deny by default, through the CLI and a worker process: every database shape the deletion does
//! not understand blocks the request before approval (at the inventory) or at preflight, before
//! the irreversible marker, naming the object and the remedy, with nothing of any community
//! changed. After the remedies (drop, or the owner's `buzz-deletion:` declaration) a resubmitted
//! or unblocked deletion completes: every row of the target is gone from the whole database —
//! the declared archive, key-only children and refreshed materialized view included — and every
//! row of everyone else is byte-identical.
//!
//! Each story commits shapes that would block every other deletion in the same database, so it
//! runs on a database of its own; objects and Redis keys stay on the shared stack.

use std::collections::BTreeSet;

use activities::store::Store;
use serde_json::Value;
use uuid::Uuid;

use testkit::certificates::verified_receipt;
use testkit::db_scan::{Ownership, every_row};
use testkit::prelude::*;
use testkit::private_db::{PrivateStory, exec, exec_all, exec_for};
use testkit::refusal::request_row;
use testkit::schema::tenant_guards;

/// Ids of the target's own rows that rows elsewhere may name without its community id.
async fn target_ids(store: &Store, target: Uuid) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT id FROM buzz.events WHERE community_id = $1 \
         UNION ALL SELECT id::text FROM buzz.channels WHERE community_id = $1",
    )
    .bind(target)
    .fetch_all(store.pool())
    .await
    .unwrap_or_else(|e| panic!("target ids: {e}"))
}

/// The request's `irreversible_at` is still unset.
async fn assert_reversible(stack: &Stack, id: &str) {
    let request = request_row(stack, id.parse().unwrap_or_default()).await;
    assert!(
        request.irreversible_at.is_none(),
        "{id} must be blocked before the irreversible point"
    );
}

/// The block's reason names every one of `objects`.
fn assert_names(reason: &str, objects: &[&str], what: &str) {
    let missing: Vec<&&str> = objects.iter().filter(|o| !reason.contains(**o)).collect();
    assert!(
        missing.is_empty(),
        "{what}: the block must name {missing:?}; it says:\n{reason}"
    );
}

/// The blocked reason of a status document.
fn reason(status: &Value) -> String {
    status["blocked"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The shapes of the first story, created (as the owner) before anything is measured. Each
/// comment names the refusal it must produce and its remedy.
const SHAPES: &[&str] = &[
    // A key from another schema into the community row, NO ACTION (it would wedge the purge):
    // declared a key child of the community row, its rows are purged before the community's.
    "CREATE SCHEMA billing",
    "CREATE TABLE billing.invoices (id bigserial PRIMARY KEY, \
     community uuid NOT NULL REFERENCES buzz.communities (id), amount_cents bigint NOT NULL)",
    "INSERT INTO billing.invoices (community, amount_cents) \
     VALUES ('{target}', 100), ('{target}', 250), ('{neighbour}', 300)",
    // A key-only child of a tenant table (no community_id): declared, purged with its parents.
    "CREATE TABLE buzz.event_tags (event_id text NOT NULL REFERENCES buzz.events (id), \
     tag text NOT NULL)",
    "INSERT INTO buzz.event_tags (event_id, tag) \
     SELECT id, 'tag-' || kind FROM buzz.events",
    // The audit-history pattern: a SECURITY DEFINER trigger archiving deleted events.
    "CREATE SCHEMA history",
    "CREATE TABLE history.events_archive (LIKE buzz.events)",
    "INSERT INTO history.events_archive \
     SELECT * FROM buzz.events WHERE community_id IN ('{target}', '{neighbour}') \
     ORDER BY id LIMIT 4",
    "CREATE FUNCTION history.keep_event() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER \
     AS $$ BEGIN INSERT INTO history.events_archive SELECT (OLD).*; RETURN OLD; END $$",
    "CREATE TRIGGER archive_events AFTER DELETE ON buzz.events \
     FOR EACH ROW EXECUTE FUNCTION history.keep_event()",
    // A materialized view in another schema keeping a copy of tenant data.
    "CREATE SCHEMA reports",
    "CREATE MATERIALIZED VIEW reports.event_counts AS \
     SELECT community_id, count(*) AS events FROM buzz.events GROUP BY community_id",
    // Rules: DO ALSO and DO INSTEAD NOTHING on delete.
    "CREATE RULE memberships_deleted_notice AS ON DELETE TO buzz.memberships \
     DO ALSO NOTIFY memberships_deleted",
    "CREATE RULE agents_never_deleted AS ON DELETE TO buzz.agents DO INSTEAD NOTHING",
    // A soft delete: a BEFORE DELETE trigger returning NULL.
    "CREATE FUNCTION public.keep_channels() RETURNS trigger LANGUAGE plpgsql \
     AS $$ BEGIN RETURN NULL; END $$",
    "CREATE TRIGGER channels_soft_delete BEFORE DELETE ON buzz.channels \
     FOR EACH ROW EXECUTE FUNCTION public.keep_channels()",
    // A publication that does not publish deletes (subscribers would keep the rows).
    "CREATE PUBLICATION events_feed FOR TABLE buzz.events WITH (publish = 'insert, update')",
    // A tenant table whose rows live in another database: a foreign table at the root.
    "CREATE FOREIGN TABLE buzz.remote_events (community_id uuid, body text) \
     SERVER loopback OPTIONS (schema_name 'elsewhere', table_name 'events')",
    // A tenant table purged by its primary key led by community_id (a keyset walk, in batches of
    // two: the purge runs with --purge-batch-rows 2), keys that repeat a timestamp and a column
    // name that needs quoting.
    "CREATE TABLE buzz.readings (community_id uuid NOT NULL, taken_at timestamptz NOT NULL, \
     \"seq no\" bigint NOT NULL, PRIMARY KEY (community_id, taken_at, \"seq no\"))",
    "INSERT INTO buzz.readings SELECT c, timestamptz '2026-01-01 00:00:00.123456+00' \
     + (n / 3) * interval '1 second', n \
     FROM unnest(ARRAY['{target}'::uuid, '{neighbour}'::uuid]) c, generate_series(1, 11) n",
    // A tenant table with a cross-tenant key: the neighbour reposts one of the target's events
    // (ON DELETE SET NULL would silently rewrite the neighbour's row).
    "CREATE TABLE buzz.reposts (id bigserial PRIMARY KEY, community_id uuid NOT NULL, \
     event_id text REFERENCES buzz.events (id) ON DELETE SET NULL)",
];

/// The reposts: two of the target's own, one by the neighbour of a target event.
const REPOSTS: &str = "INSERT INTO buzz.reposts (community_id, event_id) \
     (SELECT '{target}'::uuid, id FROM buzz.events WHERE community_id = '{target}' \
      ORDER BY id LIMIT 2) \
     UNION ALL \
     (SELECT '{neighbour}'::uuid, id FROM buzz.events WHERE community_id = '{target}' \
      ORDER BY id LIMIT 1)";

/// What the first round's refusal must name: one object per undeclared shape.
const REFUSED_AT_INVENTORY: &[&str] = &[
    "foreign key invoices_community_fkey on billing.invoices",
    "foreign key event_tags_event_id_fkey on buzz.event_tags",
    "table history.events_archive",
    "trigger archive_events on buzz.events",
    "materialized view reports.event_counts",
    "rule memberships_deleted_notice on buzz.memberships",
    "rule agents_never_deleted on buzz.agents",
    "trigger channels_soft_delete on buzz.channels",
    "publication events_feed",
    "foreign table buzz.remote_events",
    "buzz.pubkey_allowlist",
];

/// The remedies: the owner declares what is understood, and drops what cannot be.
const REMEDIES: &[&str] = &[
    "COMMENT ON CONSTRAINT invoices_community_fkey ON billing.invoices IS \
     'buzz-deletion: tenant data through this key'",
    "GRANT USAGE ON SCHEMA billing TO buzz_deletion_worker",
    "GRANT SELECT, DELETE ON billing.invoices TO buzz_deletion_worker",
    "COMMENT ON CONSTRAINT event_tags_event_id_fkey ON buzz.event_tags IS \
     'buzz-deletion: tenant data through this key'",
    "COMMENT ON TRIGGER archive_events ON buzz.events IS \
     'buzz-deletion: archives into history.events_archive'",
    "GRANT USAGE ON SCHEMA history TO buzz_deletion_worker",
    "GRANT SELECT, DELETE ON history.events_archive TO buzz_deletion_worker",
    "COMMENT ON MATERIALIZED VIEW reports.event_counts IS \
     'buzz-deletion: refreshed by the deletion'",
    "GRANT USAGE ON SCHEMA reports TO buzz_deletion_worker",
    "GRANT SELECT ON reports.event_counts TO buzz_deletion_worker",
    "DROP RULE memberships_deleted_notice ON buzz.memberships",
    "DROP RULE agents_never_deleted ON buzz.agents",
    "DROP TRIGGER channels_soft_delete ON buzz.channels",
    "ALTER PUBLICATION events_feed SET (publish = 'insert, update, delete')",
    "DROP FOREIGN TABLE buzz.remote_events",
    "ALTER TABLE buzz.pubkey_allowlist NO FORCE ROW LEVEL SECURITY",
    "ALTER TABLE buzz.pubkey_allowlist DISABLE ROW LEVEL SECURITY",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undeclared_shapes_block_the_inventory_and_once_declared_or_dropped_the_whole_target_goes()
{
    let _shared = outage_lock().read().await;
    let story = PrivateStory::start("cw_e2e", &[]).await;
    let (stack, cli) = (&story.stack, &story.cli);
    let host = unique_host("closed-world");
    let target = seed(stack, &host, small_plan()).await.community_id;
    let neighbour = small_community(stack, "cw-kept").await;
    exec(
        &stack.store,
        &format!(
            "CREATE SERVER loopback FOREIGN DATA WRAPPER postgres_fdw \
             OPTIONS (host '127.0.0.1', dbname '{}')",
            story.db.name
        ),
    )
    .await;
    exec_for(&stack.store, SHAPES, target, neighbour).await;
    for table in ["buzz.reposts", "buzz.readings"] {
        for sql in tenant_guards(table, "none") {
            exec(&stack.store, &sql).await;
        }
    }
    exec_for(&stack.store, &[REPOSTS], target, neighbour).await;
    let ids = target_ids(&stack.store, target).await;
    let others = [neighbour];
    let ownership = Ownership {
        target,
        target_ids: &ids,
        others: &others,
    };
    let database_before = every_row(&stack.store).await;
    let target_before = Kept::now(stack, target).await;
    let neighbour_before = Kept::now(stack, neighbour).await;
    for relation in [
        "billing.invoices",
        "buzz.event_tags",
        "history.events_archive",
        "reports.event_counts",
        "buzz.reposts",
        "buzz.readings",
    ] {
        assert!(
            ownership
                .targets_rows(&database_before)
                .contains_key(relation),
            "the story needs target rows in {relation}"
        );
    }
    // Row-level security hides rows from every reader, so it goes on after the snapshots.
    exec_all(
        &stack.store,
        &[
            "ALTER TABLE buzz.pubkey_allowlist ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE buzz.pubkey_allowlist FORCE ROW LEVEL SECURITY",
        ],
    )
    .await;

    // Round 1: the inventory refuses every undeclared shape at once, naming each.
    let (id, submitted) = cli
        .submit_blocked(&host, &["--purge-batch-rows", "2"])
        .await;
    let id = id.to_string();
    let blocked = reason(&submitted);
    assert_names(&blocked, REFUSED_AT_INVENTORY, "the inventory");
    assert!(
        blocked.contains("COMMENT ON") && blocked.contains("DISABLE ROW LEVEL SECURITY"),
        "the block must say what to do: {blocked}"
    );
    assert_reversible(stack, &id).await;

    // The remedies; nothing of anyone changed while the request was blocked.
    exec_all(&stack.store, REMEDIES).await;
    target_before
        .assert_unchanged(stack, "the blocked target")
        .await;
    let while_blocked = "the neighbour while blocked";
    neighbour_before
        .assert_unchanged(stack, while_blocked)
        .await;
    assert_eq!(every_row(&stack.store).await, database_before);

    // Round 2: the declarations pass; the neighbour's repost of a target event blocks, counted.
    cli.unblock(&id, "carol", "declared the archive, key children and view")
        .await
        .expect_code(0);
    let status = cli
        .wait_status(&id, 180, |s| reason(s).contains("reposts_event_id_fkey"))
        .await;
    let blocked = reason(&status);
    assert_names(
        &blocked,
        &["reposts_event_id_fkey", "buzz.reposts", "buzz.events"],
        "the cross-tenant count",
    );
    assert!(
        blocked.contains(&neighbour.to_string()),
        "the block names the neighbour community: {blocked}"
    );
    assert_reversible(stack, &id).await;
    assert_eq!(every_row(&stack.store).await, database_before);

    // The key goes (the neighbour keeps its repost); the inventory passes and shows what it
    // relied on.
    let drop_key = "ALTER TABLE buzz.reposts DROP CONSTRAINT reposts_event_id_fkey";
    exec(&stack.store, drop_key).await;
    cli.unblock(&id, "carol", "dropped reposts_event_id_fkey")
        .await
        .expect_code(0);
    let status = cli
        .wait_status(&id, 180, |s| {
            s["phase"] == "awaiting_approval" && s["blocked"].is_null()
        })
        .await;
    let digest = inventory_digest(&status);
    let inspection = cli.run(&["community", "inspect", &id]).await.expect_code(0);
    for declared in [
        "invoices_community_fkey",
        "event_tags_event_id_fkey",
        "archive_events",
        "reports.event_counts",
    ] {
        assert!(
            inspection.stdout.contains(declared),
            "the inventory shows the declaration of {declared}"
        );
    }

    cli.approve_and_finish(&id, &digest).await;

    // Everything of the target is gone, everywhere; everyone else's rows are untouched.
    snapshot(stack, target).await.assert_gone("the target");
    neighbour_before
        .assert_unchanged(stack, "the neighbour")
        .await;
    let database_after = every_row(&stack.store).await;
    let left = ownership.targets_rows(&database_after);
    assert!(left.is_empty(), "rows of the target left: {left:#?}");
    assert_eq!(
        ownership.others_rows(&database_after),
        ownership.others_rows(&database_before),
        "every row of everyone else, in every table and view, is byte-identical"
    );
    let tables: BTreeSet<&String> = database_after.keys().collect();
    assert!(
        tables.contains(&"history.events_archive".to_owned()),
        "{tables:?}"
    );

    // The receipt names every declaration relied on, and states the declared archive, key
    // children and the community row among the inventoried relations.
    let receipt = verified_receipt(cli, "community", &id).await;
    let declared: BTreeSet<(String, String)> = receipt["inventory"]["declarations"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|d| {
            (
                d["object"].as_str().unwrap_or_default().to_owned(),
                d["declaration"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    for (object, declaration) in [
        (
            "trigger archive_events on buzz.events",
            "archives into history.events_archive",
        ),
        (
            "foreign key event_tags_event_id_fkey on buzz.event_tags",
            "tenant data through this key",
        ),
        (
            "foreign key invoices_community_fkey on billing.invoices",
            "tenant data through this key",
        ),
        (
            "materialized view reports.event_counts",
            "refreshed by the deletion",
        ),
    ] {
        assert!(
            declared.contains(&(object.to_owned(), declaration.to_owned())),
            "the receipt names {object} declared '{declaration}': {declared:?}"
        );
    }
    let relations: BTreeSet<&str> = receipt["inventory"]["relations"]
        .as_array()
        .map(|all| all.iter().filter_map(|r| r["relation"].as_str()).collect())
        .unwrap_or_default();
    for relation in [
        "history.events_archive",
        "buzz.event_tags",
        "billing.invoices",
        "buzz.communities",
    ] {
        assert!(relations.contains(relation), "{relation}: {relations:?}");
    }
    story.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shapes_added_after_the_inventory_block_at_preflight_before_the_irreversible_marker() {
    let _shared = outage_lock().read().await;
    let story = PrivateStory::start("cw_preflight", &[]).await;
    let (stack, cli) = (&story.stack, &story.cli);
    let host = unique_host("cw-preflight");
    let target = seed(stack, &host, small_plan()).await.community_id;
    let neighbour = seed(stack, &unique_host("cw-pf-kept"), small_plan())
        .await
        .community_id;
    // A tenant table with no key to buzz.communities, holding rows of both.
    exec(
        &stack.store,
        "CREATE TABLE buzz.bookmarks (community_id uuid NOT NULL, note text NOT NULL)",
    )
    .await;
    for sql in tenant_guards("buzz.bookmarks", "none") {
        exec(&stack.store, &sql).await;
    }
    let bookmarks = "INSERT INTO buzz.bookmarks VALUES ('{target}', 'a'), ('{neighbour}', 'b')";
    exec_for(&stack.store, &[bookmarks], target, neighbour).await;
    let target_before = Kept::now(stack, target).await;
    let neighbour_before = Kept::now(stack, neighbour).await;
    let database_before = every_row(&stack.store).await;

    let (id, digest) = cli.submit(&host, "alice", &[]).await;
    // After the inventory the operator approved, the schema grows shapes it never saw.
    exec_all(
        &stack.store,
        &[
            "CREATE RULE events_never_deleted AS ON DELETE TO buzz.events DO INSTEAD NOTHING",
            "CREATE SCHEMA analytics",
            "CREATE MATERIALIZED VIEW analytics.kinds AS \
             SELECT community_id, kind FROM buzz.events",
            "CREATE PUBLICATION channels_feed FOR TABLE buzz.channels \
             WITH (publish = 'insert')",
            "ALTER TABLE buzz.bookmarks ENABLE ROW LEVEL SECURITY",
        ],
    )
    .await;
    cli.approve(&id, "bob", &digest).await.expect_code(0);
    let status = cli.wait_status(&id, 120, |s| !s["blocked"].is_null()).await;
    assert_names(
        &reason(&status),
        &[
            "rule events_never_deleted on buzz.events",
            "materialized view analytics.kinds",
            "publication channels_feed",
            "buzz.bookmarks",
        ],
        "preflight",
    );
    assert_reversible(stack, &id).await;
    let lift_rls = "ALTER TABLE buzz.bookmarks DISABLE ROW LEVEL SECURITY";
    exec(&stack.store, lift_rls).await;
    target_before
        .assert_unchanged(stack, "the blocked target")
        .await;
    let database_blocked = every_row(&stack.store).await;
    let views: Vec<&String> = database_blocked
        .keys()
        .filter(|k| !database_before.contains_key(*k))
        .collect();
    assert_eq!(views, vec!["analytics.kinds"], "only the new view appeared");
    let mut without_view = database_blocked.clone();
    without_view.remove("analytics.kinds");
    assert_eq!(
        without_view, database_before,
        "nothing changed while blocked"
    );

    exec_all(
        &stack.store,
        &[
            "DROP RULE events_never_deleted ON buzz.events",
            "DROP MATERIALIZED VIEW analytics.kinds",
            "DROP PUBLICATION channels_feed",
        ],
    )
    .await;
    cli.unblock_and_finish(&id, "carol", "dropped the shapes added after approval")
        .await;
    snapshot(stack, target).await.assert_gone("the target");
    neighbour_before
        .assert_unchanged(stack, "the neighbour")
        .await;
    story.end().await;
}
