//! The background task that keeps an admitted lease alive, and declares it lost when it cannot.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::db::ServingDb;
use crate::lease::ServingWriteLease;

/// What the heartbeat task needs.
pub(crate) struct Heartbeat {
    pub(crate) db: ServingDb,
    pub(crate) lease: ServingWriteLease,
    pub(crate) ttl: Duration,
    pub(crate) renew_every: Duration,
    pub(crate) stop: CancellationToken,
    pub(crate) lost: CancellationToken,
    pub(crate) lost_reason: Arc<Mutex<Option<String>>>,
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
pub(crate) async fn heartbeat(beat: Heartbeat, mut deadline: Instant) {
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
                let renewal = beat.db.renew_serving_write_lease(&beat.lease, beat.ttl);
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
