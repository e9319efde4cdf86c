//! `buzz-deletion-redis-bench`: should the worker reach Redis through a `deadpool-redis` pool, as
//! the design card names, or through the one multiplexed `ConnectionManager` it uses today?
//!
//! It measures the load that matters for the choice: several namespace purges at once (one per
//! community being deleted by the worker's concurrent activities), each a SCAN MATCH COUNT 1000
//! then UNLINK loop — the commands `Cache::purge_namespace` sends — while a probe sends the small
//! command the other activities send meanwhile (PUBLISH on a control channel) every 2 ms and
//! times it. Both variants run the same loop through `redis::aio::ConnectionLike`; only the
//! connection source differs: (m) clones of one `ConnectionManager`, (p) a `deadpool-redis` pool
//! with one connection per concurrent purge plus one for the probe. Every purge is checked: the
//! namespace must be empty afterwards, and a neighbour namespace seeded alongside must keep
//! every key. Not a test: run it by hand; it rewrites `docs/benchmarks-redis.md`.
#![deny(unsafe_code)]

#[path = "../machine.rs"]
#[allow(dead_code)]
mod machine;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bench::redis_loop::{scan_page, serial_purge};
use clap::Parser;
use redis::aio::{ConnectionLike, ConnectionManager};

/// Measures concurrent namespace purges through one multiplexed connection and through a pool.
#[derive(Debug, Parser)]
#[command(name = "buzz-deletion-redis-bench")]
struct Args {
    /// Keys per purged namespace.
    #[arg(long, default_value_t = 20_000)]
    keys: u32,
    /// Concurrent purges (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    concurrency: Vec<usize>,
    /// Runs of each variant per concurrency, in ABBA order; medians are reported.
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// Where the markdown report is written.
    #[arg(long, default_value = "docs/benchmarks-redis.md")]
    docs: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Manager,
    Pool,
}

impl Variant {
    fn label(self) -> &'static str {
        match self {
            Variant::Manager => "(m) one multiplexed ConnectionManager",
            Variant::Pool => "(p) deadpool-redis pool",
        }
    }
}

/// One run's numbers.
#[derive(Debug, Clone, Copy)]
struct Run {
    wall: Duration,
    probe_p50: Duration,
    probe_p99: Duration,
    probe_max: Duration,
    connections: usize,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let url = std::env::var("REDIS_URL").context("REDIS_URL: run `source .state/env`")?;
    let client = redis::Client::open(url.as_str())?;
    let mut admin = client.get_multiplexed_async_connection().await?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let started = chrono::Utc::now();
    let mut rows = Vec::new();
    for &concurrency in &args.concurrency {
        let mut manager_runs = Vec::new();
        let mut pool_runs = Vec::new();
        for round in 0..args.repeat {
            let order = if round % 2 == 0 {
                [Variant::Manager, Variant::Pool]
            } else {
                [Variant::Pool, Variant::Manager]
            };
            for variant in order {
                let run =
                    measure(&url, &client, &mut admin, variant, concurrency, args.keys).await?;
                eprintln!("{concurrency:>3} purges, {}: {run:?}", variant.label());
                match variant {
                    Variant::Manager => manager_runs.push(run),
                    Variant::Pool => pool_runs.push(run),
                }
            }
        }
        rows.push((concurrency, median(&manager_runs), median(&pool_runs)));
    }
    let report = render(&args, &command, &started.to_rfc3339(), &rows);
    print!("{report}");
    std::fs::write(&args.docs, report).with_context(|| format!("write {}", args.docs.display()))?;
    Ok(())
}

