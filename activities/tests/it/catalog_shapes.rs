//! Tenant tables of every shape Postgres allows, against a real PostgreSQL: plain tables,
//! partitioned tables (list, hash, range, two levels, a partition attached after submit) and
//! inheritance trees, each holding a target's and a neighbour's rows at the same physical
//! positions in sibling heaps. The purge must remove every target row and leave every other row
//! byte-identical at the same place; the fence and foreign-key rules must fail closed naming the
//! relation or constraint.
//!
//! Tests that commit tables run in a database of their own (`store_support::private_db`): a
//! committed tenant table is discovered by every catalog scan in its database. Refusal variants
//! run inside transactions that are rolled back.

use crate::store_support;
use crate::store_support::{exec, exec_in};
use activities::store::CatalogError;

use activities::failure::{Classified, Severity};
use activities::store::{
    CatalogInventory, Community, Store, StoreError, StoreResult, catalog_scan_in,
};
use store_support::private_db::{PrivateDb, private_db};
use store_support::request_flow::submit;
use store_support::{assert_no_rows_left, community};
use uuid::Uuid;

/// The sound fence on `table`: the trigger, enabled ALWAYS.
fn fence(table: &str) -> [String; 2] {
    [
        format!(
            "CREATE TRIGGER buzz_write_fence BEFORE INSERT OR UPDATE ON {table} \
             FOR EACH ROW EXECUTE FUNCTION buzz.refuse_fenced_write()"
        ),
        format!("ALTER TABLE {table} ENABLE ALWAYS TRIGGER buzz_write_fence"),
    ]
}

/// Gives each of `tables` the sound fence.
async fn fence_all(store: &Store, tables: &[&str]) {
    for table in tables {
        for sql in fence(table) {
            exec(store, &sql).await;
        }
    }
}

/// Creates tenant table `table` (community_id, seq, body), partitioned by `partitioning` unless
/// it is empty, with the sound fence.
async fn create_fenced(store: &Store, table: &str, partitioning: &str) {
    let ddl = match partitioning {
        "" => plain_table(table),
        _ => format!("{} {partitioning}", plain_table(table)),
    };
    exec(store, &ddl).await;
    fence_all(store, &[table]).await;
}

/// Inserts one row of `community` with `seq` into `table` (through routing, if partitioned).
async fn insert(store: &Store, table: &str, community: Uuid, seq: i32) {
    let sql = format!(
        "INSERT INTO {table} (community_id, seq, body) VALUES ($1, $2, md5(random()::text))"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(community)
        .bind(seq)
        .execute(store.pool())
        .await
        .unwrap_or_else(|e| panic!("insert into {table}: {e}"));
}

/// Every row under `root` (its whole tree) not of `target`, each with its physical table and
/// position: equal before and after exactly when no such row was deleted, moved or changed.
async fn rows_of_others(store: &Store, root: &str, target: Uuid) -> Vec<String> {
    let sql = format!(
        "SELECT format('%s %s %s', t.tableoid::regclass, t.ctid, t::text) FROM {root} t \
         WHERE community_id <> $1 ORDER BY 1"
    );
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(target)
        .fetch_all(store.pool())
        .await
        .unwrap_or_else(|e| panic!("rows of others in {root}: {e}"))
}

/// Rows of `community` anywhere under `root`.
async fn rows_of(store: &Store, root: &str, community: Uuid) -> i64 {
    let sql = format!("SELECT count(*) FROM {root} WHERE community_id = $1");
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(community)
        .fetch_one(store.pool())
        .await
        .unwrap_or_else(|e| panic!("count {root}: {e}"))
}

/// Asserts the setup really puts a target row and a neighbour row at the same ctid in two
/// different heaps of the tree (the shape that broke a ctid-only purge).
async fn assert_ctids_collide(store: &Store, root: &str, target: Uuid, neighbour: Uuid) {
    let sql = format!(
        "SELECT count(*) FROM {root} a JOIN {root} b ON a.ctid = b.ctid AND a.tableoid <> b.tableoid \
         WHERE a.community_id = $1 AND b.community_id = $2"
    );
    let collisions: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(target)
        .bind(neighbour)
        .fetch_one(store.pool())
        .await
        .unwrap_or_else(|e| panic!("collisions in {root}: {e}"));
    assert!(
        collisions > 0,
        "setup: no target row shares a ctid with a neighbour row in {root}"
    );
}

/// Values of `seq` in 1..=40 that hash to `remainder` of `modulus` for `table`'s hash key.
async fn seqs_hashing_to(store: &Store, table: &str, modulus: i32, remainder: i32) -> Vec<i32> {
    sqlx::query_scalar(
        "SELECT g FROM generate_series(1, 40) g \
         WHERE satisfies_hash_partition($1::regclass, $2, $3, g) ORDER BY g",
    )
    .bind(table)
    .bind(modulus)
    .bind(remainder)
    .fetch_all(store.pool())
    .await
    .unwrap_or_else(|e| panic!("hash placement in {table}: {e}"))
}

/// What a shape test checks after its rows are in place.
struct ShapeRun<'a> {
    store: &'a Store,
    root: &'a str,
    target: &'a Community,
    neighbour: &'a Community,
    /// Target rows the inventory must count under `root`.
    target_rows: u64,
    /// The tree has several heaps and the setup put target and neighbour rows at equal ctids in
    /// two of them (a plain table has one heap, so nothing to collide with).
    shares_ctids: bool,
}

