//! Everything that can go wrong talking to Redis, one variant per retry decision.

use redis::{ErrorKind, RedisError, ServerErrorKind};

use super::server_mode::Mismatch;
use crate::failure::{Classified, Severity, variants};

/// Everything that can go wrong talking to Redis, one variant per retry decision.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The configuration contradicts itself or a file cannot be read. Permanent.
    #[error("Redis: {reason}")]
    Config {
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// The Redis URL does not parse. Permanent.
    #[error("invalid Redis URL: {source}")]
    InvalidUrl {
        /// The parser's error.
        source: RedisError,
    },
    /// The server is not the kind `BUZZ_REDIS_MODE` says (a cluster node for a single-node
    /// configuration, a standalone server for a cluster one). Permanent: refused at start-up.
    #[error("Redis at {address}: {}: {}", mismatch.reason(), mismatch.fix())]
    ModeMismatch {
        /// The server that answered (password redacted).
        address: String,
        /// What is configured and what answered.
        mismatch: Mismatch,
    },
    /// The server refused the credentials or the command's permission. Permanent.
    #[error("Redis refused {command}: {source}")]
    Denied {
        /// The command.
        command: &'static str,
        /// The client's error.
        source: RedisError,
    },
    /// The command or its reply is wrong as formed (wrong type, unknown command, …). Permanent.
    #[error("Redis {command} failed and retrying cannot help: {source}")]
    Rejected {
        /// The command.
        command: &'static str,
        /// The client's error.
        source: RedisError,
    },
    /// A Redis Cluster described its topology in a way this worker does not understand (a node
    /// of unknown endpoint, a malformed reply). Permanent: nothing can be proven of a keyspace
    /// whose nodes are not known.
    #[error("the Redis Cluster's topology is not understood: {reason}")]
    TopologyUnreadable {
        /// What could not be read.
        reason: String,
    },
    /// Connection lost or refused, timeout, server loading or failing over. Transient.
    #[error("Redis {command} failed transiently: {source}")]
    Unavailable {
        /// The command.
        command: &'static str,
        /// The client's error.
        source: RedisError,
    },
    /// No SCAN pass over a Redis Cluster could complete within one topology epoch: every
    /// attempt saw a failover, a slot migration or a primary that did not answer. Transient: the
    /// activity retries once the cluster has settled.
    #[error(
        "no complete SCAN pass of the Redis Cluster in {attempts} attempts: the topology kept \
         changing (last: {reason})"
    )]
    TopologyUnsettled {
        /// Passes attempted.
        attempts: u32,
        /// Why the last one did not count.
        reason: String,
    },
    /// A purge restricted to declared key shapes met a key of none of them; nothing of its SCAN
    /// page was deleted. Permanent: the caller names it and the remedy.
    #[error("Redis key {key} matches {pattern} but none of the declared key shapes")]
    UndeclaredKey {
        /// The key.
        key: String,
        /// The SCAN pattern that found it.
        pattern: String,
    },
    /// A key of the namespace still exists after the purge. Transient: the verify stage retries,
    /// and a writer that kept writing after the fence is what an operator must look for.
    #[error("Redis key {key} of the purged namespace is still present")]
    KeyStillPresent {
        /// The first key found.
        key: String,
    },
}

impl Classified for CacheError {
    fn severity(&self) -> Severity {
        match self {
            variants!(
                CacheError: InvalidUrl, Config, ModeMismatch, Denied, Rejected, TopologyUnreadable,
                UndeclaredKey
            ) => Severity::Permanent,
            variants!(
                CacheError: Unavailable, TopologyUnsettled, KeyStillPresent
            ) => Severity::Transient,
        }
    }
}

/// Maps a client error to its retry decision by the client's typed error kind.
///
/// The redirections and refusals of a cluster in motion (`MOVED`, `ASK`, `TRYAGAIN`,
/// `CLUSTERDOWN`, a node the client has no connection to yet) are transient: the topology settles
/// and the idempotent command is sent again. `CROSSSLOT` is permanent: the adapter never sends a
/// command whose keys span slots, so one would be a bug.
pub(super) fn command_error(command: &'static str, source: RedisError) -> CacheError {
    match source.kind() {
        ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm) => {
            CacheError::Denied { command, source }
        }
        ErrorKind::Io
        | ErrorKind::Parse
        | ErrorKind::ClusterConnectionNotFound
        | ErrorKind::MasterNameNotFoundBySentinel
        | ErrorKind::NoValidReplicasFoundBySentinel
        | ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask,
        ) => CacheError::Unavailable { command, source },
        _ => CacheError::Rejected { command, source },
    }
}

/// A reply of the wrong shape, as the client's own parsing error.
pub(super) fn reply_error(command: &'static str, source: redis::ParsingError) -> CacheError {
    CacheError::Rejected {
        command,
        source: source.into(),
    }
}
