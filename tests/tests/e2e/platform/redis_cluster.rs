//! Deletions with the worker on the local Redis Cluster (`BUZZ_REDIS_MODE=cluster`, every node
//! a seed): a community whose keys sit on every primary is deleted while one primary crashes in
//! the middle of the Redis purge and its replica takes over; a user with keys on every primary is
//! erased; nobody else's keys change by a byte; and a worker whose single-node setting names a
//! cluster node refuses to start, naming the fix.

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use activities::redis::namespace_pattern;
use activities::taxonomy::user_keys::user_key_scan_pattern;
use testkit::prelude::*;
use testkit::records::stage_of;
use testkit::redis_cluster::{
    self, Node, cluster_cache, cluster_env, event_keys, keys_on_any_node, node_connection,
    node_ports, primaries, primaries_holding, primary_ports, seed_keys,
};
use testkit::workers::refused_in_one_line;
use uuid::Uuid;

use crate::user::erasure::{fresh_pubkey, member, seed_footprint, submit_user, without_user};

/// The crash test takes it for writing, the others for reading.
fn cluster_lock() -> &'static tokio::sync::RwLock<()> {
    static LOCK: OnceLock<tokio::sync::RwLock<()>> = OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::RwLock::new(()))
}

/// The shared stack with the cluster as its Redis: seeding and snapshots go to the cluster.
async fn cluster_stack() -> Stack {
    Stack {
        cache: cluster_cache().await,
        ..stack().await
    }
}

/// The story's stack with the cluster as its Redis, a worker on a queue named after `tag` and
/// the CLI of that queue, both on the cluster too (they inherit the single-node settings
/// otherwise). Take the outage and cluster locks first.
async fn on_cluster(tag: &str) -> (Stack, Cli, WorkerProcess) {
    let stack = cluster_stack().await;
    let queue = unique_queue(tag);
    let env = cluster_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let worker = WorkerProcess::start(&queue, &env).await;
    let cli = env
        .iter()
        .fold(Cli::new(&queue), |cli, (k, v)| cli.with_env(k, v));
    (stack, cli, worker)
}

/// Writes on `primaries` held (`CLIENT PAUSE … WRITE`: reads, SCAN and the cluster bus go on)
/// until dropped.
struct WritesPaused(Vec<u16>);

impl WritesPaused {
    fn hold(primaries: &[Node]) -> Self {
        for primary in primaries {
            let _: () = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(120_000)
                .arg("WRITE")
                .query(&mut node_connection(primary.port))
                .unwrap_or_else(|e| panic!("CLIENT PAUSE on {}: {e}", primary.port));
        }
        Self(primaries.iter().map(|p| p.port).collect())
    }
}

impl Drop for WritesPaused {
    fn drop(&mut self) {
        for port in &self.0 {
            if let Ok(mut connection) = redis::Client::open(format!("redis://127.0.0.1:{port}"))
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            {
                let _: redis::RedisResult<()> =
                    redis::cmd("CLIENT").arg("UNPAUSE").query(&mut connection);
            }
        }
    }
}