/// Seeds `concurrency` namespaces and a neighbour, purges the namespaces at once through
/// `variant` while the probe runs, and checks what is left.
async fn measure(
    url: &str,
    client: &redis::Client,
    admin: &mut redis::aio::MultiplexedConnection,
    variant: Variant,
    concurrency: usize,
    keys: u32,
) -> Result<Run> {
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let namespaces: Vec<String> = (0..concurrency)
        .map(|i| format!("bench:{run_id}:{i}:"))
        .collect();
    let neighbour = format!("bench:{run_id}:neighbour:");
    for namespace in namespaces.iter().chain(std::iter::once(&neighbour)) {
        seed(admin, namespace, keys).await?;
    }
    let baseline = client_count(admin).await?;
    let (wall, probes, connections) = match variant {
        Variant::Manager => {
            let manager = ConnectionManager::new(client.clone()).await?;
            let connections = client_count(admin).await? - baseline;
            let (wall, probes) = purge_all(&namespaces, || {
                let manager = manager.clone();
                async move { Ok(manager) }
            })
            .await?;
            (wall, probes, connections)
        }
        Variant::Pool => {
            let config = deadpool_redis::Config::from_url(url);
            let pool = config
                .builder()
                .context("pool config")?
                .max_size(concurrency + 1)
                .runtime(deadpool_redis::Runtime::Tokio1)
                .build()
                .context("build the pool")?;
            let (wall, probes) = purge_all(&namespaces, || {
                let pool = pool.clone();
                async move { pool.get().await.context("pool.get") }
            })
            .await?;
            let connections = client_count(admin).await? - baseline;
            (wall, probes, connections)
        }
    };
    for namespace in &namespaces {
        let left = count(admin, namespace).await?;
        if left != 0 {
            bail!("{variant:?}: {left} keys of {namespace} survived the purge");
        }
    }
    let kept = count(admin, &neighbour).await?;
    if kept != u64::from(keys) {
        bail!("{variant:?}: the neighbour namespace has {kept} keys, expected {keys}");
    }
    let _: u64 = purge(admin, &neighbour).await?;
    Ok(Run {
        wall,
        probe_p50: percentile(&probes, 50),
        probe_p99: percentile(&probes, 99),
        probe_max: probes.iter().copied().max().unwrap_or_default(),
        connections,
    })
}

/// Runs one purge per namespace at once, each on a connection from `connect`, and the probe on
/// another; the wall time of the purges and every probe latency.
async fn purge_all<C, F, Fut>(
    namespaces: &[String],
    connect: F,
) -> Result<(Duration, Vec<Duration>)>
where
    C: ConnectionLike + Send + 'static,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<C>> + Send + 'static,
{
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probe = {
        let done = done.clone();
        let connection = connect();
        tokio::spawn(async move {
            let mut connection = connection.await?;
            let mut latencies = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let sent = Instant::now();
                let _: u64 = redis::cmd("PUBLISH")
                    .arg("bench:probe:conn-control")
                    .arg(r#"{"op":"DisconnectCommunity"}"#)
                    .query_async(&mut connection)
                    .await?;
                latencies.push(sent.elapsed());
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            anyhow::Ok(latencies)
        })
    };
    let started = Instant::now();
    let mut purges = Vec::new();
    for namespace in namespaces {
        let namespace = namespace.clone();
        let connection = connect();
        purges.push(tokio::spawn(async move {
            let mut connection = connection.await?;
            purge(&mut connection, &namespace).await
        }));
    }
    for purge in purges {
        purge.await.context("purge task")??;
    }
    let wall = started.elapsed();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let probes = probe.await.context("probe task")??;
    Ok((wall, probes))
}

/// One SCAN MATCH `pattern` COUNT 1000 step from `cursor`: the next cursor and the page.
/// SCAN MATCH `namespace*` COUNT 1000, UNLINK each non-empty page: `Cache::purge_namespace`'s
/// commands. The keys unlinked.
async fn purge(connection: &mut impl ConnectionLike, namespace: &str) -> Result<u64> {
    serial_purge(connection, &format!("{namespace}*")).await
}

/// `keys` string keys under `namespace`, 1,000 per pipeline.
async fn seed(connection: &mut impl ConnectionLike, namespace: &str, keys: u32) -> Result<()> {
    for start in (0..keys).step_by(1000) {
        let mut pipe = redis::pipe();
        for i in start..(start + 1000).min(keys) {
            pipe.cmd("SET")
                .arg(format!("{namespace}{i}"))
                .arg("v")
                .ignore();
        }
        let () = pipe.query_async(connection).await?;
    }
    Ok(())
}

/// Keys under `namespace` (one full SCAN pass).
async fn count(connection: &mut impl ConnectionLike, namespace: &str) -> Result<u64> {
    let pattern = format!("{namespace}*");
    let (mut cursor, mut found) = (0u64, 0u64);
    loop {
        let (next, keys) = scan_page(connection, &pattern, cursor).await?;
        found += keys.len() as u64;
        if next == 0 {
            return Ok(found);
        }
        cursor = next;
    }
}

/// Clients connected to the server now (`CLIENT LIST`), to count what a variant opened.
async fn client_count(connection: &mut impl ConnectionLike) -> Result<usize> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(connection)
        .await?;
    Ok(list.lines().filter(|line| !line.trim().is_empty()).count())
}

