//! Stopping and starting the stack's servers: `deploy/local/stop-service` stops one the way a
//! failure would, `deploy/local/up` starts whatever is down again with its state (the same path
//! an operator uses, so a restart here is a restart there).

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context, Result, bail};
use tokio::process::Command;

use crate::schedule::Dependency;

/// The stack's service scripts.
#[derive(Debug, Clone)]
pub struct Services {
    repo_root: PathBuf,
    state_dir: PathBuf,
}

impl Services {
    /// For the stack of `state_dir`, with the scripts of `repo_root`.
    pub fn new(repo_root: PathBuf, state_dir: PathBuf) -> Services {
        Services {
            repo_root,
            state_dir,
        }
    }

    async fn script(&self, name: &str, args: &[&str]) -> Result<()> {
        let output = Command::new("bash")
            .arg(self.repo_root.join("deploy/local").join(name))
            .args(args)
            .env("BUZZ_STATE_DIR", &self.state_dir)
            .stdin(Stdio::null())
            .output()
            .await
            .with_context(|| format!("cannot run deploy/local/{name}"))?;
        if !output.status.success() {
            bail!(
                "deploy/local/{name} {} failed ({}): {}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(())
    }

    /// Stops `dependency`'s server.
    pub async fn stop(&self, dependency: Dependency) -> Result<()> {
        self.script("stop-service", &[dependency.name()]).await
    }

    /// Starts whatever of the stack is down. After a Redis restart the dump it reloaded is
    /// removed, so a later start of the stack never brings back keys deleted since.
    pub async fn start(&self, dependency: Dependency) -> Result<()> {
        self.script("up", &[]).await?;
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
