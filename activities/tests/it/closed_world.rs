//! The closed-world catalogue check against a real PostgreSQL, one shape at a time: an object
//! that can hold, reach, copy or hide a tenant's rows is refused by the catalogue scan, naming
//! exactly that object, and after the remedy (dropping it, or its owner's `buzz-deletion:`
//! declaration) the scan passes and the inventory's closed world lists what it relied on (the
//! declaration, the key child with the target's rows, the archive, the cross key's count).
//!
//! Every test commits objects of its own, so each runs in a database of its own
//! (`store_support::private_db`): the DDL as the schema owner, the scan as the worker role —
//! whose privileges and row-level security are what the check judges.

use crate::store_support::community;
use crate::store_support::exec;
use crate::store_support::private_db::{RoleStores, private_db_as_worker};
use activities::failure::{Classified, Severity};
use activities::store::CatalogError;
use activities::store::closed_world::summary::ClosedWorldSummary;
use activities::store::{CatalogInventory, Community, Store, StoreError, StoreResult};
use testkit::schema::tenant_guards;
use uuid::Uuid;
use workflows::community::contracts::TableCount;

/// Runs each statement in order.
async fn exec_all(store: &Store, statements: &[impl AsRef<str>]) {
    for sql in statements {
        exec(store, sql.as_ref()).await;
    }
}

/// A database of the test's own, connected as owner and worker, holding a target community.
async fn db_with_target(tag: &str) -> (RoleStores, Community) {
    let db = private_db_as_worker(tag).await;
    let target = community(&db.owner).await;
    (db, target)
}

/// Inserts one event of `community` (as the owner) and returns its id.
async fn event(owner: &Store, community: &Community) -> String {
    let id = format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple());
    sqlx::query(
        "INSERT INTO buzz.events (id, community_id, pubkey, kind, content) \
         VALUES ($1, $2, $3, 1, 'closed world')",
    )
    .bind(&id)
    .bind(community.id)
    .bind(format!("{:064x}", 7))
    .execute(owner.pool())
    .await
    .unwrap_or_else(|e| panic!("insert event: {e}"));
    id
}

/// The worker's catalogue scan for `community`.
async fn scan(worker: &Store, community: &Community) -> StoreResult<CatalogInventory> {
    worker.catalog_scan(community.id).await
}

/// One refusal as `(object, problem, remedy)`.
type Refusal = (String, String, String);

/// The scan was refused ([`CatalogError::Refused`]) naming exactly `objects` (sorted, as
/// the check sorts them); returns the refusals.
fn assert_refused(scan: StoreResult<CatalogInventory>, objects: &[&str]) -> Vec<Refusal> {
    match scan {
        Err(error @ StoreError::Catalog(CatalogError::Refused { .. })) => {
            assert_eq!(error.severity(), Severity::Permanent, "{error}");
            let message = error.to_string();
            let StoreError::Catalog(CatalogError::Refused { refusals }) = error else {
                unreachable!()
            };
            let named: Vec<&str> = refusals.iter().map(|r| r.object.as_str()).collect();
            assert_eq!(named, objects, "{message}");
            for refusal in &refusals {
                assert!(!refusal.problem.is_empty(), "{message}");
                assert!(!refusal.remedy.is_empty(), "{message}");
                assert!(message.contains(&refusal.object), "{message}");
            }
            refusals
                .into_iter()
                .map(|r| (r.object, r.problem, r.remedy))
                .collect()
        }
        other => panic!("expected CatalogRefused naming {objects:?}, got {other:?}"),
    }
}

/// The one refusal of `object`, its problem containing `problem`.
fn assert_refused_one(scan: StoreResult<CatalogInventory>, object: &str, problem: &str) -> Refusal {
    let mut refusals = assert_refused(scan, &[object]);
    let refusal = refusals.remove(0);
    assert!(
        refusal.1.contains(problem),
        "{object}: expected {problem:?} in the problem: {refusal:?}"
    );
    refusal
}

/// The scan passed; its closed world.
fn assert_passes(scan: StoreResult<CatalogInventory>, what: &str) -> ClosedWorldSummary {
    match scan {
        Ok(inventory) => inventory
            .closed_world
            .unwrap_or_else(|| panic!("{what}: the scan recorded no closed world")),
        Err(error) => panic!("{what}: expected the scan to pass, got {error}"),
    }
}