impl ShapeRun<'_> {
    /// Inventory, approval, preflight, fence, purge in batches of 2; then the target has no row
    /// anywhere, every other row is byte-identical at the same place, and the inventory counted
    /// each target row once.
    async fn purge_and_check(&self, after_submit: impl AsyncFnOnce()) {
        let store = self.store;
        if self.shares_ctids {
            assert_ctids_collide(store, self.root, self.target.id, self.neighbour.id).await;
        }
        let others_before = rows_of_others(store, self.root, self.target.id).await;
        let snapshot_before = store
            .snapshot_rows(self.neighbour.id)
            .await
            .expect("snapshot");
        assert!(!others_before.is_empty());

        let mut request = submit(store, self.target).await;
        let inventory = request.take_inventory().await.expect("inventory");
        let counted = inventory
            .catalog
            .row_counts
            .iter()
            .find(|count| count.table == self.root)
            .map(|count| count.rows);
        assert_eq!(
            counted,
            Some(self.target_rows),
            "each target row counted exactly once: {:?}",
            inventory.catalog
        );
        after_submit().await;
        request.approve(&inventory).await;
        request.preflight().await.expect("preflight");
        request.fence_and_drain().await;
        let report = request.purge(2).await.expect("purge");

        assert_eq!(rows_of(store, self.root, self.target.id).await, 0);
        assert_no_rows_left(store, self.target.id).await;
        assert!(
            report
                .tables
                .iter()
                .any(|t| t.table == self.root && t.rows > 0),
            "{report:?}"
        );
        assert_eq!(
            rows_of_others(store, self.root, self.target.id).await,
            others_before,
            "every other community's row is byte-identical in the same heap at the same ctid"
        );
        assert_eq!(
            store
                .snapshot_rows(self.neighbour.id)
                .await
                .expect("snapshot"),
            snapshot_before
        );
    }
}

/// Two communities with demo rows in the model's own tables too.
async fn two_communities(store: &Store) -> (Community, Community) {
    let target = community(store).await;
    let neighbour = community(store).await;
    for id in [target.id, neighbour.id] {
        demo::seed_rows(store, id, 3).await.expect("seed");
    }
    (target, neighbour)
}

/// A shape test's database of its own, with a target and a neighbour community.
struct Shape {
    db: PrivateDb,
    target: Community,
    neighbour: Community,
}

impl Shape {
    /// A database tagged `tag` and two communities with demo rows in the model's own tables too.
    async fn new(tag: &str) -> Shape {
        let db = private_db(tag).await;
        let (target, neighbour) = two_communities(&db.store).await;
        Shape {
            db,
            target,
            neighbour,
        }
    }

    /// The store (as the schema owner), the target and the neighbour.
    fn parts(&self) -> (&Store, &Community, &Community) {
        (&self.db.store, &self.target, &self.neighbour)
    }

    /// The check of the tree under `root`, holding `target_rows` target rows, some of them at
    /// the same ctid as a neighbour row in another heap of the tree.
    fn run<'a>(&'a self, root: &'a str, target_rows: u64) -> ShapeRun<'a> {
        ShapeRun {
            store: &self.db.store,
            root,
            target: &self.target,
            neighbour: &self.neighbour,
            target_rows,
            shares_ctids: true,
        }
    }

    /// Closes the pool and drops the database.
    async fn drop_database(self) {
        self.db.drop_database().await;
    }
}

#[tokio::test]
async fn plain_table_purge_touches_only_the_target() {
    let shape = Shape::new("plain").await;
    let (store, target, neighbour) = shape.parts();
    exec(
        store,
        "CREATE TABLE buzz.plain (id bigserial PRIMARY KEY, community_id uuid NOT NULL, \
         seq int NOT NULL, body text NOT NULL)",
    )
    .await;
    fence_all(store, &["buzz.plain"]).await;
    // A second plain table with the neighbour's row first, so one physical position holds a
    // target row in one heap and a neighbour row in the other (different tables, same ctid).
    create_fenced(store, "buzz.plain_b", "").await;
    for (community, seq) in [(&target, 1), (&neighbour, 2), (&target, 3), (&neighbour, 4)] {
        insert(store, "buzz.plain", community.id, seq).await;
    }
    for (community, seq) in [(&neighbour, 1), (&target, 2), (&target, 3)] {
        insert(store, "buzz.plain_b", community.id, seq).await;
    }
    let plain_b_before = rows_of_others(store, "buzz.plain_b", target.id).await;
    ShapeRun {
        shares_ctids: false,
        ..shape.run("buzz.plain", 2)
    }
    .purge_and_check(async || {})
    .await;
    assert_eq!(rows_of(store, "buzz.plain_b", target.id).await, 0);
    assert_eq!(
        rows_of_others(store, "buzz.plain_b", target.id).await,
        plain_b_before
    );
    shape.drop_database().await;
}

