//! Redis adapter: the community key namespace and its control channel.
//!
//! A community owns every key matching `buzz:{community}:*` (community = lowercase hyphenated
//! UUID) and listens on `buzz:{community}:conn-control`. Purging walks the namespace with SCAN and
//! removes each page with UNLINK, so memory stays bounded by one page whatever the keyspace size.

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, ServerErrorKind};
use uuid::Uuid;

use crate::failure::{Classified, Severity};

/// Keys requested per SCAN step; also the most keys one UNLINK removes.
const SCAN_PAGE_HINT: u64 = 1000;

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

/// True only if a SCAN pass reached the terminal cursor 0 and every page it returned was empty.
///
/// `pages` is one complete pass as `(cursor returned, keys returned)` in order. A pass cut short
/// (last cursor not 0) proves nothing, and neither does an empty list of pages.
pub fn scan_proves_absence(pages: &[(u64, Vec<String>)]) -> bool {
    pages.last().is_some_and(|(cursor, _)| *cursor == 0)
        && pages.iter().all(|(_, keys)| keys.is_empty())
}

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
    /// Connection lost or refused, timeout, server loading or failing over. Transient.
    #[error("Redis {command} failed transiently: {source}")]
    Unavailable {
        /// The command.
        command: &'static str,
        /// The client's error.
        source: RedisError,
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
            CacheError::InvalidUrl { .. }
            | CacheError::Config { .. }
            | CacheError::Denied { .. }
            | CacheError::Rejected { .. }
            | CacheError::UndeclaredKey { .. } => Severity::Permanent,
            CacheError::Unavailable { .. } | CacheError::KeyStillPresent { .. } => {
                Severity::Transient
            }
        }
    }
}

/// Maps a client error to its retry decision by the client's typed error kind.
fn command_error(command: &'static str, source: RedisError) -> CacheError {
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

/// Where Redis is and how it is trusted: `redis://` (plaintext) or `rediss://` (TLS), with
/// `user:password@` for AUTH, and a CA file for a server certificate of a private CA (else the
/// system roots). TLS goes through rustls with the process's one crypto provider (ring).
#[derive(Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// `redis://…` or `rediss://…` (the password, if any, inside).
    pub url: String,
    /// PEM file of the CA certificates that sign the server's certificate (`BUZZ_REDIS_CA_FILE`).
    pub ca_file: Option<String>,
}

impl RedisConfig {
    /// A plaintext or system-roots configuration: just the URL.
    pub fn url(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            ca_file: None,
        }
    }

    /// The URL with its password replaced, for messages.
    pub fn redacted_url(&self) -> String {
        crate::store::redact_password(&self.url)
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &self.redacted_url())
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// The client of `config`, refusing a configuration that would not be verified TLS as meant.
fn client_of(config: &RedisConfig) -> Result<redis::Client, CacheError> {
    let refuse = |reason: String| CacheError::Config { reason };
    let tls = config.url.starts_with("rediss://");
    if tls && config.url.contains("#insecure") {
        return Err(refuse(
            "REDIS_URL ends in #insecure, which would turn certificate checks off: remove it \
             and set BUZZ_REDIS_CA_FILE to the CA that signed the server's certificate"
                .to_owned(),
        ));
    }
    let Some(ca_file) = &config.ca_file else {
        return redis::Client::open(config.url.as_str())
            .map_err(|source| CacheError::InvalidUrl { source });
    };
    if !tls {
        return Err(refuse(
            "BUZZ_REDIS_CA_FILE is set but REDIS_URL is plaintext (redis://): write rediss:// \
             for TLS, or unset BUZZ_REDIS_CA_FILE"
                .to_owned(),
        ));
    }
    let root_cert = std::fs::read(ca_file).map_err(|e| {
        refuse(format!(
            "BUZZ_REDIS_CA_FILE={ca_file}: cannot read the file ({e})"
        ))
    })?;
    // The TLS handshake uses the process's default provider; install ring when no binary did.
    let _ = rustls::crypto::ring::default_provider().install_default();
    redis::Client::build_with_tls(
        config.url.as_str(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(root_cert),
        },
    )
    .map_err(|source| CacheError::InvalidUrl { source })
}

