//! The local stack as the run sees it: the environment `deploy/local/up` writes, connections to
//! the three data stores for seeding and checking, and the environment a worker gets so that it
//! reaches every dependency through its proxy.

use std::collections::BTreeMap;
use std::path::PathBuf;

use activities::redis::RedisMode;
use activities::stack_settings::StackSettings;
use anyhow::{Context, Result, anyhow};
use stack_config::env as stack_env;
use url::Url;

use crate::schedule::Dependency;

const HOW_TO_START: &str = "run it through `deploy/local/chaos`, which starts the local stack and \
     sources its environment";

/// Reads a required variable (trimmed; blank counts as unset) through the test kit, naming how a
/// chaos run gets its environment when it is missing.
pub fn env(name: &'static str) -> Result<String> {
    testkit::running_stack::variable(name, HOW_TO_START)
}

/// Where each dependency really listens, and the variables that name it.
#[derive(Debug, Clone)]
pub struct StackEnv {
    /// `host:port` per dependency behind a proxy (not Redis on a cluster: a cluster client
    /// connects to the node addresses the cluster announces, which no proxy can stand for).
    pub upstreams: BTreeMap<Dependency, String>,
    /// The stack's state directory.
    pub state_dir: PathBuf,
    /// The workers use the Redis Cluster `REDIS_URL` lists (`BUZZ_REDIS_MODE=cluster`).
    pub redis_cluster: bool,
}

/// `host:port` of a URL.
fn authority(url: &str) -> Result<String> {
    let parsed = Url::parse(url).with_context(|| format!("not a URL: {url}"))?;
    let host = parsed
        .host_str()
        .ok_or_else(|| anyhow!("{url} has no host"))?;
    let port = parsed
        .port_or_known_default()
        .ok_or_else(|| anyhow!("{url} has no port"))?;
    Ok(format!("{host}:{port}"))
}

/// `url` with its port replaced.
fn with_port(url: &str, port: u16) -> Result<String> {
    let mut parsed = Url::parse(url).with_context(|| format!("not a URL: {url}"))?;
    parsed
        .set_port(Some(port))
        .map_err(|()| anyhow!("cannot set a port on {url}"))?;
    Ok(parsed.to_string())
}

impl StackEnv {
    /// Reads the stack's environment.
    pub fn from_env() -> Result<StackEnv> {
        let temporal = env("TEMPORAL_ADDRESS")?;
        let temporal = temporal
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let redis_cluster = stack_env::StackEnv::process()
            .redis_mode()
            .map_err(|e| anyhow!("{e}"))?
            == RedisMode::Cluster;
        let mut upstreams = BTreeMap::new();
        upstreams.insert(Dependency::Temporal, temporal);
        upstreams.insert(Dependency::Postgres, authority(&env("DATABASE_URL")?)?);
        if !redis_cluster {
            upstreams.insert(Dependency::Redis, authority(&env("REDIS_URL")?)?);
        }
        upstreams.insert(Dependency::S3, authority(&env("BUZZ_S3_ENDPOINT")?)?);
        Ok(StackEnv {
            upstreams,
            state_dir: PathBuf::from(env("BUZZ_STATE_DIR")?),
            redis_cluster,
        })
    }

    /// The variables that point a worker at the proxies (`port` per dependency).
    pub fn worker_env(&self, ports: &BTreeMap<Dependency, u16>) -> Result<Vec<(String, String)>> {
        let port = |d: Dependency| {
            ports
                .get(&d)
                .copied()
                .ok_or_else(|| anyhow!("no proxy for {}", d.name()))
        };
        let redis = if self.redis_cluster {
            vec![
                ("REDIS_URL".into(), env("REDIS_URL")?),
                (stack_env::REDIS_MODE.into(), RedisMode::Cluster.to_string()),
            ]
        } else {
            vec![(
                "REDIS_URL".into(),
                with_port(&env("REDIS_URL")?, port(Dependency::Redis)?)?,
            )]
        };
        let mut variables = vec![
            (
                "TEMPORAL_ADDRESS".into(),
                format!("127.0.0.1:{}", port(Dependency::Temporal)?),
            ),
            (
                "DATABASE_URL".into(),
                with_port(&env("DATABASE_URL")?, port(Dependency::Postgres)?)?,
            ),
            (
                "BUZZ_S3_ENDPOINT".into(),
                with_port(&env("BUZZ_S3_ENDPOINT")?, port(Dependency::S3)?)?
                    .trim_end_matches('/')
                    .to_owned(),
            ),
        ];
        variables.extend(redis);
        Ok(variables)
    }
}

/// Direct connections to the data stores (never through a proxy), the test kit's handles: the
/// owner (`store`) for seeding communities and reading the proof, the serving role for tenant
/// writes, the bucket and Redis.
pub type Stores = testkit::stack::Stack;

/// Connects to the three stores (the schema must be current; nothing is migrated).
pub async fn connect_stores() -> Result<Stores> {
    Stores::connect_running(HOW_TO_START).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_keeps_everything_but_its_port() {
        let moved = with_port("postgres://w:pw@127.0.0.1:55432/buzz", 40001)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(moved, "postgres://w:pw@127.0.0.1:40001/buzz");
        assert_eq!(
            authority("redis://127.0.0.1:56379").unwrap_or_else(|e| panic!("{e}")),
            "127.0.0.1:56379"
        );
        assert_eq!(
            authority("http://127.0.0.1:57480").unwrap_or_else(|e| panic!("{e}")),
            "127.0.0.1:57480"
        );
    }
}
