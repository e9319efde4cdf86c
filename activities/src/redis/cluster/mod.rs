//! A Redis Cluster through the `redis` crate's async cluster client (`cluster-async`): it keeps
//! one multiplexed connection per node, routes each keyed command to the primary of its slot and
//! follows `MOVED`/`ASK` (refreshing its slot map). What it cannot do for us is SCAN: a SCAN
//! covers one node. So a pass here reads the topology, SCANs every primary that serves slots to
//! cursor 0 (each SCAN sent to that node by address), reads the topology again, and counts only
//! if both reads are the same settled topology ([`topology`]); otherwise it is redone.
//!
//! Deletes never span slots: the keys of a page are grouped by hash slot and each group is one
//! UNLINK, so `CROSSSLOT` cannot happen. When a group's UNLINK meets a slot in migration
//! (`TRYAGAIN`: some of its keys already moved) or any other transient refusal, its keys are
//! unlinked one per command, which the client redirects key by key (`ASK`). UNLINK is idempotent,
//! so a redone pass, or a purge run again by the activity, deletes only what is left.

mod connection;
mod topology;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo, Slot};
use redis::{AsyncConnectionConfig, Value};

use self::connection::Reconnecting;
use self::topology::{NodeAddr, Topology, parse_self_report, parse_slot_map};
use super::config::{CONNECTION_TIMEOUT, RESPONSE_TIMEOUT, RedisConfig};
use super::error::{CacheError, command_error, reply_error};
use super::server_mode::{RedisMode, require_mode};
use super::single::scan_step;
use super::walk::{Step, Visitor, unlink_beside_scan};

/// Passes attempted before a cluster that keeps changing is reported (transient) to the
/// activity, which retries later.
const PASS_ATTEMPTS: u32 = 8;
/// UNLINK commands of one page in flight at once (each to its slot's primary).
const UNLINK_CONCURRENCY: usize = 32;

/// How one attempt at a pass ended.
enum Attempt {
    /// Every primary's cursor returned 0 within one settled topology.
    Complete,
    /// The visitor stopped the pass.
    Stopped,
    /// The pass does not count; why.
    Redo(String),
}

/// A Redis Cluster. Cheap to clone; clones share the client's connections.
#[derive(Clone)]
pub(super) struct Cluster {
    connection: Reconnecting,
}

impl Cluster {
    /// Connects through the seed nodes, refusing a seed that answers but is not a cluster node,
    /// and reads the topology once so that one this adapter does not understand is refused now.
    pub(super) async fn connect(config: &RedisConfig) -> Result<Self, CacheError> {
        let probe = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECTION_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let mut unreachable = None;
        let mut reached = 0usize;
        for (address, client) in config.clients()? {
            match client
                .get_multiplexed_async_connection_with_config(&probe)
                .await
            {
                Ok(mut seed) => {
                    require_mode(&mut seed, RedisMode::Cluster, &address).await?;
                    reached += 1;
                }
                Err(source) => {
                    unreachable.get_or_insert_with(|| command_error("CONNECT", source));
                }
            }
        }
        if reached == 0 {
            return Err(unreachable.unwrap_or_else(|| CacheError::Config {
                reason: "REDIS_URL names no seed node".to_owned(),
            }));
        }
        let connection = Reconnecting::connect(config.cluster_client()?).await?;
        let cluster = Self { connection };
        read_topology(&mut cluster.connection.get()).await?;
        Ok(cluster)
    }

    /// One command routed by its key (to the slot's primary); after a transient failure the
    /// connection is renewed for the next command.
    pub(super) async fn keyed<T: redis::FromRedisValue>(
        &self,
        name: &'static str,
        command: &redis::Cmd,
    ) -> Result<T, CacheError> {
        let result = command
            .query_async(&mut self.connection.get())
            .await
            .map_err(|source| command_error(name, source));
        if let Err(CacheError::Unavailable { .. }) = &result {
            self.connection.renew().await;
        }
        result
    }

    /// One complete pass of `pattern` over every primary (or until `visitor` stops it), redone
    /// while the topology moves under it, at most [`PASS_ATTEMPTS`] times.
    pub(super) async fn walk(
        &self,
        pattern: &str,
        visitor: &mut impl Visitor,
    ) -> Result<(), CacheError> {
        let mut last = None;
        for attempt in 1..=PASS_ATTEMPTS {
            if attempt > 1 {
                tokio::time::sleep(backoff(attempt)).await;
                visitor.restart();
            }
            match self.attempt(pattern, visitor).await {
                Ok(Attempt::Complete | Attempt::Stopped) => return Ok(()),
                Ok(Attempt::Redo(reason)) => {
                    tracing::info!(pattern, attempt, %reason, "Redis Cluster SCAN pass redone");
                    last = Some(CacheError::TopologyUnsettled {
                        attempts: attempt,
                        reason,
                    });
                }
                Err(error @ CacheError::Unavailable { .. }) => {
                    tracing::info!(pattern, attempt, %error, "Redis Cluster SCAN pass redone");
                    last = Some(error);
                    self.connection.renew().await;
                }
                Err(other) => return Err(other),
            }
        }
        Err(last.unwrap_or_else(|| CacheError::TopologyUnsettled {
            attempts: PASS_ATTEMPTS,
            reason: "no attempt ran".to_owned(),
        }))
    }