/// The declarations the closed world relied on, `(object, declaration)`.
fn declarations(world: &ClosedWorldSummary) -> Vec<(String, String)> {
    world
        .declarations
        .iter()
        .map(|d| (d.object.clone(), d.declaration.clone()))
        .collect()
}

fn declared(object: &str, declaration: &str) -> (String, String) {
    (object.to_owned(), declaration.to_owned())
}

/// The closed world relied on `object` being declared `declaration`.
fn assert_relies_on(world: &ClosedWorldSummary, object: &str, declaration: &str) {
    assert!(
        declarations(world).contains(&declared(object, declaration)),
        "{:?}",
        world.declarations
    );
}

/// The closed world lists `object` as unrelated to tenant data.
fn assert_unrelated(world: &ClosedWorldSummary, object: &str) {
    assert!(
        world.unrelated.contains(&object.to_owned()),
        "{:?}",
        world.unrelated
    );
}

fn count(table: &str, rows: u64) -> TableCount {
    TableCount {
        table: table.to_owned(),
        rows,
    }
}

/// The role the closed world inventoried `relation` under.
fn role_of(world: &ClosedWorldSummary, relation: &str) -> Option<String> {
    world
        .relations
        .iter()
        .find(|r| r.relation == relation)
        .map(|r| r.role.clone())
}

// --- 1. A key between two tenant tables: rows of another community referencing the target's. -

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_neighbours_row_referencing_the_targets_through_a_tenant_key_refuses_the_scan() {
    let (db, target) = db_with_target("cw_cross").await;
    let (owner, worker) = (&db.owner, &db.worker);
    let neighbour = community(owner).await;
    let target_event = event(owner, &target).await;
    let neighbour_event = event(owner, &neighbour).await;

    for action in ["CASCADE", "SET NULL", "NO ACTION"] {
        exec(
            owner,
            &format!(
                "CREATE TABLE buzz.reposts (community_id uuid NOT NULL, \
                 event_id text REFERENCES buzz.events (id) ON DELETE {action})"
            ),
        )
        .await;
        exec_all(owner, &tenant_guards("buzz.reposts", "none")).await;
        // The target reposting its own event and the neighbour's (both purged with the target),
        // and the neighbour reposting the target's event (a row the purge must not touch).
        for (community, event_id) in [
            (&target, &target_event),
            (&target, &neighbour_event),
            (&neighbour, &target_event),
        ] {
            sqlx::query("INSERT INTO buzz.reposts (community_id, event_id) VALUES ($1, $2)")
                .bind(community.id)
                .bind(event_id)
                .execute(owner.pool())
                .await
                .unwrap_or_else(|e| panic!("insert repost: {e}"));
        }

        match scan(worker, &target).await {
            Err(error @ StoreError::Catalog(CatalogError::CrossTenantReferences { .. })) => {
                assert_eq!(error.severity(), Severity::Permanent);
                let message = error.to_string();
                assert!(message.contains("reposts_event_id_fkey"), "{message}");
                let StoreError::Catalog(CatalogError::CrossTenantReferences { references }) = error
                else {
                    unreachable!()
                };
                assert_eq!(references.len(), 1, "ON DELETE {action}: {message}");
                let reference = &references[0];
                assert_eq!(reference.constraint, "reposts_event_id_fkey", "{message}");
                assert_eq!(reference.referencing, "buzz.reposts", "{message}");
                assert_eq!(reference.referenced, "buzz.events", "{message}");
                assert_eq!(reference.rows, 1, "ON DELETE {action}: {message}");
                assert_eq!(
                    reference.communities,
                    vec![neighbour.id.to_string()],
                    "ON DELETE {action}: {message}"
                );
            }
            other => panic!("ON DELETE {action}: expected CrossTenantReferences, got {other:?}"),
        }
        // The other way round: the target's repost of the neighbour's event refuses the
        // neighbour's deletion, naming the target.
        match scan(worker, &neighbour).await {
            Err(StoreError::Catalog(CatalogError::CrossTenantReferences { references })) => {
                assert_eq!(references.len(), 1, "{references:?}");
                assert_eq!(references[0].constraint, "reposts_event_id_fkey");
                assert_eq!(references[0].rows, 1, "{references:?}");
                assert_eq!(references[0].communities, vec![target.id.to_string()]);
            }
            other => panic!("ON DELETE {action}: the neighbour's scan, got {other:?}"),
        }

        // The neighbour's repost removed: the target's scan passes and lists the key with 0 rows.
        sqlx::query("DELETE FROM buzz.reposts WHERE community_id = $1")
            .bind(neighbour.id)
            .execute(owner.pool())
            .await
            .expect("delete the neighbour's repost");
        let world = assert_passes(scan(worker, &target).await, action);
        assert_eq!(world.cross_references.len(), 1, "{world:?}");
        let reference = &world.cross_references[0];
        assert_eq!(reference.constraint, "reposts_event_id_fkey");
        assert_eq!(reference.referencing, "buzz.reposts");
        assert_eq!(reference.referenced, "buzz.events");
        assert_eq!(reference.rows, 0);
        assert!(reference.communities.is_empty(), "{reference:?}");
        assert_eq!(
            role_of(&world, "buzz.reposts").as_deref(),
            Some("tenant table")
        );
        exec(owner, "DROP TABLE buzz.reposts").await;
    }
    db.drop_database().await;
}

