//! The cluster client's connection, rebuilt from the seed nodes after a transient failure.
//!
//! The `redis` crate's async cluster connection repairs itself on `MOVED` and lost connections,
//! but on the local cluster one whose primary crashed while a command to it was waiting answered
//! every later command with a timeout, for minutes (the crate's tracker has issues of the same
//! family: redis-rs/redis-rs#1005, #1098, #1528). A deletion cannot wait for that, and a process
//! that shares one client across activities must not stay wedged: after any transient failure
//! the next command goes through a fresh connection, built from the seeds and the topology they
//! report now. Connecting is itself bounded in time (redis-rs/redis-rs#1953).

use std::sync::{Arc, PoisonError, RwLock};

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

use super::super::config::CONNECTION_TIMEOUT;
use super::super::error::{CacheError, command_error};

/// A shared cluster connection that can be replaced. Cheap to clone; clones share it.
#[derive(Clone)]
pub(super) struct Reconnecting {
    client: Arc<ClusterClient>,
    current: Arc<RwLock<ClusterConnection>>,
}

impl Reconnecting {
    /// Connects through `client`'s seed nodes.
    pub(super) async fn connect(client: ClusterClient) -> Result<Self, CacheError> {
        let connection = fresh(&client).await?;
        Ok(Self {
            client: Arc::new(client),
            current: Arc::new(RwLock::new(connection)),
        })
    }

    /// The connection to send the next commands through.
    pub(super) fn get(&self) -> ClusterConnection {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the connection with a fresh one from the seeds (kept as is if none answers:
    /// the caller's error stands, and the next failure tries again).
    pub(super) async fn renew(&self) {
        match fresh(&self.client).await {
            Ok(connection) => {
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = connection;
            }
            Err(error) => {
                tracing::warn!(%error, "Redis Cluster: no seed node gave a fresh connection")
            }
        }
    }
}

/// A new connection through the seeds, within twice the connection timeout.
async fn fresh(client: &ClusterClient) -> Result<ClusterConnection, CacheError> {
    match tokio::time::timeout(CONNECTION_TIMEOUT * 2, client.get_async_connection()).await {
        Ok(connected) => connected.map_err(|source| command_error("CONNECT", source)),
        Err(_elapsed) => Err(command_error(
            "CONNECT",
            redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no seed node of the Redis Cluster answered in time",
            )),
        )),
    }
}