#[tokio::test]
async fn list_partitions_per_community_purge_touches_only_the_target() {
    let shape = Shape::new("list").await;
    let (store, target, neighbour) = shape.parts();
    create_fenced(store, "buzz.listed", "PARTITION BY LIST (community_id)").await;
    for (name, community) in [("listed_target", &target), ("listed_neighbour", &neighbour)] {
        exec(
            store,
            &format!(
                "CREATE TABLE buzz.{name} PARTITION OF buzz.listed FOR VALUES IN ('{}')",
                community.id
            ),
        )
        .await;
    }
    exec(
        store,
        "CREATE TABLE buzz.listed_rest PARTITION OF buzz.listed DEFAULT",
    )
    .await;
    for seq in 1..=3 {
        insert(store, "buzz.listed", target.id, seq).await;
        insert(store, "buzz.listed", neighbour.id, seq).await;
    }
    shape
        .run("buzz.listed", 3)
        .purge_and_check(async || {})
        .await;
    shape.drop_database().await;
}

#[tokio::test]
async fn hash_partitions_purge_touches_only_the_target() {
    let shape = Shape::new("hash").await;
    let (store, target, neighbour) = shape.parts();
    create_fenced(store, "buzz.hashed", "PARTITION BY HASH (seq)").await;
    for remainder in 0..2 {
        exec(
            store,
            &format!(
                "CREATE TABLE buzz.hashed_{remainder} PARTITION OF buzz.hashed \
                 FOR VALUES WITH (MODULUS 2, REMAINDER {remainder})"
            ),
        )
        .await;
    }
    let zero = seqs_hashing_to(store, "buzz.hashed", 2, 0).await;
    let one = seqs_hashing_to(store, "buzz.hashed", 2, 1).await;
    // Partition 0 starts with a target row, partition 1 with a neighbour row.
    insert(store, "buzz.hashed", target.id, zero[0]).await;
    insert(store, "buzz.hashed", neighbour.id, one[0]).await;
    insert(store, "buzz.hashed", neighbour.id, zero[1]).await;
    insert(store, "buzz.hashed", target.id, one[1]).await;
    insert(store, "buzz.hashed", target.id, one[2]).await;
    shape
        .run("buzz.hashed", 3)
        .purge_and_check(async || {})
        .await;
    shape.drop_database().await;
}

#[tokio::test]
async fn range_partitions_purge_touches_only_the_target() {
    let shape = Shape::new("range").await;
    let (store, target, neighbour) = shape.parts();
    create_fenced(store, "buzz.ranged", "PARTITION BY RANGE (seq)").await;
    exec(
        store,
        "CREATE TABLE buzz.ranged_low PARTITION OF buzz.ranged FOR VALUES FROM (MINVALUE) TO (100)",
    )
    .await;
    exec(
        store,
        "CREATE TABLE buzz.ranged_high PARTITION OF buzz.ranged FOR VALUES FROM (100) TO (MAXVALUE)",
    )
    .await;
    insert(store, "buzz.ranged", target.id, 1).await;
    insert(store, "buzz.ranged", neighbour.id, 100).await;
    insert(store, "buzz.ranged", neighbour.id, 2).await;
    insert(store, "buzz.ranged", target.id, 101).await;
    shape
        .run("buzz.ranged", 2)
        .purge_and_check(async || {})
        .await;
    shape.drop_database().await;
}

#[tokio::test]
async fn two_level_partition_tree_with_a_partition_attached_after_submit_is_purged_exactly() {
    let shape = Shape::new("tree").await;
    let (store, target, neighbour) = shape.parts();
    create_fenced(store, "buzz.tree", "PARTITION BY LIST (community_id)").await;
    // Level 1 per community; the target's level 2 by range, the neighbour's by hash; a second
    // partition schema for the target's leaf (partitions need not live in `buzz`).
    exec(store, "CREATE SCHEMA tenant_parts").await;
    exec(
        store,
        &format!(
            "CREATE TABLE buzz.tree_target PARTITION OF buzz.tree FOR VALUES IN ('{}') \
             PARTITION BY RANGE (seq)",
            target.id
        ),
    )
    .await;
    exec(
        store,
        "CREATE TABLE tenant_parts.tree_target_low PARTITION OF buzz.tree_target \
         FOR VALUES FROM (MINVALUE) TO (100)",
    )
    .await;
    exec(
        store,
        &format!(
            "CREATE TABLE buzz.tree_neighbour PARTITION OF buzz.tree FOR VALUES IN ('{}') \
             PARTITION BY HASH (seq)",
            neighbour.id
        ),
    )
    .await;
    for remainder in 0..2 {
        exec(
            store,
            &format!(
                "CREATE TABLE buzz.tree_neighbour_{remainder} PARTITION OF buzz.tree_neighbour \
                 FOR VALUES WITH (MODULUS 2, REMAINDER {remainder})"
            ),
        )
        .await;
    }
    exec(
        store,
        "CREATE TABLE buzz.tree_rest PARTITION OF buzz.tree DEFAULT",
    )
    .await;
    for seq in 1..=4 {
        insert(store, "buzz.tree", target.id, seq).await;
        insert(store, "buzz.tree", neighbour.id, seq).await;
    }
    let late_store = store.clone();
    let target_id = target.id;
    shape
        .run("buzz.tree", 4)
        .purge_and_check(async move || {
            // After the inventory: a new leaf under the target's range partition, with rows. Its
            // cloned fence trigger inherits ENABLE ALWAYS, so the catalog still passes.
            exec(
                &late_store,
                "CREATE TABLE buzz.tree_target_high PARTITION OF buzz.tree_target \
                 FOR VALUES FROM (100) TO (MAXVALUE)",
            )
            .await;
            for seq in [100, 101, 102] {
                insert(&late_store, "buzz.tree", target_id, seq).await;
            }
        })
        .await;
    shape.drop_database().await;
}

