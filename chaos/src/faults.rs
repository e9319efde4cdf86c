//! Injecting and healing one fault of the schedule, and the record of when each really happened.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, anyhow};
use serde::Serialize;
use tokio::sync::Mutex;

use crate::proxies::NetProxy;
use crate::schedule::{Dependency, Fault, FaultKind};
use crate::services::Services;
use crate::workers::{self, Workers};

/// What really happened to one scheduled fault.
#[derive(Debug, Clone, Serialize)]
pub struct FaultRecord {
    /// The scheduled fault.
    pub fault: Fault,
    /// When it was injected (ms since the window started).
    pub began_ms: u64,
    /// When it was healed (ms since the window started).
    pub healed_ms: u64,
    /// Why injecting or healing failed, if it did.
    pub error: Option<String>,
}

/// Everything that can fail on purpose.
pub struct Actuators {
    /// The stack's servers.
    pub services: Services,
    /// The network between the workers and each dependency.
    pub proxies: BTreeMap<Dependency, Mutex<NetProxy>>,
    /// The worker processes.
    pub workers: Mutex<Workers>,
    /// How long a SIGTERMed worker may drain.
    pub term_grace: Duration,
}

impl Actuators {
    fn proxy(&self, dependency: Dependency) -> Result<&Mutex<NetProxy>> {
        self.proxies
            .get(&dependency)
            .ok_or_else(|| anyhow!("no proxy for {}", dependency.name()))
    }

    /// Starts `fault`.
    pub async fn inject(&self, fault: &Fault) -> Result<()> {
        match fault.kind {
            FaultKind::WorkerKill => {
                let child = self.workers.lock().await.hold_down(fault.worker);
                if let Some(child) = child {
                    workers::kill(child).await;
                }
            }
            FaultKind::WorkerTerm => {
                let child = self.workers.lock().await.hold_down(fault.worker);
                if let Some(child) = child {
                    workers::terminate(child, self.term_grace).await;
                }
            }
            FaultKind::Restart(dependency) => self.services.stop(dependency).await?,
            FaultKind::Latency(dependency) => {
                self.proxy(dependency)?.lock().await.add_latency().await?;
            }
            FaultKind::Drop(dependency) => self.proxy(dependency)?.lock().await.close().await,
            FaultKind::HalfOpen(dependency) => {
                self.proxy(dependency)?.lock().await.black_hole().await?;
            }
            FaultKind::RedisFailover => self.services.fail_over_redis_primary().await?,
        }
        Ok(())
    }

    /// Ends `fault`.
    pub async fn heal(&self, fault: &Fault) -> Result<()> {
        match fault.kind {
            FaultKind::WorkerKill | FaultKind::WorkerTerm => {
                self.workers.lock().await.release(fault.worker)?;
            }
            FaultKind::Restart(dependency) => self.services.start(dependency).await?,
            FaultKind::Latency(dependency) => {
                self.proxy(dependency)?
                    .lock()
                    .await
                    .remove_latency()
                    .await?;
            }
            FaultKind::Drop(dependency) => {
                self.proxy(dependency)?.lock().await.reopen().await?;
            }
            FaultKind::HalfOpen(dependency) => {
                self.proxy(dependency)?.lock().await.reset().await?;
            }
            FaultKind::RedisFailover => self.services.start(Dependency::Redis).await?,
        }
        Ok(())
    }
}
