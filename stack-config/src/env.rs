//! The one reader of the stack's environment: where Postgres, Redis, the S3 bucket and Temporal
//! are, as `deploy/local/up` writes them to `.state/env` and a deployment exports them.
//!
//! It is pure: every read goes through an injected lookup function ([`StackEnv::process`] for the
//! real environment, a map in tests), so the rules — what is required, what is trimmed, which
//! default applies — are unit-tested without touching the process environment. Each caller asks
//! only for what it uses; settings that belong to one binary (the worker's tuning knobs, the
//! CLI's task queue) stay with it, and the settings that build the adapters' own types
//! (`S3Config`, `RedisConfig`) are read through this reader by `activities::stack_settings`.
//!
//! Every required variable may instead be given as a file: `NAME_FILE` names a file whose
//! content (trimmed) is the value, the convention of container secrets (`POSTGRES_PASSWORD_FILE`)
//! and of Kubernetes Secrets mounted as volumes. So no secret needs to be in the process
//! environment. Setting both `NAME` and `NAME_FILE` is refused rather than silently preferring
//! one; errors name the variable and the file, never a value.

/// Worker role's Postgres connection string (least privilege).
pub const DATABASE_URL: &str = "DATABASE_URL";
/// Schema owner's Postgres connection string (migrations, seeding, inspection).
pub const OWNER_DATABASE_URL: &str = "BUZZ_OWNER_DATABASE_URL";
/// Serving role's Postgres connection string (tenant writes and leases, as the relay makes them).
pub const SERVING_DATABASE_URL: &str = "BUZZ_SERVING_DATABASE_URL";
/// Redis connection string.
pub const REDIS_URL: &str = "REDIS_URL";
/// PEM file of CA certificates trusted for a `rediss://` server (optional).
pub const REDIS_CA_FILE: &str = "BUZZ_REDIS_CA_FILE";
/// `single` (one server, the default) or `cluster` (a Redis Cluster; `REDIS_URL` lists seed
/// nodes, comma-separated).
pub const REDIS_MODE: &str = "BUZZ_REDIS_MODE";
/// Base URL of the S3 server.
pub const S3_ENDPOINT: &str = "BUZZ_S3_ENDPOINT";
/// The shared, versioned bucket.
pub const S3_BUCKET: &str = "BUZZ_S3_BUCKET";
/// S3 signing region (optional, see [`DEFAULT_S3_REGION`]).
pub const S3_REGION: &str = "BUZZ_S3_REGION";
/// S3 access key id.
pub const S3_ACCESS_KEY: &str = "BUZZ_S3_ACCESS_KEY";
/// S3 secret access key.
pub const S3_SECRET_KEY: &str = "BUZZ_S3_SECRET_KEY";
/// PEM file of CA certificates trusted for an `https://` S3 endpoint (optional).
pub const S3_CA_FILE: &str = "BUZZ_S3_CA_FILE";
/// S3 addressing style, `path` (default) or `virtual`.
pub const S3_ADDRESSING: &str = "BUZZ_S3_ADDRESSING";
/// Temporal frontend, `host:port` or a URL.
pub const TEMPORAL_ADDRESS: &str = "TEMPORAL_ADDRESS";
/// Temporal namespace (optional, see [`DEFAULT_TEMPORAL_NAMESPACE`]).
pub const TEMPORAL_NAMESPACE: &str = "TEMPORAL_NAMESPACE";
/// Task queue the workflows and their activities run on (optional, default
/// `workflows::TASK_QUEUE`): the worker polls it, the CLI starts workflows on it.
pub const TASK_QUEUE: &str = "BUZZ_TASK_QUEUE";

/// Region used when `BUZZ_S3_REGION` is unset or blank: any non-empty value signs correctly for
/// Ceph RGW, and `us-east-1` is what the SDKs assume for real S3.
pub const DEFAULT_S3_REGION: &str = "us-east-1";
/// Namespace used when `TEMPORAL_NAMESPACE` is unset or blank.
pub const DEFAULT_TEMPORAL_NAMESPACE: &str = "default";

/// Suffix of the variable naming a file that holds another variable's value
/// (`DATABASE_URL_FILE` for `DATABASE_URL`).
pub const FILE_SUFFIX: &str = "_FILE";

