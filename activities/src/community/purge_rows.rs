//! Purge rows: the community's rows deleted from every tenant table in short batches, then the
//! community row, once every object version is gone.

use temporalio_sdk::activities::ActivityContext;
use workflows::community::{PurgeInput, PurgeReport};

use crate::store::Stage;

use super::CommunityActivities;
use super::failure::PhaseResult;
use super::heartbeat::{PhaseProgress, ProgressCell, heartbeating};

/// Deletes the community's rows in every tenant table in short batches, then the community row.
/// A retry resumes where the rows stop (deleting nothing twice); after the advance it returns
/// the recorded counts.
pub async fn purge_postgres(
    acts: &CommunityActivities,
    ctx: &ActivityContext,
    input: PurgeInput,
) -> PhaseResult<PurgeReport> {
    let token = acts
        .store
        .claim(
            input.request_id,
            &[Stage::BindingsRemoved, Stage::PostgresPurged],
        )
        .await?;
    if token.stage == Stage::PostgresPurged {
        let tables = acts.store.purge_progress(input.request_id).await?;
        let rows_deleted = tables.iter().map(|t| t.rows).sum();
        return Ok(PurgeReport {
            tables,
            rows_deleted,
        });
    }
    let progress = ProgressCell::default();
    heartbeating(ctx, &progress, async {
        acts.store.load_frozen_inventory(input.request_id).await?;
        acts.store.verify_fence(&token).await?;
        let report = acts
            .store
            .purge_postgres(&token, input.batch_rows, |table, rows| {
                progress.set(PhaseProgress {
                    step: format!("purging {table}"),
                    done: rows,
                    total: None,
                    unit: "rows deleted in this table".to_owned(),
                });
            })
            .await?;
        // Counted once: only the attempt that advanced the request gets here.
        acts.settings.metrics.rows_purged(report.rows_deleted);
        Ok(report)
    })
    .await
}
