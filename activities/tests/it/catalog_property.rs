//! Property test of the row purge over generated tenant catalogs, against a real PostgreSQL.
//!
//! Each case builds a random mix of plain tables, partitioned tables (list, hash and range, one to
//! three levels) and inheritance trees (children and grandchildren, some outside schema `buzz`),
//! with tenant-to-tenant foreign keys (`NO ACTION`, `CASCADE`, `SET NULL`), fills them with rows of
//! two or three communities in a random order, then deletes the first community through the
//! store's request calls. Invariant: the inventory counted each target row once, the target has no
//! row left anywhere, and every row of every other community is byte-identical in the same heap at
//! the same ctid. Runs in a database of its own (committed tables are seen by every catalog scan).

use crate::store_support;

use std::collections::BTreeMap;

use activities::store::{Community, Store};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use store_support::community;
use store_support::private_db::private_db;
use store_support::request_flow::submit;

/// How one level of a partitioned table splits its rows.
#[derive(Debug, Clone, Copy)]
enum Split {
    /// By `community_id` at the top level (one partition per community and a default), by
    /// `seq` below.
    List,
    /// By `seq`, modulus 2.
    Hash,
    /// By `seq`, below 3 and from 3.
    Range,
}

#[derive(Debug, Clone)]
enum Layout {
    Plain,
    Partitioned(Vec<Split>),
    /// Children, each with or without a grandchild; the flag puts that child outside `buzz`.
    Inherited(Vec<(bool, bool)>),
}

#[derive(Debug, Clone, Copy)]
enum OnDelete {
    NoAction,
    Cascade,
    SetNull,
}

impl OnDelete {
    fn sql(self) -> &'static str {
        match self {
            OnDelete::NoAction => "NO ACTION",
            OnDelete::Cascade => "CASCADE",
            OnDelete::SetNull => "SET NULL",
        }
    }
}

/// One row: community index, `seq`, and a pick (which tree member receives it, which referenced
/// row it points at).
type RowSpec = (usize, i32, usize);

#[derive(Debug, Clone)]
struct TableSpec {
    layout: Layout,
    /// A foreign key to an earlier table (used only when that one is plain).
    references: Option<(usize, OnDelete)>,
    rows: Vec<RowSpec>,
}

#[derive(Debug, Clone)]
struct CatalogSpec {
    communities: usize,
    tables: Vec<TableSpec>,
    batch_rows: u32,
}

fn split() -> impl Strategy<Value = Split> {
    prop_oneof![Just(Split::List), Just(Split::Hash), Just(Split::Range)]
}

fn layout() -> impl Strategy<Value = Layout> {
    prop_oneof![
        Just(Layout::Plain),
        prop::collection::vec(split(), 1..=3).prop_map(Layout::Partitioned),
        prop::collection::vec((any::<bool>(), any::<bool>()), 1..=2).prop_map(Layout::Inherited),
    ]
}

fn on_delete() -> impl Strategy<Value = OnDelete> {
    prop_oneof![
        Just(OnDelete::NoAction),
        Just(OnDelete::Cascade),
        Just(OnDelete::SetNull)
    ]
}

fn catalog(communities: usize) -> impl Strategy<Value = CatalogSpec> {
    let table = (
        layout(),
        prop::option::of((0usize..4, on_delete())),
        prop::collection::vec((0..communities, 0i32..6, 0usize..4), 0..8),
    )
        .prop_map(|(layout, references, rows)| TableSpec {
            layout,
            references,
            rows,
        });
    (prop::collection::vec(table, 1..=4), 1u32..=3).prop_map(move |(tables, batch_rows)| {
        CatalogSpec {
            communities,
            tables,
            batch_rows,
        }
    })
}

fn any_catalog() -> impl Strategy<Value = CatalogSpec> {
    (2usize..=3).prop_flat_map(catalog)
}

/// The DDL of one table and the relations rows can be inserted into (for an inheritance tree,
/// every member; otherwise the root).
struct Built {
    root: String,
    ddl: Vec<String>,
    members: Vec<String>,
    plain: bool,
}

fn fence(table: &str) -> [String; 2] {
    [
        format!(
            "CREATE TRIGGER buzz_write_fence BEFORE INSERT OR UPDATE ON {table} \
             FOR EACH ROW EXECUTE FUNCTION buzz.refuse_fenced_write()"
        ),
        format!("ALTER TABLE {table} ENABLE ALWAYS TRIGGER buzz_write_fence"),
    ]
}

