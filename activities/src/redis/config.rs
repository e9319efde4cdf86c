//! Where Redis is, what kind of server it is and how it is trusted, and the clients built from
//! that.

use std::fmt;
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};

use super::error::CacheError;
use super::server_mode::RedisMode;
use stack_config::env::{REDIS_CA_FILE, REDIS_MODE, REDIS_URL};

/// How long connecting to one server may take.
pub(super) const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one reply may take (a SCAN step of a large keyspace included).
pub(super) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// Where Redis is and how it is trusted: `redis://` (plaintext) or `rediss://` (TLS), with
/// `user:password@` for AUTH, and a CA file for a server certificate of a private CA (else the
/// system roots). TLS goes through rustls with the process's one crypto provider (ring).
///
/// In [`RedisMode::Cluster`], `url` lists the cluster's seed nodes, comma-separated, all with the
/// same scheme and credentials; the client learns the rest of the topology from them.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// `redis://…` or `rediss://…` (the password, if any, inside); seed nodes comma-separated in
    /// cluster mode.
    pub url: String,
    /// PEM file of the CA certificates that sign the server's certificate (`BUZZ_REDIS_CA_FILE`).
    pub ca_file: Option<String>,
    /// One server or a Redis Cluster (`BUZZ_REDIS_MODE`).
    pub mode: RedisMode,
}

