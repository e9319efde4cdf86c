//! Verify: the absence proof in every store (rows, every inventoried relation, the community row,
//! object versions and uploads, two empty Redis passes).

use workflows::community::{RequestRef, VerificationReport};

use crate::store::{ExecToken, Stage};
use crate::taxonomy::tenant_prefixes;

use super::claim::{Claim, claimed};
use super::failure::{PhaseError, PhaseResult};
use super::late_versions;
use super::uploads::verify_no_uploads;
use super::{Attempt, CommunityActivities};

/// Redis passes that must each complete empty (SCAN is weakly consistent: one sparse pass could
/// look empty while a key survives a cursor rollover).
const REDIS_EMPTY_PASSES: u32 = 2;

/// Proves absence in every store: zero rows of the community in every tenant table and no
/// community row, each tenant prefix lists no version and no multipart upload in progress, and
/// two complete SCAN passes of the namespace find nothing. Anything found is a transient failure naming it (retried, visible
/// in the UI) — never a silent pass.
pub async fn verify(
    (acts, ctx): Attempt<'_>,
    input: RequestRef,
) -> PhaseResult<VerificationReport> {
    let claim = Claim::at(
        input.request_id,
        &[Stage::CachePurged, Stage::LogicallyVerified],
    );
    claimed((acts, ctx), claim, async |token, progress| {
        acts.store.load_frozen_inventory(input.request_id).await?;
        progress.update(|p| p.step = "counting remaining rows".to_owned());
        let rows = acts.store.count_community_rows(token.community_id).await?;
        if let Some(table) = rows.iter().find(|t| t.rows > 0) {
            return Err(PhaseError::StillPresent {
                what: "Postgres rows",
                detail: format!("{} rows in {}", table.rows, table.table),
            });
        }
        progress.update(|p| p.step = "verifying every inventoried relation".to_owned());
        verify_inventoried_relations(acts, &token).await?;
        if acts
            .store
            .community_by_id(token.community_id)
            .await?
            .is_some()
        {
            return Err(PhaseError::StillPresent {
                what: "the community row",
                detail: format!("buzz.communities id {}", token.community_id),
            });
        }
        let prefixes = tenant_prefixes(token.community_id);
        for prefix in &prefixes {
            progress.update(|p| p.step = format!("listing {prefix}"));
            if let Some(version) = acts.objects.prefix_is_empty(prefix).await? {
                return Err(late_versions::surviving_version(acts, &token, prefix, &version).await);
            }
        }
        verify_no_uploads(&acts.objects, &prefixes, progress).await?;
        progress.update(|p| p.step = "two empty Redis SCAN passes".to_owned());
        acts.cache.verify_absent(token.community_id).await?;
        let report = VerificationReport {
            tables_checked: rows.len() as u64,
            prefixes_checked: prefixes.len() as u64,
            redis_empty_passes: REDIS_EMPTY_PASSES,
        };
        if token.stage == Stage::CachePurged {
            acts.store
                .advance(
                    &token,
                    Stage::CachePurged,
                    Stage::LogicallyVerified,
                    serde_json::to_value(&report).unwrap_or_default(),
                )
                .await?;
        }
        Ok(report)
    })
    .await
}

/// Every relation of the frozen inventory is still in scope and holds no row of the community
/// (recorded as the `scope_verified` milestone the receipt states); a relation that left is
/// [`crate::store::CatalogError::ScopeShrank`], a row left is a transient failure naming it.
pub(super) async fn verify_inventoried_relations(
    acts: &CommunityActivities,
    token: &ExecToken,
) -> PhaseResult<()> {
    let counts = acts.store.verify_scope(token).await?;
    match counts.iter().find(|count| count.rows > 0) {
        Some(left) => Err(PhaseError::StillPresent {
            what: "Postgres rows",
            detail: format!("{} rows in {}", left.rows, left.table),
        }),
        None => Ok(()),
    }
}
