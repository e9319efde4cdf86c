//! What the worker needs to know, read once from the environment at the binary edge.

use std::time::Duration;

use activities::s3::S3Config;
use activities::stack_settings::StackSettings;
use stack_config::env::{StackEnv, StackEnvError};

use crate::deployment::DeploymentConfig;

/// A required variable is missing or malformed.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A variable of the stack's environment (database, Redis, S3, Temporal) is unset or blank.
    #[error(transparent)]
    Stack(#[from] StackEnvError),
    /// A worker-only variable is unset or blank.
    #[error("{name} is not set: {hint}")]
    Missing {
        /// Variable name.
        name: &'static str,
        /// What to do about it.
        hint: &'static str,
    },
    /// The variable is set but cannot be parsed.
    #[error("{name}={value:?} is invalid: {reason}")]
    Invalid {
        /// Variable name.
        name: &'static str,
        /// The value found.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
}

/// Where Temporal is, which namespace to use, and how the connection is secured.
#[derive(Debug, Clone)]
pub struct TemporalConfig {
    /// `host:port` of the frontend (no scheme), or a full `http(s)://` URL.
    pub address: String,
    /// Namespace the workflows run in.
    pub namespace: String,
    /// TLS, mutual TLS, API key (`TEMPORAL_TLS*`, `TEMPORAL_API_KEY(_FILE)`).
    pub access: stack_config::temporal::TemporalAccess,
}

/// Everything the worker process is configured with.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Temporal frontend and namespace.
    pub temporal: TemporalConfig,
    /// Postgres connection string.
    pub database_url: String,
    /// Activity slots and the PostgreSQL pool serving them (`BUZZ_ACTIVITY_SLOTS`,
    /// `BUZZ_PG_POOL_SIZE`, `BUZZ_PG_*_TIMEOUT_MS`; see [`crate::capacity`]).
    pub capacity: crate::capacity::Capacity,
    /// Redis connection string.
    pub redis: activities::redis::RedisConfig,
    /// The S3 bucket holding tenant objects.
    pub s3: S3Config,
    /// Port of the Prometheus `/metrics` endpoint (0 disables it).
    pub metrics_port: u16,
    /// How often the request-state gauges are sampled from Postgres
    /// (`BUZZ_METRICS_SAMPLE_SECS`, see [`crate::request_sampler`]).
    pub metrics_sample_every: Duration,
    /// How the serving-write lease reaper runs (`BUZZ_LEASE_REAP_SECS`, `BUZZ_LEASE_REAP_BATCH`,
    /// see [`crate::lease_reaper`]).
    pub lease_reaper: crate::lease_reaper::ReaperSettings,
    /// How long in-flight activities get to finish after SIGTERM before they are cancelled.
    pub shutdown_grace: Duration,
    /// Task queue to poll (default `buzz-deletion`; tests isolate themselves with their own).
    pub task_queue: String,
    /// Versions per manifest chunk (`BUZZ_MANIFEST_CHUNK_ENTRIES`, default 1,000 — one
    /// DeleteObjects call — at most 10,000).
    pub manifest_chunk_entries: usize,
    /// How long one fence attempt waits for live serving-write leases.
    pub fence_wait: Duration,
    /// Rows of a user deleted per transaction by a user deletion's purge
    /// (`BUZZ_USER_ROW_BATCH`, default 1,000, clamped to 1..=10,000).
    pub user_row_batch: u32,
    /// The bounds of each tenant prefix's adaptive delete rate, versions per second: the ceiling
    /// (`BUZZ_DELETE_RATE_PER_PREFIX`, default 3,500 as real S3 allows; 0 = unpaced until the
    /// first `SlowDown`) and the floor a throttled prefix falls to at the lowest
    /// (`BUZZ_DELETE_RATE_FLOOR`, default 100 or the ceiling if lower; never above the ceiling).
    pub delete_rate: activities::community::RateBounds,
    /// Run even when `DATABASE_URL` is a superuser or the schema owner
    /// (`BUZZ_ALLOW_PRIVILEGED_DB_ROLE=throwaway-local-stack`; throwaway local stacks only).
    pub allow_privileged_db_role: bool,
    /// The Ed25519 key that signs receipts and log checkpoints (`BUZZ_RECEIPT_SIGNING_KEY_FILE`,
    /// a PKCS#8 PEM file; required: a deletion cannot finish without its receipt).
    pub receipt_key_file: std::path::PathBuf,
    /// The object-lock bucket signed receipts are copied to (`BUZZ_RECEIPT_ARCHIVE_BUCKET`;
    /// unset: receipts stay in Postgres only).
    pub receipt_archive_bucket: Option<String>,
    /// Deployment name, build id and Worker Versioning choice (`BUZZ_WORKER_DEPLOYMENT`,
    /// `BUZZ_WORKER_BUILD_ID`, `BUZZ_WORKER_VERSIONING`; see `docs/upgrades.md`).
    pub deployment: DeploymentConfig,
}

