//! Stopping and starting the stack's servers: `deploy/local/stop-service` stops one the way a
//! failure would, `deploy/local/up` starts whatever is down again with its state (the same path
//! an operator uses, so a restart here is a restart there).

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context, Result};
use testkit::process::checked_output;
use tokio::process::Command;
use tokio::sync::Mutex;

use crate::schedule::Dependency;

/// The stack's service scripts. One script runs at a time: `up` starts whatever is down, so a
/// server stopped by another fault while `up` is starting a third would race the tooling, not
/// the product (a run caught `up` checking a bucket on a gateway stopped under it).
#[derive(Debug)]
pub struct Services {
    repo_root: PathBuf,
    state_dir: PathBuf,
    one_at_a_time: Mutex<()>,
}

/// Attempts of `up` before a heal is reported as failed (a server may refuse its first start
/// while another restarts).
const START_ATTEMPTS: u32 = 3;

impl Services {
    /// For the stack of `state_dir`, with the scripts of `repo_root`.
    pub fn new(repo_root: PathBuf, state_dir: PathBuf) -> Services {
        Services {
            repo_root,
            state_dir,
            one_at_a_time: Mutex::new(()),
        }
    }

    async fn script(&self, name: &str, args: &[&str]) -> Result<()> {
        let _turn = self.one_at_a_time.lock().await;
        let mut command = Command::new("bash");
        command
            .arg(self.repo_root.join("deploy/local").join(name))
            .args(args)
            .env("BUZZ_STATE_DIR", &self.state_dir)
            .stdin(Stdio::null());
        let what = format!("deploy/local/{name} {}", args.join(" "));
        let cannot_run = format!("cannot run deploy/local/{name}");
        checked_output(&mut command, &what, &cannot_run).await?;
        Ok(())
    }

    /// Stops `dependency`'s server.
    pub async fn stop(&self, dependency: Dependency) -> Result<()> {
        self.script("stop-service", &[dependency.name()]).await
    }

    /// Crashes a primary of the local Redis Cluster and promotes its replica
    /// (`deploy/local/stop-service redis-primary`); [`Services::start`] brings it back.
    pub async fn fail_over_redis_primary(&self) -> Result<()> {
        self.script("stop-service", &["redis-primary"]).await
    }

    /// Starts whatever of the stack is down. After a Redis restart the dump it reloaded is
    /// removed, so a later start of the stack never brings back keys deleted since.
    pub async fn start(&self, dependency: Dependency) -> Result<()> {
        let mut attempt = 1;
        while let Err(error) = self.script("up", &[]).await {
            if attempt >= START_ATTEMPTS {
                return Err(error);
            }
            tracing::warn!(attempt, "deploy/local/up failed; starting again: {error:#}");
            attempt += 1;
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        }
        if dependency == Dependency::Redis {
            let dump = self.state_dir.join("redis").join("dump.rdb");
            match std::fs::remove_file(&dump) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("remove {}", dump.display())),
            }
        }
        Ok(())
    }
}
