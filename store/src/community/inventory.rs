//! The frozen inventory: what the operator approves, bound to its sha256 digest.
//!
//! The digest is computed over a canonical, length-prefixed encoding (tables, fenced tables and
//! prefixes sorted), so the same inventory always has the same digest whatever order it was
//! assembled in, and any change to a count, table, prefix digest or the target changes it. It is
//! recomputed on every read: a frozen inventory edited in the database is refused.

use crate::ApprovalError;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sqlx::PgConnection;
use uuid::Uuid;
use workflows::community::contracts::{InventorySummary, PrefixSummary, UploadSummary};

use super::stage::Stage;
use super::token::ExecToken;
use crate::catalog::CatalogInventory;
use crate::error::{StoreError, StoreResult};
use crate::{Store, put_canonical_field, put_canonical_list};

/// Version of the frozen-inventory encoding (part of the digest). Version 2 adds the multipart
/// uploads in progress per tenant prefix; a version-1 inventory (frozen before uploads were
/// counted, so without them) still encodes and validates as it did.
///
/// Version 3 binds the closed-world classification (every purge-set relation by oid and name,
/// the declarations relied on, the target's rows in key children, archives and refreshed views,
/// the cross-reference counts).
pub const FROZEN_INVENTORY_VERSION: u32 = 3;

/// The first encoding version that binds the closed world.
const CLOSED_WORLD_SINCE_VERSION: u32 = 3;

/// The first encoding version that binds the uploads in progress.
const UPLOADS_SINCE_VERSION: u32 = 2;

/// Domain separator of the frozen-inventory digest.
const DIGEST_DOMAIN: &str = "buzz-deletion/frozen-inventory";

/// The inventory frozen on a request at `submitted → inventoried`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrozenInventory {
    /// Encoding version ([`FROZEN_INVENTORY_VERSION`]).
    pub version: u32,
    /// The community to be deleted.
    pub community_id: Uuid,
    /// Its host at inventory time.
    pub host: String,
    /// Tenant tables, fenced tables and the community's row counts.
    pub catalog: CatalogInventory,
    /// The three tenant prefixes' version counts, bytes and key digests.
    pub prefixes: Vec<PrefixSummary>,
    /// Keys in the community's Redis namespace.
    pub redis_keys: u64,
    /// Multipart uploads in progress per tenant prefix: counts and order-independent digests.
    #[serde(default)]
    pub uploads: Vec<UploadSummary>,
}

impl FrozenInventory {
    /// Assembles an inventory in canonical order (every list sorted).
    pub fn new(
        community_id: Uuid,
        host: impl Into<String>,
        catalog: CatalogInventory,
        prefixes: Vec<PrefixSummary>,
        redis_keys: u64,
    ) -> Self {
        let mut inventory = FrozenInventory {
            version: FROZEN_INVENTORY_VERSION,
            community_id,
            host: host.into(),
            catalog,
            prefixes,
            redis_keys,
            uploads: Vec::new(),
        };
        inventory.catalog.tenant_tables.sort();
        inventory.catalog.fenced_tables.sort();
        inventory
            .catalog
            .row_counts
            .sort_by(|a, b| a.table.cmp(&b.table));
        inventory.prefixes.sort_by(|a, b| a.prefix.cmp(&b.prefix));
        inventory
    }

    /// The same inventory with the multipart uploads in progress per prefix (sorted by prefix).
    pub fn with_uploads(mut self, mut uploads: Vec<UploadSummary>) -> Self {
        uploads.sort_by(|a, b| a.prefix.cmp(&b.prefix));
        self.uploads = uploads;
        self
    }

    /// Uploads in progress across the three prefixes.
    pub fn total_uploads(&self) -> u64 {
        self.uploads.iter().map(|u| u.uploads).sum()
    }