impl WorkerConfig {
    /// Reads the configuration from the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the configuration through `lookup` (the environment, or a map in tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let stack = StackEnv::new(&lookup);
        let optional = |name: &str, default: &str| -> String {
            stack.optional(name).unwrap_or_else(|| default.to_owned())
        };
        let parse_u64 = |name: &'static str, default: &str| -> Result<u64, ConfigError> {
            let value = optional(name, default);
            value.parse::<u64>().map_err(|e| ConfigError::Invalid {
                name,
                value: value.clone(),
                reason: e.to_string(),
            })
        };
        let metrics_port = parse_u64("BUZZ_METRICS_PORT", "9464")?;
        let metrics_port = u16::try_from(metrics_port).map_err(|e| ConfigError::Invalid {
            name: "BUZZ_METRICS_PORT",
            value: metrics_port.to_string(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            temporal: TemporalConfig {
                address: stack.temporal_address()?,
                namespace: stack.temporal_namespace(),
                access: stack.temporal_access()?,
            },
            database_url: stack.database_url()?,
            capacity: crate::capacity::Capacity::from_lookup(&lookup)?,
            redis: stack.redis()?,
            s3: stack.s3()?,
            metrics_port,
            metrics_sample_every: crate::request_sampler::sample_interval(
                stack
                    .optional(crate::request_sampler::SAMPLE_SECS_ENV)
                    .as_deref(),
            )
            .map_err(|e| ConfigError::Invalid {
                name: crate::request_sampler::SAMPLE_SECS_ENV,
                value: e.value.clone(),
                reason: format!(
                    "not a whole number of seconds between 1 and {}",
                    crate::request_sampler::MAX_SAMPLE_SECS
                ),
            })?,
            lease_reaper: crate::lease_reaper::ReaperSettings::from_values(
                stack
                    .optional(crate::lease_reaper::REAP_SECS_ENV)
                    .as_deref(),
                stack
                    .optional(crate::lease_reaper::REAP_BATCH_ENV)
                    .as_deref(),
            )
            .map_err(|e| ConfigError::Invalid {
                name: e.name,
                value: e.value.clone(),
                reason: format!("not {}", e.expected),
            })?,
            shutdown_grace: Duration::from_secs(parse_u64("BUZZ_SHUTDOWN_GRACE_SECS", "60")?),
            task_queue: stack.task_queue(),
            manifest_chunk_entries: usize::try_from(parse_u64(
                "BUZZ_MANIFEST_CHUNK_ENTRIES",
                "1000",
            )?)
            .unwrap_or(10_000)
            .clamp(1, 10_000),
            fence_wait: Duration::from_secs(parse_u64("BUZZ_FENCE_WAIT_SECS", "20")?),
            user_row_batch: u32::try_from(parse_u64("BUZZ_USER_ROW_BATCH", "1000")?)
                .unwrap_or(10_000)
                .clamp(1, 10_000),
            delete_rate: delete_rate_bounds(
                parse_u64("BUZZ_DELETE_RATE_PER_PREFIX", "3500")?,
                stack.optional("BUZZ_DELETE_RATE_FLOOR"),
            )?,
            allow_privileged_db_role: activities::store::privileged_role_allowed(
                lookup(activities::store::ALLOW_PRIVILEGED_ROLE_ENV).as_deref(),
            ),
            receipt_key_file: stack
                .optional(activities::certificates::SIGNING_KEY_FILE_ENV)
                .map(std::path::PathBuf::from)
                .ok_or(ConfigError::Missing {
                    name: activities::certificates::SIGNING_KEY_FILE_ENV,
                    hint: "name the file of the worker's Ed25519 receipt signing key \
                           (`buzz-deletion keys generate --dir DIR` writes one; the Helm chart \
                           mounts it from a Secret); see docs/certificates.md",
                })?,
            receipt_archive_bucket: stack.optional(activities::certificates::ARCHIVE_BUCKET_ENV),
            deployment: DeploymentConfig::from_lookup(&lookup)?,
        })
    }
}