#[tokio::test]
async fn inheritance_tree_is_counted_once_and_purge_touches_only_the_target() {
    let shape = Shape::new("inherit").await;
    let (store, target, neighbour) = shape.parts();
    exec(
        store,
        "CREATE TABLE buzz.inh (community_id uuid NOT NULL, seq int NOT NULL, body text NOT NULL)",
    )
    .await;
    exec(
        store,
        "CREATE TABLE buzz.inh_child (extra text) INHERITS (buzz.inh)",
    )
    .await;
    exec(store, "CREATE SCHEMA tenant_children").await;
    exec(
        store,
        "CREATE TABLE tenant_children.inh_grandchild () INHERITS (buzz.inh_child)",
    )
    .await;
    // Triggers are not inherited: each member of the tree gets its own.
    fence_all(
        store,
        &[
            "buzz.inh",
            "buzz.inh_child",
            "tenant_children.inh_grandchild",
        ],
    )
    .await;
    insert(store, "buzz.inh", target.id, 1).await;
    insert(store, "buzz.inh", neighbour.id, 2).await;
    insert(store, "buzz.inh_child", neighbour.id, 3).await;
    insert(store, "buzz.inh_child", target.id, 4).await;
    insert(store, "tenant_children.inh_grandchild", target.id, 5).await;
    insert(store, "tenant_children.inh_grandchild", neighbour.id, 6).await;
    shape.run("buzz.inh", 3).purge_and_check(async || {}).await;
    shape.drop_database().await;
}

#[tokio::test]
async fn a_child_of_two_tenant_tables_is_counted_and_purged_once() {
    let shape = Shape::new("multi").await;
    let (store, target, neighbour) = shape.parts();
    for table in ["buzz.ia", "buzz.ib"] {
        exec(
            store,
            &format!(
                "CREATE TABLE {table} (community_id uuid NOT NULL, seq int NOT NULL, \
                 body text NOT NULL)"
            ),
        )
        .await;
    }
    exec(
        store,
        "CREATE TABLE buzz.iab () INHERITS (buzz.ia, buzz.ib)",
    )
    .await;
    fence_all(store, &["buzz.ia", "buzz.ib", "buzz.iab"]).await;
    insert(store, "buzz.ia", target.id, 1).await;
    insert(store, "buzz.ib", neighbour.id, 2).await;
    insert(store, "buzz.ib", target.id, 3).await;
    insert(store, "buzz.iab", neighbour.id, 4).await;
    insert(store, "buzz.iab", target.id, 5).await;
    let ib_before = rows_of_others(store, "buzz.ib", target.id).await;
    let late_store = store.clone();
    let target_id = target.id;
    // Its own row and the shared child's; `buzz.ib` counts only its own.
    shape
        .run("buzz.ia", 2)
        .purge_and_check(async move || {
            let scan = late_store.catalog_scan(target_id).await.expect("scan");
            let ib = scan.row_counts.iter().find(|c| c.table == "buzz.ib");
            assert_eq!(ib.map(|c| c.rows), Some(1), "{scan:?}");
            let inherited: u64 = scan
                .row_counts
                .iter()
                .filter(|c| c.table == "buzz.ia" || c.table == "buzz.ib")
                .map(|c| c.rows)
                .sum();
            assert_eq!(
                inherited, 3,
                "three target rows, each counted once: {scan:?}"
            );
        })
        .await;
    assert_eq!(rows_of(store, "buzz.ib", target.id).await, 0);
    assert_eq!(rows_of_others(store, "buzz.ib", target.id).await, ib_before);
    shape.drop_database().await;
}

/// Runs `ddl` in a transaction, scans the catalog inside it and rolls back: what the scan said.
async fn scan_rolled_back(store: &Store, ddl: &[String]) -> StoreResult<CatalogInventory> {
    let mut tx = store.pool().begin().await.expect("begin");
    for sql in ddl {
        exec_in(&mut tx, sql).await;
    }
    let scan = catalog_scan_in(&mut tx, Uuid::new_v4()).await;
    tx.rollback().await.expect("rollback");
    scan
}

/// Runs `ddl` in a transaction, scans, rolls back: the scan must fail closed naming exactly
/// `table`, with `what` in the reason.
async fn assert_unfenced(store: &Store, ddl: &[String], table: &str, what: &str) {
    let scan = scan_rolled_back(store, ddl).await;
    match scan {
        Err(error @ StoreError::Catalog(CatalogError::Unfenced { .. })) => {
            assert_eq!(error.severity(), Severity::Permanent);
            let message = error.to_string();
            if let StoreError::Catalog(CatalogError::Unfenced { tables, problems }) = error {
                assert_eq!(tables, vec![table.to_owned()], "{message}");
                assert_eq!(problems.len(), 1, "{message}");
                assert!(problems[0].starts_with(table), "{message}");
                assert!(problems[0].contains(what), "expected {what:?}: {message}");
            }
            assert!(
                message.contains(table) && message.contains(what),
                "{message}"
            );
        }
        other => panic!("{table} ({what}): expected CatalogUnfenced, got {other:?}"),
    }
}

