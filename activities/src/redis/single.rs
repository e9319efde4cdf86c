//! One Redis server behind a reconnecting multiplexed connection: a SCAN pass is the server's
//! cursor from 0 back to 0, and a page is unlinked with one UNLINK, sent beside the next SCAN.

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::config::{CONNECTION_TIMEOUT, RESPONSE_TIMEOUT, RedisConfig};
use super::error::{CacheError, command_error};
use super::server_mode::{RedisMode, require_mode};
use super::walk::{Step, Visitor, unlink_beside_scan};

/// Keys requested per SCAN step; also the most keys one UNLINK removes.
pub(super) const SCAN_PAGE_HINT: u64 = 1000;

/// One server. Cheap to clone; clones share one multiplexed connection.
#[derive(Clone)]
pub(super) struct SingleNode {
    pub(super) connection: ConnectionManager,
}

impl SingleNode {
    /// Connects, failing fast if the server is unreachable or refuses, and refuses a server
    /// that is a Redis Cluster node.
    pub(super) async fn connect(config: &RedisConfig) -> Result<Self, CacheError> {
        let Some((address, client)) = config.clients()?.into_iter().next() else {
            return Err(CacheError::Config {
                reason: "REDIS_URL names no server".to_owned(),
            });
        };
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECTION_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(2);
        let mut connection = ConnectionManager::new_with_config(client, manager)
            .await
            .map_err(|source| command_error("CONNECT", source))?;
        require_mode(&mut connection, RedisMode::Single, &address).await?;
        Ok(Self { connection })
    }

    /// One complete SCAN pass of `pattern` (or until `visitor` stops it); a page's UNLINK goes
    /// out on the multiplexed connection beside the next SCAN ([`unlink_beside_scan`]).
    pub(super) async fn walk(
        &self,
        pattern: &str,
        visitor: &mut impl Visitor,
    ) -> Result<(), CacheError> {
        let mut scanner = self.connection.clone();
        let mut unlinker = self.connection.clone();
        let (mut cursor, mut keys) = scan_step(&mut scanner, 0, pattern).await?;
        loop {
            let doomed = match visitor.page(keys)? {
                Step::Stop => return Ok(()),
                Step::Next => Vec::new(),
                Step::Unlink(keys) => keys,
            };
            let (removed, page) = unlink_beside_scan(
                (!doomed.is_empty()).then(|| unlink(&mut unlinker, &doomed)),
                (cursor != 0).then(|| scan_step(&mut scanner, cursor, pattern)),
            )
            .await?;
            if let Some(removed) = removed {
                visitor.unlinked(removed);
            }
            match page {
                Some((next, page)) => (cursor, keys) = (next, page),
                None => return Ok(()),
            }
        }
    }
}

/// `UNLINK keys…` on `connection`: how many of them existed.
async fn unlink(
    connection: &mut impl redis::aio::ConnectionLike,
    keys: &[String],
) -> Result<u64, CacheError> {
    redis::cmd("UNLINK")
        .arg(keys)
        .query_async(connection)
        .await
        .map_err(|source| command_error("UNLINK", source))
}

/// `SCAN cursor MATCH pattern COUNT 1000` on `connection`: the next cursor and the page.
pub(super) async fn scan_step(
    connection: &mut impl redis::aio::ConnectionLike,
    cursor: u64,
    pattern: &str,
) -> Result<(u64, Vec<String>), CacheError> {
    redis::cmd("SCAN")
        .arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(SCAN_PAGE_HINT)
        .query_async(connection)
        .await
        .map_err(|source| command_error("SCAN", source))
}
