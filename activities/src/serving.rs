//! Serving-write leases as the relay's serving path uses them (DESIGN 2).
//!
//! Every external serving write (S3 put, Redis write, push) is wrapped in a guard:
//!
//! ```text
//! let guard = acquire_serving_write(&store, community, "s3_put").await?;   // refused once quiescing/fenced
//! let etag = guard.protect(s3.put_object(...)).await?;                      // cancelled if the lease is lost
//! guard.finish().await?;                                                   // released
//! ```
//!
//! While the guard lives, a background task renews the lease every `renew_every`. If a renewal
//! fails, or does not succeed before the lease would expire, the guard is *lost*: `protect` drops
//! the protected future at its next poll and returns [`ServingError::LeaseLost`], so a serving
//! process whose exclusion proof vanished stops its network I/O instead of racing the deletion.
//! A guard dropped without `finish` releases its lease from a spawned task; if even that cannot
//! run, the lease simply expires after one TTL.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::failure::{Classified, Severity};
use crate::store::{ServingWriteLease, Store, StoreError};

/// Lease timing and identity of one serving process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingLeaseConfig {
    /// How long a lease lives without renewal: the longest a crashed serving process can hold a
    /// deletion's fence back.
    pub ttl: Duration,
    /// How often the heartbeat renews (well under `ttl`).
    pub renew_every: Duration,
    /// Who holds the leases (recorded on each, and required to release it).
    pub owner: String,
}

impl Default for ServingLeaseConfig {
    fn default() -> Self {
        ServingLeaseConfig {
            ttl: Duration::from_secs(60),
            renew_every: Duration::from_secs(10),
            owner: default_owner(),
        }
    }
}

/// `serving:{HOSTNAME}:{pid}`: distinguishes serving processes in lease rows.
pub fn default_owner() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".to_owned());
    format!("serving:{host}:{}", std::process::id())
}

/// Why a serving write was refused or abandoned.
#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    /// The community is quiescing for deletion: no new serving write is admitted.
    #[error("serving write refused: community {community_id} is quiescing for deletion")]
    Quiescing {
        /// The community.
        community_id: Uuid,
    },
    /// The community is fenced for deletion.
    #[error("serving write refused: community {community_id} is fenced for deletion")]
    Fenced {
        /// The community.
        community_id: Uuid,
    },
    /// The lease is no longer valid; the protected write was (or must be) abandoned.
    #[error("serving-write lease {lease_id} lost: {reason}")]
    LeaseLost {
        /// The lease.
        lease_id: Uuid,
        /// Why.
        reason: String,
    },
    /// The store failed otherwise.
    #[error(transparent)]
    Store(StoreError),
}

impl ServingError {
    /// Whether the write was refused because the community is being deleted (quiescing or
    /// fenced): the serving path should answer "community unavailable", not retry.
    pub fn is_refused_because_fenced(&self) -> bool {
        matches!(
            self,
            ServingError::Quiescing { .. } | ServingError::Fenced { .. }
        )
    }

    /// Whether an admitted write lost its lease.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, ServingError::LeaseLost { .. })
    }

    fn from_store(error: StoreError, lease_id: Option<Uuid>) -> Self {
        match (error, lease_id) {
            (StoreError::CommunityQuiescing { community_id }, _) => {
                ServingError::Quiescing { community_id }
            }
            (StoreError::CommunityFenced { community_id }, None) => {
                ServingError::Fenced { community_id }
            }
            // Fenced under an admitted lease means the lease no longer protects anything.
            (StoreError::CommunityFenced { community_id }, Some(lease_id)) => {
                ServingError::LeaseLost {
                    lease_id,
                    reason: format!("community {community_id} is fenced"),
                }
            }
            (StoreError::LeaseLost { lease_id, reason }, _) => {
                ServingError::LeaseLost { lease_id, reason }
            }
            (other, _) => ServingError::Store(other),
        }
    }
}

impl Classified for ServingError {
    fn severity(&self) -> Severity {
        match self {
            ServingError::Store(error) => error.severity(),
            _ => Severity::Permanent,
        }
    }
}

/// Admits one external serving write with the default lease configuration.
pub async fn acquire_serving_write(
    store: &Store,
    community_id: Uuid,
    operation: &str,
) -> Result<ServingWriteGuard, ServingError> {
    acquire_serving_write_with(
        store,
        community_id,
        operation,
        &ServingLeaseConfig::default(),
    )
    .await
}

/// Admits one external serving write: acquires a lease (refused once the community is quiescing
/// or fenced) and starts its heartbeat.
pub async fn acquire_serving_write_with(
    store: &Store,
    community_id: Uuid,
    operation: &str,
    config: &ServingLeaseConfig,
) -> Result<ServingWriteGuard, ServingError> {
    let requested_at = Instant::now();
    let lease = store
        .acquire_serving_write_lease(community_id, operation, &config.owner, config.ttl)
        .await
        .map_err(|error| ServingError::from_store(error, None))?;
    let stop = CancellationToken::new();
    let lost = CancellationToken::new();
    let lost_reason = Arc::new(Mutex::new(None));
    let heartbeat = tokio::spawn(heartbeat(
        Heartbeat {
            store: store.clone(),
            lease: lease.clone(),
            ttl: config.ttl,
            renew_every: config.renew_every,
            stop: stop.clone(),
            lost: lost.clone(),
            lost_reason: Arc::clone(&lost_reason),
        },
        requested_at + config.ttl,
    ));
    Ok(ServingWriteGuard {
        store: store.clone(),
        lease,
        stop,
        lost,
        lost_reason,
        heartbeat: Some(heartbeat),
        finished: false,
    })
}

