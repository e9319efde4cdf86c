//! Waiting for the stack to reach a state: the one polling loop the tests share, so every wait
//! has a bound and says, when it runs out, what it saw last.

use std::time::Duration;

use tokio::time::Instant;

/// Asks `probe` every `every` until it answers `Ok`, and returns that answer. `Err` carries what
/// the probe saw (and what it waited for); once `within` has passed, the last one is the panic
/// message.
pub async fn until<T>(
    within: Duration,
    every: Duration,
    mut probe: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        let seen = match probe().await {
            Ok(answer) => return answer,
            Err(seen) => seen,
        };
        assert!(Instant::now() < deadline, "after {within:?}: {seen}");
        tokio::time::sleep(every).await;
    }
}

/// [`until`] with a probe that answers `Some` once the state is reached; `what` names the
/// state in the panic.
pub async fn until_some<T>(
    within: Duration,
    every: Duration,
    what: &str,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    until(within, every, async || {
        probe().await.ok_or_else(|| what.to_owned())
    })
    .await
}
