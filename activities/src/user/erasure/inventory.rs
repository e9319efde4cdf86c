//! A real user's inventory: the declarations, then every community holding data of the user
//! (members today first, then former participants, each by host), with the footprint the
//! approval will name. Read-only.

use std::collections::BTreeSet;

use uuid::Uuid;
use workflows::user::footprint::{CommunityFootprint, DeclaredTable, agent_key_pattern};
use workflows::user::inventory::{
    CommunityRole, InventoryCommunity, MAX_INVENTORY_COMMUNITIES, USER_INVENTORY_VERSION,
    UserInventory,
};

use super::media::exact_versions;
use super::{Eraser, ErasureError};
use crate::store::user::erasure::footprint::FoundCommunity;
use crate::taxonomy::derived_keys;
use crate::taxonomy::user_keys::{
    USER_KEY_SHAPES, community_of_user_key, user_key_scan_pattern, user_keys_everywhere_pattern,
};

/// Undeclared keys a refusal names (the rest are counted).
const UNDECLARED_KEYS_NAMED: usize = 20;

/// The membership role of a community's owner.
pub(crate) const OWNER_ROLE: &str = "owner";

/// Why an inventory cannot be frozen although it was read.
#[derive(Debug, thiserror::Error)]
pub enum InventoryRefusal {
    /// Nothing of the user was found.
    #[error(
        "user {0} has no row in any declared tenant table (no membership, event, upload, agent, \
         allow-list entry): there is nothing to delete; check the key"
    )]
    NothingFound(String),
    /// More communities than one request may cover.
    #[error(
        "user {pubkey} has data in {found} communities; one request covers at most \
         {MAX_INVENTORY_COMMUNITIES}"
    )]
    TooManyCommunities {
        /// The user.
        pubkey: String,
        /// How many were found.
        found: usize,
    },
    /// Keys naming the user's prefix that match no declared per-user key shape: the erasure
    /// cannot tell whether they are the user's, so it refuses before anything is approved.
    #[error(
        "{found} Redis key(s) under user {pubkey}'s prefix match no declared per-user key shape \
         ({declared}): {named:?}. Delete them if they are stray, or, if the platform writes that \
         shape, declare it in store/src/taxonomy/user_keys.rs (docs/data-model.md, \
         \"Per-user Redis keys\"); then submit again"
    )]
    UndeclaredUserKeys {
        /// The user.
        pubkey: String,
        /// How many keys matched no shape.
        found: u64,
        /// The first of them, sorted.
        named: Vec<String>,
        /// The declared shapes, spelled out.
        declared: String,
    },
}

impl crate::failure::Classified for InventoryRefusal {
    fn severity(&self) -> crate::failure::Severity {
        crate::failure::Severity::Permanent
    }
}

/// Takes the inventory of `target` (`user:<pubkey>`, already validated).
pub async fn take_inventory(
    eraser: &Eraser,
    target: &str,
    pubkey: &str,
) -> Result<Result<UserInventory, InventoryRefusal>, ErasureError> {
    let keyed = match communities_with_user_keys(eraser, pubkey).await? {
        Ok(keyed) => keyed,
        Err(UndeclaredKeys { found, named }) => {
            return Ok(Err(InventoryRefusal::UndeclaredUserKeys {
                pubkey: pubkey.to_owned(),
                found,
                named,
                declared: USER_KEY_SHAPES
                    .iter()
                    .map(|shape| shape.spelled())
                    .collect::<Vec<_>>()
                    .join(", "),
            }));
        }
    };
    let scan = eraser.store.user_footprint(pubkey, &keyed).await?;
    if scan.communities.is_empty() {
        return Ok(Err(InventoryRefusal::NothingFound(pubkey.to_owned())));
    }
    if scan.communities.len() > MAX_INVENTORY_COMMUNITIES {
        return Ok(Err(InventoryRefusal::TooManyCommunities {
            pubkey: pubkey.to_owned(),
            found: scan.communities.len(),
        }));
    }
    let mut communities = Vec::with_capacity(scan.communities.len());
    for found in scan.communities {
        communities.push(inventory_community(eraser, pubkey, found).await?);
    }
    communities.sort_by(|a, b| {
        let rank = |c: &InventoryCommunity| c.role != CommunityRole::Participant;
        let host = |c: &InventoryCommunity| c.footprint.as_ref().map(|f| f.host.clone());
        (rank(a), host(a), a.community_id).cmp(&(rank(b), host(b), b.community_id))
    });
    Ok(Ok(UserInventory {
        version: USER_INVENTORY_VERSION,
        target: target.to_owned(),
        communities,
        declarations: scan
            .declarations
            .into_iter()
            .map(|d| DeclaredTable {
                table: d.table,
                column: d.user_column,
            })
            .collect(),
    }))
}