    /// The canonical encoding the digest is computed over. Lists are encoded sorted regardless
    /// of their order in memory.
    pub fn canonical_encoding(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let put = |out: &mut Vec<u8>, field: &str| put_canonical_field(out, field);
        put(&mut out, DIGEST_DOMAIN);
        put(&mut out, &self.version.to_string());
        put(&mut out, &self.community_id.hyphenated().to_string());
        put(&mut out, &self.host);

        let tables = |out: &mut Vec<u8>, tables: &[String]| {
            put_canonical_list(out, tables, String::as_str, |out, table| put(out, table));
        };
        tables(&mut out, &self.catalog.tenant_tables);
        tables(&mut out, &self.catalog.fenced_tables);
        put_canonical_list(
            &mut out,
            &self.catalog.row_counts,
            |count| &count.table,
            |out, count| {
                put(out, &count.table);
                put(out, &count.rows.to_string());
            },
        );
        put_prefix_summaries(&mut out, &self.prefixes);
        put(&mut out, &self.redis_keys.to_string());
        // Uploads are bound from version 2 on; any uploads at all are bound whatever the version,
        // so relabelling an inventory as version 1 cannot drop them from the digest.
        if self.version >= UPLOADS_SINCE_VERSION || !self.uploads.is_empty() {
            put_canonical_list(
                &mut out,
                &self.uploads,
                |u| &u.prefix,
                |out, upload| {
                    put(out, &upload.prefix);
                    put(out, &upload.uploads.to_string());
                    put(out, &upload.uploads_digest);
                },
            );
        }
        // Likewise the closed world: from version 3 on, and whenever present.
        if self.version >= CLOSED_WORLD_SINCE_VERSION || self.catalog.closed_world.is_some() {
            match &self.catalog.closed_world {
                Some(world) => {
                    put(&mut out, "closed-world");
                    world.encode(&mut out);
                }
                None => put(&mut out, "no-closed-world"),
            }
        }
        out
    }

    /// Lowercase hex sha256 of [`FrozenInventory::canonical_encoding`].
    pub fn digest(&self) -> String {
        hex::encode(Sha256::digest(self.canonical_encoding()))
    }

    /// The inventory as the operator sees it (the `community.inventory` contract's output).
    pub fn summary(&self) -> InventorySummary {
        InventorySummary {
            digest: self.digest(),
            tables: self.catalog.row_counts.clone(),
            prefixes: self.prefixes.clone(),
            redis_keys: self.redis_keys,
            uploads: self.uploads.clone(),
        }
    }
}

/// Encodes the per-prefix summaries of a canonical encoding (sorted by prefix): the frozen
/// inventory's and the destructive manifest's.
pub(crate) fn put_prefix_summaries(out: &mut Vec<u8>, prefixes: &[PrefixSummary]) {
    put_canonical_list(
        out,
        prefixes,
        |p| &p.prefix,
        |out, summary| {
            put_canonical_field(out, &summary.prefix);
            put_canonical_field(out, &summary.versions.to_string());
            put_canonical_field(out, &summary.bytes.to_string());
            put_canonical_field(out, &summary.keys_digest);
        },
    );
}

/// A document frozen on the request row beside its digest, as read: the document, the digest.
pub(crate) type StoredDocument = (Option<sqlx::types::Json<serde_json::Value>>, Option<String>);

/// Decodes a frozen document (`what`: the frozen inventory, the destructive manifest) and
/// re-validates it against its stored digest: [`StoreError::NotFound`] (as `missing`) when
/// either is absent, [`StoreError::Corrupt`] when it does not decode, and
/// [`ApprovalError::DigestMismatch`] when it no longer hashes (`digest`) to the stored digest.
pub(crate) fn verified_document<T: serde::de::DeserializeOwned>(
    request_id: Uuid,
    stored: StoredDocument,
    (what, missing): (&'static str, &'static str),
    digest: impl Fn(&T) -> String,
) -> StoreResult<T> {
    let (Some(document), Some(stored_digest)) = stored else {
        return Err(StoreError::NotFound {
            what: missing,
            id: request_id.to_string(),
        });
    };
    let decoded: T = serde_json::from_value(document.0).map_err(|error| StoreError::Corrupt {
        what,
        reason: error.to_string(),
    })?;
    let actual = digest(&decoded);
    if actual != stored_digest {
        return Err(StoreError::Approval(ApprovalError::DigestMismatch {
            request_id,
            what,
            expected: stored_digest,
            actual,
        }));
    }
    Ok(decoded)
}