// --- 2. A key from outside the purge set into the community row. ----------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_from_another_schema_into_the_community_row_is_refused_whatever_its_action() {
    let (db, target) = db_with_target("cw_billing").await;
    let (owner, worker) = (&db.owner, &db.worker);
    exec(owner, "CREATE SCHEMA billing").await;
    let object = "foreign key invoices_community_fkey on billing.invoices";

    for action in ["CASCADE", "SET NULL", "NO ACTION", "RESTRICT"] {
        exec(
            owner,
            &format!(
                "CREATE TABLE billing.invoices (id bigserial PRIMARY KEY, \
                 community uuid REFERENCES buzz.communities (id) ON DELETE {action}, \
                 amount_cents bigint NOT NULL DEFAULT 0)"
            ),
        )
        .await;
        sqlx::query("INSERT INTO billing.invoices (community, amount_cents) VALUES ($1, 100)")
            .bind(target.id)
            .execute(owner.pool())
            .await
            .expect("insert invoice");
        let (_, problem, remedy) = assert_refused_one(
            scan(worker, &target).await,
            object,
            &format!("ON DELETE {action}"),
        );
        assert!(problem.contains("buzz.communities"), "{problem}");
        assert!(remedy.contains("tenant data through this key"), "{remedy}");

        // The remedy: drop the key.
        exec(
            owner,
            "ALTER TABLE billing.invoices DROP CONSTRAINT invoices_community_fkey",
        )
        .await;
        let world = assert_passes(scan(worker, &target).await, action);
        assert_unrelated(&world, "table billing.invoices");
        exec(owner, "DROP TABLE billing.invoices").await;
    }
    db.drop_database().await;
}

// --- 3. A materialized view keeping a copy of tenant data. ------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_materialized_view_of_tenant_data_is_refused_until_declared() {
    let (db, target) = db_with_target("cw_matview").await;
    let (owner, worker) = (&db.owner, &db.worker);
    event(owner, &target).await;
    exec_all(
        owner,
        &[
            "CREATE SCHEMA analytics",
            "CREATE MATERIALIZED VIEW analytics.event_counts AS \
             SELECT community_id, count(*) FROM buzz.events GROUP BY 1",
        ],
    )
    .await;
    let object = "materialized view analytics.event_counts";
    let (_, _, remedy) =
        assert_refused_one(scan(worker, &target).await, object, "keeps a copy of it");
    assert!(
        remedy.contains("COMMENT ON MATERIALIZED VIEW analytics.event_counts"),
        "{remedy}"
    );

    // A declaration that does not apply to a materialized view is refused, naming it.
    exec(
        owner,
        "COMMENT ON MATERIALIZED VIEW analytics.event_counts IS 'buzz-deletion: harmless'",
    )
    .await;
    assert_refused_one(scan(worker, &target).await, object, "does not apply");

    exec(
        owner,
        "COMMENT ON MATERIALIZED VIEW analytics.event_counts IS 'buzz-deletion: not tenant data'",
    )
    .await;
    let world = assert_passes(scan(worker, &target).await, "declared not tenant data");
    assert_relies_on(&world, object, "not tenant data");
    assert!(world.refreshed_views.is_empty(), "{world:?}");

    // Through a plain view: the materialized view still reads tenant data.
    exec_all(
        owner,
        &[
            "CREATE VIEW analytics.recent_events AS SELECT community_id, kind FROM buzz.events",
            "CREATE MATERIALIZED VIEW analytics.kinds AS \
             SELECT community_id, kind FROM analytics.recent_events",
        ],
    )
    .await;
    assert_refused(
        scan(worker, &target).await,
        &["materialized view analytics.kinds"],
    );
    exec(owner, "DROP MATERIALIZED VIEW analytics.kinds").await;
    let world = assert_passes(scan(worker, &target).await, "dropped");
    assert_unrelated(&world, "view analytics.recent_events");
    db.drop_database().await;
}

