//! The approved inventory as the source of every run: the stored copy is read back from
//! Postgres, its version must be one this build understands, and its digest must be the one the
//! approval names. Pure, so the checks are unit-tested; the activity
//! `user.load_approved_inventory` applies them to what it read.

use serde::{Deserialize, Serialize};

use super::inventory::{
    INVENTORY_VERSION, MAX_INVENTORY_COMMUNITIES, USER_INVENTORY_VERSION, UserInventory,
};

/// Inventory versions whose encoding and stage rules this build implements.
pub const KNOWN_INVENTORY_VERSIONS: [u32; 2] = [INVENTORY_VERSION, USER_INVENTORY_VERSION];

/// Output of `user.load_approved_inventory`: the stored inventory, verified against the approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovedInventory {
    /// The inventory as stored, re-read on every run.
    pub inventory: UserInventory,
    /// The digest the approval names (equal to the stored inventory's recomputed digest).
    pub inventory_digest: String,
}

/// Why the stored inventory cannot be run. Each is permanent: the run blocks with this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoredInventoryError {
    /// No approval row: nothing may run.
    #[error("the request has no approval: approve its inventory digest first")]
    NotApproved,
    /// The request row holds no inventory.
    #[error("the request has no stored inventory")]
    Missing,
    /// A version this build does not implement (e.g. written by a newer release).
    #[error(
        "inventory version {0} is not understood by this build (it knows {KNOWN_INVENTORY_VERSIONS:?}); deploy a build that knows it"
    )]
    UnknownVersion(String),
    /// More communities than reconstruction may read.
    #[error(
        "the stored inventory lists {0} communities, more than the limit of {MAX_INVENTORY_COMMUNITIES}; refusing to read it"
    )]
    TooManyCommunities(u64),
    /// The stored JSON is not an inventory of a known version.
    #[error("the stored inventory is unreadable: {0}")]
    Unreadable(String),
    /// The stored inventory is not the one approved (edited after approval).
    #[error(
        "the stored inventory has digest {stored}, but the approval names digest {approved}: the inventory was changed after approval; refusing to run it"
    )]
    DigestMismatch {
        /// Digest recomputed over the stored inventory (or the request row's frozen digest, when
        /// that one differs from the approval).
        stored: String,
        /// Digest named by the approval row.
        approved: String,
    },
}