/// What to do when a variable is missing.
pub const HOW_TO_SET: &str =
    "export it, or run `bash deploy/local/up && source .state/env` for the local stack";

/// A required variable of the stack's environment is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StackEnvError {
    /// The variable is unset, empty or only whitespace, and so is its `_FILE` twin.
    #[error("{name} is not set (or is blank), nor is {name}_FILE: {HOW_TO_SET}")]
    Missing {
        /// Variable name.
        name: &'static str,
    },
    /// Both the variable and its `_FILE` twin are set.
    #[error(
        "both {name} and {name}_FILE are set: keep one ({name}_FILE keeps the value out of the \
         process environment)"
    )]
    Ambiguous {
        /// Variable name.
        name: &'static str,
    },
    /// A variable's value is not one of the accepted ones.
    #[error("{name}={value:?} is invalid: {expected}")]
    Invalid {
        /// Variable name.
        name: &'static str,
        /// The value found (never a secret's).
        value: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// The file named by the `_FILE` twin cannot be read or is empty.
    #[error("{name}_FILE={path}: {reason}")]
    Unreadable {
        /// Variable name (without the suffix).
        name: &'static str,
        /// The file named.
        path: String,
        /// Why it cannot serve (never its content).
        reason: String,
    },
}

impl StackEnvError {
    /// The variable at fault.
    pub fn name(&self) -> &'static str {
        match self {
            StackEnvError::Missing { name }
            | StackEnvError::Ambiguous { name }
            | StackEnvError::Invalid { name, .. }
            | StackEnvError::Unreadable { name, .. } => name,
        }
    }
}

/// The trimmed content of `path`, the value of `name` given as a file.
fn read_value_file(name: &'static str, path: &str) -> Result<String, StackEnvError> {
    let unreadable = |reason: String| StackEnvError::Unreadable {
        name,
        path: path.to_owned(),
        reason,
    };
    let content = std::fs::read_to_string(path)
        .map_err(|e| unreadable(format!("cannot read the file ({e})")))?;
    let value = content.trim();
    if value.is_empty() {
        return Err(unreadable("the file is empty".to_owned()));
    }
    Ok(value.to_owned())
}

/// Reads the stack's variables through a lookup function.
///
/// Values are trimmed; a value that is empty after trimming counts as unset.
#[derive(Debug, Clone, Copy)]
pub struct StackEnv<L> {
    lookup: L,
}

/// Lookup function of the real process environment.
pub type ProcessLookup = fn(&str) -> Option<String>;

