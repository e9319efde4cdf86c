//! Redis adapter: the community key namespace and its control channel.
//!
//! A community owns every key matching `buzz:{community}:*` (community = lowercase hyphenated
//! UUID) and listens on `buzz:{community}:conn-control`. Purging walks the namespace with SCAN and
//! removes each page with UNLINK, so memory stays bounded by one page whatever the keyspace size.
//!
//! One API for callers over two backends, chosen by [`RedisConfig::mode`] (`BUZZ_REDIS_MODE`):
//! one server ([`single`]), or a Redis Cluster ([`cluster`]), where a SCAN pass covers every
//! primary of one settled topology. A server that is not the configured kind is refused when
//! connecting ([`server_mode`]).

mod cluster;
mod config;
mod error;
mod server_mode;
mod single;
mod walk;

use std::fmt;

use uuid::Uuid;

pub use self::config::RedisConfig;
pub use self::error::CacheError;
pub use self::server_mode::{Mismatch, RedisMode, ServerMode};

use self::cluster::Cluster;
use self::error::command_error;
use self::single::SingleNode;
use self::walk::{Collect, Count, EachKey, FirstKey, Purge, Visitor};

/// The message that tells every relay to drop the community's live connections.
pub const DISCONNECT_COMMUNITY_MESSAGE: &str = r#"{"op":"DisconnectCommunity"}"#;

/// The SCAN pattern matching every key of the community: `buzz:{c}:*`.
///
/// The community id is a UUID, so it contains no glob metacharacters to escape.
pub fn namespace_pattern(community: Uuid) -> String {
    format!("buzz:{}:*", community.hyphenated())
}

/// The community's control channel: `buzz:{c}:conn-control`.
pub fn control_channel(community: Uuid) -> String {
    format!("buzz:{}:conn-control", community.hyphenated())
}

/// How many complete SCAN passes in a row must find no key before absence counts as proven.
const ABSENCE_PASSES: usize = 2;

/// Runs `pass` (one complete SCAN pass, answering the first key it saw, if any)
/// [`ABSENCE_PASSES`] times, stopping at the first key with [`CacheError::KeyStillPresent`].
/// Kept apart from the backends so the number of passes is unit-tested.
async fn absent_in_every_pass<P: Future<Output = Result<Option<String>, CacheError>>>(
    mut pass: impl FnMut() -> P,
) -> Result<(), CacheError> {
    for _ in 0..ABSENCE_PASSES {
        if let Some(key) = pass().await? {
            return Err(CacheError::KeyStillPresent { key });
        }
    }
    Ok(())
}

/// The server (or cluster) behind a [`Cache`].
#[derive(Clone)]
enum Backend {
    Single(SingleNode),
    Cluster(Cluster),
}

/// A reconnecting Redis client. Cheap to clone; clones share the connection(s).
#[derive(Clone)]
pub struct Cache {
    backend: Backend,
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("mode", &self.mode())
            .finish_non_exhaustive()
    }
}

impl Cache {
    /// Connects to the single server at `url` (`redis://host:port/db`, or `rediss://` trusting
    /// the system roots), failing fast if it is unreachable and refusing a cluster node.
    pub async fn connect(url: &str) -> Result<Self, CacheError> {
        Self::connect_with(&RedisConfig::url(url)).await
    }

    /// Connects as `config` says (one server or a cluster's seed nodes, TLS with its CA file,
    /// AUTH from the URL), failing fast if the server is unreachable or refuses, and refusing a
    /// server of another kind than `config.mode` ([`CacheError::ModeMismatch`]).
    pub async fn connect_with(config: &RedisConfig) -> Result<Self, CacheError> {
        let backend = match config.mode {
            RedisMode::Single => Backend::Single(SingleNode::connect(config).await?),
            RedisMode::Cluster => Backend::Cluster(Cluster::connect(config).await?),
        };
        Ok(Self { backend })
    }