fn plain_table(name: &str) -> String {
    format!(
        "CREATE TABLE {name} (community_id uuid NOT NULL, seq int NOT NULL, body text NOT NULL)"
    )
}

fn trigger(table: &str, timing_events: &str, level_when: &str, function: &str) -> String {
    format!(
        "CREATE TRIGGER buzz_write_fence {timing_events} ON {table} {level_when} \
         EXECUTE FUNCTION {function}()"
    )
}

#[tokio::test]
async fn every_fence_that_would_not_fire_fails_the_scan_closed_naming_the_relation() {
    let db = private_db("fences").await;
    let store = &db.store;
    let fn_ok = "buzz.refuse_fenced_write";
    let before_ins_upd = "BEFORE INSERT OR UPDATE";
    let row = "FOR EACH ROW";
    let always = |t: &str| format!("ALTER TABLE {t} ENABLE ALWAYS TRIGGER buzz_write_fence");
    let t = "buzz.v";

    // The control: a sound fence passes (so every refusal below is the variant's doing).
    let mut tx = store.pool().begin().await.expect("begin");
    for sql in [
        plain_table(t),
        trigger(t, before_ins_upd, row, fn_ok),
        always(t),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut *tx)
            .await
            .expect("control");
    }
    catalog_scan_in(&mut tx, Uuid::new_v4())
        .await
        .expect("a sound fence passes");
    tx.rollback().await.expect("rollback");

    let variants: Vec<(Vec<String>, &str, &str)> = vec![
        (vec![plain_table(t)], t, "has no buzz_write_fence trigger"),
        (
            vec![
                plain_table(t),
                trigger(t, before_ins_upd, row, fn_ok),
                format!("ALTER TABLE {t} DISABLE TRIGGER buzz_write_fence"),
            ],
            t,
            "is disabled",
        ),
        (
            vec![
                plain_table(t),
                trigger(t, before_ins_upd, row, fn_ok),
                format!("ALTER TABLE {t} ENABLE REPLICA TRIGGER buzz_write_fence"),
            ],
            t,
            "fires only under session_replication_role = replica",
        ),
        (
            vec![plain_table(t), trigger(t, before_ins_upd, row, fn_ok)],
            t,
            "origin sessions only",
        ),
        (
            vec![
                plain_table(t),
                trigger(t, before_ins_upd, "FOR EACH ROW WHEN (NEW.seq > 0)", fn_ok),
                always(t),
            ],
            t,
            "WHEN condition",
        ),
        (
            vec![
                plain_table(t),
                trigger(t, "BEFORE INSERT OR UPDATE OF community_id", row, fn_ok),
                always(t),
            ],
            t,
            "column list",
        ),
        (
            vec![
                plain_table(t),
                "CREATE FUNCTION buzz.pass_through() RETURNS trigger LANGUAGE plpgsql \
                 AS $$ BEGIN RETURN NEW; END $$"
                    .to_owned(),
                trigger(t, before_ins_upd, row, "buzz.pass_through"),
                always(t),
            ],
            t,
            "does not execute buzz.refuse_fenced_write()",
        ),
        (
            vec![
                plain_table(t),
                trigger(t, "BEFORE INSERT", row, fn_ok),
                always(t),
            ],
            t,
            "does not fire on UPDATE",
        ),
        (
            vec![
                plain_table(t),
                trigger(t, "AFTER INSERT OR UPDATE", row, fn_ok),
                always(t),
            ],
            t,
            "does not fire BEFORE",
        ),
        (
            vec![
                plain_table(t),
                trigger(t, before_ins_upd, "FOR EACH STATEMENT", fn_ok),
                always(t),
            ],
            t,
            "is not FOR EACH ROW",
        ),
    ];
    for (ddl, table, what) in &variants {
        assert_unfenced(store, ddl, table, what).await;
    }

    // Partitions: the cloned trigger of one partition disabled, or merely ENABLEd.
    let partitioned = vec![
        "CREATE TABLE buzz.pv (community_id uuid NOT NULL, seq int NOT NULL) \
         PARTITION BY RANGE (seq)"
            .to_owned(),
        trigger("buzz.pv", before_ins_upd, row, fn_ok),
        always("buzz.pv"),
        "CREATE TABLE buzz.pv_a PARTITION OF buzz.pv FOR VALUES FROM (MINVALUE) TO (10)".to_owned(),
        "CREATE TABLE buzz.pv_b PARTITION OF buzz.pv FOR VALUES FROM (10) TO (20) \
         PARTITION BY HASH (seq)"
            .to_owned(),
        "CREATE TABLE buzz.pv_b0 PARTITION OF buzz.pv_b FOR VALUES WITH (MODULUS 2, REMAINDER 0)"
            .to_owned(),
        "CREATE TABLE buzz.pv_b1 PARTITION OF buzz.pv_b FOR VALUES WITH (MODULUS 2, REMAINDER 1)"
            .to_owned(),
    ];
    let with = |extra: &str| {
        let mut ddl = partitioned.clone();
        ddl.push(extra.to_owned());
        ddl
    };
    assert_unfenced(
        store,
        &with("ALTER TABLE buzz.pv_a DISABLE TRIGGER buzz_write_fence"),
        "buzz.pv_a",
        "is disabled",
    )
    .await;
    assert_unfenced(
        store,
        &with("ALTER TABLE buzz.pv_b1 ENABLE TRIGGER buzz_write_fence"),
        "buzz.pv_b1",
        "origin sessions only",
    )
    .await;
    assert_unfenced(
        store,
        &with("ALTER TABLE buzz.pv_b0 ENABLE REPLICA TRIGGER buzz_write_fence"),
        "buzz.pv_b0",
        "replica",
    )
    .await;
    // A partitioned root without the trigger (its partitions carry their own).
    let mut bare_root = vec![
        "CREATE TABLE buzz.pr (community_id uuid NOT NULL, seq int NOT NULL) \
         PARTITION BY RANGE (seq)"
            .to_owned(),
        "CREATE TABLE buzz.pr_a PARTITION OF buzz.pr FOR VALUES FROM (MINVALUE) TO (MAXVALUE)"
            .to_owned(),
    ];
    bare_root.push(trigger("buzz.pr_a", before_ins_upd, row, fn_ok));
    bare_root.push(always("buzz.pr_a"));
    assert_unfenced(
        store,
        &bare_root,
        "buzz.pr",
        "has no buzz_write_fence trigger",
    )
    .await;

    // Inheritance: triggers are not inherited, so a child (in any schema) needs its own.
    let mut inherited = vec![plain_table("buzz.ih")];
    inherited.push(trigger("buzz.ih", before_ins_upd, row, fn_ok));
    inherited.push(always("buzz.ih"));
    inherited.push("CREATE TABLE buzz.ih_child () INHERITS (buzz.ih)".to_owned());
    assert_unfenced(
        store,
        &inherited,
        "buzz.ih_child",
        "has no buzz_write_fence trigger",
    )
    .await;
    inherited.push(trigger("buzz.ih_child", before_ins_upd, row, fn_ok));
    inherited.push(always("buzz.ih_child"));
    inherited.push("CREATE SCHEMA elsewhere".to_owned());
    inherited.push("CREATE TABLE elsewhere.ih_grandchild () INHERITS (buzz.ih_child)".to_owned());
    assert_unfenced(
        store,
        &inherited,
        "elsewhere.ih_grandchild",
        "has no buzz_write_fence trigger",
    )
    .await;

    db.drop_database().await;
}