/// The delete rate's ceiling (`BUZZ_DELETE_RATE_PER_PREFIX`, 0: none) and floor
/// (`BUZZ_DELETE_RATE_FLOOR`, at least 1 and never above a set ceiling; unset: the default floor,
/// or the ceiling when that is lower).
fn delete_rate_bounds(
    ceiling: u64,
    floor: Option<String>,
) -> Result<activities::community::RateBounds, ConfigError> {
    const FLOOR: &str = "BUZZ_DELETE_RATE_FLOOR";
    let ceiling = u32::try_from(ceiling).unwrap_or(u32::MAX);
    let floor = match floor {
        None => {
            let default = activities::community::DEFAULT_DELETES_PER_SECOND_FLOOR;
            if ceiling == 0 {
                default
            } else {
                default.min(ceiling)
            }
        }
        Some(value) => {
            let invalid = |reason: String| ConfigError::Invalid {
                name: FLOOR,
                value: value.clone(),
                reason,
            };
            let floor = value.parse::<u32>().map_err(|e| invalid(e.to_string()))?;
            if floor == 0 {
                return Err(invalid(
                    "the floor must be at least 1 version per second, or a throttled deletion \
                     could stop"
                        .to_owned(),
                ));
            }
            if ceiling != 0 && floor > ceiling {
                return Err(invalid(format!(
                    "the floor is above BUZZ_DELETE_RATE_PER_PREFIX={ceiling}; lower the floor \
                     or raise the ceiling"
                )));
            }
            floor
        }
    };
    Ok(activities::community::RateBounds { ceiling, floor })
}

