//! The outcome every variant must have: the target gone from all three stores, the neighbour
//! byte-identical.

use activities::objects::ObjectVersion;
use activities::store::TableSnapshot;
use activities::taxonomy::tenant_prefixes;
use anyhow::Result;
use uuid::Uuid;

use crate::stack::Stack;

/// Everything a community holds, for before/after equality.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommunitySnapshot {
    /// Rows per tenant table plus the community row, each as canonical JSON text.
    pub rows: Vec<TableSnapshot>,
    /// Every version and delete marker under its three prefixes.
    pub versions: Vec<ObjectVersion>,
    /// Every key with its DUMP serialization.
    pub keys: Vec<(String, Vec<u8>)>,
}

/// Snapshots a community in all three stores.
pub async fn snapshot(stack: &Stack, community: Uuid) -> Result<CommunitySnapshot> {
    let rows = stack.store.snapshot_rows(community).await?;
    let mut versions = Vec::new();
    for prefix in tenant_prefixes(community) {
        versions.extend(stack.objects.snapshot_prefix(&prefix).await?);
    }
    let keys = stack.cache.snapshot_namespace(community).await?;
    Ok(CommunitySnapshot {
        rows,
        versions,
        keys,
    })
}

/// What is left of a deleted target; all zero means gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Remains {
    /// Rows in tenant tables plus the community row.
    pub rows: u64,
    /// Prefixes still listing a version or delete marker.
    pub prefixes_not_empty: u64,
    /// Keys in the Redis namespace.
    pub keys: u64,
}

impl Remains {
    /// True when nothing of the target is left anywhere.
    pub fn is_empty(&self) -> bool {
        *self == Remains::default()
    }
}

/// Looks for anything of `community` left in the three stores.
pub async fn remains(stack: &Stack, community: Uuid) -> Result<Remains> {
    let rows = stack
        .store
        .count_community_rows(community)
        .await?
        .iter()
        .map(|t| t.rows)
        .sum();
    let mut prefixes_not_empty = 0;
    for prefix in tenant_prefixes(community) {
        if stack.objects.prefix_is_empty(&prefix).await?.is_some() {
            prefixes_not_empty += 1;
        }
    }
    let keys = stack.cache.count_namespace(community).await?;
    Ok(Remains {
        rows,
        prefixes_not_empty,
        keys,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_leftover_anywhere_means_not_gone() {
        assert!(Remains::default().is_empty());
        for left in [
            Remains {
                rows: 1,
                ..Remains::default()
            },
            Remains {
                prefixes_not_empty: 1,
                ..Remains::default()
            },
            Remains {
                keys: 1,
                ..Remains::default()
            },
        ] {
            assert!(!left.is_empty());
        }
    }
}