/// Runs `ddl` in a transaction, scans, rolls back: the scan must refuse naming `constraint`,
/// both tables and the action.
async fn assert_cascade_refused(
    store: &Store,
    ddl: &[String],
    constraint: &str,
    referencing: &str,
    referenced: &str,
    action: &str,
) {
    let scan = scan_rolled_back(store, ddl).await;
    match scan {
        Err(error @ StoreError::Catalog(CatalogError::CascadingReferences { .. })) => {
            assert_eq!(error.severity(), Severity::Permanent);
            let message = error.to_string();
            for name in [constraint, referencing, referenced, action] {
                assert!(message.contains(name), "expected {name:?}: {message}");
            }
            if let StoreError::Catalog(CatalogError::CascadingReferences { references }) = error {
                assert_eq!(references.len(), 1, "{message}");
                assert_eq!(references[0].constraint, constraint);
                assert_eq!(references[0].referencing, referencing);
                assert_eq!(references[0].referenced, referenced);
                assert_eq!(references[0].action, action);
            }
        }
        other => panic!("{constraint}: expected CatalogCascadingReference, got {other:?}"),
    }
}

/// Runs `ddl` in a transaction; the scan must pass.
async fn assert_scan_passes(store: &Store, ddl: &[String]) {
    let scan = scan_rolled_back(store, ddl).await;
    if let Err(error) = scan {
        panic!("{ddl:?}: expected the scan to pass, got {error}");
    }
}