fn process_lookup(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl StackEnv<ProcessLookup> {
    /// A reader of the process environment.
    pub fn process() -> Self {
        StackEnv {
            lookup: process_lookup,
        }
    }
}

impl<L: Fn(&str) -> Option<String>> StackEnv<L> {
    /// A reader that looks variables up through `lookup` (a map in tests).
    pub fn new(lookup: L) -> Self {
        StackEnv { lookup }
    }

    /// The trimmed value of `name`, or `None` when it is unset or blank.
    pub fn optional(&self, name: &str) -> Option<String> {
        (self.lookup)(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    /// The trimmed value of `name`, or of the file `NAME_FILE` names; an error naming the
    /// variable (and the file, never its content) when neither serves or both are set.
    pub fn required(&self, name: &'static str) -> Result<String, StackEnvError> {
        let file = self.optional(&format!("{name}{FILE_SUFFIX}"));
        match (self.optional(name), file) {
            (Some(_), Some(_)) => Err(StackEnvError::Ambiguous { name }),
            (Some(value), None) => Ok(value),
            (None, Some(path)) => read_value_file(name, &path),
            (None, None) => Err(StackEnvError::Missing { name }),
        }
    }

    /// Like [`StackEnv::required`], but `None` when neither `NAME` nor `NAME_FILE` is set.
    pub fn optional_or_file(&self, name: &'static str) -> Result<Option<String>, StackEnvError> {
        match self.required(name) {
            Ok(value) => Ok(Some(value)),
            Err(StackEnvError::Missing { .. }) => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// How Temporal is reached: TLS, mutual TLS, API key (see [`crate::temporal`]).
    pub fn temporal_access(&self) -> Result<crate::temporal::TemporalAccess, StackEnvError> {
        crate::temporal::settings::read(self)
    }

    /// `DATABASE_URL`: the worker role's connection string.
    pub fn database_url(&self) -> Result<String, StackEnvError> {
        self.required(DATABASE_URL)
    }

    /// `BUZZ_OWNER_DATABASE_URL`: the schema owner's connection string.
    pub fn owner_database_url(&self) -> Result<String, StackEnvError> {
        self.required(OWNER_DATABASE_URL)
    }

    /// `BUZZ_SERVING_DATABASE_URL`: the serving role's connection string.
    pub fn serving_database_url(&self) -> Result<String, StackEnvError> {
        self.required(SERVING_DATABASE_URL)
    }

    /// `REDIS_URL`.
    pub fn redis_url(&self) -> Result<String, StackEnvError> {
        self.required(REDIS_URL)
    }

    /// `TEMPORAL_ADDRESS`, as written (`host:port` or a URL).
    pub fn temporal_address(&self) -> Result<String, StackEnvError> {
        self.required(TEMPORAL_ADDRESS)
    }

    /// `TEMPORAL_NAMESPACE`, or [`DEFAULT_TEMPORAL_NAMESPACE`].
    pub fn temporal_namespace(&self) -> String {
        self.optional(TEMPORAL_NAMESPACE)
            .unwrap_or_else(|| DEFAULT_TEMPORAL_NAMESPACE.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn full_env() -> HashMap<&'static str, String> {
        [
            (
                DATABASE_URL,
                "postgres://buzz_worker:w@127.0.0.1:55432/buzz",
            ),
            (OWNER_DATABASE_URL, "postgres://buzz:o@127.0.0.1:55432/buzz"),
            (
                SERVING_DATABASE_URL,
                "postgres://buzz_serving:s@127.0.0.1:55432/buzz",
            ),
            (REDIS_URL, "redis://127.0.0.1:56379"),
            (S3_ENDPOINT, "http://127.0.0.1:57480"),
            (S3_BUCKET, "buzz-media"),
            (S3_REGION, "eu-west-3"),
            (S3_ACCESS_KEY, "access"),
            (S3_SECRET_KEY, "secret"),
            (TEMPORAL_ADDRESS, "127.0.0.1:7233"),
            (TEMPORAL_NAMESPACE, "buzz"),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.to_owned()))
        .collect()
    }

    fn reader(env: &HashMap<&'static str, String>) -> StackEnv<impl Fn(&str) -> Option<String>> {
        StackEnv::new(move |name: &str| env.get(name).cloned())
    }

    /// Every required read, by the variable it reads.
    fn read_required(
        env: &StackEnv<impl Fn(&str) -> Option<String>>,
        name: &'static str,
    ) -> Result<String, StackEnvError> {
        match name {
            DATABASE_URL => env.database_url(),
            OWNER_DATABASE_URL => env.owner_database_url(),
            SERVING_DATABASE_URL => env.serving_database_url(),
            REDIS_URL => env.redis_url(),
            TEMPORAL_ADDRESS => env.temporal_address(),
            _ => env.required(name),
        }
    }

    const REQUIRED: [&str; 9] = [
        DATABASE_URL,
        OWNER_DATABASE_URL,
        SERVING_DATABASE_URL,
        REDIS_URL,
        TEMPORAL_ADDRESS,
        S3_ENDPOINT,
        S3_BUCKET,
        S3_ACCESS_KEY,
        S3_SECRET_KEY,
    ];

    #[test]
    fn a_full_environment_is_read_exactly() {
        let env = full_env();
        let env = reader(&env);
        assert_eq!(
            env.database_url().as_deref(),
            Ok("postgres://buzz_worker:w@127.0.0.1:55432/buzz")
        );
        assert_eq!(
            env.owner_database_url().as_deref(),
            Ok("postgres://buzz:o@127.0.0.1:55432/buzz")
        );
        assert_eq!(
            env.serving_database_url().as_deref(),
            Ok("postgres://buzz_serving:s@127.0.0.1:55432/buzz")
        );
        assert_eq!(env.redis_url().as_deref(), Ok("redis://127.0.0.1:56379"));
        assert_eq!(env.temporal_address().as_deref(), Ok("127.0.0.1:7233"));
        assert_eq!(env.temporal_namespace(), "buzz");
    }

    #[test]
    fn each_missing_required_variable_is_named_with_the_fix() {
        for missing in REQUIRED {
            let mut env = full_env();
            env.remove(missing);
            let error = read_required(&reader(&env), missing)
                .expect_err("a missing required variable must be refused");
            assert_eq!(error, StackEnvError::Missing { name: missing });
            assert_eq!(error.name(), missing);
            let message = error.to_string();
            assert!(message.starts_with(missing), "{message}");
            assert!(
                message.contains("bash deploy/local/up && source .state/env"),
                "{message}"
            );
        }
    }

    #[test]
    fn empty_and_whitespace_values_count_as_missing() {
        for missing in REQUIRED {
            for blank in ["", "   ", "\t\n"] {
                let mut env = full_env();
                env.insert(missing, blank.to_owned());
                let error = read_required(&reader(&env), missing)
                    .expect_err("a blank required variable must be refused");
                assert_eq!(error.name(), missing, "{blank:?}");
            }
        }
    }

    /// A file of this test's own holding `content`.
    fn value_file(content: &str) -> std::path::PathBuf {
        let path =
            std::env::temp_dir().join(format!("buzz-stack-env-{}", uuid::Uuid::new_v4().simple()));
        std::fs::write(&path, content).expect("write the value file");
        path
    }

    #[test]
    fn every_required_variable_can_be_given_as_a_file() {
        for name in REQUIRED {
            let mut env = full_env();
            let value = env.remove(name).unwrap_or_default();
            let path = value_file(&format!("{value}\n"));
            env.insert(
                Box::leak(format!("{name}{FILE_SUFFIX}").into_boxed_str()),
                path.display().to_string(),
            );
            let read = read_required(&reader(&env), name);
            let expected = read_required(&reader(&full_env()), name);
            assert_eq!(read, expected, "{name} from a file");
            let _ = std::fs::remove_file(path);
        }
    }

    #[test]
    fn a_variable_and_its_file_together_are_refused() {
        let mut env = full_env();
        let path = value_file("postgres://other");
        env.insert("DATABASE_URL_FILE", path.display().to_string());
        let error = reader(&env).database_url().expect_err("both set");
        assert_eq!(error, StackEnvError::Ambiguous { name: DATABASE_URL });
        assert!(error.to_string().contains("DATABASE_URL_FILE"), "{error}");
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn an_unreadable_or_empty_file_is_named_and_its_content_never_shown() {
        let mut env = full_env();
        env.remove(S3_SECRET_KEY);
        env.insert("BUZZ_S3_SECRET_KEY_FILE", "/nonexistent/secret".into());
        let error = reader(&env)
            .required(S3_SECRET_KEY)
            .expect_err("unreadable");
        assert_eq!(error.name(), S3_SECRET_KEY);
        let message = error.to_string();
        assert!(
            message.starts_with("BUZZ_S3_SECRET_KEY_FILE=/nonexistent/secret: cannot read"),
            "{message}"
        );
        let empty = value_file(" \n");
        env.insert("BUZZ_S3_SECRET_KEY_FILE", empty.display().to_string());
        let message = reader(&env)
            .required(S3_SECRET_KEY)
            .expect_err("empty")
            .to_string();
        assert!(message.ends_with("the file is empty"), "{message}");
        let _ = std::fs::remove_file(empty);
        let full = full_env();
        assert!(!message.contains(full[S3_SECRET_KEY].as_str()));
    }

    #[test]
    fn values_are_trimmed() {
        let mut env = full_env();
        env.insert(REDIS_URL, "  redis://127.0.0.1:56379\n".into());
        env.insert(S3_BUCKET, "\tbuzz-media ".into());
        let env = reader(&env);
        assert_eq!(env.redis_url().as_deref(), Ok("redis://127.0.0.1:56379"));
        assert_eq!(env.required(S3_BUCKET).as_deref(), Ok("buzz-media"));
    }

    #[test]
    fn the_namespace_defaults_to_default_when_unset_or_blank() {
        let mut env = full_env();
        env.remove(TEMPORAL_NAMESPACE);
        assert_eq!(reader(&env).temporal_namespace(), "default");
        env.insert(TEMPORAL_NAMESPACE, " ".into());
        assert_eq!(reader(&env).temporal_namespace(), "default");
    }
}