// --- 4. A trigger archiving deleted rows into another schema. ---------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archiving_trigger_is_refused_until_declared_and_its_archive_is_listed() {
    let (db, target) = db_with_target("cw_archive").await;
    let (owner, worker) = (&db.owner, &db.worker);
    let neighbour = community(owner).await;
    exec_all(
        owner,
        &[
            "CREATE SCHEMA archive",
            "CREATE TABLE archive.events_history (LIKE buzz.events)",
        ],
    )
    .await;
    let trigger = "trigger archive_events on buzz.events";

    for (function, definer) in [
        ("archive.keep_event", ""),
        ("archive.keep_event_as_owner", "SECURITY DEFINER"),
    ] {
        exec(
            owner,
            &format!(
                "CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql {definer} \
                 AS $$ BEGIN INSERT INTO archive.events_history SELECT (OLD).*; RETURN OLD; END $$"
            ),
        )
        .await;
        exec(
            owner,
            &format!(
                "CREATE TRIGGER archive_events AFTER DELETE ON buzz.events \
                 FOR EACH ROW EXECUTE FUNCTION {function}()"
            ),
        )
        .await;
        // One archived event of each community.
        for community in [&target, &neighbour] {
            let id = event(owner, community).await;
            sqlx::query("DELETE FROM buzz.events WHERE id = $1")
                .bind(&id)
                .execute(owner.pool())
                .await
                .expect("delete event");
        }

        // Undeclared: the trigger, and its table (a community_id column outside `buzz`).
        let refusals = assert_refused(
            scan(worker, &target).await,
            &["table archive.events_history", trigger],
        );
        assert!(
            refusals[1]
                .1
                .contains(&format!("AFTER DELETE FOR EACH ROW executing {function}()")),
            "{refusals:?}"
        );
        assert_eq!(
            refusals[1].1.contains("SECURITY DEFINER"),
            !definer.is_empty(),
            "{refusals:?}"
        );

        // Declared, but the worker may not read and purge the archive.
        exec(
            owner,
            "COMMENT ON TRIGGER archive_events ON buzz.events IS \
             'buzz-deletion: archives into archive.events_history'",
        )
        .await;
        let refusals = assert_refused(
            scan(worker, &target).await,
            &["table archive.events_history", trigger],
        );
        assert!(
            refusals[1].1.contains("GRANT SELECT, DELETE"),
            "{refusals:?}"
        );

        // Declared and granted: the archive joins the purge set with the target's rows.
        exec_all(
            owner,
            &[
                "GRANT USAGE ON SCHEMA archive TO buzz_deletion_worker",
                "GRANT SELECT, DELETE ON archive.events_history TO buzz_deletion_worker",
            ],
        )
        .await;
        if definer.is_empty() {
            // The function runs as the deleting role: without INSERT on the archive every purge
            // batch would fail after objects were deleted, so the check names the grant.
            // (The archive, left outside the purge set, is refused for its community_id too.)
            let refusals = assert_refused(
                scan(worker, &target).await,
                &["table archive.events_history", trigger],
            );
            let (_, problem, remedy) = refusals[1].clone();
            assert!(
                problem.contains("runs as the deleting role, which may not INSERT"),
                "{problem}"
            );
            assert!(
                remedy
                    .starts_with("GRANT INSERT ON archive.events_history TO buzz_deletion_worker"),
                "{remedy}"
            );
            exec(
                owner,
                "GRANT INSERT ON archive.events_history TO buzz_deletion_worker",
            )
            .await;
        }
        let world = assert_passes(scan(worker, &target).await, function);
        let archived: u64 = sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM archive.events_history WHERE community_id = $1",
        )
        .bind(target.id)
        .fetch_one(owner.pool())
        .await
        .expect("count archive") as u64;
        assert!(archived >= 1);
        assert_eq!(
            world.archives,
            vec![count("archive.events_history", archived)]
        );
        assert_relies_on(&world, trigger, "archives into archive.events_history");
        assert_eq!(
            role_of(&world, "archive.events_history").as_deref(),
            Some("archive table")
        );

        exec_all(
            owner,
            &[
                "DROP TRIGGER archive_events ON buzz.events",
                "REVOKE ALL ON archive.events_history FROM buzz_deletion_worker",
                "REVOKE ALL ON SCHEMA archive FROM buzz_deletion_worker",
            ],
        )
        .await;
    }
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_in_a_schema_the_worker_may_not_use_is_refused_naming_the_trigger() {
    let (db, target) = db_with_target("cw_archive_usage").await;
    let (owner, worker) = (&db.owner, &db.worker);
    exec_all(
        owner,
        &[
            "CREATE SCHEMA archive",
            "CREATE TABLE archive.events_history (LIKE buzz.events)",
            "CREATE FUNCTION archive.keep_event() RETURNS trigger LANGUAGE plpgsql \
             AS $$ BEGIN INSERT INTO archive.events_history SELECT (OLD).*; RETURN OLD; END $$",
            "CREATE TRIGGER archive_events AFTER DELETE ON buzz.events \
             FOR EACH ROW EXECUTE FUNCTION archive.keep_event()",
            "COMMENT ON TRIGGER archive_events ON buzz.events IS \
             'buzz-deletion: archives into archive.events_history'",
            // The table's grants, but not USAGE on its schema.
            "GRANT SELECT, DELETE ON archive.events_history TO buzz_deletion_worker",
        ],
    )
    .await;
    let refusals = assert_refused(
        scan(worker, &target).await,
        &[
            "table archive.events_history",
            "trigger archive_events on buzz.events",
        ],
    );
    assert!(
        refusals[1].1.contains("cannot be read and purged"),
        "{refusals:?}"
    );
    db.drop_database().await;
}

