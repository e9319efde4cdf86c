//! A protected operation polled only while its deadline is ahead and its lease is not lost.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What one poll of a bounded operation found.
pub(crate) enum Polled<T> {
    Done(T),
    Lost,
    TooLong,
}

/// Polls the operation only while the deadline is ahead and the lease is not lost: timers and
/// I/O readiness wake in no particular order after a pause, so the checks sit in front of every
/// poll rather than racing it.
pub(crate) struct Bounded<'a, F> {
    pub(crate) operation: Pin<&'a mut F>,
    pub(crate) deadline: Instant,
    pub(crate) lost: &'a CancellationToken,
}

impl<F: Future> Future for Bounded<'_, F> {
    type Output = Polled<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.lost.is_cancelled() {
            return Poll::Ready(Polled::Lost);
        }
        if Instant::now() >= self.deadline {
            return Poll::Ready(Polled::TooLong);
        }
        self.operation.as_mut().poll(cx).map(Polled::Done)
    }
}
