//! The frozen inventory of a user deletion: which communities it covers, in which order.
//!
//! A `demo:` target's inventory (version 1) is artificial and fixed — B, where the user
//! participates, then C, where they used to — so the orchestration can be exercised end to end
//! without touching any real account. A `user:` target's (version 2) is discovered by
//! `user.take_inventory` and also carries the user-data declarations it was taken under and the
//! user's footprint in each community; the digest covers all of it.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

pub use super::footprint::{CommunityFootprint, DeclaredTable};
pub use super::target::{
    DEMO_TARGET_PREFIX, MAX_TARGET_LEN, TargetError, UserTarget, parse_target,
};

/// Most communities one inventory may list; a resource limit of reconstruction, not a demo shape.
pub const MAX_INVENTORY_COMMUNITIES: usize = 1_000;
/// Version of the demo inventory's encoding and of the stage rules that read it.
pub const INVENTORY_VERSION: u32 = 1;
/// Version of a real user's inventory: the demo encoding plus the user-data declarations it was
/// taken under and each community's footprint.
pub const USER_INVENTORY_VERSION: u32 = 2;
/// Communities of a demo inventory when the submitter asks for no other size: B, then C.
pub const DEFAULT_DEMO_COMMUNITIES: u32 = 2;

/// Community B of the demo inventory: the user participates in it.
pub const DEMO_PARTICIPANT_COMMUNITY: Uuid = Uuid::from_u128(0xb);
/// Community C of the demo inventory: the user used to participate in it.
pub const DEMO_FORMER_PARTICIPANT_COMMUNITY: Uuid = Uuid::from_u128(0xc);

/// How the user relates to a community of the inventory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommunityRole {
    /// The user is a member today.
    Participant,
    /// The user left but left data behind.
    FormerParticipant,
}

impl CommunityRole {
    /// The stable name used in the canonical encoding and in stage inputs.
    pub fn as_str(self) -> &'static str {
        match self {
            CommunityRole::Participant => "participant",
            CommunityRole::FormerParticipant => "former_participant",
        }
    }
}

/// One community of the inventory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InventoryCommunity {
    /// The community (lowercase hyphenated UUID when printed).
    pub community_id: Uuid,
    /// How the user relates to it.
    pub role: CommunityRole,
    /// What of the user it holds (a real user's inventory only; a demo inventory has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footprint: Option<CommunityFootprint>,
}

/// The inventory frozen at submission; approval names its digest, and the stage policy visits
/// its communities in this order. Unknown fields are refused when it is read back: the digest
/// covers only the fields above, so a field it does not cover must not be silently accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserInventory {
    /// Encoding and rule version (see [`INVENTORY_VERSION`]).
    pub version: u32,
    /// The user being deleted, e.g. `demo:alice`.
    pub target: String,
    /// Communities in the order they are purged.
    pub communities: Vec<InventoryCommunity>,
    /// The user-data declarations the inventory was taken under (a real user's inventory only):
    /// the purge refuses to run under different ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub declarations: Vec<DeclaredTable>,
}

/// Checks that `target` is an acceptable `demo:` target.
pub fn validate_demo_target(target: &str) -> Result<(), TargetError> {
    match parse_target(target)? {
        UserTarget::Demo { .. } => Ok(()),
        UserTarget::User { .. } => Err(TargetError::UnknownKind(target.to_string())),
    }
}

impl UserInventory {
    /// The artificial inventory of a demo target: B (participant), then C (former participant).
    pub fn demo(target: &str) -> Result<Self, TargetError> {
        Self::demo_sized(target, DEFAULT_DEMO_COMMUNITIES)
    }

    /// An artificial inventory of `communities` communities (`user submit --demo-communities N`):
    /// B, then C, then further generated communities (see [`demo_community`]). Two communities is
    /// exactly [`UserInventory::demo`]. The digest covers every community, so the size approved is
    /// the size run.
    pub fn demo_sized(target: &str, communities: u32) -> Result<Self, TargetError> {
        validate_demo_target(target)?;
        if communities == 0 || communities as usize > MAX_INVENTORY_COMMUNITIES {
            return Err(TargetError::CommunityCount(communities));
        }
        Ok(UserInventory {
            version: INVENTORY_VERSION,
            target: target.to_string(),
            communities: (0..communities).map(demo_community).collect(),
            declarations: Vec::new(),
        })
    }

    /// sha256 (lowercase hex) over the canonical encoding: one line per field, communities in
    /// inventory order. Independent of serde field order, so a reformatted JSON copy of the same
    /// inventory has the same digest and any reordering of communities changes it.
    pub fn digest(&self) -> String {
        let mut canonical = format!(
            "buzz-user-inventory\nversion={}\ntarget={}\n",
            self.version, self.target
        );
        for declaration in &self.declarations {
            canonical.push_str(&declaration.canonical_line());
        }
        for community in &self.communities {
            canonical.push_str(&format!(
                "community={} role={}\n",
                community.community_id.hyphenated(),
                community.role.as_str()
            ));
            if let Some(footprint) = &community.footprint {
                canonical.push_str(&footprint.canonical_lines());
            }
        }
        hex::encode(Sha256::digest(canonical.as_bytes()))
    }