/// A lookup over these name/value pairs (the last one of a name wins), as the tests feed a
/// `from_lookup`.
#[cfg(test)]
pub(crate) fn lookup_in<'a>(
    pairs: &'a [(&'a str, &'a str)],
) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        pairs
            .iter()
            .rev()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| (*value).to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn full_env() -> HashMap<&'static str, &'static str> {
        HashMap::from([
            ("TEMPORAL_ADDRESS", "127.0.0.1:7233"),
            ("DATABASE_URL", "postgres://buzz:buzz@127.0.0.1:55432/buzz"),
            ("REDIS_URL", "redis://127.0.0.1:56379"),
            ("BUZZ_S3_ENDPOINT", "http://127.0.0.1:57480"),
            ("BUZZ_S3_BUCKET", "buzz-media"),
            ("BUZZ_S3_ACCESS_KEY", "buzz"),
            ("BUZZ_S3_SECRET_KEY", "secret"),
            ("BUZZ_RECEIPT_SIGNING_KEY_FILE", "/run/secrets/receipt.key"),
        ])
    }

    #[test]
    fn every_required_variable_is_named_when_missing() {
        for missing in [
            "TEMPORAL_ADDRESS",
            "DATABASE_URL",
            "REDIS_URL",
            "BUZZ_S3_ENDPOINT",
            "BUZZ_S3_BUCKET",
            "BUZZ_S3_ACCESS_KEY",
            "BUZZ_S3_SECRET_KEY",
            "BUZZ_RECEIPT_SIGNING_KEY_FILE",
        ] {
            let mut env = full_env();
            env.insert(missing, "  ");
            let error = WorkerConfig::from_lookup(|k| env.get(k).map(|v| v.to_string()))
                .expect_err("a blank required variable must be refused");
            assert!(error.to_string().starts_with(missing), "{error}");
            assert!(
                matches!(&error, ConfigError::Stack(e) if e.name() == missing)
                    || matches!(&error, ConfigError::Missing { name, .. } if *name == missing),
                "{error:?}"
            );
        }
    }

    #[test]
    fn defaults_fill_namespace_region_and_metrics_port() {
        let env = full_env();
        let config = WorkerConfig::from_lookup(|k| env.get(k).map(|v| v.to_string()))
            .expect("complete environment");
        assert_eq!(config.temporal.namespace, "default");
        assert_eq!(
            config.s3.region, None,
            "an unset region is the AWS SDK's to find"
        );
        assert_eq!(config.metrics_port, 9464);
        assert!(!config.allow_privileged_db_role);
        assert_eq!(
            config.temporal.access,
            stack_config::temporal::TemporalAccess::plaintext()
        );
    }

    #[test]
    fn the_metrics_sample_period_defaults_to_thirty_seconds_and_refuses_zero() {
        let mut env = full_env();
        let config = WorkerConfig::from_lookup(|k| env.get(k).map(|v| v.to_string()))
            .expect("complete environment");
        assert_eq!(config.metrics_sample_every, Duration::from_secs(30));
        env.insert("BUZZ_METRICS_SAMPLE_SECS", "0");
        let error = WorkerConfig::from_lookup(|k| env.get(k).map(|v| v.to_string()))
            .expect_err("zero is no period");
        assert!(
            error
                .to_string()
                .starts_with("BUZZ_METRICS_SAMPLE_SECS=\"0\" is invalid"),
            "{error}"
        );
    }

    #[test]
    fn the_per_prefix_delete_rate_defaults_to_what_real_s3_allows_and_zero_disables_it() {
        let mut env = full_env();
        let config = WorkerConfig::from_lookup(|k| env.get(k).map(|v| v.to_string()))
            .expect("complete environment");
        assert_eq!(config.delete_rate.ceiling, 3_500);
        assert_eq!(config.delete_rate.floor, 100);
        assert_eq!(config.manifest_chunk_entries, 1_000);
        env.insert("BUZZ_DELETE_RATE_PER_PREFIX", "0");
        let config = WorkerConfig::from_lookup(|k| env.get(k).map(|v| v.to_string()))
            .expect("complete environment");
        assert_eq!(config.delete_rate.ceiling, 0);
        env.insert("BUZZ_DELETE_RATE_PER_PREFIX", "15");
        let config = WorkerConfig::from_lookup(|k| env.get(k).map(|v| v.to_string()))
            .expect("complete environment");
        assert_eq!(
            (config.delete_rate.ceiling, config.delete_rate.floor),
            (15, 15),
            "the default floor gives way to a lower ceiling"
        );
    }

    #[test]
    fn a_delete_rate_floor_above_the_ceiling_or_zero_is_refused_naming_both() {
        let mut env = full_env();
        env.insert("BUZZ_DELETE_RATE_PER_PREFIX", "2000");
        env.insert("BUZZ_DELETE_RATE_FLOOR", "500");
        let config = WorkerConfig::from_lookup(|k| env.get(k).map(|v| v.to_string()))
            .expect("complete environment");
        assert_eq!(
            (config.delete_rate.ceiling, config.delete_rate.floor),
            (2_000, 500)
        );
        env.insert("BUZZ_DELETE_RATE_FLOOR", "2500");
        let error = WorkerConfig::from_lookup(|k| env.get(k).map(|v| v.to_string()))
            .expect_err("a floor above the ceiling");
        let message = error.to_string();
        assert!(
            message.contains("BUZZ_DELETE_RATE_FLOOR") && message.contains("2000"),
            "{message}"
        );
        env.insert("BUZZ_DELETE_RATE_FLOOR", "0");
        let error = WorkerConfig::from_lookup(|k| env.get(k).map(|v| v.to_string()))
            .expect_err("a zero floor");
        assert!(
            error.to_string().contains("BUZZ_DELETE_RATE_FLOOR"),
            "{error}"
        );
    }

    #[test]
    fn only_the_spelled_out_flag_allows_a_privileged_database_role() {
        let mut env = full_env();
        for (value, allowed) in [
            ("throwaway-local-stack", true),
            ("true", false),
            ("1", false),
        ] {
            env.insert("BUZZ_ALLOW_PRIVILEGED_DB_ROLE", value);
            let config = WorkerConfig::from_lookup(|k| env.get(k).map(|v| v.to_string()))
                .expect("complete environment");
            assert_eq!(config.allow_privileged_db_role, allowed, "{value}");
        }
    }

    #[test]
    fn malformed_metrics_port_is_refused_with_its_value() {
        let mut env = full_env();
        env.insert("BUZZ_METRICS_PORT", "70000");
        let error = WorkerConfig::from_lookup(|k| env.get(k).map(|v| v.to_string()))
            .expect_err("port out of range");
        assert!(error.to_string().contains("70000"), "{error}");
    }
}