// --- 5. A key-only child table in the tenant schema. -------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_only_child_is_refused_until_its_key_is_declared_and_then_counted() {
    let (db, target) = db_with_target("cw_keychild").await;
    let (owner, worker) = (&db.owner, &db.worker);
    let neighbour = community(owner).await;
    exec(
        owner,
        "CREATE TABLE buzz.event_tags (event_id text REFERENCES buzz.events (id), tag text)",
    )
    .await;
    let mut target_tags = 0;
    for (community, tags) in [(&target, 3), (&neighbour, 2), (&target, 1)] {
        let id = event(owner, community).await;
        for n in 0..tags {
            sqlx::query("INSERT INTO buzz.event_tags (event_id, tag) VALUES ($1, $2)")
                .bind(&id)
                .bind(format!("tag-{n}"))
                .execute(owner.pool())
                .await
                .expect("insert tag");
        }
        if community.id == target.id {
            target_tags += tags;
        }
    }
    let object = "foreign key event_tags_event_id_fkey on buzz.event_tags";
    let (_, problem, remedy) =
        assert_refused_one(scan(worker, &target).await, object, "ON DELETE NO ACTION");
    assert!(problem.contains("buzz.events"), "{problem}");
    assert!(remedy.contains("tenant data through this key"), "{remedy}");

    exec(
        owner,
        "COMMENT ON CONSTRAINT event_tags_event_id_fkey ON buzz.event_tags IS \
         'buzz-deletion: tenant data through this key'",
    )
    .await;
    let world = assert_passes(scan(worker, &target).await, "declared key child");
    assert_eq!(
        world.key_children,
        vec![count("buzz.event_tags", target_tags)]
    );
    assert_relies_on(&world, object, "tenant data through this key");
    assert_eq!(
        role_of(&world, "buzz.event_tags").as_deref(),
        Some("key child through event_tags_event_id_fkey")
    );
    let world = assert_passes(scan(worker, &neighbour).await, "the neighbour's count");
    assert_eq!(world.key_children, vec![count("buzz.event_tags", 2)]);
    db.drop_database().await;
}

