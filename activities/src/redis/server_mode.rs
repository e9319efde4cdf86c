//! What kind of server answered: the `mode` field of `HELLO`, read at connection time and
//! compared with `BUZZ_REDIS_MODE`. A single-node client on a cluster node would SCAN one shard
//! and prove the namespace empty while every other shard still holds keys, so a configuration
//! that does not match the server is refused, never silently used.
//!
//! `HELLO` (without a protocol argument: the connection's protocol is kept) is in the
//! `@connection` category every ACL user has; `INFO`, which also tells, is `@dangerous` and
//! denied to the recommended production user.

use std::fmt;

use redis::Value;
use redis::aio::ConnectionLike;

use super::error::{CacheError, command_error};
use stack_config::env::REDIS_MODE;

/// How the worker is configured to talk to Redis (`BUZZ_REDIS_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RedisMode {
    /// One server (`single`, the default): `REDIS_URL` names it.
    #[default]
    Single,
    /// A Redis Cluster (`cluster`): `REDIS_URL` lists seed nodes, comma-separated.
    Cluster,
}

impl RedisMode {
    /// The value of `BUZZ_REDIS_MODE` that selects it.
    pub fn as_str(self) -> &'static str {
        match self {
            RedisMode::Single => "single",
            RedisMode::Cluster => "cluster",
        }
    }

    /// The mode `value` names, if any.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "single" => Some(RedisMode::Single),
            "cluster" => Some(RedisMode::Cluster),
            _ => None,
        }
    }
}

impl fmt::Display for RedisMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `mode` a server reports in its `HELLO` reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerMode {
    /// A standalone server (or a replicated primary without cluster support).
    Standalone,
    /// A node of a Redis Cluster.
    Cluster,
    /// A Sentinel, which holds no keys.
    Sentinel,
    /// Anything else, named as reported (or `(none)` when the reply has no mode).
    Other(String),
}

impl ServerMode {
    fn from_reported(mode: &str) -> Self {
        match mode {
            "standalone" => ServerMode::Standalone,
            "cluster" => ServerMode::Cluster,
            "sentinel" => ServerMode::Sentinel,
            other => ServerMode::Other(other.to_owned()),
        }
    }

    fn reported(&self) -> &str {
        match self {
            ServerMode::Standalone => "standalone",
            ServerMode::Cluster => "cluster",
            ServerMode::Sentinel => "sentinel",
            ServerMode::Other(other) => other,
        }
    }
}

/// A server whose kind contradicts the configured mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// What `BUZZ_REDIS_MODE` says.
    pub configured: RedisMode,
    /// What the server reported.
    pub server: ServerMode,
}

impl Mismatch {
    /// What is wrong, for an operator.
    pub fn reason(&self) -> String {
        let reported = self.server.reported();
        match (&self.server, self.configured) {
            (ServerMode::Cluster, _) => format!(
                "it is a Redis Cluster node (HELLO reports mode {reported}) and {REDIS_MODE} is \
                 single: a single-node client would SCAN one shard and leave every other shard's \
                 keys behind"
            ),
            (ServerMode::Standalone, _) => format!(
                "it is a standalone server (HELLO reports mode {reported}), not a Redis Cluster \
                 node, and {REDIS_MODE} is cluster"
            ),
            (ServerMode::Sentinel, _) => {
                format!(
                    "it is a Redis Sentinel (HELLO reports mode {reported}), which holds no keys"
                )
            }
            (ServerMode::Other(_), configured) => format!(
                "HELLO reports mode {reported}, which this worker does not know how to use \
                 ({REDIS_MODE} is {configured})"
            ),
        }
    }

    /// The one change that fixes it.
    pub fn fix(&self) -> String {
        match self.server {
            ServerMode::Cluster => format!(
                "set {REDIS_MODE}=cluster (REDIS_URL may then list several seed nodes, \
                 comma-separated)"
            ),
            ServerMode::Standalone => format!(
                "unset {REDIS_MODE} (or set it to single) for this server, or point REDIS_URL at \
                 the cluster's nodes"
            ),
            ServerMode::Sentinel | ServerMode::Other(_) => format!(
                "point REDIS_URL at a standalone Redis ({REDIS_MODE}=single) or at Redis Cluster \
                 nodes ({REDIS_MODE}=cluster)"
            ),
        }
    }
}