/// A reconnecting Redis client. Cheap to clone; clones share one multiplexed connection.
#[derive(Clone)]
pub struct Cache {
    connection: ConnectionManager,
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache").finish_non_exhaustive()
    }
}

impl Cache {
    /// Connects to `url` (`redis://host:port/db`, or `rediss://` trusting the system roots),
    /// failing fast if the server is unreachable.
    pub async fn connect(url: &str) -> Result<Self, CacheError> {
        Self::connect_with(&RedisConfig::url(url)).await
    }

    /// Connects as `config` says (TLS with its CA file, AUTH from the URL), failing fast if the
    /// server is unreachable or refuses.
    pub async fn connect_with(config: &RedisConfig) -> Result<Self, CacheError> {
        let client = client_of(config)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(Duration::from_secs(30)))
            .set_number_of_retries(2);
        let connection = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|source| command_error("CONNECT", source))?;
        Ok(Self { connection })
    }

    /// Publishes `{"op":"DisconnectCommunity"}` on the community's control channel and returns
    /// how many subscribers received it (0 is not an error: no relay may be connected).
    pub async fn publish_disconnect(&self, community: Uuid) -> Result<u64, CacheError> {
        redis::cmd("PUBLISH")
            .arg(control_channel(community))
            .arg(DISCONNECT_COMMUNITY_MESSAGE)
            .query_async(&mut self.connection.clone())
            .await
            .map_err(|source| command_error("PUBLISH", source))
    }

    /// Removes every key of the community's namespace and returns how many were unlinked.
    ///
    /// SCAN MATCH COUNT 1000, then one UNLINK per non-empty page; `on_progress` receives the
    /// running total after each page. Memory is bounded by one page. SCAN guarantees every key
    /// present for the whole pass is returned, so after the fence no key escapes; idempotent on
    /// retry (keys already gone are simply not found again).
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
        mut on_progress: impl FnMut(u64),
    ) -> Result<u64, CacheError> {
        let pattern = pattern.to_owned();
        let mut connection = self.connection.clone();
        let mut pass = ScanPass::new(&pattern);
        let mut unlinked = 0u64;
        while let Some((_, keys)) = pass.next_page(&mut connection).await? {
            if keys.is_empty() {
                continue;
            }
            let removed: u64 = redis::cmd("UNLINK")
                .arg(&keys)
                .query_async(&mut connection)
                .await
                .map_err(|source| command_error("UNLINK", source))?;
            unlinked = unlinked.saturating_add(removed);
            on_progress(unlinked);
        }
        Ok(unlinked)
    }

    /// Removes every key matching `pattern` the way [`Cache::purge_matching`] does, provided
    /// each is one `declared` accepts: a SCAN page holding any other key is not deleted, and the
    /// purge stops with [`CacheError::UndeclaredKey`] naming it (keys of earlier pages stay
    /// deleted; a rerun after the remedy finds the rest).
    pub async fn purge_declared_matching(
        &self,
        pattern: &str,
        declared: impl Fn(&str) -> bool,
        mut on_progress: impl FnMut(u64),
    ) -> Result<u64, CacheError> {
        let pattern = pattern.to_owned();
        let mut connection = self.connection.clone();
        let mut pass = ScanPass::new(&pattern);
        let mut unlinked = 0u64;
        while let Some((_, keys)) = pass.next_page(&mut connection).await? {
            if let Some(key) = keys.iter().find(|key| !declared(key)) {
                return Err(CacheError::UndeclaredKey {
                    key: key.clone(),
                    pattern,
                });
            }
            if keys.is_empty() {
                continue;
            }
            let removed: u64 = redis::cmd("UNLINK")
                .arg(&keys)
                .query_async(&mut connection)
                .await
                .map_err(|source| command_error("UNLINK", source))?;
            unlinked = unlinked.saturating_add(removed);
            on_progress(unlinked);
        }
        Ok(unlinked)
    }

    /// Proves the namespace empty with two complete SCAN passes.
    ///
    /// SCAN only promises to return keys that exist for the whole pass, so a key written while
    /// one pass runs can be missed; two complete empty passes are required, each judged by
    /// [`scan_proves_absence`]. The first key seen fails with [`CacheError::KeyStillPresent`].
    pub async fn verify_absent(&self, community: Uuid) -> Result<(), CacheError> {
        self.verify_absent_matching(&namespace_pattern(community))
            .await
    }

    /// Proves no key matches `pattern` with two complete SCAN passes (see
    /// [`Cache::verify_absent`]).
    pub async fn verify_absent_matching(&self, pattern: &str) -> Result<(), CacheError> {
        let pattern = pattern.to_owned();
        let mut connection = self.connection.clone();
        for _pass in 0..2 {
            let pass = scan_until_first_key(&mut connection, &pattern).await?;
            if !scan_proves_absence(&pass) {
                let key = pass
                    .into_iter()
                    .find_map(|(_, keys)| keys.into_iter().next())
                    .unwrap_or(pattern);
                return Err(CacheError::KeyStillPresent { key });
            }
        }
        Ok(())
    }

    /// Sets `key` to `value` (seeding and tests).
    pub async fn set(&self, key: &str, value: &[u8]) -> Result<(), CacheError> {
        redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query_async::<()>(&mut self.connection.clone())
            .await
            .map_err(|source| command_error("SET", source))
    }

    /// Number of keys in the community's namespace (one full SCAN pass).
    pub async fn count_namespace(&self, community: Uuid) -> Result<u64, CacheError> {
        self.count_matching(&namespace_pattern(community)).await
    }

    /// Calls `each` with every key matching `pattern` (one full SCAN pass; memory bounded by one
    /// page).
    pub async fn for_each_matching(
        &self,
        pattern: &str,
        mut each: impl FnMut(&str),
    ) -> Result<(), CacheError> {
        let mut connection = self.connection.clone();
        let mut pass = ScanPass::new(pattern);
        while let Some((_, keys)) = pass.next_page(&mut connection).await? {
            keys.iter().for_each(|key| each(key));
        }
        Ok(())
    }

    /// Number of keys matching `pattern` (one full SCAN pass).
    pub async fn count_matching(&self, pattern: &str) -> Result<u64, CacheError> {
        let pattern = pattern.to_owned();
        let mut connection = self.connection.clone();
        let mut pass = ScanPass::new(&pattern);
        let mut count = 0u64;
        while let Some((_, keys)) = pass.next_page(&mut connection).await? {
            count = count.saturating_add(keys.len() as u64);
        }
        Ok(count)
    }

    /// Every key of the namespace with its DUMP serialization (type, value and encoding), sorted
    /// by key, so before/after snapshots compare byte for byte. Holds the whole namespace in
    /// memory: for tests and small tenants only.
    pub async fn snapshot_namespace(
        &self,
        community: Uuid,
    ) -> Result<Vec<(String, Vec<u8>)>, CacheError> {
        let pattern = namespace_pattern(community);
        let mut connection = self.connection.clone();
        let mut keys = Vec::new();
        let mut pass = ScanPass::new(&pattern);
        while let Some((_, page)) = pass.next_page(&mut connection).await? {
            keys.extend(page);
        }
        // SCAN may return a key twice; a snapshot lists each once.
        keys.sort();
        keys.dedup();
        let mut snapshot = Vec::with_capacity(keys.len());
        for key in keys {
            let dump: Option<Vec<u8>> = redis::cmd("DUMP")
                .arg(&key)
                .query_async(&mut connection)
                .await
                .map_err(|source| command_error("DUMP", source))?;
            // A key that expired between SCAN and DUMP is not part of the snapshot.
            if let Some(dump) = dump {
                snapshot.push((key, dump));
            }
        }
        Ok(snapshot)
    }
}

