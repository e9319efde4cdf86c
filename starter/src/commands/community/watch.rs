//! `community watch`: live progress lines until the deletion ends.

use super::*;
use workflows::community::status::BlockedInfo;

/// `community watch`: its live progress lines are written to stdout as they change (a bar
/// redrawn in place on a terminal); its result, where the deletion ended, is a [`Report`].
pub(super) async fn watch(
    waits: &WorkerWait,
    id: Uuid,
    interval_ms: u64,
    timeout_secs: u64,
) -> CliResult {
    let handle = existing_workflow(id).await?;
    let interactive = std::io::stdout().is_terminal();
    let started = tokio::time::Instant::now();
    let mut last_line = String::new();
    loop {
        let Some(status) = query_status(waits, &handle, id).await? else {
            if interactive {
                println!();
            }
            return unanswered(waits, &handle, id).await;
        };
        let pending = pending_activity(&handle).await;
        let line = render::community::progress_line(&status, pending.as_ref());
        if interactive {
            print!("{}", render::community::progress_redraw(&status, &line));
            use std::io::Write;
            let _ = std::io::stdout().flush();
        } else if line != last_line {
            println!("{line}");
        }
        last_line = line;
        if watch_ends(&status) {
            if interactive {
                println!();
            }
            return watched_report(&status);
        }
        if timeout_secs > 0 && started.elapsed() >= Duration::from_secs(timeout_secs) {
            if interactive {
                println!();
            }
            return Err(CliError::Other(anyhow::anyhow!(
                "still {} after {timeout_secs} s",
                status.phase
            )));
        }
        tokio::time::sleep(Duration::from_millis(interval_ms.max(100))).await;
    }
}

/// Whether a watch stops at `status`: done, aborted, or blocked waiting for an operator. A
/// block whose unblock is being recorded is watched on: the phase runs again in a moment.
pub(crate) fn watch_ends(status: &DeletionStatus) -> bool {
    let blocked = status
        .blocked
        .as_ref()
        .is_some_and(BlockedInfo::awaits_operator);
    blocked || matches!(status.phase, Phase::RetentionPending | Phase::Aborted)
}

/// Where a watched deletion ended: exit 0 when done (with what verification checked), 1 when
/// blocked or aborted.
pub(super) fn watched_report(status: &DeletionStatus) -> CliResult {
    let done = status.phase == Phase::RetentionPending;
    let verified = status.verification.as_ref().filter(|_| done).map(|v| {
        format!(
            "{} tenant tables empty, {} prefixes list no version, {} empty Redis SCAN passes",
            v.tables_checked, v.prefixes_checked, v.redis_empty_passes
        )
    });
    let document = serde_json::json!({
        "request_id": status.request_id,
        "phase": status.phase,
        "blocked": status.blocked,
        "verified": verified,
        "verification": status.verification,
    });
    let text = verified
        .as_ref()
        .map(|v| format!("verified: {v}\n"))
        .unwrap_or_default();
    Ok(Report::new(&document, text)?.with_exit_code(if done { 0 } else { 1 }))
}