/// `PARTITION BY …` for `split` at `level`, and the partition bounds it gets.
fn partitioning(split: Split, level: usize, communities: &[Community]) -> (String, Vec<String>) {
    match (split, level) {
        (Split::List, 0) => {
            let mut bounds: Vec<String> = communities
                .iter()
                .map(|c| format!("FOR VALUES IN ('{}')", c.id))
                .collect();
            bounds.push("DEFAULT".to_owned());
            ("PARTITION BY LIST (community_id)".to_owned(), bounds)
        }
        (Split::List, _) => (
            "PARTITION BY LIST (seq)".to_owned(),
            vec!["FOR VALUES IN (0, 1, 2)".to_owned(), "DEFAULT".to_owned()],
        ),
        (Split::Hash, _) => (
            "PARTITION BY HASH (seq)".to_owned(),
            (0..2)
                .map(|r| format!("FOR VALUES WITH (MODULUS 2, REMAINDER {r})"))
                .collect(),
        ),
        (Split::Range, _) => (
            "PARTITION BY RANGE (seq)".to_owned(),
            vec![
                "FOR VALUES FROM (MINVALUE) TO (3)".to_owned(),
                "FOR VALUES FROM (3) TO (MAXVALUE)".to_owned(),
            ],
        ),
    }
}

/// Creates the partitions of `parent` for `levels[level..]`.
fn partitions(
    parent: &str,
    levels: &[Split],
    level: usize,
    communities: &[Community],
    ddl: &mut Vec<String>,
) {
    let Some(split) = levels.get(level) else {
        return;
    };
    let (_, bounds) = partitioning(*split, level, communities);
    for (k, bound) in bounds.iter().enumerate() {
        let child = format!("{parent}_{k}");
        let below = levels
            .get(level + 1)
            .map(|next| partitioning(*next, level + 1, communities).0)
            .unwrap_or_default();
        ddl.push(format!(
            "CREATE TABLE {child} PARTITION OF {parent} {bound} {below}"
        ));
        partitions(&child, levels, level + 1, communities, ddl);
    }
}

fn build(
    name: &str,
    spec: &TableSpec,
    references: Option<(&str, OnDelete)>,
    communities: &[Community],
) -> Built {
    let root = format!("buzz.{name}");
    let fk = references
        .map(|(target, action)| {
            format!(
                ", ref_id bigint REFERENCES {target} (id) ON DELETE {}",
                action.sql()
            )
        })
        .unwrap_or_default();
    let columns = "community_id uuid NOT NULL, seq int NOT NULL, body text NOT NULL";
    let mut ddl = Vec::new();
    let mut members = vec![root.clone()];
    match &spec.layout {
        Layout::Plain => {
            ddl.push(format!(
                "CREATE TABLE {root} (id bigserial PRIMARY KEY, {columns}{fk})"
            ));
            ddl.extend(fence(&root));
        }
        Layout::Partitioned(levels) => {
            let (by, _) = partitioning(levels[0], 0, communities);
            ddl.push(format!(
                "CREATE TABLE {root} (id bigserial, {columns}{fk}) {by}"
            ));
            ddl.extend(fence(&root));
            partitions(&root, levels, 0, communities, &mut ddl);
        }
        Layout::Inherited(children) => {
            ddl.push(format!("CREATE TABLE {root} (id bigserial, {columns}{fk})"));
            ddl.extend(fence(&root));
            for (k, (grandchild, elsewhere)) in children.iter().enumerate() {
                let schema = if *elsewhere { "prop_ext" } else { "buzz" };
                let child = format!("{schema}.{name}_c{k}");
                ddl.push(format!("CREATE TABLE {child} () INHERITS ({root})"));
                ddl.extend(fence(&child));
                members.push(child.clone());
                if *grandchild {
                    let grand = format!("{schema}.{name}_c{k}_g");
                    ddl.push(format!(
                        "CREATE TABLE {grand} (note text) INHERITS ({child})"
                    ));
                    ddl.extend(fence(&grand));
                    members.push(grand);
                }
            }
        }
    }
    Built {
        root,
        ddl,
        members,
        plain: matches!(spec.layout, Layout::Plain),
    }
}

async fn exec(store: &Store, sql: &str) -> Result<(), TestCaseError> {
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(store.pool())
        .await
        .map(|_| ())
        .map_err(|e| TestCaseError::fail(format!("{sql}: {e}")))
}

/// Every row under `root` not of `target`, with heap and ctid.
async fn rows_of_others(
    store: &Store,
    root: &str,
    target: uuid::Uuid,
) -> Result<Vec<String>, TestCaseError> {
    let sql = format!(
        "SELECT format('%s %s %s', t.tableoid::regclass, t.ctid, t::text) FROM {root} t \
         WHERE community_id <> $1 ORDER BY 1"
    );
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(target)
        .fetch_all(store.pool())
        .await
        .map_err(|e| TestCaseError::fail(format!("rows of others in {root}: {e}")))
}