/// One SCAN pass that stops early at the first non-empty page, so it holds at most one page of
/// keys; the pages it returns are exactly what [`scan_proves_absence`] judges.
async fn scan_until_first_key(
    connection: &mut ConnectionManager,
    pattern: &str,
) -> Result<Vec<(u64, Vec<String>)>, CacheError> {
    let mut pass = ScanPass::new(pattern);
    let mut pages = Vec::new();
    while let Some((next, keys)) = pass.next_page(connection).await? {
        let found = !keys.is_empty();
        pages.push((next, keys));
        if found {
            break;
        }
    }
    Ok(pages)
}

/// One complete SCAN pass over a pattern, read a page at a time.
struct ScanPass<'p> {
    pattern: &'p str,
    cursor: u64,
    finished: bool,
}

impl<'p> ScanPass<'p> {
    fn new(pattern: &'p str) -> Self {
        Self {
            pattern,
            cursor: 0,
            finished: false,
        }
    }

    /// The next SCAN step as `(cursor returned, keys)`, or `None` once the server returned the
    /// terminal cursor 0 (the pass is then complete).
    async fn next_page(
        &mut self,
        connection: &mut ConnectionManager,
    ) -> Result<Option<(u64, Vec<String>)>, CacheError> {
        if self.finished {
            return Ok(None);
        }
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(self.cursor)
            .arg("MATCH")
            .arg(self.pattern)
            .arg("COUNT")
            .arg(SCAN_PAGE_HINT)
            .query_async(connection)
            .await
            .map_err(|source| command_error("SCAN", source))?;
        self.cursor = next;
        self.finished = next == 0;
        Ok(Some((next, keys)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(cursor: u64, keys: &[&str]) -> (u64, Vec<String>) {
        (cursor, keys.iter().map(|k| (*k).to_owned()).collect())
    }

    #[test]
    fn redis_absence_requires_terminal_cursor_and_all_pages_empty() {
        assert!(scan_proves_absence(&[page(0, &[])]));
        assert!(scan_proves_absence(&[
            page(17, &[]),
            page(4, &[]),
            page(0, &[])
        ]));
    }

    #[test]
    fn redis_absence_is_not_proven_by_a_pass_cut_short() {
        assert!(!scan_proves_absence(&[page(17, &[]), page(4, &[])]));
    }

    #[test]
    fn redis_absence_is_not_proven_by_no_pages() {
        assert!(!scan_proves_absence(&[]));
    }

    #[test]
    fn redis_absence_is_not_proven_when_any_page_held_a_key() {
        assert!(!scan_proves_absence(&[
            page(17, &["buzz:c:x"]),
            page(0, &[])
        ]));
        assert!(!scan_proves_absence(&[page(0, &["buzz:c:x"])]));
    }

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
    fn a_configuration_that_would_not_be_verified_tls_is_refused_before_connecting() {
        // `#insecure` would switch certificate checks off.
        let insecure = client_of(&RedisConfig::url(
            "rediss://u:secret-pw@cache:6379/#insecure",
        ))
        .err()
        .map(|e| e.to_string());
        assert!(
            insecure
                .as_deref()
                .is_some_and(|m| m.contains("#insecure") && m.contains("BUZZ_REDIS_CA_FILE")),
            "{insecure:?}"
        );
        // A CA file with a plaintext URL would trust nothing: TLS is not on.
        let plaintext = client_of(&RedisConfig {
            url: "redis://cache:6379".into(),
            ca_file: Some("/etc/ca.pem".into()),
        })
        .err()
        .map(|e| e.to_string());
        assert!(
            plaintext
                .as_deref()
                .is_some_and(|m| m.contains("rediss://")),
            "{plaintext:?}"
        );
        // An unreadable CA file is named, and the URL's password is never shown.
        let config = RedisConfig {
            url: "rediss://u:secret-pw@cache:6379".into(),
            ca_file: Some("/nonexistent/ca.pem".into()),
        };
        let unreadable = client_of(&config).err().map(|e| e.to_string());
        assert!(
            unreadable
                .as_deref()
                .is_some_and(|m| m.contains("BUZZ_REDIS_CA_FILE=/nonexistent/ca.pem")),
            "{unreadable:?}"
        );
        assert!(!format!("{config:?}").contains("secret-pw"));
        assert_eq!(config.redacted_url(), "rediss://u:***@cache:6379");
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
    }
}