// --- 6. Rewrite rules on a tenant table. --------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_on_a_tenant_table_are_refused_and_an_instead_rule_even_when_declared() {
    let (db, target) = db_with_target("cw_rules").await;
    let (owner, worker) = (&db.owner, &db.worker);

    exec(
        owner,
        "CREATE RULE events_deleted_notice AS ON DELETE TO buzz.events \
         DO ALSO NOTIFY buzz_events_deleted",
    )
    .await;
    let also = "rule events_deleted_notice on buzz.events";
    assert_refused_one(scan(worker, &target).await, also, "DO ALSO rule ON DELETE");
    exec(
        owner,
        "COMMENT ON RULE events_deleted_notice ON buzz.events IS 'buzz-deletion: harmless'",
    )
    .await;
    let world = assert_passes(scan(worker, &target).await, "declared harmless");
    assert_relies_on(&world, also, "harmless");
    exec(owner, "DROP RULE events_deleted_notice ON buzz.events").await;

    exec(
        owner,
        "CREATE RULE events_never_deleted AS ON DELETE TO buzz.events DO INSTEAD NOTHING",
    )
    .await;
    let instead = "rule events_never_deleted on buzz.events";
    assert_refused_one(
        scan(worker, &target).await,
        instead,
        "DO INSTEAD rule ON DELETE",
    );
    exec(
        owner,
        "COMMENT ON RULE events_never_deleted ON buzz.events IS 'buzz-deletion: harmless'",
    )
    .await;
    let (_, _, remedy) = assert_refused_one(
        scan(worker, &target).await,
        instead,
        "DO INSTEAD rule ON DELETE",
    );
    assert!(remedy.contains("cannot be declared"), "{remedy}");
    exec(owner, "DROP RULE events_never_deleted ON buzz.events").await;
    assert_passes(scan(worker, &target).await, "rule dropped");
    db.drop_database().await;
}

// --- 7. A soft-delete trigger. ------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_before_delete_trigger_returning_null_is_refused_undeclared() {
    let (db, target) = db_with_target("cw_softdel").await;
    let (owner, worker) = (&db.owner, &db.worker);
    exec_all(
        owner,
        &[
            "CREATE FUNCTION public.keep_deleted_events() RETURNS trigger LANGUAGE plpgsql \
             AS $$ BEGIN RETURN NULL; END $$",
            "CREATE TRIGGER events_soft_delete BEFORE DELETE ON buzz.events \
             FOR EACH ROW EXECUTE FUNCTION public.keep_deleted_events()",
        ],
    )
    .await;
    let object = "trigger events_soft_delete on buzz.events";
    let (_, _, remedy) = assert_refused_one(
        scan(worker, &target).await,
        object,
        "BEFORE DELETE FOR EACH ROW executing public.keep_deleted_events()",
    );
    assert!(
        remedy.contains("COMMENT ON TRIGGER \"events_soft_delete\" ON buzz.events"),
        "{remedy}"
    );

    // A comment in the declaration's namespace that is not one is refused too.
    exec(
        owner,
        "COMMENT ON TRIGGER events_soft_delete ON buzz.events IS 'buzz-deletion: soft delete'",
    )
    .await;
    // (Named twice: the malformed comment, and the trigger it leaves undeclared.)
    let refusals = assert_refused(scan(worker, &target).await, &[object, object]);
    assert!(
        refusals
            .iter()
            .any(|r| r.1.contains("is not a declaration")),
        "{refusals:?}"
    );
    assert!(
        refusals.iter().any(|r| r.1.contains("does not understand")),
        "{refusals:?}"
    );
    // An ordinary comment declares nothing.
    exec(
        owner,
        "COMMENT ON TRIGGER events_soft_delete ON buzz.events IS 'keeps rows for support'",
    )
    .await;
    assert_refused_one(scan(worker, &target).await, object, "does not understand");

    exec(owner, "DROP TRIGGER events_soft_delete ON buzz.events").await;
    assert_passes(scan(worker, &target).await, "trigger dropped");
    db.drop_database().await;
}

