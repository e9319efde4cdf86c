//! `buzz-deletion-pg-size-bench`: the Postgres purge of a tenant with a million rows per table,
//! interleaved with a neighbour's million, through the real worker and CLI.
//!
//! Each variant gets a database of its own: two communities seeded as usual, then `--rows` rows
//! each in `buzz.events` (whose only index on the tenant column is `(community_id)`: purged from
//! the start of the community's rows each batch) and `buzz.memberships` (primary key
//! `(community_id, pubkey)`: purged by keyset), the two communities' rows interleaved. The target
//! is deleted through a fresh worker; the benchmark polls `deletion.purge_progress` to time each
//! table's purge, reads the WAL written over the whole deletion (`pg_current_wal_lsn`), and
//! checks the target is gone and the neighbour's rows all there. Variants: with nothing else
//! running; with an older snapshot held open all along (a `REPEATABLE READ` transaction, as a
//! backup or a long report holds one); and the same with a unique `(community_id, id)` index on
//! `buzz.events`, so events are purged by keyset too. Writes a markdown report. Not a test: run it
//! by hand (see docs/benchmarks-pg-size.md).
#![deny(unsafe_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bench::check::remains;
use bench::document::thousands;
use bench::machine;
use bench::stack::Stack;
use bench::workflow::{WorkflowVariant, run_workflow};
use clap::Parser;
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

/// The two tables filled at size.
const TABLES: [&str; 2] = ["buzz.events", "buzz.memberships"];

/// The keyset purge of events, with an older snapshot open, against the purge from the start
/// under the same snapshot: it must be at least this much faster (the target).
const KEYSET_AT_LEAST: f64 = 2.0;

/// The Postgres purge at size.
#[derive(Debug, Clone, Parser)]
#[command(name = "buzz-deletion-pg-size-bench")]
struct PgArgs {
    /// Rows per table for the target and, interleaved, for the neighbour.
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Give up on one deletion after this many seconds.
    #[arg(long, default_value_t = 1800)]
    timeout_secs: u64,
    /// Directory holding `buzz-deletion` and `buzz-deletion-worker` (default: this binary's).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Where to write the markdown report ("-" writes nothing).
    #[arg(long, default_value = "docs/benchmarks-pg-size.md")]
    docs: PathBuf,
}

/// One way of running the purge.
#[derive(Debug, Clone, Copy)]
struct Setup {
    label: &'static str,
    old_snapshot: bool,
    events_keyset: bool,
    /// Plans use indexes (`enable_seqscan = off` for this database, set before the worker
    /// connects), as the planner chooses when the tenant is a small share of a large table.
    index_plans: bool,
}

const SETUPS: [Setup; 4] = [
    Setup {
        label: "nothing else running",
        old_snapshot: false,
        events_keyset: false,
        index_plans: false,
    },
    Setup {
        label: "an older snapshot held open",
        old_snapshot: true,
        events_keyset: false,
        index_plans: false,
    },
    Setup {
        label: "an older snapshot held open, index plans",
        old_snapshot: true,
        events_keyset: false,
        index_plans: true,
    },
    Setup {
        label: "an older snapshot held open, index plans, events indexed (community_id, id)",
        old_snapshot: true,
        events_keyset: true,
        index_plans: true,
    },
];

/// What one table's purge took.
#[derive(Debug, Clone, Copy, Default)]
struct TablePurge {
    rows: u64,
    took: Duration,
}

/// One measured deletion.
struct Measured {
    setup: Setup,
    seed: Duration,
    purge_stage: Duration,
    tables: BTreeMap<String, TablePurge>,
    wal_bytes: u64,
    rows_purged: u64,
    whole: Duration,
}

#[tokio::main]
async fn main() -> ExitCode {
    bench::install_crypto();
    let outcome = run(PgArgs::parse()).await;
    bench::exit_code(
        "buzz-deletion-pg-size-bench",
        outcome,
        &format!(
            "the keyset purge of events was not {KEYSET_AT_LEAST}x faster than the purge from the \
             start with an older snapshot open"
        ),
    )
}

