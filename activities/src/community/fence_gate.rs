//! The fence bracket of the delete loop's calls, shared by the calls in flight.
//!
//! Every DeleteObjects call needs a fence check that *starts after* the call is ready to be sent
//! (and one that starts after its answer came back). Eight calls in flight would run sixteen
//! checks a round, one connection each. The gate runs one check at a time. A caller is served by
//! the first check that starts after it asked, whoever runs it: it queues for its turn, and
//! returns at once if a check that started after its request has succeeded meanwhile. So every
//! call is still bracketed by a check of its own moment, never by an older one, while a burst of
//! calls costs at most two checks. The loop then holds at most one pooled connection for its
//! checks, whatever its parallelism.
//!
//! A failed check serves no one else: each waiter then runs its own, and gets its own error.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::store::{ExecToken, Store};

use super::connection_budget::ConnectionBudget;
use super::failure::PhaseResult;

/// One fence check: a fresh read of the fence and the attempt's generation.
pub(super) trait FenceCheck: Sync {
    /// Runs the check.
    fn check(&self) -> impl Future<Output = PhaseResult<()>> + Send;
}

/// The real check: [`Store::verify_fence_held`] of `token`, on one of the attempt's connections.
pub(super) struct HeldFence<'a> {
    pub(super) store: &'a Store,
    pub(super) token: &'a ExecToken,
    pub(super) budget: ConnectionBudget,
}

impl FenceCheck for HeldFence<'_> {
    async fn check(&self) -> PhaseResult<()> {
        self.budget
            .spend(self.store.verify_fence_held(self.token))
            .await
    }
}

/// One attempt's fence checks, coalesced (see the module doc).
pub(super) struct FenceGate<C> {
    check: C,
    /// Whose turn it is to check (fair: callers run in arrival order).
    turn: tokio::sync::Mutex<()>,
    /// Checks started so far; check `n` is the `n`th (from 1).
    started: AtomicU64,
    /// The latest check that succeeded (0: none yet).
    last_held: AtomicU64,
}

impl<C: FenceCheck> FenceGate<C> {
    pub(super) fn new(check: C) -> Self {
        Self {
            check,
            turn: tokio::sync::Mutex::new(()),
            started: AtomicU64::new(0),
            last_held: AtomicU64::new(0),
        }
    }

    /// Returns once a fence check that started after this call has found the fence and the
    /// attempt's generation held; the error of such a check otherwise.
    pub(super) async fn held(&self) -> PhaseResult<()> {
        // Any check numbered above those started so far starts after this moment.
        let needed = self.started.load(Ordering::SeqCst) + 1;
        let _turn = self.turn.lock().await;
        if self.last_held.load(Ordering::SeqCst) >= needed {
            return Ok(());
        }
        let check = self.started.fetch_add(1, Ordering::SeqCst) + 1;
        self.check.check().await?;
        self.last_held.fetch_max(check, Ordering::SeqCst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use super::*;
    use crate::community::failure::PhaseError;

    /// Checks that take `ms`, counted in `runs`; a check reads `lost` when it starts (as a
    /// statement reads its snapshot) and fails if it was set.
    struct Fake {
        ms: u64,
        runs: Arc<AtomicU64>,
        lost: Arc<AtomicBool>,
    }

    impl FenceCheck for Fake {
        async fn check(&self) -> PhaseResult<()> {
            self.runs.fetch_add(1, Ordering::SeqCst);
            let lost = self.lost.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(self.ms)).await;
            match lost {
                true => Err(PhaseError::Cancelled),
                false => Ok(()),
            }
        }
    }

    fn gate(ms: u64, runs: Arc<AtomicU64>, lost: Arc<AtomicBool>) -> FenceGate<Fake> {
        FenceGate::new(Fake { ms, runs, lost })
    }

    #[tokio::test]
    async fn a_burst_of_callers_costs_at_most_two_checks() {
        let runs = Arc::new(AtomicU64::new(0));
        let gate = gate(20, runs.clone(), Arc::default());
        let calls = (0..8).map(|_| gate.held());
        let results = futures::future::join_all(calls).await;
        assert!(results.iter().all(Result::is_ok));
        assert!(runs.load(Ordering::SeqCst) <= 2, "{runs:?}");
    }

    #[tokio::test]
    async fn a_check_that_started_before_the_request_never_serves_it() {
        let runs = Arc::new(AtomicU64::new(0));
        let lost = Arc::new(AtomicBool::new(false));
        let gate = gate(50, runs.clone(), lost.clone());
        let first = gate.held();
        let later = async {
            // Asks while the first check is running, and the fence is lost meanwhile: the
            // running check (which read before) must not answer for it.
            tokio::time::sleep(Duration::from_millis(10)).await;
            lost.store(true, Ordering::SeqCst);
            gate.held().await
        };
        let (first, later) = tokio::join!(first, later);
        assert!(first.is_ok(), "the first check read the fence held");
        assert!(
            later.is_err(),
            "a later request was served by an earlier check"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_check_serves_no_one_each_waiter_checks_again() {
        let runs = Arc::new(AtomicU64::new(0));
        let lost = Arc::new(AtomicBool::new(true));
        let gate = gate(5, runs.clone(), lost);
        let results = futures::future::join_all((0..4).map(|_| gate.held())).await;
        assert!(results.iter().all(Result::is_err));
        assert_eq!(runs.load(Ordering::SeqCst), 4);
    }
}
