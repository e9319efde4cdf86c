//! The local Redis Cluster (`deploy/local/up`: three primaries with one replica each on
//! loopback): a cluster-mode [`Cache`], the environment that points a worker or the CLI at it,
//! where each key lives, keys seeded so that every primary holds some (a target and a neighbour
//! with keys in every slot range), and the topology changes the tests make happen (a failover
//! promoting a replica, a slot migration). Nothing here skips: a cluster that does not answer
//! fails the test naming how to start it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use activities::redis::{Cache, RedisConfig, namespace_pattern};
use futures::{StreamExt, TryStreamExt, stream};
use stack_config::env::{REDIS_MODE, REDIS_URL};
use uuid::Uuid;

use crate::env::{HOW_TO_START, required};

/// The env file's variable listing every node of the local cluster as seed URLs.
pub const CLUSTER_URL: &str = "BUZZ_REDIS_CLUSTER_URL";

/// Slots of a Redis Cluster.
pub const SLOTS: u16 = 16_384;

/// The seed URLs of the local cluster (`BUZZ_REDIS_CLUSTER_URL`).
pub fn cluster_url() -> String {
    required(CLUSTER_URL)
}

/// The variables that put a worker or the CLI on the local cluster.
pub fn cluster_env() -> Vec<(&'static str, String)> {
    vec![
        (REDIS_MODE, "cluster".to_owned()),
        (REDIS_URL, cluster_url()),
    ]
}

/// A cluster-mode cache on the local cluster, or a panic saying how to start it.
pub async fn cluster_cache() -> Cache {
    let url = cluster_url();
    Cache::connect_with(&RedisConfig::cluster(&url))
        .await
        .unwrap_or_else(|e| panic!("the Redis Cluster at {url} is not usable: {e}\n{HOW_TO_START}"))
}

/// The port of every node of the local cluster.
pub fn node_ports() -> Vec<u16> {
    cluster_url()
        .split(',')
        .filter_map(|url| url.trim().trim_end_matches('/').rsplit(':').next())
        .filter_map(|port| port.parse().ok())
        .collect()
}

/// The hash slot of `key` (CRC16/XMODEM of its hash tag, or of the key, modulo 16384), as the
/// cluster computes it.
pub fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = bytes
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            let close = rest.iter().position(|b| *b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(bytes);
    let mut crc: u16 = 0;
    for byte in hashed {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % SLOTS
}

/// A node as `CLUSTER NODES` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Node id.
    pub id: String,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Whether it is a primary.
    pub primary: bool,
    /// The primary it replicates (replicas only).
    pub primary_id: Option<String>,
    /// The slots it serves, inclusive ranges.
    pub ranges: Vec<(u16, u16)>,
}

impl Node {
    /// Whether it serves `slot`.
    pub fn serves(&self, slot: u16) -> bool {
        self.ranges.iter().any(|(a, b)| (*a..=*b).contains(&slot))
    }
}

/// A blocking connection to the node on `port`.
pub fn node_connection(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(5)))
        .unwrap_or_else(|e| {
            panic!(
                "the Redis Cluster node on 127.0.0.1:{port} does not answer: {e}\n{HOW_TO_START}"
            )
        })
}

/// `CLUSTER NODES` as the node on `port` sees the cluster.
pub fn nodes_seen_by(port: u16) -> Vec<Node> {
    try_nodes_seen_by(port)
        .unwrap_or_else(|| panic!("CLUSTER NODES on 127.0.0.1:{port} failed\n{HOW_TO_START}"))
}

/// [`nodes_seen_by`], or `None` when the node does not answer (a node a test stopped).
pub fn try_nodes_seen_by(port: u16) -> Option<Vec<Node>> {
    let mut connection = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(2)))
        .ok()?;
    let text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut connection)
        .ok()?;
    let nodes = text
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port = fields
                .get(1)?
                .split(['@', ','])
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()?;
            let flags: Vec<&str> = fields.get(2)?.split(',').collect();
            let ranges = fields
                .iter()
                .skip(8)
                .filter(|token| !token.starts_with('['))
                .filter_map(|token| match token.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => token.parse().ok().map(|s| (s, s)),
                })
                .collect();
            Some(Node {
                id: (*fields.first()?).to_owned(),
                port,
                primary: flags.contains(&"master"),
                primary_id: fields
                    .get(3)
                    .filter(|id| **id != "-")
                    .map(|id| (*id).to_owned()),
                ranges,
            })
        })
        .collect();
    Some(nodes)
}