    /// What makes this inventory unfit to be frozen or run, if anything. A demo inventory
    /// (version 1) has a `demo:` target and no footprint or declarations. A real user's (version
    /// 2) has a `user:` target, the declarations it was taken under and a footprint for every
    /// community. Either lists between one and [`MAX_INVENTORY_COMMUNITIES`] distinct communities.
    pub fn shape_problem(&self) -> Option<String> {
        let real = match parse_target(&self.target) {
            Ok(UserTarget::Demo { .. }) => false,
            Ok(UserTarget::User { .. }) => true,
            Err(refusal) => return Some(refusal.to_string()),
        };
        let distinct: std::collections::BTreeSet<Uuid> =
            self.communities.iter().map(|c| c.community_id).collect();
        if distinct.len() != self.communities.len() {
            return Some("it lists a community twice".into());
        }
        if self.communities.is_empty() || self.communities.len() > MAX_INVENTORY_COMMUNITIES {
            return Some(format!(
                "it lists {} communities; an inventory lists 1 to {MAX_INVENTORY_COMMUNITIES}",
                self.communities.len()
            ));
        }
        let footprints = self
            .communities
            .iter()
            .filter(|c| c.footprint.is_some())
            .count();
        match (real, self.version) {
            (false, INVENTORY_VERSION) if footprints == 0 && self.declarations.is_empty() => None,
            (false, INVENTORY_VERSION) => {
                Some("a demo inventory carries no footprint or declarations".into())
            }
            (true, USER_INVENTORY_VERSION)
                if footprints == self.communities.len() && !self.declarations.is_empty() =>
            {
                None
            }
            (true, USER_INVENTORY_VERSION) => Some(
                "a user inventory needs the declarations it was taken under and a footprint for                  every community"
                    .into(),
            ),
            (real, version) => Some(format!(
                "version {version} is not the version of a {} inventory",
                if real { "user" } else { "demo" }
            )),
        }
    }

    /// The community entry for `community_id`, if the inventory lists it.
    pub fn community(&self, community_id: Uuid) -> Option<&InventoryCommunity> {
        self.communities
            .iter()
            .find(|c| c.community_id == community_id)
    }
}

/// Community `index` of a demo inventory: B (participant), C (former participant), then
/// `00000000-0000-0000-0000-0001000000NN`, participant at even and former participant at odd
/// indexes.
pub fn demo_community(index: u32) -> InventoryCommunity {
    match index {
        0 => InventoryCommunity {
            community_id: DEMO_PARTICIPANT_COMMUNITY,
            role: CommunityRole::Participant,
            footprint: None,
        },
        1 => InventoryCommunity {
            community_id: DEMO_FORMER_PARTICIPANT_COMMUNITY,
            role: CommunityRole::FormerParticipant,
            footprint: None,
        },
        n => InventoryCommunity {
            community_id: Uuid::from_u128(0x1_0000_0000 + u128::from(n)),
            role: if n % 2 == 0 {
                CommunityRole::Participant
            } else {
                CommunityRole::FormerParticipant
            },
            footprint: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_inventory_lists_participant_b_then_former_participant_c() {
        let inventory = UserInventory::demo("demo:alice").unwrap();
        let ids: Vec<String> = inventory
            .communities
            .iter()
            .map(|c| c.community_id.to_string())
            .collect();
        assert_eq!(
            ids,
            [
                "00000000-0000-0000-0000-00000000000b",
                "00000000-0000-0000-0000-00000000000c"
            ]
        );
        assert_eq!(inventory.communities[0].role, CommunityRole::Participant);
        assert_eq!(
            inventory.communities[1].role,
            CommunityRole::FormerParticipant
        );
    }

    #[test]
    fn non_demo_targets_are_refused() {
        assert_eq!(
            UserInventory::demo("npub1realuser"),
            Err(TargetError::UnknownKind("npub1realuser".into()))
        );
        assert_eq!(UserInventory::demo("demo:"), Err(TargetError::EmptyName));
        assert!(matches!(
            UserInventory::demo("demo:a b"),
            Err(TargetError::Malformed(_))
        ));
    }

    #[test]
    fn digest_is_stable_per_target_and_changes_with_order_or_target() {
        let a = UserInventory::demo("demo:alice").unwrap();
        assert_eq!(
            a.digest(),
            UserInventory::demo("demo:alice").unwrap().digest()
        );
        assert_eq!(a.digest().len(), 64);
        assert_ne!(
            a.digest(),
            UserInventory::demo("demo:bob").unwrap().digest()
        );
        let mut reordered = a.clone();
        reordered.communities.reverse();
        assert_ne!(a.digest(), reordered.digest());
    }

    #[test]
    fn sized_demo_inventories_extend_b_and_c_and_stop_at_the_limit() {
        let two = UserInventory::demo_sized("demo:alice", 2).unwrap();
        assert_eq!(two, UserInventory::demo("demo:alice").unwrap());
        let big = UserInventory::demo_sized("demo:alice", 1_000).unwrap();
        assert_eq!(big.communities.len(), 1_000);
        assert_eq!(big.communities[..2], two.communities[..]);
        let distinct: std::collections::BTreeSet<Uuid> =
            big.communities.iter().map(|c| c.community_id).collect();
        assert_eq!(distinct.len(), 1_000, "every community is listed once");
        assert_ne!(big.digest(), two.digest(), "the digest covers the size");
        assert_eq!(
            UserInventory::demo_sized("demo:alice", 1_001),
            Err(TargetError::CommunityCount(1_001))
        );
        assert_eq!(
            UserInventory::demo_sized("demo:alice", 0),
            Err(TargetError::CommunityCount(0))
        );
    }
}