    /// Which kind of server this is connected to.
    pub fn mode(&self) -> RedisMode {
        match self.backend {
            Backend::Single(_) => RedisMode::Single,
            Backend::Cluster(_) => RedisMode::Cluster,
        }
    }

    /// One command routed by its key (to the slot's primary in a cluster).
    async fn keyed<T: redis::FromRedisValue>(
        &self,
        name: &'static str,
        command: &redis::Cmd,
    ) -> Result<T, CacheError> {
        match &self.backend {
            Backend::Single(single) => command
                .query_async(&mut single.connection.clone())
                .await
                .map_err(|source| command_error(name, source)),
            Backend::Cluster(cluster) => cluster.keyed(name, command).await,
        }
    }

    /// One complete SCAN pass of `pattern` (see [`cluster`] for what complete means there).
    async fn walk(&self, pattern: &str, visitor: &mut impl Visitor) -> Result<(), CacheError> {
        match &self.backend {
            Backend::Single(single) => single.walk(pattern, visitor).await,
            Backend::Cluster(cluster) => cluster.walk(pattern, visitor).await,
        }
    }

    /// Publishes `{"op":"DisconnectCommunity"}` on the community's control channel and returns
    /// how many subscribers received it (0 is not an error: no relay may be connected; in a
    /// cluster, only the subscribers of the node that took the message are counted, though
    /// every node delivers it).
    pub async fn publish_disconnect(&self, community: Uuid) -> Result<u64, CacheError> {
        let mut command = redis::cmd("PUBLISH");
        command
            .arg(control_channel(community))
            .arg(DISCONNECT_COMMUNITY_MESSAGE);
        self.keyed("PUBLISH", &command).await
    }

    /// Removes every key of the community's namespace and returns how many were unlinked.
    ///
    /// SCAN MATCH COUNT 1000, then UNLINK of each non-empty page (one per slot in a cluster);
    /// `on_progress` receives the running total after each page. Memory is bounded by one page.
    /// SCAN guarantees every key present for the whole pass is returned, so after the fence no
    /// key escapes; idempotent on retry (keys already gone are simply not found again).
    pub async fn purge_namespace(
        &self,
        community: Uuid,
        on_progress: impl FnMut(u64),
    ) -> Result<u64, CacheError> {
        self.purge_matching(&namespace_pattern(community), on_progress)
            .await
    }

    /// Removes every key matching `pattern` (a SCAN glob inside one namespace, e.g. a user's
    /// keys in a community), the way [`Cache::purge_namespace`] does.
    pub async fn purge_matching(
        &self,
        pattern: &str,
        on_progress: impl FnMut(u64),
    ) -> Result<u64, CacheError> {
        self.purge_declared_matching(pattern, |_| true, on_progress)
            .await
    }

    /// Removes every key matching `pattern` the way [`Cache::purge_matching`] does, provided
    /// each is one `declared` accepts: a SCAN page holding any other key is not deleted, and the
    /// purge stops with [`CacheError::UndeclaredKey`] naming it (keys of earlier pages stay
    /// deleted; a rerun after the remedy finds the rest).
    pub async fn purge_declared_matching(
        &self,
        pattern: &str,
        declared: impl Fn(&str) -> bool,
        on_progress: impl FnMut(u64),
    ) -> Result<u64, CacheError> {
        let mut purge = Purge {
            declared,
            pattern: pattern.to_owned(),
            on_progress,
            total: 0,
        };
        self.walk(pattern, &mut purge).await?;
        Ok(purge.total)
    }

    /// Proves the namespace empty with two complete SCAN passes.
    ///
    /// SCAN only promises to return keys that exist for the whole pass, so a key written while
    /// one pass runs can be missed; two complete empty passes are required (in a cluster, each
    /// over every primary of one settled topology). The first key seen fails with
    /// [`CacheError::KeyStillPresent`].
    pub async fn verify_absent(&self, community: Uuid) -> Result<(), CacheError> {
        self.verify_absent_matching(&namespace_pattern(community))
            .await
    }