/// Reads the frozen inventory and re-validates its digest (inside the caller's transaction).
pub(crate) async fn frozen_inventory_in(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> StoreResult<FrozenInventory> {
    let stored: Option<StoredDocument> =
        sqlx::query_as("SELECT inventory, inventory_digest FROM deletion.requests WHERE id = $1")
            .bind(request_id)
            .fetch_optional(conn)
            .await?;
    verified_inventory(request_id, stored.unwrap_or_default())
}

/// The frozen inventory of `stored` (the request's document and digest), refused unless it
/// hashes to that digest.
pub(crate) fn verified_inventory(
    request_id: Uuid,
    stored: StoredDocument,
) -> StoreResult<FrozenInventory> {
    let what = ("frozen inventory", "frozen inventory of request");
    verified_document(request_id, stored, what, FrozenInventory::digest)
}

impl Store {
    /// Freezes the inventory and its digest on the request (`submitted → inventoried`, with a
    /// checkpoint) and returns the digest. Generation-checked; refused if the inventory names
    /// another community.
    pub async fn freeze_inventory(
        &self,
        token: &ExecToken,
        inventory: &FrozenInventory,
    ) -> StoreResult<String> {
        if inventory.community_id != token.community_id {
            return Err(StoreError::InvalidInput {
                field: "inventory",
                reason: format!(
                    "inventory is for community {}, request {} is for {}",
                    inventory.community_id, token.request_id, token.community_id
                ),
            });
        }
        let digest = inventory.digest();
        let document = serde_json::to_value(inventory).map_err(|error| StoreError::Corrupt {
            what: "frozen inventory",
            reason: error.to_string(),
        })?;
        let (mut tx, _) = self.begin_for_token(token, &[Stage::Submitted]).await?;
        sqlx::query(
            "UPDATE deletion.requests SET inventory = $2, inventory_digest = $3, updated_at = now() \
             WHERE id = $1",
        )
        .bind(token.request_id)
        .bind(sqlx::types::Json(&document))
        .bind(&digest)
        .execute(&mut *tx)
        .await?;
        let versions: u64 = inventory.prefixes.iter().map(|p| p.versions).sum();
        let detail = serde_json::json!({
            "digest": digest,
            "tenant_tables": inventory.catalog.tenant_tables.len(),
            "rows": inventory.catalog.total_rows(),
            "versions": versions,
            "redis_keys": inventory.redis_keys,
            "uploads": inventory.total_uploads(),
        });
        token
            .commit_advance(tx, Stage::Inventoried, &detail)
            .await?;
        Ok(digest)
    }

    /// The frozen inventory, its digest re-validated ([`ApprovalError::DigestMismatch`] if the
    /// stored document no longer hashes to the stored digest).
    pub async fn load_frozen_inventory(&self, request_id: Uuid) -> StoreResult<FrozenInventory> {
        let mut conn = self.pool.acquire().await?;
        frozen_inventory_in(&mut conn, request_id).await
    }

    /// Refuses ([`CatalogError::Drift`]) if tenant tables were added or removed since the
    /// inventory was frozen, ([`CatalogError::Unfenced`]) if any relation's fence would not
    /// fire, and ([`CatalogError::CascadingReferences`]) if a foreign key would carry the
    /// purge into non-tenant data.
    pub async fn check_catalog_unchanged(&self, token: &ExecToken) -> StoreResult<()> {
        self.verify_token(token).await?;
        let frozen = self.load_frozen_inventory(token.request_id).await?;
        let live = self.catalog_scan(token.community_id).await?;
        live.require_unchanged_since(&frozen.catalog)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use workflows::community::contracts::TableCount;

    fn inventory() -> FrozenInventory {
        FrozenInventory::new(
            Uuid::from_u128(7),
            "a.example",
            CatalogInventory {
                tenant_tables: vec!["buzz.events".into(), "buzz.agents".into()],
                fenced_tables: vec!["buzz.events".into(), "buzz.agents".into()],
                row_counts: vec![
                    TableCount {
                        table: "buzz.events".into(),
                        rows: 3,
                    },
                    TableCount {
                        table: "buzz.agents".into(),
                        rows: 1,
                    },
                ],
                closed_world: None,
            },
            vec![PrefixSummary {
                prefix: "media/x/".into(),
                versions: 2,
                bytes: 10,
                keys_digest: "ab".into(),
            }],
            5,
        )
        .with_uploads(vec![
            UploadSummary {
                prefix: "thumbs/x/".into(),
                uploads: 1,
                uploads_digest: "u2".into(),
            },
            UploadSummary {
                prefix: "media/x/".into(),
                uploads: 2,
                uploads_digest: "u1".into(),
            },
        ])
    }

    #[test]
    fn digest_does_not_depend_on_list_order() {
        let sorted = inventory();
        let mut shuffled = sorted.clone();
        shuffled.catalog.tenant_tables.reverse();
        shuffled.catalog.row_counts.reverse();
        shuffled.uploads.reverse();
        assert_eq!(sorted.digest(), shuffled.digest());
    }

    #[test]
    fn digest_changes_with_any_count_or_target() {
        let base = inventory().digest();
        let mut changed = inventory();
        changed.catalog.row_counts[0].rows += 1;
        assert_ne!(changed.digest(), base);
        let mut changed = inventory();
        changed.redis_keys += 1;
        assert_ne!(changed.digest(), base);
        let mut changed = inventory();
        changed.community_id = Uuid::from_u128(8);
        assert_ne!(changed.digest(), base);
        let mut changed = inventory();
        changed.prefixes[0].keys_digest = "ac".into();
        assert_ne!(changed.digest(), base);
        let mut changed = inventory();
        changed.uploads[0].uploads += 1;
        assert_ne!(changed.digest(), base);
        let mut changed = inventory();
        changed.uploads[1].uploads_digest = "u3".into();
        assert_ne!(changed.digest(), base);
        let mut changed = inventory();
        changed.uploads.pop();
        assert_ne!(changed.digest(), base);
    }

    #[test]
    fn uploads_cannot_be_dropped_by_relabelling_the_encoding_version() {
        let base = inventory();
        let mut relabelled = base.clone();
        relabelled.version = 1;
        assert_ne!(relabelled.digest(), base.digest());
        let mut stripped = relabelled.clone();
        stripped.uploads.clear();
        assert_ne!(stripped.digest(), base.digest());
        assert_ne!(stripped.digest(), relabelled.digest());
    }

    #[test]
    fn a_version_1_inventory_without_uploads_keeps_its_digest() {
        // Frozen before uploads were counted: the JSON has no `uploads` field at all, and the
        // digest must stay what version 1 computed (no uploads section in the encoding).
        let mut v1 = inventory();
        v1.version = 1;
        v1.uploads.clear();
        let mut json = serde_json::to_value(&v1).unwrap_or_default();
        if let Some(object) = json.as_object_mut() {
            object.remove("uploads");
        }
        let back: FrozenInventory = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
        assert!(back.uploads.is_empty());
        assert_eq!(back.digest(), v1.digest());
        // Version 2 always carries the uploads section, even when no upload is in progress.
        let mut v2 = v1.clone();
        v2.version = 2;
        assert!(v2.canonical_encoding().ends_with(b"1:0,"));
        assert!(!v1.canonical_encoding().ends_with(b"1:0,"));
    }

    #[test]
    fn digest_survives_a_json_round_trip() {
        let original = inventory();
        let json = serde_json::to_value(&original).ok();
        let back: Option<FrozenInventory> = json.and_then(|v| serde_json::from_value(v).ok());
        assert_eq!(back.map(|inv| inv.digest()), Some(original.digest()));
    }
}