#[tokio::test]
async fn cascading_foreign_keys_from_non_tenant_tables_are_refused_naming_the_constraint() {
    let db = private_db("fkrules").await;
    let store = &db.store;
    let mut tenant: Vec<String> = vec![
        "CREATE TABLE buzz.docs (id bigint PRIMARY KEY, community_id uuid NOT NULL)".to_owned(),
        "CREATE TABLE buzz.parted (id bigint, community_id uuid NOT NULL, \
         PRIMARY KEY (id, community_id)) PARTITION BY HASH (community_id)"
            .to_owned(),
        "CREATE TABLE buzz.parted_0 PARTITION OF buzz.parted FOR VALUES WITH (MODULUS 2, REMAINDER 0)"
            .to_owned(),
        "CREATE TABLE buzz.parted_1 PARTITION OF buzz.parted FOR VALUES WITH (MODULUS 2, REMAINDER 1)"
            .to_owned(),
        "CREATE TABLE buzz.base (id bigint, community_id uuid NOT NULL)".to_owned(),
        "CREATE TABLE buzz.base_child (PRIMARY KEY (id)) INHERITS (buzz.base)".to_owned(),
        "CREATE SCHEMA outside".to_owned(),
    ];
    for table in ["buzz.docs", "buzz.parted", "buzz.base", "buzz.base_child"] {
        tenant.extend(fence(table));
    }
    let with = |extra: &[&str]| {
        let mut ddl = tenant.clone();
        ddl.extend(extra.iter().map(|s| (*s).to_owned()));
        ddl
    };
    assert_scan_passes(store, &tenant).await;

    for (action, spelled) in [
        ("CASCADE", "CASCADE"),
        ("SET NULL", "SET NULL"),
        ("SET DEFAULT", "SET DEFAULT"),
    ] {
        let ddl = with(&[&format!(
            "CREATE TABLE outside.notes (id bigint, doc_id bigint DEFAULT 0, \
             CONSTRAINT notes_doc_fk FOREIGN KEY (doc_id) REFERENCES buzz.docs (id) \
             ON DELETE {action})"
        )]);
        assert_cascade_refused(
            store,
            &ddl,
            "notes_doc_fk",
            "outside.notes",
            "buzz.docs",
            spelled,
        )
        .await;
    }
    // Into a partitioned tenant table, into one of its partitions, into an inheritance child.
    assert_cascade_refused(
        store,
        &with(&["CREATE TABLE outside.links (id bigint, cid uuid, \
                 CONSTRAINT links_parted_fk FOREIGN KEY (id, cid) \
                 REFERENCES buzz.parted (id, community_id) ON DELETE CASCADE)"]),
        "links_parted_fk",
        "outside.links",
        "buzz.parted",
        "CASCADE",
    )
    .await;
    assert_cascade_refused(
        store,
        &with(&["CREATE TABLE outside.links (id bigint, cid uuid, \
                 CONSTRAINT links_part_fk FOREIGN KEY (id, cid) \
                 REFERENCES buzz.parted_1 (id, community_id) ON DELETE SET NULL)"]),
        "links_part_fk",
        "outside.links",
        "buzz.parted_1",
        "SET NULL",
    )
    .await;
    assert_cascade_refused(
        store,
        &with(&["CREATE TABLE outside.refs (child_id bigint \
                 CONSTRAINT refs_child_fk REFERENCES buzz.base_child (id) ON DELETE CASCADE)"]),
        "refs_child_fk",
        "outside.refs",
        "buzz.base_child",
        "CASCADE",
    )
    .await;
    // A table in `buzz` without `community_id` is not tenant data either.
    assert_cascade_refused(
        store,
        &with(&["CREATE TABLE buzz.lookup (doc_id bigint \
                 CONSTRAINT lookup_doc_fk REFERENCES buzz.docs (id) ON DELETE CASCADE)"]),
        "lookup_doc_fk",
        "buzz.lookup",
        "buzz.docs",
        "CASCADE",
    )
    .await;
    // A non-cascading key from outside is refused too, by the closed-world check: the purge
    // would fail on it after objects were already deleted (issue 28). A cascading key from
    // tenant data is allowed.
    for action in ["NO ACTION", "RESTRICT"] {
        let ddl = with(&[&format!(
            "CREATE TABLE outside.audit (doc_id bigint REFERENCES buzz.docs (id) ON DELETE {action})"
        )]);
        let scan = scan_rolled_back(store, &ddl).await;
        match scan {
            Err(StoreError::Catalog(CatalogError::Refused { refusals })) => {
                assert_eq!(refusals.len(), 1, "{refusals:?}");
                assert_eq!(
                    refusals[0].object,
                    "foreign key audit_doc_id_fkey on outside.audit"
                );
                assert!(refusals[0].problem.contains(action), "{refusals:?}");
            }
            other => panic!("{action}: expected a closed-world refusal, got {other:?}"),
        }
    }
    let mut tenant_child = with(&["CREATE TABLE buzz.comments (community_id uuid NOT NULL, \
         doc_id bigint REFERENCES buzz.docs (id) ON DELETE CASCADE)"]);
    tenant_child.extend(fence("buzz.comments"));
    assert_scan_passes(store, &tenant_child).await;
    db.drop_database().await;
}