/// The ports of the nodes that answer.
pub fn live_ports() -> Vec<u16> {
    node_ports()
        .into_iter()
        .filter(|port| try_nodes_seen_by(*port).is_some())
        .collect()
}

/// The cluster as its first answering node sees it.
pub fn nodes() -> Vec<Node> {
    node_ports()
        .into_iter()
        .find_map(try_nodes_seen_by)
        .unwrap_or_else(|| panic!("no node of the Redis Cluster answers\n{HOW_TO_START}"))
}

/// The primaries that serve slots, by port.
pub fn primaries() -> Vec<Node> {
    let mut primaries: Vec<Node> = nodes()
        .into_iter()
        .filter(|n| n.primary && !n.ranges.is_empty())
        .collect();
    primaries.sort_by_key(|n| n.port);
    primaries
}

/// The primary serving `slot`.
pub fn owner_of(slot: u16) -> Node {
    primaries()
        .into_iter()
        .find(|n| n.serves(slot))
        .unwrap_or_else(|| panic!("no primary serves slot {slot}: the cluster is not whole"))
}

/// The primaries serving slots, as one node sees them: port and slot ranges, by port.
type PrimariesView = Vec<(u16, Vec<(u16, u16)>)>;

/// Waits (at most 30 s) until the cluster is whole ([`wait_until_whole`]), every node answers,
/// and every node sees each primary serving slots with a replica: the state a test that fails
/// a primary over starts from. A primary failed over by the test before keeps serving as a
/// replica only once it has learnt its successor, a moment after the promotion has spread.
pub fn wait_until_ready() {
    wait_until_whole();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let views: Vec<Vec<Node>> = node_ports()
            .into_iter()
            .map(try_nodes_seen_by)
            .collect::<Option<_>>()
            .unwrap_or_default();
        let replicated = |nodes: &Vec<Node>| {
            nodes
                .iter()
                .filter(|n| n.primary && !n.ranges.is_empty())
                .all(|p| {
                    nodes
                        .iter()
                        .any(|r| r.primary_id.as_deref() == Some(p.id.as_str()))
                })
        };
        if !views.is_empty() && views.iter().all(replicated) {
            return wait_until_whole();
        }
        assert!(
            Instant::now() < deadline,
            "the Redis Cluster has a primary without a replica after 30 s: {:?}",
            nodes()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits (at most 30 s) until every node that answers sees the same primaries serving all
/// 16384 slots; panics naming what is still wrong.
pub fn wait_until_whole() {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let live = live_ports();
        let views: Vec<PrimariesView> = live
            .iter()
            .filter_map(|port| try_nodes_seen_by(*port))
            .map(|nodes| {
                let mut primaries: Vec<_> = nodes
                    .into_iter()
                    .filter(|n| n.primary && !n.ranges.is_empty())
                    .map(|n| (n.port, n.ranges))
                    .collect();
                primaries.sort();
                primaries
            })
            .collect();
        let covered: u32 = views
            .first()
            .into_iter()
            .flatten()
            .flat_map(|(_, ranges)| ranges)
            .map(|(a, b)| u32::from(b - a) + 1)
            .sum();
        let agreed = views.windows(2).all(|w| w[0] == w[1]);
        let info: String = live
            .first()
            .and_then(|port| {
                redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut node_connection(*port))
                    .ok()
            })
            .unwrap_or_default();
        if agreed && covered == u32::from(SLOTS) && info.contains("cluster_state:ok") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the Redis Cluster did not settle within 30 s: {views:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Fails the primary on `primary_port` over to its replica with `CLUSTER FAILOVER` (run on the
/// replica: a clean failover, nothing killed) and waits until every node sees the replica as the
/// primary. Returns the new primary's port. Blocking: callable from a synchronous callback.
pub fn fail_over(primary_port: u16) -> u16 {
    let replica = replica_of(primary_port);
    promote(replica.port, "FAILOVER", &[]);
    replica.port
}

/// The replica of the primary on `primary_port`; panics unless that node is a primary with one.
fn replica_of(primary_port: u16) -> Node {
    let all = nodes();
    let primary = all
        .iter()
        .find(|n| n.port == primary_port && n.primary)
        .unwrap_or_else(|| panic!("127.0.0.1:{primary_port} is not a primary: {all:?}"));
    all.iter()
        .find(|n| n.primary_id.as_deref() == Some(primary.id.as_str()))
        .unwrap_or_else(|| panic!("127.0.0.1:{primary_port} has no replica: {all:?}"))
        .clone()
}

/// Stops the primary on `primary_port` as a crash would (`SHUTDOWN NOSAVE`: its keys die with
/// it), then promotes its replica at once with `CLUSTER FAILOVER FORCE` (what the cluster does
/// by itself after `cluster-node-timeout`), and waits until the nodes left agree. Returns the
/// new primary's port; [`restart_stopped_nodes`] brings the stopped one back (as a replica).
pub fn crash_and_fail_over(primary_port: u16) -> u16 {
    let replica = replica_of(primary_port);
    // The server closes the connection as it exits: the reply is an error by design.
    let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN")
        .arg("NOSAVE")
        .query(&mut node_connection(primary_port));
    let deadline = Instant::now() + Duration::from_secs(30);
    while try_nodes_seen_by(primary_port).is_some() {
        assert!(Instant::now() < deadline, "{primary_port} did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
    promote(replica.port, "FAILOVER", &["FORCE"]);
    replica.port
}

/// Asks the replica on `port` to take over its primary's slots with `CLUSTER <command>
/// <options>` and waits until every node agrees. Redis 7.0 can end a failover requested soon
/// after an earlier one on the same replica without a new config epoch (it logs "Failover
/// election won" with no "configEpoch set"): the other nodes then keep the old primary as the
/// owner and the promotion never spreads. When the requested failover has not spread within
/// [`ELECTION_GRACE`], the replica is told `CLUSTER FAILOVER TAKEOVER` (a new epoch without a
/// vote; `CLUSTER BUMPEPOCH` when the node already calls itself primary), which the other
/// nodes accept; the test is about the purge surviving the change of
/// primary, not about Redis's election.
fn promote(port: u16, command: &str, options: &[&str]) {
    let request = |command: &str, options: &[&str]| {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg(command).arg(options);
        let _: redis::Value = cmd
            .query(&mut node_connection(port))
            .unwrap_or_else(|e| panic!("CLUSTER {command} {options:?} on {port}: {e}"));
    };
    request(command, options);
    if !await_promotion(port, Instant::now() + ELECTION_GRACE) {
        // A node that already believes it is the primary refuses FAILOVER; a fresh epoch makes
        // the others accept its claim.
        let sees_itself_primary = try_nodes_seen_by(port)
            .is_some_and(|nodes| nodes.iter().any(|n| n.port == port && n.primary));
        if sees_itself_primary {
            request("BUMPEPOCH", &[]);
        } else {
            request("FAILOVER", &["TAKEOVER"]);
        }
        assert!(
            await_promotion(port, Instant::now() + Duration::from_secs(30)),
            "the replica on {port} was not promoted within {} s, even after taking over without a vote",
            (ELECTION_GRACE + Duration::from_secs(30)).as_secs()
        );
    }
    wait_until_whole();
}

/// How long an elected failover may take to spread before [`promote`] takes over instead.
const ELECTION_GRACE: Duration = Duration::from_secs(10);

/// Starts again every node of the local stack that is not running (`deploy/local/up`: a
/// stopped cluster node rejoins as a replica); blocks until the cluster is whole.
pub fn restart_stopped_nodes() {
    let status = std::process::Command::new("bash")
        .arg(crate::env::repo_root().join("deploy/local/up"))
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("deploy/local/up: {e}"));
    assert!(
        status.success(),
        "deploy/local/up failed to restart the stack"
    );
}

/// Waits until every node that answers sees the node on `port` as a primary serving slots;
/// false when `deadline` passes first.
fn await_promotion(port: u16, deadline: Instant) -> bool {
    loop {
        let promoted = live_ports().into_iter().all(|live| {
            try_nodes_seen_by(live).is_some_and(|nodes| {
                nodes
                    .iter()
                    .any(|n| n.port == port && n.primary && !n.ranges.is_empty())
            })
        });
        if promoted {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`fail_over`] off the async runtime.
pub async fn fail_over_async(primary_port: u16) -> u16 {
    tokio::task::spawn_blocking(move || fail_over(primary_port))
        .await
        .unwrap_or_else(|e| panic!("failover task: {e}"))
}

/// Moves `keys` of slot `slot` from the primary on `from` to the one on `to` with `MIGRATE`,
/// after marking the slot importing on `to` and migrating on `from` (what `redis-cli --cluster
/// reshard` does); the slot stays open until [`finish_migration`].
pub fn start_migration(slot: u16, from: &Node, to: &Node, keys: &[String]) {
    let mut source = node_connection(from.port);
    let mut target = node_connection(to.port);
    let setslot = |connection: &mut redis::Connection, state: &str, node: &str| {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(state)
            .arg(node)
            .query(connection)
            .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {state} {node}: {e}"));
    };
    setslot(&mut target, "IMPORTING", &from.id);
    setslot(&mut source, "MIGRATING", &to.id);
    migrate(&mut source, to.port, keys);
}

/// Moves whatever of `slot` is left on `from` to `to` and assigns the slot to `to` on every
/// primary, closing the migration.
pub fn finish_migration(slot: u16, from: &Node, to: &Node) {
    let mut source = node_connection(from.port);
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(100)
            .query(&mut source)
            .unwrap_or_else(|e| panic!("CLUSTER GETKEYSINSLOT {slot}: {e}"));
        if keys.is_empty() {
            break;
        }
        migrate(&mut source, to.port, &keys);
    }
    let mut owners = vec![to.port, from.port];
    owners.extend(
        primaries()
            .into_iter()
            .map(|n| n.port)
            .filter(|p| *p != to.port && *p != from.port),
    );
    for port in owners {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(&to.id)
            .query(&mut node_connection(port))
            .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} NODE on {port}: {e}"));
    }
    wait_until_whole();
}

/// Puts `slot` back to stable on every node (after a test that failed half-way).
pub fn close_migration(slot: u16) {
    for port in node_ports() {
        let _: redis::RedisResult<()> = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("STABLE")
            .query(&mut node_connection(port));
    }
}

fn migrate(source: &mut redis::Connection, to_port: u16, keys: &[String]) {
    if keys.is_empty() {
        return;
    }
    let _: redis::Value = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(to_port)
        .arg("")
        .arg(0)
        .arg(5_000)
        .arg("KEYS")
        .arg(keys)
        .query(source)
        .unwrap_or_else(|e| panic!("MIGRATE to {to_port}: {e}"));
}

/// Keys matching `pattern` on the node on `port` (SCAN of that node alone, replicas too).
pub fn keys_on_node(port: u16, pattern: &str) -> Vec<String> {
    let mut connection = node_connection(port);
    let mut cursor = 0u64;
    let mut found = Vec::new();
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query(&mut connection)
            .unwrap_or_else(|e| panic!("SCAN on {port}: {e}"));
        found.extend(keys);
        if next == 0 {
            return found;
        }
        cursor = next;
    }
}

/// Keys matching `pattern` on every node that answers, replicas included, with their node's port.
pub fn keys_on_any_node(pattern: &str) -> Vec<(u16, String)> {
    live_ports()
        .into_iter()
        .flat_map(|port| {
            keys_on_node(port, pattern)
                .into_iter()
                .map(move |k| (port, k))
        })
        .collect()
}

/// The ports of the primaries serving `keys`' slots.
pub fn primaries_holding(keys: &[String]) -> BTreeSet<u16> {
    let primaries = primaries();
    keys.iter()
        .filter_map(|key| {
            let slot = key_slot(key);
            primaries.iter().find(|p| p.serves(slot)).map(|p| p.port)
        })
        .collect()
}

/// The ports of every primary serving slots.
pub fn primary_ports() -> BTreeSet<u16> {
    primaries().iter().map(|p| p.port).collect()
}

/// Slot ranges [`keys_in_every_slot_range`] reaches: 64 ranges of 256 slots.
pub const RANGES: u16 = 64;

/// Key `buzz:{community}:{suffix}` of the community's namespace.
pub fn namespace_key(community: Uuid, suffix: &str) -> String {
    namespace_pattern(community).replacen('*', suffix, 1)
}

/// The community's keys `event:0` to `event:{count - 1}`.
pub fn event_keys(community: Uuid, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| namespace_key(community, &format!("event:{i}")))
        .collect()
}

/// The community's keys `event:{i}`, from 0, until every one of the [`RANGES`] slot ranges holds
/// at least `per_range` of them: keys on every primary, whatever the slots' owners.
pub fn keys_in_every_slot_range(community: Uuid, per_range: usize) -> Vec<String> {
    let mut per = BTreeMap::<u16, usize>::new();
    let mut keys = Vec::new();
    let mut i = 0u64;
    while per.len() < usize::from(RANGES) || per.values().any(|n| *n < per_range) {
        let key = namespace_key(community, &format!("event:{i}"));
        *per.entry(key_slot(&key) / (SLOTS / RANGES)).or_default() += 1;
        keys.push(key);
        i += 1;
    }
    keys
}

/// Writes every one of `keys` (its value `value of KEY`), 64 at a time.
pub async fn seed_keys(cache: &Cache, keys: &[String]) {
    stream::iter(keys)
        .map(|key| async move { cache.set(key, format!("value of {key}").as_bytes()).await })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await
        .unwrap_or_else(|e| panic!("seeding the cluster: {e}"));
}

/// A target and a neighbour community with keys seeded on the cluster, and the neighbour's keys
/// and values as they were before the test touched anything.
pub struct SeededPair {
    /// The community to purge.
    pub target: Uuid,
    /// The community to leave alone.
    pub neighbour: Uuid,
    /// The target's keys.
    pub target_keys: Vec<String>,
    /// The neighbour's keys and their DUMP serialization, as seeded.
    pub neighbour_before: Vec<(String, Vec<u8>)>,
}

impl SeededPair {
    /// Seeds `target_keys` of `target` and `neighbour_keys` of `neighbour`; snapshots the
    /// neighbour.
    pub async fn seed(
        cache: &Cache,
        (target, target_keys): (Uuid, Vec<String>),
        (neighbour, neighbour_keys): (Uuid, Vec<String>),
    ) -> SeededPair {
        seed_keys(cache, &target_keys).await;
        seed_keys(cache, &neighbour_keys).await;
        let neighbour_before = cache
            .snapshot_namespace(neighbour)
            .await
            .unwrap_or_else(|e| panic!("snapshot of {neighbour}: {e}"));
        SeededPair {
            target,
            neighbour,
            target_keys,
            neighbour_before,
        }
    }

    /// Two fresh communities, the target with at least `target_per_range` keys in every slot
    /// range and the neighbour with `neighbour_per_range`, seeded.
    pub async fn in_every_slot_range(
        cache: &Cache,
        target_per_range: usize,
        neighbour_per_range: usize,
    ) -> SeededPair {
        let (target, neighbour) = (Uuid::new_v4(), Uuid::new_v4());
        let target_keys = keys_in_every_slot_range(target, target_per_range);
        let neighbour_keys = keys_in_every_slot_range(neighbour, neighbour_per_range);
        SeededPair::seed(cache, (target, target_keys), (neighbour, neighbour_keys)).await
    }

    /// Panics unless the neighbour's keys and values are byte-identical to what they were when
    /// seeded.
    pub async fn assert_neighbour_byte_identical(&self, cache: &Cache) {
        let now = cache
            .snapshot_namespace(self.neighbour)
            .await
            .unwrap_or_else(|e| panic!("snapshot of {}: {e}", self.neighbour));
        assert_eq!(now, self.neighbour_before, "the neighbour's keys changed");
    }
}