    /// Proves no key matches `pattern` with two complete SCAN passes (see
    /// [`Cache::verify_absent`]).
    pub async fn verify_absent_matching(&self, pattern: &str) -> Result<(), CacheError> {
        absent_in_every_pass(|| async {
            let mut first = FirstKey::default();
            self.walk(pattern, &mut first).await?;
            Ok(first.0)
        })
        .await
    }

    /// Sets `key` to `value` (seeding and tests).
    pub async fn set(&self, key: &str, value: &[u8]) -> Result<(), CacheError> {
        let mut command = redis::cmd("SET");
        command.arg(key).arg(value);
        self.keyed("SET", &command).await
    }

    /// Number of keys in the community's namespace (one full SCAN pass).
    pub async fn count_namespace(&self, community: Uuid) -> Result<u64, CacheError> {
        self.count_matching(&namespace_pattern(community)).await
    }

    /// Calls `each` with every key matching `pattern` (one full SCAN pass; memory bounded by one
    /// page). A key may be handed more than once (SCAN may return it twice, and a cluster pass
    /// redone after a topology change sees it again).
    pub async fn for_each_matching(
        &self,
        pattern: &str,
        each: impl FnMut(&str),
    ) -> Result<(), CacheError> {
        self.walk(pattern, &mut EachKey(each)).await
    }

    /// Number of keys matching `pattern` (one full SCAN pass).
    pub async fn count_matching(&self, pattern: &str) -> Result<u64, CacheError> {
        let mut count = Count::default();
        self.walk(pattern, &mut count).await?;
        Ok(count.0)
    }

    /// Every key of the namespace with its DUMP serialization (type, value and encoding), sorted
    /// by key, so before/after snapshots compare byte for byte. Holds the whole namespace in
    /// memory: for tests and small tenants only.
    pub async fn snapshot_namespace(
        &self,
        community: Uuid,
    ) -> Result<Vec<(String, Vec<u8>)>, CacheError> {
        self.snapshot_matching(&namespace_pattern(community)).await
    }

