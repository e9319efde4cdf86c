//! The pooled PostgreSQL connections one deleting attempt may hold at once.
//!
//! A `delete_chunks` (or late-versions) attempt talks to PostgreSQL from several places at the
//! same time: the fence checks bracketing its DeleteObjects calls, the reader fetching chunks
//! ahead, the grouped stamp written beside the calls, and the irreversible marker. Each would
//! take a pooled connection of its own, so one attempt could hold four, and the worker's pool
//! (sized per activity slot, `worker::capacity`) would no longer cover every slot at once.
//! Every one of those statements therefore runs under the attempt's budget: at most
//! [`CONNECTIONS_PER_ATTEMPT`] of them at a time, the others waiting their turn (first come,
//! first served) for a statement of the same attempt to end, never for another activity.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::Semaphore;

use super::failure::{PhaseError, PhaseResult};

/// Pooled connections one attempt holds at most, whatever its parallelism.
pub const CONNECTIONS_PER_ATTEMPT: usize = 2;

/// One attempt's share of the pool (cloned into the tasks of the attempt; see the module doc).
#[derive(Clone)]
pub(super) struct ConnectionBudget(Arc<Semaphore>);

impl ConnectionBudget {
    pub(super) fn new() -> Self {
        Self(Arc::new(Semaphore::new(CONNECTIONS_PER_ATTEMPT)))
    }

    /// Runs `work` (statements on at most one pooled connection at a time) once the attempt has
    /// a connection to spare, and holds that share until `work` ends.
    pub(super) async fn spend<T, E>(
        &self,
        work: impl Future<Output = Result<T, E>>,
    ) -> PhaseResult<T>
    where
        PhaseError: From<E>,
    {
        // The semaphore is never closed; a closed one would mean the attempt is being torn down.
        let _share = self.0.acquire().await.map_err(|_| PhaseError::Cancelled)?;
        Ok(work.await?)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn no_more_statements_than_the_budget_run_at_once_and_every_one_runs() {
        let budget = ConnectionBudget::new();
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for n in 0..12_u64 {
            let (budget, running, most) = (budget.clone(), running.clone(), most.clone());
            tasks.spawn(async move {
                budget
                    .spend(async {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(5 + n % 3)).await;
                        running.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, PhaseError>(n)
                    })
                    .await
            });
        }
        let mut done = Vec::new();
        while let Some(result) = tasks.join_next().await {
            done.push(result.expect("task").expect("statement"));
        }
        done.sort_unstable();
        assert_eq!(done, (0..12).collect::<Vec<_>>());
        assert_eq!(most.load(Ordering::SeqCst), CONNECTIONS_PER_ATTEMPT);
    }

    #[tokio::test]
    async fn a_failed_statement_gives_its_share_back() {
        let budget = ConnectionBudget::new();
        for _ in 0..CONNECTIONS_PER_ATTEMPT + 1 {
            let failed = budget
                .spend(async { Err::<(), _>(PhaseError::Cancelled) })
                .await;
            assert!(matches!(failed, Err(PhaseError::Cancelled)));
        }
        let ok = tokio::time::timeout(
            Duration::from_secs(1),
            budget.spend(async { Ok::<_, PhaseError>(7) }),
        )
        .await
        .expect("a share is free");
        assert_eq!(ok.expect("statement"), 7);
    }
}