/// Keys naming a user's prefix that match no declared per-user key shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UndeclaredKeys {
    /// How many.
    pub found: u64,
    /// The first [`UNDECLARED_KEYS_NAMED`] of them, sorted.
    pub named: Vec<String>,
}

/// Communities whose namespace holds a key of the user, found with one SCAN over every
/// namespace (a user may have keys where no row is left), or the keys under the user's prefix
/// that match no declared shape.
pub(crate) async fn communities_with_user_keys(
    eraser: &Eraser,
    pubkey: &str,
) -> Result<Result<BTreeSet<Uuid>, UndeclaredKeys>, ErasureError> {
    let mut found = BTreeSet::new();
    let mut undeclared = BTreeSet::new();
    let mut undeclared_count = 0u64;
    eraser
        .cache
        .for_each_matching(
            &user_keys_everywhere_pattern(pubkey),
            |key| match community_of_user_key(key, pubkey) {
                Some(community) => {
                    found.insert(community);
                }
                None => {
                    undeclared_count += 1;
                    undeclared.insert(key.to_owned());
                    if undeclared.len() > UNDECLARED_KEYS_NAMED {
                        undeclared.pop_last();
                    }
                }
            },
        )
        .await?;
    if undeclared_count > 0 {
        return Ok(Err(UndeclaredKeys {
            found: undeclared_count,
            named: undeclared.into_iter().collect(),
        }));
    }
    Ok(Ok(found))
}

/// How many of the objects derived from `media_keys` (thumbnails, metadata documents) have at
/// least one version. A key of unknown shape derives nothing here; the purge refuses it.
async fn count_derived_objects(
    eraser: &Eraser,
    media_keys: &[String],
) -> Result<u64, ErasureError> {
    let mut present = 0u64;
    for derived in media_keys.iter().filter_map(|key| derived_keys(key)) {
        for key in &derived {
            if !exact_versions(eraser, key).await?.is_empty() {
                present += 1;
            }
        }
    }
    Ok(present)
}

/// One community's entry: role, and the footprint with its Redis counts.
async fn inventory_community(
    eraser: &Eraser,
    pubkey: &str,
    found: FoundCommunity,
) -> Result<InventoryCommunity, ErasureError> {
    let user_keys = eraser
        .cache
        .count_matching(&user_key_scan_pattern(found.community_id, pubkey))
        .await?;
    let media_keys = eraser
        .store
        .user_uploaded_objects(found.community_id, pubkey)
        .await?;
    let derived_objects = count_derived_objects(eraser, &media_keys).await?;
    let mut agent_keys = 0u64;
    for agent in &found.agent_ids {
        agent_keys = agent_keys.saturating_add(
            eraser
                .cache
                .count_matching(&agent_key_pattern(found.community_id, *agent))
                .await?,
        );
    }
    let owner = found.member_role.as_deref() == Some(OWNER_ROLE);
    Ok(InventoryCommunity {
        community_id: found.community_id,
        role: match found.member_role {
            Some(_) => CommunityRole::Participant,
            None => CommunityRole::FormerParticipant,
        },
        footprint: Some(CommunityFootprint {
            host: found.host.unwrap_or_default(),
            rows: found.rows,
            media_objects: found.media_objects,
            derived_objects: Some(derived_objects),
            agents: u64::try_from(found.agent_ids.len()).unwrap_or(u64::MAX),
            user_keys,
            agent_keys,
            owner,
            other_members: found.other_members,
        }),
    })
}
