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
//!
//! **The protected-operation bound.** No protected operation runs longer than
//! [`MAX_PROTECTED_OPERATION`]: `protect` takes its deadline *before* it verifies the lease, and
//! checks it (and the heartbeat's verdict) before every single poll of the operation, so a
//! process that was paused mid-write (a stopped container, a long GC pause, a slow PutObject)
//! never drives the write on once it resumes past the deadline — it gets
//! [`ServingError::OperationTooLong`] instead. Because the lease was valid when the deadline was
//! taken, the last moment this library lets a serving write touch the network is before
//! `expires_at + MAX_PROTECTED_OPERATION` of the lease's last renewal. The deletion's drain
//! waits exactly that long for every lease left unreleased at fence time (see
//! `docs/operations.md`, "Stalled serving-write leases").

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::failure::{Classified, Severity};
use crate::store::{ServingWriteLease, Store, StoreError};

/// The longest one protected operation may run, from just before its lease is verified to its
/// last poll. `protect` enforces it; [`ServingWriteGuard::protect_within`] may only shorten it.
/// The deletion's drain waits this long past the expiry of every lease left unreleased at fence
/// time before it lets the manifest be frozen, so changing it changes that wait too.
pub const MAX_PROTECTED_OPERATION: Duration = Duration::from_secs(30);

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
    /// The user the write is made for is quiescing for deletion: no new write for them is
    /// admitted.
    #[error("serving write refused: user {pubkey} is quiescing for deletion")]
    UserQuiescing {
        /// The user's pubkey.
        pubkey: String,
    },
    /// The user the write is made for is fenced for deletion.
    #[error("serving write refused: user {pubkey} is fenced for deletion")]
    UserFenced {
        /// The user's pubkey.
        pubkey: String,
    },
    /// The lease is no longer valid; the protected write was (or must be) abandoned.
    #[error("serving-write lease {lease_id} lost: {reason}")]
    LeaseLost {
        /// The lease.
        lease_id: Uuid,
        /// Why.
        reason: String,
    },
    /// The protected operation did not finish within its bound and was abandoned (never polled
    /// again); the write may or may not have landed.
    #[error(
        "serving write under lease {lease_id} abandoned: it did not finish within {limit:?} \
         (the protected-operation bound)"
    )]
    OperationTooLong {
        /// The lease.
        lease_id: Uuid,
        /// The bound it exceeded.
        limit: Duration,
    },
    /// The store failed otherwise.
    #[error(transparent)]
    Store(StoreError),
}

impl ServingError {
    /// Whether the write was refused because the community, or the user it is made for, is
    /// being deleted (quiescing or fenced): the serving path should answer "unavailable", not
    /// retry.
    pub fn is_refused_because_fenced(&self) -> bool {
        matches!(
            self,
            ServingError::Quiescing { .. }
                | ServingError::Fenced { .. }
                | ServingError::UserQuiescing { .. }
                | ServingError::UserFenced { .. }
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
            (StoreError::UserQuiescing { pubkey }, _) => ServingError::UserQuiescing { pubkey },
            (StoreError::UserFenced { pubkey }, None) => ServingError::UserFenced { pubkey },
            (StoreError::UserFenced { pubkey }, Some(lease_id)) => ServingError::LeaseLost {
                lease_id,
                reason: format!("user {pubkey} is fenced"),
            },
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
    Ok(guard_lease(store, lease, requested_at, config))
}

/// Admits one external serving write made for the user `pubkey` (a media upload, a per-user
/// cache key): refused once the community or the user is quiescing or fenced. The returned
/// guard works as [`acquire_serving_write_with`]'s; its lease is also lost once the user is
/// fenced.
pub async fn acquire_user_serving_write_with(
    store: &Store,
    community_id: Uuid,
    pubkey: &str,
    operation: &str,
    config: &ServingLeaseConfig,
) -> Result<ServingWriteGuard, ServingError> {
    let requested_at = Instant::now();
    let lease = store
        .acquire_user_serving_write_lease(
            community_id,
            pubkey,
            operation,
            &config.owner,
            config.ttl,
        )
        .await
        .map_err(|error| ServingError::from_store(error, None))?;
    Ok(guard_lease(store, lease, requested_at, config))
}

/// Starts the heartbeat of a lease acquired at `requested_at` and wraps it in its guard.
fn guard_lease(
    store: &Store,
    lease: ServingWriteLease,
    requested_at: Instant,
    config: &ServingLeaseConfig,
) -> ServingWriteGuard {
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
    ServingWriteGuard {
        store: store.clone(),
        lease,
        stop,
        lost,
        lost_reason,
        heartbeat: Some(heartbeat),
        finished: false,
    }
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

/// What one poll of a bounded operation found.
enum Polled<T> {
    Done(T),
    Lost,
    TooLong,
}

/// Polls the operation only while the deadline is ahead and the lease is not lost: timers and
/// I/O readiness wake in no particular order after a pause, so the checks sit in front of every
/// poll rather than racing it.
struct Bounded<'a, F> {
    operation: std::pin::Pin<&'a mut F>,
    deadline: Instant,
    lost: &'a CancellationToken,
}

impl<F: Future> Future for Bounded<'_, F> {
    type Output = Polled<F::Output>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        if self.lost.is_cancelled() {
            return std::task::Poll::Ready(Polled::Lost);
        }
        if Instant::now() >= self.deadline {
            return std::task::Poll::Ready(Polled::TooLong);
        }
        self.operation.as_mut().poll(cx).map(Polled::Done)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_lease_lives_sixty_seconds_and_is_renewed_every_ten() {
        let config = ServingLeaseConfig::default();
        assert_eq!(config.ttl, Duration::from_secs(60));
        assert_eq!(config.renew_every, Duration::from_secs(10));
        // The lease outlives the renewal interval several times over, so one late renewal does
        // not lose it, and a crashed process holds a fence back for at most one TTL.
        assert!(config.renew_every * 5 <= config.ttl);
        assert!(config.owner.starts_with("serving:"), "{}", config.owner);
        assert!(
            config.owner.ends_with(&format!(":{}", std::process::id())),
            "{}",
            config.owner
        );
    }
}
