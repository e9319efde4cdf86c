//! Reading the approved inventory back: every run takes its inventory from here, never from the
//! workflow's own copy.

use uuid::Uuid;
use workflows::user::approved::verify_stored_inventory;
use workflows::user::inventory::MAX_INVENTORY_COMMUNITIES;
use workflows::user::{ApprovedInventory, StoredInventoryError, real_user_pubkey};

use super::error::UserStoreError;
use super::{UserStore, UserStoreResult};

/// What the bounded read of the request row and its approval returns.
#[derive(sqlx::FromRow)]
struct StoredRow {
    frozen_digest: Option<String>,
    approved_digest: Option<String>,
    communities: Option<i64>,
    /// The inventory, only when it lists at most the limit of communities.
    inventory: Option<serde_json::Value>,
    has_inventory: bool,
    /// Why the request is blocked, if it is.
    blocked_reason: Option<String>,
}

impl UserStore {
    /// The stored inventory of request `id`, verified against its approval: the version must be
    /// one this build knows, the community count within [`MAX_INVENTORY_COMMUNITIES`] (counted in
    /// SQL, so an oversized inventory is never fetched), and the digest recomputed over the
    /// stored copy must equal the digest the approval names (and the request row's frozen one).
    /// A real user's request that is blocked is refused ([`UserStoreError::Blocked`]) until an
    /// operator unblocks it.
    pub async fn load_approved_inventory(&self, id: Uuid) -> UserStoreResult<ApprovedInventory> {
        let row: Option<StoredRow> = sqlx::query_as(
            "SELECT r.inventory_digest AS frozen_digest, a.inventory_digest AS approved_digest, \
                    c.communities, \
                    CASE WHEN c.communities IS NULL OR c.communities <= $2 THEN r.inventory END \
                        AS inventory, \
                    r.inventory IS NOT NULL AS has_inventory, r.blocked_reason \
             FROM deletion.requests r \
             LEFT JOIN deletion.approvals a ON a.request_id = r.id \
             CROSS JOIN LATERAL (SELECT CASE \
                 WHEN jsonb_typeof(r.inventory -> 'communities') = 'array' \
                 THEN jsonb_array_length(r.inventory -> 'communities')::bigint END \
                 AS communities) c \
             WHERE r.id = $1 AND r.kind = 'user'",
        )
        .bind(id)
        .bind(MAX_INVENTORY_COMMUNITIES as i64)
        .fetch_optional(&self.pool)
        .await?;
        let row = row.ok_or(UserStoreError::UnknownRequest(id))?;
        let refused = |source| UserStoreError::StoredInventory {
            request_id: id,
            source,
        };
        let approved_digest = row
            .approved_digest
            .ok_or(refused(StoredInventoryError::NotApproved))?;
        if !row.has_inventory {
            return Err(refused(StoredInventoryError::Missing));
        }
        let Some(inventory) = row.inventory else {
            let count = row.communities.unwrap_or_default();
            return Err(refused(StoredInventoryError::TooManyCommunities(
                u64::try_from(count).unwrap_or_default(),
            )));
        };
        let approved =
            verify_stored_inventory(&inventory, row.frozen_digest.as_deref(), &approved_digest)
                .map_err(refused)?;
        // A real user's deletion that blocked stays blocked until an operator unblocks it (a demo
        // request's block is only a report, as before).
        if let Some(reason) = row.blocked_reason
            && real_user_pubkey(&approved.inventory.target).is_some()
        {
            return Err(UserStoreError::Blocked {
                request_id: id,
                reason,
            });
        }
        Ok(approved)
    }
}