async fn rows_of(store: &Store, root: &str, community: uuid::Uuid) -> Result<i64, TestCaseError> {
    let sql = format!("SELECT count(*) FROM {root} WHERE community_id = $1");
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(community)
        .fetch_one(store.pool())
        .await
        .map_err(|e| TestCaseError::fail(format!("count {root}: {e}")))
}

async fn run_case(store: &Store, case: usize, spec: &CatalogSpec) -> Result<(), TestCaseError> {
    let mut communities = Vec::new();
    for _ in 0..spec.communities {
        communities.push(community(store).await);
    }
    let target = communities[0].clone();

    let mut built: Vec<Built> = Vec::new();
    for (i, table) in spec.tables.iter().enumerate() {
        let references = table.references.and_then(|(j, action)| {
            let j = j % (i.max(1));
            (j < i && built[j].plain).then(|| (built[j].root.clone(), action))
        });
        let b = build(
            &format!("p{case}_{i}"),
            table,
            references.as_ref().map(|(t, a)| (t.as_str(), *a)),
            &communities,
        );
        for sql in &b.ddl {
            exec(store, sql).await?;
        }
        for &(c, seq, pick) in &table.rows {
            let into = &b.members[pick % b.members.len()];
            let (ref_col, ref_val) = match &references {
                Some((referenced, _)) => (
                    ", ref_id",
                    format!(
                        ", (SELECT id FROM {referenced} WHERE community_id = $1 \
                         ORDER BY id LIMIT 1 OFFSET {pick})"
                    ),
                ),
                None => ("", String::new()),
            };
            let sql = format!(
                "INSERT INTO {into} (community_id, seq, body{ref_col}) \
                 VALUES ($1, $2, md5(random()::text){ref_val})"
            );
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(communities[c].id)
                .bind(seq)
                .execute(store.pool())
                .await
                .map_err(|e| TestCaseError::fail(format!("insert into {into}: {e}")))?;
        }
        built.push(b);
    }

    let mut expected_counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut others_before = Vec::new();
    for (b, table) in built.iter().zip(&spec.tables) {
        let target_rows = table.rows.iter().filter(|(c, _, _)| *c == 0).count();
        expected_counts.insert(b.root.clone(), target_rows as u64);
        others_before.push(rows_of_others(store, &b.root, target.id).await?);
    }

    let mut request = submit(store, &target).await;
    let inventory = request
        .take_inventory()
        .await
        .map_err(|e| TestCaseError::fail(format!("inventory: {e}")))?;
    for (root, expected) in &expected_counts {
        let counted = inventory
            .catalog
            .row_counts
            .iter()
            .find(|c| &c.table == root)
            .map(|c| c.rows);
        prop_assert_eq!(counted, Some(*expected), "inventory count of {}", root);
    }
    request.approve(&inventory).await;
    request
        .preflight()
        .await
        .map_err(|e| TestCaseError::fail(format!("preflight: {e}")))?;
    request.fence_and_drain().await;
    request
        .purge(spec.batch_rows)
        .await
        .map_err(|e| TestCaseError::fail(format!("purge: {e}")))?;

    for (b, before) in built.iter().zip(&others_before) {
        prop_assert_eq!(rows_of(store, &b.root, target.id).await?, 0, "{}", b.root);
        let after = rows_of_others(store, &b.root, target.id).await?;
        prop_assert_eq!(&after, before, "other communities' rows in {}", b.root);
    }
    let left = store
        .count_community_rows(target.id)
        .await
        .map_err(|e| TestCaseError::fail(format!("count: {e}")))?;
    prop_assert!(left.iter().all(|c| c.rows == 0), "{:?}", left);

    for b in built.iter().rev() {
        exec(store, &format!("DROP TABLE {} CASCADE", b.root)).await?;
    }
    Ok(())
}

#[test]
fn purging_one_community_leaves_every_other_row_of_any_catalog_unchanged() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let db = runtime.block_on(private_db("prop"));
    runtime
        .block_on(exec(&db.store, "CREATE SCHEMA prop_ext"))
        .expect("schema");
    let mut runner = TestRunner::new(Config {
        cases: 24,
        max_shrink_iters: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(&any_catalog(), |spec| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        runtime.block_on(run_case(&db.store, n, &spec))
    });
    runtime.block_on(db.drop_database());
    if let Err(error) = result {
        panic!("{error}");
    }
}
