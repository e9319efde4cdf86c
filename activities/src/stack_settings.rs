//! The stack's settings that build this crate's own types — where the bucket is
//! ([`S3Config`]), where Redis is ([`RedisConfig`]) — and the task queue, whose default is the
//! workflows' own: read once, through the one reader of the environment
//! ([`stack_config::env::StackEnv`]), next to the types they build. Variable names, `NAME_FILE`
//! and every error are `stack_config::env`'s.

use stack_config::env::{
    FILE_SUFFIX, REDIS_CA_FILE, REDIS_MODE, S3_ACCESS_KEY, S3_ADDRESSING, S3_BUCKET, S3_CA_FILE,
    S3_ENDPOINT, S3_REGION, S3_SECRET_KEY, StackEnv, StackEnvError, TASK_QUEUE,
};

use crate::redis::{RedisConfig, RedisMode};
use crate::s3::{S3Addressing, S3Config, S3Credentials};

/// The settings of [`StackEnv`] that build `activities`' types (bring it into scope to call
/// `StackEnv::process().s3()`).
pub trait StackSettings {
    /// `REDIS_URL`, `BUZZ_REDIS_CA_FILE` and `BUZZ_REDIS_MODE` (`single` when unset).
    fn redis(&self) -> Result<RedisConfig, StackEnvError>;

    /// `BUZZ_REDIS_MODE`: `single` (the default) or `cluster`.
    fn redis_mode(&self) -> Result<RedisMode, StackEnvError>;

    /// `BUZZ_TASK_QUEUE`, or [`workflows::TASK_QUEUE`].
    fn task_queue(&self) -> String;

    /// The bucket settings from the `BUZZ_S3_*` variables. Endpoint and bucket are required.
    /// The region is `BUZZ_S3_REGION`, else the AWS SDK's standard places, else
    /// [`stack_config::env::DEFAULT_S3_REGION`]. The credentials are the static pair
    /// `BUZZ_S3_ACCESS_KEY` and `BUZZ_S3_SECRET_KEY` when either is set (then both are
    /// required), else the AWS SDK's default provider chain. `BUZZ_S3_ADDRESSING` is `path`
    /// (default) or `virtual`.
    fn s3(&self) -> Result<S3Config, StackEnvError>;
}

impl<L: Fn(&str) -> Option<String>> StackSettings for StackEnv<L> {
    fn redis(&self) -> Result<RedisConfig, StackEnvError> {
        Ok(RedisConfig {
            url: self.redis_url()?,
            ca_file: self.optional(REDIS_CA_FILE),
            mode: self.redis_mode()?,
        })
    }

    fn redis_mode(&self) -> Result<RedisMode, StackEnvError> {
        match self.optional(REDIS_MODE) {
            None => Ok(RedisMode::Single),
            Some(value) => RedisMode::parse(&value).ok_or(StackEnvError::Invalid {
                name: REDIS_MODE,
                value,
                expected: "single (one Redis server, the default) or cluster (a Redis \
                               Cluster; REDIS_URL then lists seed nodes, comma-separated)",
            }),
        }
    }

    fn task_queue(&self) -> String {
        self.optional(TASK_QUEUE)
            .unwrap_or_else(|| workflows::TASK_QUEUE.to_owned())
    }