    /// One attempt at a pass: topology, every primary to cursor 0, topology again.
    async fn attempt(
        &self,
        pattern: &str,
        visitor: &mut impl Visitor,
    ) -> Result<Attempt, CacheError> {
        let mut connection = self.connection.get();
        let before = read_topology(&mut connection).await?;
        if let Some(reason) = before.unsettled() {
            return Ok(Attempt::Redo(reason));
        }
        for addr in before.primaries() {
            let mut node = NodeConnection {
                connection: &mut connection,
                addr,
            };
            // As on one server, a page's UNLINKs go out beside the node's next SCAN.
            let unlinker = node.connection.clone();
            let (mut cursor, mut keys) = scan_step(&mut node, 0, pattern).await?;
            loop {
                let doomed = match visitor.page(keys)? {
                    Step::Stop => return Ok(Attempt::Stopped),
                    Step::Next => Vec::new(),
                    Step::Unlink(keys) => keys,
                };
                let (removed, page) = unlink_beside_scan(
                    (!doomed.is_empty()).then(|| unlink(&unlinker, doomed)),
                    (cursor != 0).then(|| scan_step(&mut node, cursor, pattern)),
                )
                .await?;
                if let Some(removed) = removed {
                    visitor.unlinked(removed);
                }
                match page {
                    Some((next, page)) => (cursor, keys) = (next, page),
                    None => break,
                }
            }
        }
        let after = read_topology(&mut connection).await?;
        Ok(
            match after.unsettled().or_else(|| after.change_since(&before)) {
                Some(reason) => Attempt::Redo(reason),
                None => Attempt::Complete,
            },
        )
    }
}

/// The slot map and each of its primaries' own report.
async fn read_topology(connection: &mut ClusterConnection) -> Result<Topology, CacheError> {
    let map = connection
        .route_command(
            cluster_command("SLOTS"),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary),
        )
        .await
        .and_then(Value::extract_error)
        .map_err(|source| command_error("CLUSTER SLOTS", source))?;
    let map = parse_slot_map(&map).map_err(unreadable)?;
    let mut reports = BTreeMap::new();
    for addr in map.keys() {
        let nodes = connection
            .route_command(cluster_command("NODES"), at(addr))
            .await
            .and_then(Value::extract_error)
            .map_err(|source| command_error("CLUSTER NODES", source))?;
        let nodes: String = redis::from_redis_value(nodes)
            .map_err(|source| reply_error("CLUSTER NODES", source))?;
        reports.insert(addr.clone(), parse_self_report(&nodes).map_err(unreadable)?);
    }
    Topology::new(map, reports).map_err(unreadable)
}

/// Unlinks `keys` one slot per command; how many existed.
async fn unlink(connection: &ClusterConnection, keys: Vec<String>) -> Result<u64, CacheError> {
    let mut slots: HashMap<Slot, Vec<String>> = HashMap::new();
    for key in keys {
        slots.entry(Slot::for_key(&key)).or_default().push(key);
    }
    stream::iter(slots.into_values())
        .map(|group| unlink_slot(connection.clone(), group))
        .buffer_unordered(UNLINK_CONCURRENCY)
        .try_fold(0u64, |total, removed| async move {
            Ok(total.saturating_add(removed))
        })
        .await
}

/// UNLINK of keys of one slot; on a transient refusal (a slot in migration answers `TRYAGAIN`
/// when only some of the keys are still there), one key per command.
async fn unlink_slot(
    mut connection: ClusterConnection,
    keys: Vec<String>,
) -> Result<u64, CacheError> {
    let together: Result<u64, _> = redis::cmd("UNLINK")
        .arg(&keys)
        .query_async(&mut connection)
        .await
        .map_err(|source| command_error("UNLINK", source));
    match together {
        Err(CacheError::Unavailable { .. }) if keys.len() > 1 => {
            let mut removed = 0u64;
            for key in &keys {
                let one: u64 = redis::cmd("UNLINK")
                    .arg(key)
                    .query_async(&mut connection)
                    .await
                    .map_err(|source| command_error("UNLINK", source))?;
                removed = removed.saturating_add(one);
            }
            Ok(removed)
        }
        other => other,
    }
}

/// Commands sent to one node by address (SCAN of that node's keyspace).
struct NodeConnection<'c> {
    connection: &'c mut ClusterConnection,
    addr: &'c NodeAddr,
}

impl redis::aio::ConnectionLike for NodeConnection<'_> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, Value> {
        Box::pin(self.connection.route_command(cmd.clone(), at(self.addr)))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        _pipeline: &'a redis::Pipeline,
        _offset: usize,
        _count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        Box::pin(async {
            Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "no pipeline is sent to one cluster node",
            )))
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// `CLUSTER <sub>`.
fn cluster_command(sub: &str) -> redis::Cmd {
    let mut command = redis::cmd("CLUSTER");
    command.arg(sub);
    command
}

/// Routing to the node at `addr`.
fn at(addr: &NodeAddr) -> RoutingInfo {
    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
        host: addr.host.clone(),
        port: addr.port,
    })
}

fn unreadable(reason: String) -> CacheError {
    CacheError::TopologyUnreadable { reason }
}

/// The pause before attempt `attempt` (2..): 100 ms doubling, at most 2 s; about 8 s in all.
fn backoff(attempt: u32) -> Duration {
    let doubled = 100u64.saturating_mul(1 << attempt.saturating_sub(2).min(5));
    Duration::from_millis(doubled.min(2_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redone_passes_wait_longer_each_time_and_at_most_two_seconds() {
        let waits: Vec<u64> = (2..=PASS_ATTEMPTS)
            .map(|a| backoff(a).as_millis() as u64)
            .collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 2000, 2000]);
    }
}