/// Verifies the stored inventory `stored` against the approval's `approved_digest` and the
/// request row's `frozen_digest`: a known version, at most [`MAX_INVENTORY_COMMUNITIES`]
/// communities, and a recomputed digest equal to both.
pub fn verify_stored_inventory(
    stored: &serde_json::Value,
    frozen_digest: Option<&str>,
    approved_digest: &str,
) -> Result<ApprovedInventory, StoredInventoryError> {
    let version = stored
        .get("version")
        .ok_or_else(|| StoredInventoryError::Unreadable("it names no version".into()))?;
    let known = version
        .as_u64()
        .is_some_and(|v| KNOWN_INVENTORY_VERSIONS.iter().any(|k| u64::from(*k) == v));
    if !known {
        return Err(StoredInventoryError::UnknownVersion(version.to_string()));
    }
    let count = stored
        .get("communities")
        .and_then(serde_json::Value::as_array)
        .map_or(0, |c| c.len());
    if count > MAX_INVENTORY_COMMUNITIES {
        return Err(StoredInventoryError::TooManyCommunities(count as u64));
    }
    let inventory: UserInventory = serde_json::from_value(stored.clone())
        .map_err(|e| StoredInventoryError::Unreadable(e.to_string()))?;
    if let Some(problem) = inventory.shape_problem() {
        return Err(StoredInventoryError::Unreadable(problem));
    }
    let recomputed = inventory.digest();
    if recomputed != approved_digest {
        return Err(StoredInventoryError::DigestMismatch {
            stored: recomputed,
            approved: approved_digest.to_string(),
        });
    }
    if let Some(frozen) = frozen_digest.filter(|frozen| *frozen != approved_digest) {
        return Err(StoredInventoryError::DigestMismatch {
            stored: frozen.to_string(),
            approved: approved_digest.to_string(),
        });
    }
    Ok(ApprovedInventory {
        inventory,
        inventory_digest: recomputed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(inventory: &UserInventory) -> serde_json::Value {
        serde_json::to_value(inventory).unwrap()
    }

    #[test]
    fn the_approved_inventory_is_returned_as_stored() {
        let inventory = UserInventory::demo("demo:alice").unwrap();
        let digest = inventory.digest();
        let approved = verify_stored_inventory(&stored(&inventory), Some(&digest), &digest);
        assert_eq!(
            approved,
            Ok(ApprovedInventory {
                inventory,
                inventory_digest: digest
            })
        );
    }

    #[test]
    fn an_inventory_edited_after_approval_is_refused_naming_both_digests() {
        let inventory = UserInventory::demo("demo:alice").unwrap();
        let approved = inventory.digest();
        let mut edited = inventory.clone();
        edited.communities.pop();
        let refusal =
            verify_stored_inventory(&stored(&edited), Some(&approved), &approved).unwrap_err();
        let message = refusal.to_string();
        assert!(message.contains(&edited.digest()), "{message}");
        assert!(message.contains(&approved), "{message}");
        // A reformatted copy with the same content is the same inventory.
        let mut reordered = stored(&inventory);
        reordered["communities"][0] = json!({"role": "participant",
            "community_id": inventory.communities[0].community_id});
        assert!(verify_stored_inventory(&reordered, Some(&approved), &approved).is_ok());
    }

    #[test]
    fn a_frozen_digest_that_differs_from_the_approval_is_refused() {
        let inventory = UserInventory::demo("demo:alice").unwrap();
        let approved = inventory.digest();
        let refusal =
            verify_stored_inventory(&stored(&inventory), Some(&"0".repeat(64)), &approved);
        assert!(matches!(
            refusal,
            Err(StoredInventoryError::DigestMismatch { .. })
        ));
    }

    #[test]
    fn an_unknown_version_is_refused_before_anything_is_read() {
        let inventory = UserInventory::demo("demo:alice").unwrap();
        let digest = inventory.digest();
        let mut future = stored(&inventory);
        future["version"] = json!(3);
        future["communities"] = json!("a shape only version 3 knows");
        let refusal = verify_stored_inventory(&future, Some(&digest), &digest).unwrap_err();
        assert_eq!(refusal, StoredInventoryError::UnknownVersion("3".into()));
        let text = refusal.to_string();
        assert!(text.contains("inventory version 3 is not understood by this build"));
        assert!(text.contains("deploy a build that knows it"));
    }

    #[test]
    fn more_communities_than_the_limit_are_refused() {
        let inventory = UserInventory::demo_sized("demo:alice", 1_000).unwrap();
        let digest = inventory.digest();
        let mut too_big = stored(&inventory);
        let extra = json!({"community_id": uuid::Uuid::from_u128(0xfff), "role": "participant"});
        too_big["communities"].as_array_mut().unwrap().push(extra);
        assert_eq!(
            verify_stored_inventory(&too_big, Some(&digest), &digest),
            Err(StoredInventoryError::TooManyCommunities(1_001))
        );
        assert!(verify_stored_inventory(&stored(&inventory), Some(&digest), &digest).is_ok());
    }

    #[test]
    fn fields_the_digest_does_not_cover_are_refused() {
        let inventory = UserInventory::demo("demo:alice").unwrap();
        let digest = inventory.digest();
        let mut extra = stored(&inventory);
        extra["communities"][1]["skip"] = json!(true);
        assert!(matches!(
            verify_stored_inventory(&extra, Some(&digest), &digest),
            Err(StoredInventoryError::Unreadable(_))
        ));
        let mut extra = stored(&inventory);
        extra["note"] = json!("approved by someone else");
        assert!(matches!(
            verify_stored_inventory(&extra, Some(&digest), &digest),
            Err(StoredInventoryError::Unreadable(_))
        ));
    }
}
