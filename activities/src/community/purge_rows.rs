//! Purge rows: the community's rows deleted from every tenant table in short batches, then the
//! community row, once every object version is gone.

use workflows::community::{PurgeInput, PurgeReport};

use crate::store::Stage;

use super::Attempt;
use super::claim::{Claim, resumable};
use super::failure::PhaseResult;
use super::heartbeat::PhaseProgress;

/// Deletes the community's rows in every tenant table in short batches, then the community row.
/// A retry resumes where the rows stop (deleting nothing twice); after the advance it returns
/// the recorded counts.
pub async fn purge_postgres(
    (acts, ctx): Attempt<'_>,
    input: PurgeInput,
) -> PhaseResult<PurgeReport> {
    let finished = async |_| {
        let tables = acts.store.purge_progress(input.request_id).await?;
        let rows_deleted = tables.iter().map(|t| t.rows).sum();
        Ok(PurgeReport {
            tables,
            rows_deleted,
        })
    };
    let stages = [Stage::BindingsRemoved, Stage::PostgresPurged];
    let claim = Claim::fenced_at(input.request_id, &stages);
    resumable((acts, ctx), claim, finished, async |token, progress| {
        let report = acts
            .store
            .purge_postgres(&token, input.batch_rows, |table, rows| {
                let unit = "rows deleted in this table";
                progress.set(PhaseProgress::counting(
                    format!("purging {table}"),
                    rows,
                    unit,
                ));
            })
            .await?;
        // Counted once: only the attempt that advanced the request gets here.
        acts.settings.metrics.rows_purged(report.rows_deleted);
        Ok(report)
    })
    .await
}