async fn run(args: PgArgs) -> Result<bool> {
    let bin_dir = testkit::process::bin_dir(args.bin_dir.as_deref())?;
    let shared = Stack::connect().await?;
    let started_at = chrono::Utc::now().format("%Y-%m-%d %H:%M").to_string();
    let load_start = machine::load_average();
    let mut measured = Vec::new();
    for (n, setup) in SETUPS.iter().enumerate() {
        let db = testkit::private_db::private_database(&format!("pgsize{n}")).await;
        let migrated = db.migrated_owner_store(2).await;
        migrated.pool().close().await;
        let outcome = measure(&args, &bin_dir, &shared, &db, *setup).await;
        others_gone(&db.owner, &db.name).await;
        testkit::private_db::drop_database(&db.name).await;
        measured.push(outcome?);
    }
    let report = render(&args, &measured, &started_at, &load_start);
    print!("{report}");
    if args.docs.as_os_str() != "-" {
        std::fs::write(&args.docs, &report)
            .with_context(|| format!("write {}", args.docs.display()))?;
        eprintln!("wrote {}", args.docs.display());
    }
    Ok(keyset_speedup(&measured) >= KEYSET_AT_LEAST)
}

/// Waits (up to 20 s) until no other role's session is left in database `name`: the stopped
/// worker's backends exit a moment after it, and only the owner's may be ended by the owner.
async fn others_gone(owner_url: &str, name: &str) {
    let Ok(mut conn) = PgConnection::connect(owner_url).await else {
        return;
    };
    for _ in 0..100 {
        let left: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = $1 AND usename IS DISTINCT FROM current_user",
        )
        .bind(name)
        .fetch_one(&mut conn)
        .await
        .unwrap_or_default();
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _closed = conn.close().await;
}

/// Seeds `db`, deletes the target through a worker and measures it.
async fn measure(
    args: &PgArgs,
    bin_dir: &std::path::Path,
    shared: &Stack,
    db: &testkit::private_db::PrivateDatabase,
    setup: Setup,
) -> Result<Measured> {
    let stack = shared.on_database(&db.owner).await?;
    let tag = Uuid::new_v4().simple().to_string();
    let target = seed(&stack, &format!("pg-target-{tag}.bench.example")).await?;
    let neighbour = seed(&stack, &format!("pg-kept-{tag}.bench.example")).await?;
    eprintln!("{}: filling {} rows per table each", setup.label, args.rows);
    let seed_started = Instant::now();
    fill(&stack, target, neighbour, args.rows, setup.events_keyset).await?;
    let seed_took = seed_started.elapsed();
    if setup.index_plans {
        let sql = format!("ALTER DATABASE \"{}\" SET enable_seqscan = off", db.name);
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(stack.store.pool())
            .await
            .context("make the worker's plans use indexes")?;
    }
    let target_rows = table_counts(&stack, target).await?;
    let neighbour_before = table_counts(&stack, neighbour).await?;

    let mut holder = PgConnection::connect(&db.owner)
        .await
        .context("connect the snapshot holder")?;
    if setup.old_snapshot {
        sqlx::raw_sql(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM buzz.communities",
        )
        .execute(&mut holder)
        .await
        .context("open the older snapshot")?;
    }
    let wal_before = wal_lsn(&mut holder).await?;
    let variant = WorkflowVariant {
        bin_dir: bin_dir.to_path_buf(),
        delete_parallelism: 8,
        chunks_per_call: 100,
        delete_rounds_per_run: 40,
        chunk_entries: 1_000,
        timeout: Duration::from_secs(args.timeout_secs),
        env: vec![
            ("DATABASE_URL".to_owned(), db.worker.clone()),
            ("BUZZ_OWNER_DATABASE_URL".to_owned(), db.owner.clone()),
        ],
        kill_freeze_at_chunks: None,
    };
    let host = stack
        .store
        .community_by_id(target)
        .await?
        .map(|c| c.host)
        .context("the target's host")?;
    eprintln!("{}: deleting {host}", setup.label);
    let poller = tokio::spawn(poll_purge(db.owner.clone(), target, target_rows.clone()));
    let timings = run_workflow(&stack, &host, &variant, "pgsize").await;
    poller.abort();
    let table_times = poller.await.unwrap_or_default();
    let timings = timings?;
    let wal_after = wal_lsn(&mut holder).await?;
    if setup.old_snapshot {
        sqlx::raw_sql("ROLLBACK").execute(&mut holder).await?;
    }
    holder.close().await?;

    let left = remains(&stack, target).await?;
    if !left.is_empty() {
        bail!("the target was not wholly deleted: {left:?}");
    }
    let neighbour_after = table_counts(&stack, neighbour).await?;
    if neighbour_after != neighbour_before {
        bail!("the neighbour's rows changed: {neighbour_before:?} -> {neighbour_after:?}");
    }
    stack.store.pool().close().await;
    let purge_stage = timings
        .stages
        .iter()
        .find(|(stage, _)| stage == "postgres_purged")
        .map(|(_, took)| *took)
        .context("no postgres_purged checkpoint")?;
    let tables = TABLES
        .iter()
        .map(|t| {
            let rows = target_rows.get(*t).copied().unwrap_or_default();
            let took = table_times.get(*t).copied().unwrap_or_default();
            ((*t).to_owned(), TablePurge { rows, took })
        })
        .collect();
    let wal_bytes = pg_wal_diff(&db.owner, &wal_after, &wal_before).await?;
    Ok(Measured {
        setup,
        seed: seed_took,
        purge_stage,
        tables,
        wal_bytes,
        rows_purged: target_rows.values().sum(),
        whole: timings.wall,
    })
}