fn percentile(samples: &[Duration], pct: usize) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let index = (sorted.len() * pct / 100).min(sorted.len() - 1);
    sorted[index]
}

/// The run with the median wall time.
fn median(runs: &[Run]) -> Run {
    let mut sorted = runs.to_vec();
    sorted.sort_by_key(|run| run.wall);
    sorted[sorted.len() / 2]
}

fn ms(duration: Duration) -> String {
    format!("{:.2}", duration.as_secs_f64() * 1000.0)
}

fn render(args: &Args, command: &str, started: &str, rows: &[(usize, Run, Run)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Benchmark: Redis connections for concurrent purges\n"
    );
    let _ = writeln!(
        out,
        "Generated by `buzz-deletion-redis-bench` (`bench/src/bin/redis_connections.rs`), run \
         started {started}. Every number below comes from that one run.\n"
    );
    let _ = writeln!(
        out,
        "## How to run\n\n```bash\nbash deploy/local/up && source .state/env\ncargo build --workspace --bins\n{command}\n```\n"
    );
    let _ = writeln!(
        out,
        "Each row: N namespaces of {} keys each (plus a neighbour namespace that must keep every \
         key) purged at once — SCAN MATCH COUNT 1000 + UNLINK per page, the commands of \
         `Cache::purge_namespace` — while a probe sends PUBLISH on a control channel every 2 ms \
         and times each reply. (m) gives every purge and the probe a clone of one \
         `ConnectionManager` (one multiplexed TCP connection, what the worker uses); (p) gives \
         each a connection of a `deadpool-redis` pool of N + 1. Medians of {} runs per variant \
         (ABBA order). Machine: {}; Redis {} on loopback, plaintext.\n",
        args.keys,
        args.repeat,
        machine::describe(),
        redis_version()
    );
    let _ = writeln!(
        out,
        "| N purges | variant | wall (ms) | keys/s | probe p50 (ms) | probe p99 (ms) | probe max (ms) | connections opened |"
    );
    let _ = writeln!(out, "|---:|---|---:|---:|---:|---:|---:|---:|");
    for (n, manager, pool) in rows {
        for (variant, run) in [(Variant::Manager, manager), (Variant::Pool, pool)] {
            let keys_per_second = (*n as f64 * f64::from(args.keys)) / run.wall.as_secs_f64();
            let _ = writeln!(
                out,
                "| {n} | {} | {} | {:.0} | {} | {} | {} | {} |",
                variant.label(),
                ms(run.wall),
                keys_per_second,
                ms(run.probe_p50),
                ms(run.probe_p99),
                ms(run.probe_max),
                run.connections
            );
        }
    }
    out
}

fn redis_version() -> String {
    std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| {
            v.split_whitespace()
                .find_map(|w| w.strip_prefix("v=").map(str::to_owned))
        })
        .unwrap_or_else(|| "unknown".to_owned())
}
