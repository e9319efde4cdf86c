//! The outcome every variant must have: the target gone from all three stores, the neighbour
//! byte-identical.

use activities::taxonomy::tenant_prefixes;
use anyhow::Result;
use uuid::Uuid;

use crate::stack::Stack;

/// Everything a community holds, for before/after equality: the test kit's snapshot (rows,
/// every version with the bytes of every data version, unfinished uploads, Redis keys with values).
pub use testkit::snapshot::Snapshot;

/// Snapshots a community in all three stores.
pub async fn snapshot(stack: &Stack, community: Uuid) -> Result<Snapshot> {
    Snapshot::capture(&stack.store, &stack.objects, &stack.cache, community).await
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