/// A community seeded as usual (a few objects, rows and keys); its id.
async fn seed(stack: &Stack, host: &str) -> Result<Uuid> {
    let plan = demo::SeedPlan {
        objects: 4,
        versions: 1,
        delete_markers: 0,
        rows: 4,
        redis_keys: 4,
        parallelism: 4,
    };
    let seeded = demo::seed_community(&stack.store, &stack.objects, &stack.cache, host, plan)
        .await
        .with_context(|| format!("seeding {host}"))?;
    Ok(seeded.community_id)
}

/// `rows` events and memberships for each community, the two interleaved (alternate rows of one
/// insert), as the schema owner; with `events_keyset`, a unique `(community_id, id)` index too.
async fn fill(
    stack: &Stack,
    target: Uuid,
    neighbour: Uuid,
    rows: u64,
    events_keyset: bool,
) -> Result<()> {
    let total = i64::try_from(rows.saturating_mul(2)).context("--rows is too large")?;
    let pool = stack.store.pool();
    // The row triggers (write fence, user-data declaration) cost more than the insert itself and
    // guard nothing here: no request exists yet. They are switched off for the fill and put back
    // exactly as they were (the deletion's catalogue check requires them enabled ALWAYS).
    let mut triggers = Vec::new();
    for table in TABLES {
        let states: Vec<(String, String)> = sqlx::query_as(
            "SELECT tgname::text, tgenabled::text FROM pg_catalog.pg_trigger \
             WHERE tgrelid = $1::regclass AND NOT tgisinternal",
        )
        .bind(table)
        .fetch_all(pool)
        .await?;
        let sql = format!("ALTER TABLE {table} DISABLE TRIGGER USER");
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(pool).await?;
        triggers.extend(states.into_iter().map(|(name, state)| (table, name, state)));
    }
    sqlx::query(
        "INSERT INTO buzz.events (id, community_id, pubkey, kind, content) \
         SELECT md5(g::text || $3) || md5($3 || g::text), \
                CASE WHEN g % 2 = 0 THEN $1::uuid ELSE $2::uuid END, \
                md5(g::text) || md5(g::text), 1, 'bench row ' || g \
         FROM generate_series(1, $4::bigint) g",
    )
    .bind(target)
    .bind(neighbour)
    .bind(target.simple().to_string())
    .bind(total)
    .execute(pool)
    .await
    .context("fill buzz.events")?;
    sqlx::query(
        "INSERT INTO buzz.memberships (community_id, pubkey) \
         SELECT CASE WHEN g % 2 = 0 THEN $1::uuid ELSE $2::uuid END, \
                md5(g::text || 'member') || md5('member' || g::text) \
         FROM generate_series(1, $3::bigint) g",
    )
    .bind(target)
    .bind(neighbour)
    .bind(total)
    .execute(pool)
    .await
    .context("fill buzz.memberships")?;
    for (table, name, state) in triggers {
        let how = match state.as_str() {
            "A" => "ENABLE ALWAYS",
            "R" => "ENABLE REPLICA",
            "D" => "DISABLE",
            _ => "ENABLE",
        };
        let sql = format!(
            "ALTER TABLE {table} {how} TRIGGER \"{}\"",
            name.replace('"', "\"\"")
        );
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(pool).await?;
    }
    if events_keyset {
        sqlx::query(
            "CREATE UNIQUE INDEX events_community_id_id_idx ON buzz.events (community_id, id)",
        )
        .execute(pool)
        .await
        .context("index events by (community_id, id)")?;
    }
    // Autovacuum would start on these tables once the purge leaves a million dead rows, as a
    // role the owner may not end, and keep the database from being dropped for minutes.
    sqlx::raw_sql(
        "ALTER TABLE buzz.events SET (autovacuum_enabled = off, toast.autovacuum_enabled = off); \
         ALTER TABLE buzz.memberships SET (autovacuum_enabled = off, \
           toast.autovacuum_enabled = off); \
         ANALYZE buzz.events; ANALYZE buzz.memberships",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Rows of `community` in each table of [`TABLES`].
async fn table_counts(stack: &Stack, community: Uuid) -> Result<BTreeMap<String, u64>> {
    let mut counts = BTreeMap::new();
    for table in TABLES {
        let sql = format!("SELECT count(*) FROM {table} WHERE community_id = $1");
        let (rows,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(community)
            .fetch_one(stack.store.pool())
            .await?;
        counts.insert(table.to_owned(), u64::try_from(rows).unwrap_or_default());
    }
    Ok(counts)
}

/// Polls the purge's counts (4 a second) until aborted, noting for each table of `expected` the
/// first poll that saw rows of it deleted and the first that saw all of them: its purge time.
async fn poll_purge(
    owner_url: String,
    community: Uuid,
    expected: BTreeMap<String, u64>,
) -> BTreeMap<String, Duration> {
    let mut took = BTreeMap::new();
    let Ok(mut conn) = PgConnection::connect(&owner_url).await else {
        return took;
    };
    let mut started: BTreeMap<String, Instant> = BTreeMap::new();
    loop {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT p.table_name, p.rows_deleted FROM deletion.purge_progress p \
             JOIN deletion.requests r ON r.id = p.request_id WHERE r.community_id = $1",
        )
        .bind(community)
        .fetch_all(&mut conn)
        .await
        .unwrap_or_default();
        let now = Instant::now();
        for (table, deleted) in rows {
            let Some(total) = expected.get(&table) else {
                continue;
            };
            let deleted = u64::try_from(deleted).unwrap_or_default();
            if deleted > 0 {
                started.entry(table.clone()).or_insert(now);
            }
            if deleted >= *total && !took.contains_key(&table) {
                let since = started.get(&table).copied().unwrap_or(now);
                took.insert(table, now - since);
            }
        }
        if took.len() == expected.len() {
            return took;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn wal_lsn(conn: &mut PgConnection) -> Result<String> {
    let (lsn,): (String,) = sqlx::query_as("SELECT pg_current_wal_lsn()::text")
        .fetch_one(&mut *conn)
        .await?;
    Ok(lsn)
}

/// Bytes of WAL between two positions.
async fn pg_wal_diff(url: &str, after: &str, before: &str) -> Result<u64> {
    let mut conn = PgConnection::connect(url).await?;
    let (bytes,): (i64,) =
        sqlx::query_as("SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)::bigint")
            .bind(after)
            .bind(before)
            .fetch_one(&mut conn)
            .await?;
    conn.close().await?;
    Ok(u64::try_from(bytes).unwrap_or_default())
}

fn events_took(measured: &Measured) -> f64 {
    measured
        .tables
        .get("buzz.events")
        .map_or(0.0, |t| t.took.as_secs_f64())
}

/// The purge of events from the start against by keyset, both with an older snapshot open and
/// index plans.
fn keyset_speedup(measured: &[Measured]) -> f64 {
    let with_snapshot = |keyset: bool| {
        measured
            .iter()
            .find(|m| {
                m.setup.old_snapshot && m.setup.index_plans && m.setup.events_keyset == keyset
            })
            .map(events_took)
    };
    match (with_snapshot(false), with_snapshot(true)) {
        (Some(from_start), Some(keyset)) if keyset > 0.0 => from_start / keyset,
        _ => 0.0,
    }
}

fn per_second(rows: u64, took: Duration) -> String {
    let secs = took.as_secs_f64();
    if secs <= 0.0 {
        return "–".to_owned();
    }
    thousands((rows as f64 / secs).round() as u64)
}

fn render(args: &PgArgs, measured: &[Measured], started_at: &str, load_start: &str) -> String {
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let mut out = String::new();
    out.push_str("# Benchmark: the Postgres purge at size\n\n");
    out.push_str(&format!(
        "Generated by `buzz-deletion-pg-size-bench` (crate `bench/`), run started {started_at} \
         UTC, {build} build. Every number below comes from that one run; rerun the command to \
         refresh this file.\n\n"
    ));
    out.push_str(&format!(
        "## How to run\n\n```bash\nbash deploy/local/up && source .state/env\n\
         cargo build --release --workspace --bins\n\
         target/release/buzz-deletion-pg-size-bench --rows {}\n```\n\n",
        args.rows
    ));
    out.push_str(&format!(
        "Each row below is a database of its own: two communities seeded as usual, then {} rows \
         each in `buzz.events` and in `buzz.memberships`, the target's and the neighbour's \
         interleaved (every other row of one insert). The target is deleted through a fresh \
         `buzz-deletion-worker` and the CLI (purge batches of 5,000 rows, each its own \
         transaction). A table's time runs from the first poll of `deletion.purge_progress` that \
         saw rows of it deleted to the first that saw all of them (polled 4 times a second). WAL \
         is `pg_current_wal_lsn()` before the approval and after the deletion (the whole \
         deletion; the purge is nearly all of it). Every run checks the target is wholly gone \
         and the neighbour's row counts are unchanged.\n\n\
         - `buzz.memberships` has the primary key `(community_id, pubkey)`: it is purged by \
         keyset, each batch starting after the last key of the one before.\n\
         - `buzz.events` has only `(community_id)` as migrated: each batch selects from the start \
         of the community's rows. With half the table the target's, the planner reads the heap \
         sequentially, and PostgreSQL's synchronized scans start each batch's scan where the last \
         one stopped: no batch re-reads the rows purged before it. On the community index \
         (index plans: the planner's choice when the tenant is a small share of a large table, \
         forced here with `enable_seqscan = off` for the benchmark's database, since seeding a \
         table a hundred times larger would take longer than the measurement), PostgreSQL skips \
         the index entries of rows deleted by earlier batches cheaply only once it may mark them \
         dead, which it may not while an older snapshot is open; then each batch re-reads every \
         row deleted before it. The last row gives events a unique `(community_id, id)` index, \
         and the same purge walks it by keyset.\n\n",
        thousands(args.rows)
    ));
    out.push_str(&format!(
        "## Machine\n\n- {}.\n- Load average at start: {load_start}; at end: {}.\n\n",
        machine::describe(),
        machine::load_average()
    ));
    out.push_str("## Results\n\n");
    out.push_str(
        "| setup | events purge | events rows/s | memberships purge (keyset) | memberships rows/s | \
         purge stage | WAL | WAL per row | whole deletion | filling |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for m in measured {
        let events = m.tables.get("buzz.events").copied().unwrap_or_default();
        let members = m
            .tables
            .get("buzz.memberships")
            .copied()
            .unwrap_or_default();
        out.push_str(&format!(
            "| {} | {:.1} s | {} | {:.1} s | {} | {:.1} s | {:.0} MB | {} B | {:.1} s | {:.1} s |\n",
            m.setup.label,
            events.took.as_secs_f64(),
            per_second(events.rows, events.took),
            members.took.as_secs_f64(),
            per_second(members.rows, members.took),
            m.purge_stage.as_secs_f64(),
            m.wal_bytes as f64 / 1e6,
            thousands(m.wal_bytes / m.rows_purged.max(1)),
            m.whole.as_secs_f64(),
            m.seed.as_secs_f64(),
        ));
    }
    out.push_str(&format!(
        "\n**Keyset against the purge from the start, events, an older snapshot open: {:.1}x \
         faster** (target: at least {KEYSET_AT_LEAST}x).\n\n",
        keyset_speedup(measured)
    ));
    out.push_str(
        "## Cost model\n\n\
         - A purge batch costs a few statements whatever the table's size (lock the batch's \
         rows, check key children and cross-tenant references for exactly those rows, delete \
         them), so a table's purge is linear in the tenant's rows as long as choosing the next \
         batch is. A keyset walk always is. A walk from the start is while the planner reads \
         the heap sequentially (synchronized scans carry the position from batch to batch) or \
         nothing holds an older snapshot; on the community index with an older snapshot open it \
         is quadratic (the index-plan rows).\n\
         - The keyset walk visits the heap in key order. Where the key is random with respect to \
         the heap (hash-like ids, as `pubkey` and these event ids), that costs more than one \
         sequential pass in the shape where the tenant is half the table (memberships against \
         events in the first rows). It is used wherever an index allows it for its bounded \
         worst case.\n\
         - WAL is about one heap delete record per row plus index entries and full-page images \
         after each checkpoint; it does not depend on how the batches are chosen.\n\
         - A tenant table without a unique index led by `community_id` is purged correctly, from \
         the start each batch; give it one (its primary key with `community_id` first is the \
         usual shape) where tenants are a small share of large tables and long transactions are \
         common.\n",
    );
    out
}
