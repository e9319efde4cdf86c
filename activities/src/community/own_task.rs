//! Work moved onto a task of its own, so it runs on any of the runtime's threads beside the
//! activity's loop, and is stopped with the activity: dropping the handle aborts the task.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::failure::{PhaseError, PhaseResult};

/// A spawned task that is aborted when its handle is dropped unfinished: a superseded or
/// cancelled attempt leaves none of its work running behind it.
pub(super) struct OwnTask<T>(tokio::task::JoinHandle<T>);

impl<T: Send + 'static> OwnTask<T> {
    /// Starts `work` on a task of its own.
    pub(super) fn spawn(work: impl Future<Output = T> + Send + 'static) -> Self {
        Self(tokio::spawn(work))
    }
}

impl<T> Future for OwnTask<T> {
    /// The work's output; a panic in it is resumed here, as if it had run inline; a task the
    /// runtime cancelled (it is shutting down) ends the attempt as cancelled.
    type Output = PhaseResult<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(|joined| match joined {
            Ok(output) => Ok(output),
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(_) => Err(PhaseError::Cancelled),
        })
    }
}

impl<T> Drop for OwnTask<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[tokio::test]
    async fn a_dropped_task_stops_before_its_next_step() {
        let reached = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&reached);
        let task = OwnTask::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            flag.store(true, Ordering::SeqCst);
        });
        drop(task);
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        assert!(!reached.load(Ordering::SeqCst), "the aborted task ran on");
    }

    #[tokio::test]
    async fn a_finished_task_gives_its_output() {
        let output = OwnTask::spawn(async { 7 }).await;
        assert!(matches!(output, Ok(7)));
    }
}