// --- 8. Row-level security on a tenant table. -------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_level_security_on_a_tenant_table_is_refused_with_and_without_force_or_policy() {
    let (db, target) = db_with_target("cw_rls").await;
    let (owner, worker) = (&db.owner, &db.worker);
    demo::seed_rows(owner, target.id, 2).await.expect("seed");
    let variants: [(&str, &[&str]); 4] = [
        ("enabled", &[]),
        (
            "forced",
            &["ALTER TABLE buzz.agents FORCE ROW LEVEL SECURITY"],
        ),
        (
            "with a policy",
            &["CREATE POLICY agents_everyone ON buzz.agents USING (true)"],
        ),
        (
            "forced with a policy",
            &[
                "ALTER TABLE buzz.agents FORCE ROW LEVEL SECURITY",
                "CREATE POLICY agents_everyone ON buzz.agents USING (true)",
            ],
        ),
    ];
    for (what, extra) in variants {
        exec(owner, "ALTER TABLE buzz.agents ENABLE ROW LEVEL SECURITY").await;
        for sql in extra {
            exec(owner, sql).await;
        }
        let (_, _, remedy) = assert_refused_one(
            scan(worker, &target).await,
            "buzz.agents",
            "row-level security",
        );
        assert!(
            remedy.contains("DISABLE ROW LEVEL SECURITY"),
            "{what}: {remedy}"
        );

        exec_all(
            owner,
            &[
                "DROP POLICY IF EXISTS agents_everyone ON buzz.agents",
                "ALTER TABLE buzz.agents NO FORCE ROW LEVEL SECURITY",
                "ALTER TABLE buzz.agents DISABLE ROW LEVEL SECURITY",
            ],
        )
        .await;
        let inventory = scan(worker, &target).await;
        assert_passes(inventory, what);
    }
    db.drop_database().await;
}

// --- 9. A publication that does not publish deletes. ------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_of_a_tenant_table_without_deletes_is_refused() {
    let (db, target) = db_with_target("cw_pub").await;
    let (owner, worker) = (&db.owner, &db.worker);
    // CREATE PUBLICATION needs no logical wal_level (it only warns that subscribers need one).
    exec(
        owner,
        "CREATE PUBLICATION events_feed FOR TABLE buzz.events WITH (publish = 'insert, update')",
    )
    .await;
    let (_, problem, remedy) = assert_refused_one(
        scan(worker, &target).await,
        "publication events_feed",
        "publishes buzz.events without deletes",
    );
    assert!(problem.contains("subscriber"), "{problem}");
    assert!(
        remedy.contains("ALTER PUBLICATION \"events_feed\""),
        "{remedy}"
    );

    exec(
        owner,
        "ALTER PUBLICATION events_feed SET (publish = 'insert, update, delete')",
    )
    .await;
    assert_passes(scan(worker, &target).await, "publishes deletes");
    // One publishing everything (the default) passes from the start.
    exec(
        owner,
        "CREATE PUBLICATION channels_feed FOR TABLE buzz.channels",
    )
    .await;
    assert_passes(scan(worker, &target).await, "default publish list");
    db.drop_database().await;
}

// --- 10. Foreign tables: rows that live outside this database. ------------------------------