#[tokio::test]
async fn a_cascading_key_added_after_approval_stops_preflight_and_purge_before_any_delete() {
    let db = private_db("fklate").await;
    let store = &db.store;
    let (target, neighbour) = two_communities(store).await;
    exec(
        store,
        "CREATE TABLE buzz.docs (id bigserial PRIMARY KEY, community_id uuid NOT NULL, \
         body text NOT NULL)",
    )
    .await;
    fence_all(store, &["buzz.docs"]).await;
    for id in [target.id, neighbour.id, target.id] {
        sqlx::query("INSERT INTO buzz.docs (community_id, body) VALUES ($1, 'doc')")
            .bind(id)
            .execute(store.pool())
            .await
            .expect("insert doc");
    }
    exec(store, "CREATE SCHEMA outside").await;
    exec(
        store,
        "CREATE TABLE outside.notes (id bigserial PRIMARY KEY, doc_id bigint, note text)",
    )
    .await;
    exec(
        store,
        "INSERT INTO outside.notes (doc_id, note) SELECT id, 'note on ' || id FROM buzz.docs",
    )
    .await;
    let notes = async || -> Vec<String> {
        sqlx::query_scalar("SELECT n::text FROM outside.notes n ORDER BY id")
            .fetch_all(store.pool())
            .await
            .expect("notes")
    };
    let notes_before = notes().await;

    let mut request = submit(store, &target).await;
    let inventory = request.take_inventory().await.expect("inventory");
    request.approve(&inventory).await;
    exec(
        store,
        "ALTER TABLE outside.notes ADD CONSTRAINT notes_doc_fk FOREIGN KEY (doc_id) \
         REFERENCES buzz.docs (id) ON DELETE CASCADE",
    )
    .await;
    let refused = request.preflight().await;
    assert!(
        matches!(&refused, Err(StoreError::Catalog(CatalogError::CascadingReferences { references }))
            if references[0].constraint == "notes_doc_fk"),
        "{refused:?}"
    );
    // Even if the workflow went on, the purge re-checks before its first delete.
    request.fence_and_drain().await;
    let refused = request.purge(10).await;
    assert!(
        matches!(
            &refused,
            Err(StoreError::Catalog(
                CatalogError::CascadingReferences { .. }
            ))
        ),
        "{refused:?}"
    );
    assert_eq!(rows_of(store, "buzz.docs", target.id).await, 2);
    assert_eq!(notes().await, notes_before);

    // The operator drops the constraint; the purge runs and the notes are untouched.
    exec(
        store,
        "ALTER TABLE outside.notes DROP CONSTRAINT notes_doc_fk",
    )
    .await;
    request.purge(10).await.expect("purge");
    assert_eq!(rows_of(store, "buzz.docs", target.id).await, 0);
    assert_eq!(rows_of(store, "buzz.docs", neighbour.id).await, 1);
    assert_eq!(notes().await, notes_before);
    db.drop_database().await;
}

/// The community is not fenced: no fence row, or one that still serves.
async fn assert_served(store: &Store, community: Uuid) {
    let fence = store.fence_status(community).await.expect("fence status");
    assert!(
        fence
            .as_ref()
            .is_none_or(|f| f.state == activities::store::FenceState::Serving),
        "preflight must refuse before the fence: {fence:?}"
    );
}

/// The preflight must refuse with drift naming exactly `added` and `removed`, permanently (the
/// request blocks instead of retrying into the fence).
fn assert_drift(result: Result<(), StoreError>, added: &[&str], removed: &[&str]) {
    match result {
        Err(error) => {
            assert_eq!(error.severity(), Severity::Permanent, "{error}");
            let message = error.to_string();
            match error {
                StoreError::Catalog(CatalogError::Drift {
                    added: found_added,
                    removed: found_removed,
                }) => {
                    assert_eq!(found_added, added, "{message}");
                    assert_eq!(found_removed, removed, "{message}");
                    for table in added.iter().chain(removed) {
                        assert!(message.contains(table), "{message}");
                    }
                }
                other => panic!("expected catalog drift, got {other:?}"),
            }
        }
        Ok(()) => panic!("preflight passed a catalog that drifted since the approval"),
    }
}

#[tokio::test]
async fn a_tenant_table_added_or_dropped_after_approval_stops_preflight_before_the_fence() {
    let db = private_db("drift").await;
    let store = &db.store;
    let (target, _neighbour) = two_communities(store).await;
    create_fenced(store, "buzz.docs", "").await;
    insert(store, "buzz.docs", target.id, 1).await;
    let mut request = submit(store, &target).await;
    let inventory = request.take_inventory().await.expect("inventory");
    assert!(
        inventory
            .catalog
            .tenant_tables
            .iter()
            .any(|t| t == "buzz.docs"),
        "{:?}",
        inventory.catalog.tenant_tables
    );
    request.approve(&inventory).await;

    // Added after the approval, fenced as the rules want and holding rows of the target that
    // nobody approved deleting.
    exec(
        store,
        "CREATE TABLE buzz.late_notes \
         (community_id uuid NOT NULL, seq int NOT NULL, body text NOT NULL)",
    )
    .await;
    fence_all(store, &["buzz.late_notes"]).await;
    insert(store, "buzz.late_notes", target.id, 1).await;
    assert_drift(request.preflight().await, &["buzz.late_notes"], &[]);
    assert_served(store, target.id).await;

    // Dropped again, the catalog is the approved one and preflight passes.
    exec(store, "DROP TABLE buzz.late_notes").await;
    request.preflight().await.expect("the approved catalog");

    // An approved tenant table dropped after the approval is drift too.
    exec(store, "DROP TABLE buzz.docs").await;
    assert_drift(request.preflight().await, &[], &["buzz.docs"]);
    assert_served(store, target.id).await;
    db.drop_database().await;
}

#[tokio::test]
async fn a_cascading_key_present_at_submit_refuses_the_inventory() {
    let db = private_db("fkearly").await;
    let store = &db.store;
    let target = community(store).await;
    exec(
        store,
        "CREATE TABLE public.channel_stats (channel_id uuid \
         CONSTRAINT channel_stats_channel_fk REFERENCES buzz.channels (id) ON DELETE SET NULL)",
    )
    .await;
    let mut request = submit(store, &target).await;
    match request.take_inventory().await {
        Err(error @ StoreError::Catalog(CatalogError::CascadingReferences { .. })) => {
            let message = error.to_string();
            for name in [
                "channel_stats_channel_fk",
                "public.channel_stats",
                "buzz.channels",
            ] {
                assert!(message.contains(name), "{message}");
            }
        }
        other => panic!("expected CatalogCascadingReference, got {other:?}"),
    }
    db.drop_database().await;
}
