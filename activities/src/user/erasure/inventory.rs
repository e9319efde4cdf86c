//! A real user's inventory: the declarations, then every community holding data of the user
//! (members today first, then former participants, each by host), with the footprint the
//! approval will name. Read-only.

use std::collections::BTreeSet;

use uuid::Uuid;
use workflows::user::footprint::{
    CommunityFootprint, DeclaredTable, agent_key_pattern, user_key_pattern,
};
use workflows::user::inventory::{
    CommunityRole, InventoryCommunity, MAX_INVENTORY_COMMUNITIES, USER_INVENTORY_VERSION,
    UserInventory,
};

use super::{Eraser, ErasureError};
use crate::store::erasure::footprint::FoundCommunity;

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
    let keyed = communities_with_user_keys(eraser, pubkey).await?;
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

/// Communities whose namespace holds a key of the user (`buzz:{community}:user:{pubkey}:*`),
/// found with one SCAN over every namespace: a user may have keys where no row is left.
pub(crate) async fn communities_with_user_keys(
    eraser: &Eraser,
    pubkey: &str,
) -> Result<BTreeSet<Uuid>, ErasureError> {
    let mut found = BTreeSet::new();
    eraser
        .cache
        .for_each_matching(&format!("buzz:*:user:{pubkey}:*"), |key| {
            if let Some(community) = community_of_user_key(key, pubkey) {
                found.insert(community);
            }
        })
        .await?;
    Ok(found)
}

/// The community of a key `buzz:{community}:user:{pubkey}:…`, when it has exactly that shape
/// (the community id written as the relay writes it: lowercase and hyphenated).
fn community_of_user_key(key: &str, pubkey: &str) -> Option<Uuid> {
    let (segment, rest) = key.strip_prefix("buzz:")?.split_once(':')?;
    let community = Uuid::parse_str(segment).ok()?;
    let canonical = community.hyphenated().to_string() == segment;
    (canonical && rest.starts_with(&format!("user:{pubkey}:"))).then_some(community)
}

/// One community's entry: role, and the footprint with its Redis counts.
async fn inventory_community(
    eraser: &Eraser,
    pubkey: &str,
    found: FoundCommunity,
) -> Result<InventoryCommunity, ErasureError> {
    let user_keys = eraser
        .cache
        .count_matching(&user_key_pattern(found.community_id, pubkey))
        .await?;
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
            agents: u64::try_from(found.agent_ids.len()).unwrap_or(u64::MAX),
            user_keys,
            agent_keys,
            owner,
            other_members: found.other_members,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_user_keys_name_a_community() {
        let key = "ab".repeat(32);
        let c = "00000000-0000-0000-0000-000000000abc";
        assert_eq!(
            community_of_user_key(&format!("buzz:{c}:user:{key}:session"), &key),
            Some(Uuid::from_u128(0xabc))
        );
        // Upper-case or unhyphenated ids are not the namespace the relay writes.
        let upper = c.to_uppercase();
        assert_eq!(
            community_of_user_key(&format!("buzz:{upper}:user:{key}:s"), &key),
            None
        );
        assert_eq!(
            community_of_user_key(&format!("buzz:{}:user:{key}:s", c.replace('-', "")), &key),
            None
        );
        assert_eq!(
            community_of_user_key(&format!("buzz:{c}:users:{key}:s"), &key),
            None
        );
        assert_eq!(
            community_of_user_key(&format!("buzz:not-a-uuid:user:{key}:s"), &key),
            None
        );
    }
}
