//! The verification facts about the approved scope: at verification (and again just before the
//! receipt is issued) every relation of the frozen inventory is re-found and counted
//! ([`count_inventoried`]); when none holds a row of the community, the relations verified are
//! recorded as the `scope_verified` milestone, which the receipt states as
//! `/verification/relations`. The first evidence recorded is kept; every run is audited.

use workflows::community::contracts::TableCount;

use super::inventory::frozen_inventory_in;
use super::stage::Stage;
use super::token::ExecToken;
use crate::Store;
use crate::catalog::closed_world::verify::count_inventoried;
use crate::error::StoreResult;

/// The milestone recording the relations the scope verification found empty.
pub const SCOPE_VERIFIED: &str = "scope_verified";

impl Store {
    /// Counts the community's rows in every relation the frozen inventory lists (refusing with
    /// [`crate::CatalogError::ScopeShrank`] when one left the scope) and, when all are
    /// empty, records them as the [`SCOPE_VERIFIED`] milestone in the same transaction. Returns
    /// the counts, inventory order (empty for an inventory frozen without its closed world); the
    /// caller refuses any non-zero one. Stage must be `cache_purged` or `logically_verified`.
    pub async fn verify_scope(&self, token: &ExecToken) -> StoreResult<Vec<TableCount>> {
        let stages = [Stage::CachePurged, Stage::LogicallyVerified];
        let (mut tx, _) = self.begin_for_token(token, &stages).await?;
        let frozen = frozen_inventory_in(&mut tx, token.request_id)
            .await?
            .catalog
            .closed_world
            .map(|world| world.relations)
            .unwrap_or_default();
        if frozen.is_empty() {
            tx.commit().await?;
            return Ok(Vec::new());
        }
        let counts = count_inventoried(&mut tx, &frozen, token.community_id).await?;
        if counts.iter().all(|count| count.rows == 0) {
            let detail = serde_json::json!({
                "relations": counts.iter().map(|c| c.table.as_str()).collect::<Vec<_>>(),
            });
            token
                .record_milestone(&mut tx, SCOPE_VERIFIED, &detail)
                .await?;
        }
        tx.commit().await?;
        Ok(counts)
    }
}