/// The primary on which a client waits in UNLINK (held by [`WritesPaused`]), once one does.
fn primary_with_a_held_unlink(primaries: &[Node], within: Duration) -> Node {
    let deadline = Instant::now() + within;
    loop {
        for primary in primaries {
            let clients: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query(&mut node_connection(primary.port))
                .unwrap_or_default();
            let held = clients.lines().any(|client| {
                client.contains("cmd=unlink")
                    && client
                        .split_whitespace()
                        .any(|field| field.starts_with("flags=") && field.contains('b'))
            });
            if held {
                return primary.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "the worker's purge never reached an UNLINK within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Brings back the node the test crashed, even when the test fails half-way.
struct RestartStoppedNodes;

impl Drop for RestartStoppedNodes {
    fn drop(&mut self) {
        redis_cluster::restart_stopped_nodes();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_community_on_every_primary_is_deleted_while_one_crashes_mid_purge_and_its_replica_takes_over()
 {
    let _shared = outage_lock().read().await;
    let _exclusive = cluster_lock().write().await;
    tokio::task::spawn_blocking(redis_cluster::wait_until_ready)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (stack, cli, _worker) = on_cluster("cluster").await;

    let target = Tenant::seed(&stack, "cluster-target", small_plan()).await;
    // Keys enough that every primary holds some of the target's.
    seed_keys(&stack.cache, &event_keys(target.id, 300)).await;
    let target_before = snapshot(&stack, target.id).await;
    let target_keys: Vec<String> = target_before.keys.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(target_keys.len(), 307);
    assert_eq!(primaries_holding(&target_keys), primary_ports());
    let mut neighbours = Vec::new();
    for tag in ["cluster-left", "cluster-right"] {
        let neighbour = Tenant::seed(&stack, tag, small_plan()).await;
        neighbours.push(neighbour.kept(&stack).await);
    }

    let (id, digest) = cli.submit(&target.host, "alice", &[]).await;
    let request: Uuid = id
        .parse()
        .unwrap_or_else(|e| panic!("request id {id}: {e}"));
    let inventoried: i64 = sqlx::query_scalar(
        "SELECT (inventory->>'redis_keys')::bigint FROM deletion.requests WHERE id = $1::uuid",
    )
    .bind(&id)
    .fetch_one(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("inventory of {id}: {e}"));
    assert_eq!(
        inventoried, 307,
        "the frozen inventory counts the keys of every primary"
    );
    cli.approve(&id, "bob", &digest).await.expect_code(0);

    // Once drained (no Redis write is left before the purge), hold writes on every primary: the
    // purge's first UNLINK waits, so the crash lands in the middle of the purge, not around it.
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let stage = stage_of(&stack, request).await;
        assert!(
            ![
                "cache_purged",
                "logically_verified",
                "retention_pending",
                "aborted"
            ]
            .contains(&stage.as_str()),
            "the purge ran before the test could hold it (stage {stage})"
        );
        if ["drained", "bindings_removed", "postgres_purged"].contains(&stage.as_str()) {
            break;
        }
        assert!(Instant::now() < deadline, "stuck at stage {stage}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = primaries();
    let paused = WritesPaused::hold(&before);
    let held = {
        let before = before.clone();
        tokio::task::spawn_blocking(move || {
            primary_with_a_held_unlink(&before, Duration::from_secs(240))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    };
    assert_eq!(stage_of(&stack, request).await, "postgres_purged");

    let _restart = RestartStoppedNodes;
    let promoted =
        tokio::task::spawn_blocking(move || redis_cluster::crash_and_fail_over(held.port))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    drop(paused);
    assert!(primary_ports().contains(&promoted));

    cli.watch_to_end(&id).await;
    let status = cli
        .run(&["community", "status", &id])
        .await
        .expect_code(0)
        .json();
    assert_eq!(status["phase"], "retention_pending", "{status}");
    target.assert_gone(&stack, "the target").await;
    for neighbour in &neighbours {
        let what = format!("neighbour {}", neighbour.community);
        neighbour.assert_unchanged(&stack, &what).await;
    }
    drop(_restart);
    // The crashed node is back (a replica now); no node holds a key of the target.
    let left = keys_on_any_node(&namespace_pattern(target.id));
    assert!(left.is_empty(), "keys left on nodes: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_keys_on_every_primary_is_erased_and_everyone_elses_keys_are_byte_identical() {
    let _shared = outage_lock().read().await;
    let _cluster = cluster_lock().read().await;
    let (stack, cli, _worker) = on_cluster("cluster-user").await;
    let user = fresh_pubkey();
    let other = fresh_pubkey();
    let community = small_community(&stack, "cluster-user").await;
    let seeded = seed_footprint(&stack, community, &user, &member(2, 1, 40)).await;
    seed_footprint(&stack, community, &other, &member(1, 0, 12)).await;
    assert_eq!(primaries_holding(&seeded.keys), primary_ports());
    let before = snapshot(&stack, community).await;

    let submitted = submit_user(&cli, &user).await;
    assert_eq!(
        submitted.footprint(community)["user_keys"],
        40,
        "the inventory counts the user's keys on every primary: {}",
        submitted.json
    );
    cli.user_approve(&submitted.id, "bob", &submitted.digest)
        .await
        .expect_code(0);
    cli.user_run(&submitted.id).await.expect_exit(0);

    let expected = without_user(&before, community, &user, &BTreeSet::new(), &seeded.agents);
    assert_ne!(expected, before);
    assert_unchanged(
        &stack,
        community,
        &expected,
        &format!("community {community} after the user's erasure"),
    )
    .await;
    let left = keys_on_any_node(&user_key_scan_pattern(community, &user));
    assert!(left.is_empty(), "keys of the user left on nodes: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_single_node_setting_names_a_cluster_node_refuses_to_start_naming_the_fix() {
    // Not while the crash test has a primary down: the node asked must answer.
    let _cluster = cluster_lock().read().await;
    let node = format!("redis://127.0.0.1:{}", node_ports()[0]);
    for (set, remove, expected) in [
        (
            vec![("REDIS_URL", node.as_str())],
            vec!["BUZZ_REDIS_MODE"],
            [
                format!("Redis at {node} is not what the configuration says"),
                "is a Redis Cluster node".to_owned(),
                "set BUZZ_REDIS_MODE=cluster".to_owned(),
            ],
        ),
        (
            vec![("BUZZ_REDIS_MODE", "cluster")],
            vec![],
            [
                "is a standalone server".to_owned(),
                "not a Redis Cluster node".to_owned(),
                "unset BUZZ_REDIS_MODE".to_owned(),
            ],
        ),
    ] {
        let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
        refused_in_one_line(&set, &remove, &expected).await;
    }
}