/// What the heartbeat task needs.
struct Heartbeat {
    store: Store,
    lease: ServingWriteLease,
    ttl: Duration,
    renew_every: Duration,
    stop: CancellationToken,
    lost: CancellationToken,
    lost_reason: Arc<Mutex<Option<String>>>,
}

impl Heartbeat {
    fn lose(&self, reason: String) {
        if let Ok(mut slot) = self.lost_reason.lock() {
            slot.get_or_insert(reason);
        }
        self.lost.cancel();
    }
}

/// Renews until stopped; declares the lease lost on a failed renewal or when `deadline` (a
/// conservative local bound on the lease's expiry: renewal start + ttl) passes unrenewed.
async fn heartbeat(beat: Heartbeat, mut deadline: Instant) {
    let mut ticks = tokio::time::interval(beat.renew_every.max(Duration::from_millis(10)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        tokio::select! {
            biased;
            _ = beat.stop.cancelled() => return,
            _ = tokio::time::sleep_until(deadline) => {
                beat.lose("the lease expired before it could be renewed".to_owned());
                return;
            }
            _ = ticks.tick() => {
                let started = Instant::now();
                let renewal = beat.store.renew_serving_write_lease(&beat.lease, beat.ttl);
                match tokio::time::timeout_at(deadline, renewal).await {
                    Ok(Ok(_)) => deadline = started + beat.ttl,
                    Ok(Err(error)) => {
                        beat.lose(format!("renewal refused: {error}"));
                        return;
                    }
                    Err(_) => {
                        beat.lose("renewal did not complete before the lease expired".to_owned());
                        return;
                    }
                }
            }
        }
    }
}

/// An admitted serving write. Hold it for the whole external side effect, run the effect
/// through [`ServingWriteGuard::protect`], then [`ServingWriteGuard::finish`].
pub struct ServingWriteGuard {
    store: Store,
    lease: ServingWriteLease,
    stop: CancellationToken,
    lost: CancellationToken,
    lost_reason: Arc<Mutex<Option<String>>>,
    heartbeat: Option<JoinHandle<()>>,
    finished: bool,
}

impl std::fmt::Debug for ServingWriteGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingWriteGuard")
            .field("lease", &self.lease)
            .field("lost", &self.lost.is_cancelled())
            .finish()
    }
}

impl ServingWriteGuard {
    /// The durable lease (e.g. to present to a final database write).
    pub fn lease(&self) -> &ServingWriteLease {
        &self.lease
    }

    /// Fires when the heartbeat loses the lease.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Whether the heartbeat has lost the lease.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    fn lost_error(&self) -> ServingError {
        let reason = self
            .lost_reason
            .lock()
            .ok()
            .and_then(|slot| slot.clone())
            .unwrap_or_else(|| "heartbeat lost".to_owned());
        ServingError::LeaseLost {
            lease_id: self.lease.id,
            reason,
        }
    }

    /// Checks, in the database, that the lease is still valid.
    pub async fn verify(&self) -> Result<(), ServingError> {
        if self.is_lost() {
            return Err(self.lost_error());
        }
        self.store
            .verify_serving_write_lease(&self.lease)
            .await
            .map_err(|error| ServingError::from_store(error, Some(self.lease.id)))
    }

    /// Runs `operation` under the lease: verifies before, drops (cancels) the future as soon as
    /// the heartbeat loses the lease, and verifies again after it completes.
    pub async fn protect<F: Future>(&self, operation: F) -> Result<F::Output, ServingError> {
        self.verify().await?;
        let output = tokio::select! {
            biased;
            _ = self.lost.cancelled() => return Err(self.lost_error()),
            output = operation => output,
        };
        self.verify().await?;
        Ok(output)
    }

    /// Stops the heartbeat and releases the lease. Fails with [`ServingError::LeaseLost`] if the
    /// lease had already expired or been released: the write was not protected to its end.
    pub async fn finish(mut self) -> Result<(), ServingError> {
        self.finished = true;
        self.stop.cancel();
        if let Some(heartbeat) = self.heartbeat.take() {
            // The task exits at its next poll; at most one in-flight renewal is awaited.
            let _ = heartbeat.await;
        }
        let released = self
            .store
            .release_serving_write_lease(&self.lease)
            .await
            .map_err(ServingError::Store)?;
        if released && !self.is_lost() {
            Ok(())
        } else if self.is_lost() {
            Err(self.lost_error())
        } else {
            Err(ServingError::LeaseLost {
                lease_id: self.lease.id,
                reason: "already released or expired when the write finished".to_owned(),
            })
        }
    }
}

impl Drop for ServingWriteGuard {
    fn drop(&mut self) {
        self.stop.cancel();
        if self.finished {
            return;
        }
        // Without a runtime the lease cannot be released here; it expires after one TTL.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let store = self.store.clone();
            let lease = self.lease.clone();
            runtime.spawn(async move {
                if let Err(error) = store.release_serving_write_lease(&lease).await {
                    tracing::warn!(lease_id = %lease.id, %error, "releasing a dropped serving-write lease failed; it will expire");
                }
            });
        }
    }
}