    /// Every key matching `pattern` with its DUMP serialization, as
    /// [`Cache::snapshot_namespace`].
    pub async fn snapshot_matching(
        &self,
        pattern: &str,
    ) -> Result<Vec<(String, Vec<u8>)>, CacheError> {
        let mut collect = Collect::default();
        self.walk(pattern, &mut collect).await?;
        let mut keys = collect.0;
        // SCAN may return a key twice; a snapshot lists each once.
        keys.sort();
        keys.dedup();
        let mut snapshot = Vec::with_capacity(keys.len());
        for key in keys {
            let mut command = redis::cmd("DUMP");
            command.arg(&key);
            let dump: Option<Vec<u8>> = self.keyed("DUMP", &command).await?;
            // A key that expired between SCAN and DUMP is not part of the snapshot.
            if let Some(dump) = dump {
                snapshot.push((key, dump));
            }
        }
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::{Classified, Severity};

    #[test]
    fn namespace_and_channel_use_the_lowercase_hyphenated_id() {
        let community = Uuid::parse_str("6F1C2E0A-5B3D-4C8E-9A7F-0123456789AB").unwrap();
        assert_eq!(
            namespace_pattern(community),
            "buzz:6f1c2e0a-5b3d-4c8e-9a7f-0123456789ab:*"
        );
        assert_eq!(
            control_channel(community),
            "buzz:6f1c2e0a-5b3d-4c8e-9a7f-0123456789ab:conn-control"
        );
    }

    #[test]
    fn key_still_present_is_transient_and_names_the_key() {
        let error = CacheError::KeyStillPresent {
            key: "buzz:c:k".into(),
        };
        assert_eq!(error.severity(), Severity::Transient);
        assert!(error.to_string().contains("buzz:c:k"));
    }

    #[test]
    fn a_cluster_that_keeps_moving_is_transient_and_a_wrong_kind_of_server_permanent() {
        let unsettled = CacheError::TopologyUnsettled {
            attempts: 8,
            reason: "slot 17 in migration".into(),
        };
        assert_eq!(unsettled.severity(), Severity::Transient);
        assert!(unsettled.to_string().contains("slot 17"));
        let mismatch = CacheError::ModeMismatch {
            address: "redis://127.0.0.1:57001".into(),
            mismatch: Mismatch {
                configured: RedisMode::Single,
                server: ServerMode::Cluster,
            },
        };
        assert_eq!(mismatch.severity(), Severity::Permanent);
        let message = mismatch.to_string();
        assert!(
            message.contains("127.0.0.1:57001") && message.contains("set BUZZ_REDIS_MODE=cluster"),
            "{message}"
        );
        let unreadable = CacheError::TopologyUnreadable {
            reason: "no endpoint".into(),
        };
        assert_eq!(unreadable.severity(), Severity::Permanent);
    }

    /// Runs [`absent_in_every_pass`] over scripted passes (each the first key it saw); returns
    /// the verdict and how many passes ran.
    async fn verdict_of(script: &[Option<&str>]) -> (Result<(), CacheError>, usize) {
        let mut passes = 0;
        let verdict = absent_in_every_pass(|| {
            let first = script.get(passes).copied().flatten().map(str::to_owned);
            passes += 1;
            async move { Ok(first) }
        })
        .await;
        (verdict, passes)
    }

    #[tokio::test]
    async fn absence_needs_two_complete_empty_passes_and_a_key_seen_only_by_the_second_fails() {
        // A key written while the first pass ran can be missed by it: the second pass must
        // still find it.
        let (verdict, passes) = verdict_of(&[None, Some("buzz:c:late")]).await;
        assert!(
            matches!(&verdict, Err(CacheError::KeyStillPresent { key }) if key == "buzz:c:late"),
            "{verdict:?}"
        );
        assert_eq!(passes, 2);
        let (verdict, passes) = verdict_of(&[None, None, Some("buzz:c:never-read")]).await;
        assert!(verdict.is_ok(), "{verdict:?}");
        assert_eq!(passes, 2, "exactly two passes prove absence");
        let (verdict, passes) = verdict_of(&[Some("buzz:c:left"), None]).await;
        assert!(
            matches!(&verdict, Err(CacheError::KeyStillPresent { key }) if key == "buzz:c:left"),
            "{verdict:?}"
        );
        assert_eq!(passes, 1, "the first key seen ends the verification");
    }

    #[tokio::test]
    async fn a_pass_that_fails_fails_the_verification() {
        let mut passes = 0;
        let verdict = absent_in_every_pass(|| {
            passes += 1;
            let answer = if passes == 2 {
                Err(CacheError::TopologyUnsettled {
                    attempts: 8,
                    reason: "slot 17 in migration".into(),
                })
            } else {
                Ok(None)
            };
            async move { answer }
        })
        .await;
        assert!(
            matches!(verdict, Err(CacheError::TopologyUnsettled { .. })),
            "{verdict:?}"
        );
    }

    #[tokio::test]
    async fn malformed_url_is_permanent() {
        let error = Cache::connect("not a url").await.unwrap_err();
        assert!(matches!(error, CacheError::InvalidUrl { .. }), "{error:?}");
        assert_eq!(error.severity(), Severity::Permanent);
    }

    #[tokio::test]
    async fn refused_connection_is_transient() {
        let error = Cache::connect("redis://127.0.0.1:1/").await.unwrap_err();
        assert_eq!(error.severity(), Severity::Transient, "{error:?}");
        let error = Cache::connect_with(&RedisConfig::cluster(
            "redis://127.0.0.1:1/,redis://127.0.0.1:2/",
        ))
        .await
        .unwrap_err();
        assert_eq!(error.severity(), Severity::Transient, "{error:?}");
    }
}