/// A postgres_fdw server pointing back at this database (`deploy/local/up` installs the wrapper
/// in template1 and lets the owner use it), with the owner's user mapping.
async fn loopback_server(owner: &Store, db_name: &str) {
    exec(
        owner,
        &format!(
            "CREATE SERVER loopback FOREIGN DATA WRAPPER postgres_fdw \
             OPTIONS (host '127.0.0.1', dbname '{db_name}')"
        ),
    )
    .await;
    exec(
        owner,
        "CREATE USER MAPPING FOR CURRENT_USER SERVER loopback OPTIONS (user 'nobody')",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_table_holding_or_reading_tenant_rows_is_refused() {
    let (db, target) = db_with_target("cw_foreign").await;
    let (owner, worker) = (&db.owner, &db.worker);
    let db_name: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(owner.pool())
        .await
        .unwrap_or_else(|e| panic!("current_database: {e}"));
    loopback_server(owner, &db_name).await;

    // At the root of the tenant schema: a tenant table whose rows live elsewhere.
    exec(
        owner,
        "CREATE FOREIGN TABLE buzz.remote_events (community_id uuid, body text) \
         SERVER loopback OPTIONS (schema_name 'elsewhere', table_name 'events')",
    )
    .await;
    let object = "foreign table buzz.remote_events";
    let (_, problem, remedy) =
        assert_refused_one(scan(worker, &target).await, object, "community_id column");
    assert!(problem.contains("cannot be fenced, purged"), "{problem}");
    assert!(remedy.contains("cannot be declared"), "{remedy}");
    // A declaration does not make it acceptable.
    exec(
        owner,
        "COMMENT ON FOREIGN TABLE buzz.remote_events IS 'buzz-deletion: not tenant data'",
    )
    .await;
    assert_refused_one(scan(worker, &target).await, object, "community_id column");
    exec(owner, "DROP FOREIGN TABLE buzz.remote_events").await;
    assert_passes(scan(worker, &target).await, "root foreign table dropped");

    // Outside the tenant schema, without a community_id column, but reading buzz.events.
    exec_all(
        owner,
        &[
            "CREATE SCHEMA mirror",
            "CREATE FOREIGN TABLE mirror.events_copy (id text, content text) \
             SERVER loopback OPTIONS (schema_name 'buzz', table_name 'events')",
        ],
    )
    .await;
    let object = "foreign table mirror.events_copy";
    let (_, _, remedy) = assert_refused_one(scan(worker, &target).await, object, "live outside");
    assert!(
        remedy.contains("COMMENT ON FOREIGN TABLE mirror.events_copy"),
        "{remedy}"
    );
    exec(
        owner,
        "COMMENT ON FOREIGN TABLE mirror.events_copy IS 'buzz-deletion: not tenant data'",
    )
    .await;
    let world = assert_passes(scan(worker, &target).await, "declared not tenant data");
    assert_relies_on(&world, object, "not tenant data");

    // One that reads nothing of the tenant's is unrelated, and listed as such.
    exec(
        owner,
        "CREATE FOREIGN TABLE mirror.weather (city text, celsius int) \
         SERVER loopback OPTIONS (schema_name 'public', table_name 'weather')",
    )
    .await;
    let world = assert_passes(scan(worker, &target).await, "unrelated foreign table");
    assert_unrelated(&world, "foreign table mirror.weather");
    db.drop_database().await;
}

// --- 11. Large-object references in a tenant table. ------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_object_column_on_a_tenant_table_is_refused_naming_the_column() {
    let (db, target) = db_with_target("cw_lo").await;
    let (owner, worker) = (&db.owner, &db.worker);
    exec(
        owner,
        "CREATE TABLE buzz.attachments (community_id uuid NOT NULL, name text NOT NULL, blob oid)",
    )
    .await;
    exec_all(owner, &tenant_guards("buzz.attachments", "none")).await;
    let (_, problem, _) = assert_refused_one(
        scan(worker, &target).await,
        "buzz.attachments.blob",
        "large objects",
    );
    assert!(problem.contains("oid"), "{problem}");
    exec(owner, "ALTER TABLE buzz.attachments DROP COLUMN blob").await;
    let world = assert_passes(scan(worker, &target).await, "column dropped");
    assert_eq!(
        role_of(&world, "buzz.attachments").as_deref(),
        Some("tenant table")
    );

    // Through a domain over oid.
    exec_all(
        owner,
        &[
            "CREATE DOMAIN public.blob_ref AS oid",
            "ALTER TABLE buzz.attachments ADD COLUMN thumb public.blob_ref",
        ],
    )
    .await;
    assert_refused_one(
        scan(worker, &target).await,
        "buzz.attachments.thumb",
        "large objects",
    );
    exec(owner, "ALTER TABLE buzz.attachments DROP COLUMN thumb").await;
    assert_passes(scan(worker, &target).await, "domain column dropped");
    db.drop_database().await;
}

// --- 12. A table with a community_id column outside the tenant schema. -----------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_community_id_table_outside_the_tenant_schema_is_refused_until_declared() {
    let (db, target) = db_with_target("cw_stray").await;
    let (owner, worker) = (&db.owner, &db.worker);
    exec_all(
        owner,
        &[
            "CREATE SCHEMA crm",
            "CREATE TABLE crm.contacts (community_id uuid, email text NOT NULL)",
        ],
    )
    .await;
    sqlx::query("INSERT INTO crm.contacts (community_id, email) VALUES ($1, 'a@example.org')")
        .bind(target.id)
        .execute(owner.pool())
        .await
        .expect("insert contact");
    let object = "table crm.contacts";
    let (_, _, remedy) =
        assert_refused_one(scan(worker, &target).await, object, "outside schema buzz");
    assert!(remedy.contains("COMMENT ON TABLE crm.contacts"), "{remedy}");
    exec(
        owner,
        "COMMENT ON TABLE crm.contacts IS 'buzz-deletion: not tenant data'",
    )
    .await;
    let world = assert_passes(scan(worker, &target).await, "declared not tenant data");
    assert_relies_on(&world, object, "not tenant data");
    assert!(role_of(&world, "crm.contacts").is_none(), "{world:?}");
    db.drop_database().await;
}
