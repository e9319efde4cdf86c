//! What a real user's inventory records beyond the demo's: the user-data declarations it was
//! taken under, and per community the user's footprint (rows per declared table, media objects,
//! agents and Redis keys). Both are covered by the inventory digest, so the approval names them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The tenant table whose rows are the user's agents: `purge_db` leaves them to `purge_agents`.
pub const AGENTS_TABLE: &str = "buzz.agents";

/// One tenant table's declaration of where user data is found in it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredTable {
    /// Root table, `schema.name`.
    pub table: String,
    /// The text column holding the pubkey of the user a row belongs to; `None` when the table
    /// declares that it holds no user data.
    pub column: Option<String>,
}

impl DeclaredTable {
    /// The line of the canonical inventory encoding. Names are quoted and escaped, so a table
    /// name holding a newline cannot forge another line.
    pub fn canonical_line(&self) -> String {
        format!(
            "declaration table={:?} column={:?}\n",
            self.table, self.column
        )
    }
}

/// The user's footprint in one community, as found when the inventory was taken. Counts are a
/// snapshot: the user may still write until the gate fences them, and the purge removes
/// everything attributed to them at that point, not only what was counted here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommunityFootprint {
    /// The community's host.
    pub host: String,
    /// The user's rows per declared table (every table that declares a column, zeros included,
    /// so the approval shows which tables were looked at).
    pub rows: BTreeMap<String, u64>,
    /// Distinct media objects (keys) the user uploaded in the community.
    pub media_objects: u64,
    /// Objects the relay derived from those media objects (thumbnails `thumbs/{c}/{h}.webp`,
    /// metadata documents `_meta/{c}/{h}.json`) found with at least one version. Erased with
    /// their media object, kept with it when it is shared. Absent from inventories taken before
    /// derived objects were counted (their digest did not cover it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derived_objects: Option<u64>,
    /// Agents acting for the user in the community.
    pub agents: u64,
    /// The user's keys in the community's namespace: every declared per-user shape under
    /// `buzz:{community}:user:{pubkey}`, the bare profile key included.
    pub user_keys: u64,
    /// Keys of the namespaces of the user's agents, `buzz:{community}:agent:{agent id}:*`.
    pub agent_keys: u64,
    /// The user owns the community (membership role `owner`).
    pub owner: bool,
    /// Members of the community other than the user.
    pub other_members: u64,
}

impl CommunityFootprint {
    /// The lines of the canonical inventory encoding.
    pub fn canonical_lines(&self) -> String {
        let mut lines = format!("footprint host={:?}\n", self.host);
        for (table, rows) in &self.rows {
            lines.push_str(&format!("rows table={table:?} count={rows}\n"));
        }
        lines.push_str(&format!(
            "media_objects={} agents={} user_keys={} agent_keys={} owner={} other_members={}\n",
            self.media_objects,
            self.agents,
            self.user_keys,
            self.agent_keys,
            self.owner,
            self.other_members
        ));
        if let Some(derived) = self.derived_objects {
            lines.push_str(&format!("derived_objects={derived}\n"));
        }
        lines
    }

    /// Total rows of the user found in the community.
    pub fn total_rows(&self) -> u64 {
        self.rows
            .values()
            .fold(0u64, |sum, n| sum.saturating_add(*n))
    }
}

/// The SCAN pattern of one agent's keys: `buzz:{community}:agent:{agent}:*`.
pub fn agent_key_pattern(community: Uuid, agent: Uuid) -> String {
    format!(
        "buzz:{}:agent:{}:*",
        community.hyphenated(),
        agent.hyphenated()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_key_pattern_stays_inside_the_community_namespace() {
        let c = Uuid::from_u128(7);
        assert_eq!(
            agent_key_pattern(c, Uuid::from_u128(9)),
            "buzz:00000000-0000-0000-0000-000000000007:agent:00000000-0000-0000-0000-000000000009:*"
        );
    }

    #[test]
    fn canonical_lines_cover_every_count() {
        let mut footprint = CommunityFootprint {
            host: "a.example".into(),
            rows: BTreeMap::from([("buzz.events".into(), 3)]),
            media_objects: 1,
            derived_objects: Some(2),
            agents: 0,
            user_keys: 2,
            agent_keys: 0,
            owner: false,
            other_members: 4,
        };
        let before = footprint.canonical_lines();
        footprint.user_keys = 3;
        assert_ne!(before, footprint.canonical_lines());
        let before = footprint.canonical_lines();
        footprint.derived_objects = Some(1);
        assert_ne!(before, footprint.canonical_lines());
        // An inventory taken before derived objects were counted keeps its digest.
        footprint.derived_objects = None;
        assert!(!footprint.canonical_lines().contains("derived_objects"));
        assert_eq!(footprint.total_rows(), 3);
    }
}