/// The mismatch between `configured` and what `server` is, if any.
pub fn mismatch(configured: RedisMode, server: ServerMode) -> Option<Mismatch> {
    let fits = matches!(
        (configured, &server),
        (RedisMode::Single, ServerMode::Standalone) | (RedisMode::Cluster, ServerMode::Cluster)
    );
    (!fits).then_some(Mismatch { configured, server })
}

/// The `mode` field of a `HELLO` reply: a map under RESP3, a flat list of field and value under
/// RESP2.
pub fn mode_of_hello(reply: &Value) -> ServerMode {
    let field = |key: &Value, value: &Value| -> Option<String> {
        let key: String = redis::from_redis_value_ref(key).ok()?;
        (key == "mode")
            .then(|| redis::from_redis_value_ref::<String>(value).ok())
            .flatten()
    };
    let found = match reply {
        Value::Map(pairs) => pairs.iter().find_map(|(k, v)| field(k, v)),
        Value::Array(items) => items
            .chunks_exact(2)
            .find_map(|pair| field(&pair[0], &pair[1])),
        _ => None,
    };
    match found {
        Some(mode) => ServerMode::from_reported(&mode),
        None => ServerMode::Other("(none)".to_owned()),
    }
}

/// Asks the server behind `connection` what it is and refuses it unless it is what
/// `configured` expects; `address` names it in the refusal.
pub async fn require_mode(
    connection: &mut impl ConnectionLike,
    configured: RedisMode,
    address: &str,
) -> Result<(), CacheError> {
    let reply: Value = redis::cmd("HELLO")
        .query_async(connection)
        .await
        .map_err(|source| command_error("HELLO", source))?;
    match mismatch(configured, mode_of_hello(&reply)) {
        None => Ok(()),
        Some(mismatch) => Err(CacheError::ModeMismatch {
            address: address.to_owned(),
            mismatch,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn the_mode_is_read_from_a_resp2_list_and_a_resp3_map() {
        let resp2 = Value::Array(vec![
            bulk("server"),
            bulk("redis"),
            bulk("proto"),
            Value::Int(2),
            bulk("mode"),
            bulk("cluster"),
            bulk("role"),
            bulk("master"),
        ]);
        assert_eq!(mode_of_hello(&resp2), ServerMode::Cluster);
        let resp3 = Value::Map(vec![
            (bulk("server"), bulk("redis")),
            (bulk("mode"), bulk("standalone")),
        ]);
        assert_eq!(mode_of_hello(&resp3), ServerMode::Standalone);
        assert_eq!(
            mode_of_hello(&Value::Array(vec![bulk("server"), bulk("redis")])),
            ServerMode::Other("(none)".to_owned())
        );
    }

    #[test]
    fn only_a_matching_server_is_accepted() {
        assert_eq!(mismatch(RedisMode::Single, ServerMode::Standalone), None);
        assert_eq!(mismatch(RedisMode::Cluster, ServerMode::Cluster), None);
        for (configured, server) in [
            (RedisMode::Single, ServerMode::Cluster),
            (RedisMode::Cluster, ServerMode::Standalone),
            (RedisMode::Single, ServerMode::Sentinel),
            (RedisMode::Cluster, ServerMode::Other("proxy".into())),
        ] {
            assert!(mismatch(configured, server.clone()).is_some(), "{server:?}");
        }
    }

    #[test]
    fn a_cluster_node_under_the_single_setting_is_refused_naming_the_fix() {
        let refusal = mismatch(RedisMode::Single, ServerMode::Cluster).unwrap();
        assert!(
            refusal.reason().contains("Redis Cluster node"),
            "{refusal:?}"
        );
        assert!(
            refusal.fix().starts_with("set BUZZ_REDIS_MODE=cluster"),
            "{refusal:?}"
        );
        let refusal = mismatch(RedisMode::Cluster, ServerMode::Standalone).unwrap();
        assert!(
            refusal.fix().contains("unset BUZZ_REDIS_MODE"),
            "{refusal:?}"
        );
        assert!(!refusal.reason().contains('\n') && !refusal.fix().contains('\n'));
    }

    #[test]
    fn the_mode_setting_names_exactly_two_values() {
        assert_eq!(RedisMode::parse("single"), Some(RedisMode::Single));
        assert_eq!(RedisMode::parse("cluster"), Some(RedisMode::Cluster));
        assert_eq!(RedisMode::parse("Cluster"), None);
        assert_eq!(RedisMode::default(), RedisMode::Single);
    }
}