    fn s3(&self) -> Result<S3Config, StackEnvError> {
        let static_pair = [S3_ACCESS_KEY, S3_SECRET_KEY].iter().any(|name| {
            self.optional(name).is_some()
                || self.optional(&format!("{name}{FILE_SUFFIX}")).is_some()
        });
        let credentials = if static_pair {
            S3Credentials::Static {
                access_key: self.required(S3_ACCESS_KEY)?,
                secret_key: self.required(S3_SECRET_KEY)?,
            }
        } else {
            S3Credentials::DefaultChain
        };
        let addressing = match self.optional(S3_ADDRESSING).as_deref() {
            None | Some("path") => S3Addressing::Path,
            Some("virtual") => S3Addressing::VirtualHosted,
            Some(other) => {
                return Err(StackEnvError::Invalid {
                    name: S3_ADDRESSING,
                    value: other.to_owned(),
                    expected: "path (endpoint/bucket/key, the default) or virtual \
                               (bucket.endpoint/key)",
                });
            }
        };
        Ok(S3Config {
            endpoint: self.required(S3_ENDPOINT)?,
            bucket: self.required(S3_BUCKET)?,
            region: self.optional(S3_REGION),
            credentials,
            addressing,
            ca_file: self.optional(S3_CA_FILE),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use stack_config::env::REDIS_URL;

    use super::*;

    /// A stack environment the settings read, changed one variable at a time.
    #[derive(Clone, Default)]
    struct Env(HashMap<&'static str, String>);

    impl Env {
        /// Every S3 and Redis variable set.
        fn full() -> Self {
            Env::default()
                .with(REDIS_URL, "redis://127.0.0.1:56379")
                .with(S3_ENDPOINT, "http://127.0.0.1:57480")
                .with(S3_BUCKET, "buzz-media")
                .with(S3_REGION, "eu-west-3")
                .with(S3_ACCESS_KEY, "access")
                .with(S3_SECRET_KEY, "secret")
        }

        /// The same environment with `name` set to `value`.
        fn with(mut self, name: &'static str, value: &str) -> Self {
            self.0.insert(name, value.to_owned());
            self
        }

        /// The same environment without `name`.
        fn without(mut self, name: &'static str) -> Self {
            self.0.remove(name);
            self
        }

        /// The environment as the stack's configuration reads it.
        fn read(&self) -> StackEnv<impl Fn(&str) -> Option<String>> {
            StackEnv::new(move |name: &str| self.0.get(name).cloned())
        }
    }

    #[test]
    fn a_full_environment_is_read_exactly() {
        assert_eq!(
            Env::full().read().s3(),
            Ok(S3Config {
                endpoint: "http://127.0.0.1:57480".into(),
                bucket: "buzz-media".into(),
                region: Some("eu-west-3".into()),
                credentials: S3Credentials::Static {
                    access_key: "access".into(),
                    secret_key: "secret".into(),
                },
                addressing: S3Addressing::Path,
                ca_file: None,
            })
        );
        assert_eq!(
            Env::full().read().redis(),
            Ok(RedisConfig::url("redis://127.0.0.1:56379"))
        );
    }

    #[test]
    fn each_missing_required_variable_is_named() {
        for missing in [S3_ENDPOINT, S3_BUCKET, S3_ACCESS_KEY, S3_SECRET_KEY] {
            let env = Env::full().without(missing);
            let error = env.read().s3().expect_err("a missing required variable");
            assert_eq!(error, StackEnvError::Missing { name: missing });
        }
        let env = Env::full().without(REDIS_URL);
        let error = env.read().redis().expect_err("no REDIS_URL");
        assert_eq!(error, StackEnvError::Missing { name: REDIS_URL });
    }

    #[test]
    fn the_task_queue_defaults_to_the_workflows_queue_when_unset_or_blank() {
        for queue in [None, Some(""), Some(" \t")] {
            let env = match queue {
                None => Env::full(),
                Some(queue) => Env::full().with(TASK_QUEUE, queue),
            };
            assert_eq!(env.read().task_queue(), workflows::TASK_QUEUE, "{queue:?}");
        }
        let env = Env::full().with(TASK_QUEUE, " e2e-queue\n");
        assert_eq!(env.read().task_queue(), "e2e-queue");
    }

    #[test]
    fn an_unset_region_is_left_to_the_aws_standard_places() {
        for region in [None, Some(""), Some("  ")] {
            let env = match region {
                None => Env::full().without(S3_REGION),
                Some(blank) => Env::full().with(S3_REGION, blank),
            };
            let s3 = env.read().s3().expect("the region is optional");
            assert_eq!(s3.region, None, "{region:?}");
        }
    }

    #[test]
    fn without_the_static_pair_the_aws_default_chain_signs() {
        let env = Env::full().without(S3_ACCESS_KEY).without(S3_SECRET_KEY);
        let s3 = env.read().s3().expect("the static pair is optional");
        assert_eq!(s3.credentials, S3Credentials::DefaultChain);
        // Half a pair is a mistake, not a request for the chain.
        let env = Env::full().without(S3_SECRET_KEY);
        let error = env.read().s3().expect_err("half a pair");
        assert_eq!(error.name(), S3_SECRET_KEY);
        // The secret is never printed, even in a Debug of the configuration.
        let debug = format!("{:?}", Env::full().read().s3());
        assert!(!debug.contains("\"secret\""), "{debug}");
    }

    #[test]
    fn addressing_is_path_unless_virtual_and_anything_else_is_refused() {
        let env = Env::full();
        let addressing = |env: &Env| env.read().s3().map(|s3| s3.addressing);
        assert_eq!(addressing(&env), Ok(S3Addressing::Path));
        let env = env.with(S3_ADDRESSING, "virtual");
        assert_eq!(addressing(&env), Ok(S3Addressing::VirtualHosted));
        let env = env.with(S3_ADDRESSING, "dns");
        let error = env.read().s3().expect_err("unknown style");
        assert_eq!(error.name(), S3_ADDRESSING);
        assert!(error.to_string().contains("path"), "{error}");
    }

    #[test]
    fn the_redis_mode_is_single_unless_cluster_and_anything_else_is_refused() {
        let env = Env::full();
        assert_eq!(env.read().redis().map(|r| r.mode), Ok(RedisMode::Single));
        let env = env
            .with(REDIS_MODE, " cluster ")
            .with(REDIS_URL, "redis://a:1,redis://b:2");
        let redis = env.read().redis().expect("cluster mode");
        assert_eq!(redis.mode, RedisMode::Cluster);
        assert_eq!(redis.urls(), ["redis://a:1", "redis://b:2"]);
        let env = env.with(REDIS_MODE, "sentinel");
        let error = env.read().redis().expect_err("unknown mode");
        assert_eq!(error.name(), REDIS_MODE);
        assert!(error.to_string().contains("single") && error.to_string().contains("cluster"));
    }
}
