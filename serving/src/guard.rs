//! Admitting a serving write and guarding it: acquire a lease, renew it in the background, run
//! the external call under it, release it.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::bounded::{Bounded, Polled};
use crate::config::{MAX_PROTECTED_OPERATION, ServingLeaseConfig};
use crate::db::ServingDb;
use crate::error::ServingError;
use crate::heartbeat::{Heartbeat, heartbeat};
use crate::lease::ServingWriteLease;

/// Admits one external serving write with the default lease configuration.
///
/// `db` is the serving role's [`ServingDb`] (or a reference to it, or anything else that can
/// hand one out on its pool).
pub async fn acquire_serving_write(
    db: impl Into<ServingDb>,
    community_id: Uuid,
    operation: &str,
) -> Result<ServingWriteGuard, ServingError> {
    acquire_serving_write_with(db, community_id, operation, &ServingLeaseConfig::default()).await
}

/// Admits one external serving write: acquires a lease (refused once the community is quiescing
/// or fenced) and starts its heartbeat.
pub async fn acquire_serving_write_with(
    db: impl Into<ServingDb>,
    community_id: Uuid,
    operation: &str,
    config: &ServingLeaseConfig,
) -> Result<ServingWriteGuard, ServingError> {
    acquire_guarded(db.into(), community_id, None, operation, config).await
}

/// Admits one external serving write made for the user `pubkey` (a media upload, a per-user
/// cache key): refused once the community or the user is quiescing or fenced. The returned
/// guard works as [`acquire_serving_write_with`]'s; its lease is also lost once the user is
/// fenced.
pub async fn acquire_user_serving_write_with(
    db: impl Into<ServingDb>,
    community_id: Uuid,
    pubkey: &str,
    operation: &str,
    config: &ServingLeaseConfig,
) -> Result<ServingWriteGuard, ServingError> {
    acquire_guarded(db.into(), community_id, Some(pubkey), operation, config).await
}

/// Acquires a community lease, or one made for `user`, and guards it.
async fn acquire_guarded(
    db: ServingDb,
    community_id: Uuid,
    user: Option<&str>,
    operation: &str,
    config: &ServingLeaseConfig,
) -> Result<ServingWriteGuard, ServingError> {
    let requested_at = Instant::now();
    let lease = db
        .acquire_lease(community_id, user, operation, &config.owner, config.ttl)
        .await?;
    Ok(guard_lease(db, lease, requested_at, config))
}

/// Starts the heartbeat of a lease acquired at `requested_at` and wraps it in its guard.
fn guard_lease(
    db: ServingDb,
    lease: ServingWriteLease,
    requested_at: Instant,
    config: &ServingLeaseConfig,
) -> ServingWriteGuard {
    let stop = CancellationToken::new();
    let lost = CancellationToken::new();
    let lost_reason = Arc::new(Mutex::new(None));
    let heartbeat = tokio::spawn(heartbeat(
        Heartbeat {
            db: db.clone(),
            lease: lease.clone(),
            ttl: config.ttl,
            renew_every: config.renew_every,
            stop: stop.clone(),
            lost: lost.clone(),
            lost_reason: Arc::clone(&lost_reason),
        },
        requested_at + config.ttl,
    ));
    ServingWriteGuard {
        db,
        lease,
        stop,
        lost,
        lost_reason,
        heartbeat: Some(heartbeat),
        finished: false,
    }
}

/// An admitted serving write. Hold it for the whole external side effect, run the effect
/// through [`ServingWriteGuard::protect`], then [`ServingWriteGuard::finish`].
pub struct ServingWriteGuard {
    db: ServingDb,
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
        self.db
            .verify_serving_write_lease(&self.lease)
            .await
            .map_err(|error| error.under_lease(self.lease.id))
    }

    /// Runs `operation` under the lease: verifies before, drops (cancels) the future as soon as
    /// the heartbeat loses the lease or [`MAX_PROTECTED_OPERATION`] has passed since just before
    /// that verification, and verifies again after it completes.
    pub async fn protect<F: Future>(&self, operation: F) -> Result<F::Output, ServingError> {
        self.protect_within(MAX_PROTECTED_OPERATION, operation)
            .await
    }

    /// As [`ServingWriteGuard::protect`] with a tighter bound (`limit` is capped at
    /// [`MAX_PROTECTED_OPERATION`]). The deadline and the lease are checked before every poll of
    /// `operation`, so a process resuming from a pause past either never polls it again.
    pub async fn protect_within<F: Future>(
        &self,
        limit: Duration,
        operation: F,
    ) -> Result<F::Output, ServingError> {
        let limit = limit.min(MAX_PROTECTED_OPERATION);
        // Taken before the lease is verified: the lease was valid after this instant.
        let deadline = Instant::now() + limit;
        self.verify().await?;
        let bounded = Bounded {
            operation: std::pin::pin!(operation),
            deadline,
            lost: &self.lost,
        };
        let output = tokio::select! {
            biased;
            _ = self.lost.cancelled() => return Err(self.lost_error()),
            _ = tokio::time::sleep_until(deadline) => return Err(self.too_long(limit)),
            output = bounded => match output {
                Polled::Done(output) => output,
                Polled::Lost => return Err(self.lost_error()),
                Polled::TooLong => return Err(self.too_long(limit)),
            },
        };
        self.verify().await?;
        Ok(output)
    }

    fn too_long(&self, limit: Duration) -> ServingError {
        ServingError::OperationTooLong {
            lease_id: self.lease.id,
            limit,
        }
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
        let released = self.db.release_serving_write_lease(&self.lease).await?;
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
            let db = self.db.clone();
            let lease = self.lease.clone();
            runtime.spawn(async move {
                if let Err(error) = db.release_serving_write_lease(&lease).await {
                    tracing::warn!(lease_id = %lease.id, %error, "releasing a dropped serving-write lease failed; it will expire");
                }
            });
        }
    }
}