impl RedisConfig {
    /// A single-server, plaintext or system-roots configuration: just the URL.
    pub fn url(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            ca_file: None,
            mode: RedisMode::Single,
        }
    }

    /// A Redis Cluster reached through `seeds` (URLs, comma-separated).
    pub fn cluster(seeds: impl Into<String>) -> Self {
        Self {
            url: seeds.into(),
            ca_file: None,
            mode: RedisMode::Cluster,
        }
    }

    /// Each URL of `url`, trimmed (one in single mode, the seed nodes in cluster mode).
    pub fn urls(&self) -> Vec<&str> {
        self.url
            .split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .collect()
    }

    /// The URL(s) with every password replaced, for messages.
    pub fn redacted_url(&self) -> String {
        self.urls()
            .into_iter()
            .map(crate::store::redact_password)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The URLs to connect to, refusing a configuration that would not be verified TLS as meant
    /// or that lists several servers for one.
    fn checked_urls(&self) -> Result<Vec<&str>, CacheError> {
        let refuse = |reason: String| CacheError::Config { reason };
        let urls = self.urls();
        if urls.is_empty() {
            return Err(refuse(format!("{REDIS_URL} names no server")));
        }
        if self.mode == RedisMode::Single && urls.len() > 1 {
            return Err(refuse(format!(
                "{REDIS_URL} lists {} servers, and a list of seed nodes is for a Redis Cluster: \
                 set {REDIS_MODE}=cluster, or keep one URL",
                urls.len()
            )));
        }
        for url in &urls {
            let tls = url.starts_with("rediss://");
            if tls && url.contains("#insecure") {
                return Err(refuse(format!(
                    "{REDIS_URL} ends in #insecure, which would turn certificate checks off: \
                     remove it and set {REDIS_CA_FILE} to the CA that signed the server's \
                     certificate"
                )));
            }
            if self.ca_file.is_some() && !tls {
                return Err(refuse(format!(
                    "{REDIS_CA_FILE} is set but {REDIS_URL} is plaintext (redis://): write \
                     rediss:// for TLS, or unset {REDIS_CA_FILE}"
                )));
            }
        }
        Ok(urls)
    }

    /// The PEM of the CA file, if one is configured.
    fn root_cert(&self) -> Result<Option<Vec<u8>>, CacheError> {
        let Some(ca_file) = &self.ca_file else {
            return Ok(None);
        };
        let pem = std::fs::read(ca_file).map_err(|e| CacheError::Config {
            reason: format!("{REDIS_CA_FILE}={ca_file}: cannot read the file ({e})"),
        })?;
        // The TLS handshake uses the process's default provider; install ring when no binary did.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Ok(Some(pem))
    }

    /// One client per URL (the server in single mode, each seed node in cluster mode).
    pub(super) fn clients(&self) -> Result<Vec<(String, redis::Client)>, CacheError> {
        let urls = self.checked_urls()?;
        let root_cert = self.root_cert()?;
        urls.into_iter()
            .map(|url| {
                let client = match &root_cert {
                    None => redis::Client::open(url),
                    Some(pem) => redis::Client::build_with_tls(
                        url,
                        redis::TlsCertificates {
                            client_tls: None,
                            root_cert: Some(pem.clone()),
                        },
                    ),
                }
                .map_err(|source| CacheError::InvalidUrl { source })?;
                Ok((crate::store::redact_password(url), client))
            })
            .collect()
    }

    /// The cluster client over every seed node, with retries bounded so that a cluster in
    /// motion surfaces as a transient error within seconds rather than the crate's default
    /// minutes (the adapter redoes its own passes and the activity retries).
    pub(super) fn cluster_client(&self) -> Result<ClusterClient, CacheError> {
        let urls = self.checked_urls()?;
        let mut builder = ClusterClientBuilder::new(urls)
            .connection_timeout(CONNECTION_TIMEOUT)
            .response_timeout(RESPONSE_TIMEOUT)
            .overall_response_timeout(Some(RESPONSE_TIMEOUT))
            .retries(6)
            .min_retry_wait(50)
            .max_retry_wait(2_000);
        if let Some(pem) = self.root_cert()? {
            builder = builder.certs(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem),
            });
        }
        builder.build().map_err(|source| match source.kind() {
            redis::ErrorKind::InvalidClientConfig => CacheError::Config {
                reason: format!(
                    "the seed nodes in {REDIS_URL} do not agree ({source}): give every seed the \
                     same scheme, user and password"
                ),
            },
            _ => CacheError::InvalidUrl { source },
        })
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &self.redacted_url())
            .field("ca_file", &self.ca_file)
            .field("mode", &self.mode)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(config: &RedisConfig) -> Option<String> {
        config.clients().err().map(|e| e.to_string())
    }

    #[test]
    fn a_configuration_that_would_not_be_verified_tls_is_refused_before_connecting() {
        // `#insecure` would switch certificate checks off.
        let insecure = refusal(&RedisConfig::url(
            "rediss://u:secret-pw@cache:6379/#insecure",
        ));
        assert!(
            insecure
                .as_deref()
                .is_some_and(|m| m.contains("#insecure") && m.contains("BUZZ_REDIS_CA_FILE")),
            "{insecure:?}"
        );
        // A CA file with a plaintext URL would trust nothing: TLS is not on.
        let plaintext = refusal(&RedisConfig {
            ca_file: Some("/etc/ca.pem".into()),
            ..RedisConfig::url("redis://cache:6379")
        });
        assert!(
            plaintext
                .as_deref()
                .is_some_and(|m| m.contains("rediss://")),
            "{plaintext:?}"
        );
        // An unreadable CA file is named, and the URL's password is never shown.
        let config = RedisConfig {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..RedisConfig::url("rediss://u:secret-pw@cache:6379")
        };
        let unreadable = refusal(&config);
        assert!(
            unreadable
                .as_deref()
                .is_some_and(|m| m.contains("BUZZ_REDIS_CA_FILE=/nonexistent/ca.pem")),
            "{unreadable:?}"
        );
        assert!(!format!("{config:?}").contains("secret-pw"));
        assert_eq!(config.redacted_url(), "rediss://u:***@cache:6379");
    }

    #[test]
    fn several_servers_are_seed_nodes_of_a_cluster_only() {
        let seeds = "redis://u:pw@10.0.0.1:6379, redis://u:pw@10.0.0.2:6379";
        let single = refusal(&RedisConfig::url(seeds));
        assert!(
            single
                .as_deref()
                .is_some_and(|m| m.contains("2 servers") && m.contains("BUZZ_REDIS_MODE=cluster")),
            "{single:?}"
        );
        let cluster = RedisConfig::cluster(seeds);
        assert_eq!(
            cluster.urls(),
            ["redis://u:pw@10.0.0.1:6379", "redis://u:pw@10.0.0.2:6379"]
        );
        assert_eq!(
            cluster.redacted_url(),
            "redis://u:***@10.0.0.1:6379,redis://u:***@10.0.0.2:6379"
        );
        assert!(cluster.clients().is_ok());
        // The crate refuses seeds that disagree on credentials; the refusal says what to align.
        let disagreeing = RedisConfig::cluster("redis://u:a@h1:1,redis://u:b@h2:1")
            .cluster_client()
            .err()
            .map(|e| e.to_string());
        assert!(
            disagreeing
                .as_deref()
                .is_some_and(|m| m.contains("same scheme, user and password")),
            "{disagreeing:?}"
        );
        assert!(refusal(&RedisConfig::cluster(" , ")).is_some());
    }
}
