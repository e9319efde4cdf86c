//! Verification of one community after its purge: no row of the user left in the declared
//! tables the stage covers, no version left of an object only the user referenced, no key left
//! in the user's (or their agents') namespaces — each proven by reading, not by counting what was
//! deleted. A failure names what is left; the stage fails and a later run purges it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use uuid::Uuid;
use workflows::user::footprint::{AGENTS_TABLE, DeclaredTable};
use workflows::user::inventory::UserInventory;

use super::media::exact_versions;
use super::{Eraser, ErasureError, HandlerRun};
use crate::redis::CacheError;
use crate::store::user::erasure::PurgeLogKind;
use crate::store::user::erasure::media::MediaDecisionKind;
use crate::taxonomy::user_keys::user_key_scan_pattern;

/// What the verification read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verified {
    /// Rows of the user left per declared table (the tables the stage does not cover included,
    /// for the record).
    pub rows_left: BTreeMap<String, u64>,
    /// Agents rows of the user left.
    pub agents_left: u64,
    /// Objects decided `delete` that were checked (media objects and the objects derived from
    /// them).
    pub objects_checked: u64,
    /// Namespaces proven empty.
    pub namespaces_checked: Vec<String>,
}

impl Verified {
    /// The summary saved in the stage result.
    pub fn summary(&self) -> Value {
        json!({
            "rows_left": self.rows_left,
            "deleted_objects_checked": self.objects_checked,
            "object_versions_left": 0,
            "namespaces_proven_empty": self.namespaces_checked,
        })
    }
}

/// Refuses to purge under declarations other than the approved inventory's.
pub(crate) async fn require_declarations_unchanged(
    eraser: &Eraser,
    inventory: &UserInventory,
) -> Result<(), ErasureError> {
    let now: Vec<DeclaredTable> = eraser
        .store
        .user_data_declarations()
        .await?
        .into_iter()
        .map(|d| DeclaredTable {
            table: d.table,
            column: d.user_column,
        })
        .collect();
    if now == inventory.declarations {
        return Ok(());
    }
    let describe =
        |d: &DeclaredTable| format!("{}:{}", d.table, d.column.as_deref().unwrap_or("none"));
    let added: Vec<String> = now
        .iter()
        .filter(|d| !inventory.declarations.contains(d))
        .map(describe)
        .collect();
    let removed: Vec<String> = inventory
        .declarations
        .iter()
        .filter(|d| !now.contains(d))
        .map(describe)
        .collect();
    Err(ErasureError::DeclarationsChanged {
        change: format!("now declared: {added:?}; no longer declared: {removed:?}"),
    })
}

/// Verifies `community_id` after a purge that covered every declared table but `uncovered`.
/// With `AGENTS_TABLE` covered, the agents' namespaces logged by `purge_agents` are proven
/// empty too.
pub(crate) async fn verify_community(
    eraser: &Eraser,
    run: &HandlerRun<'_>,
    community_id: Uuid,
    uncovered: &[&str],
) -> Result<Verified, ErasureError> {
    let not_verified = |what: String| ErasureError::NotVerified { community_id, what };
    let rows_left = eraser
        .store
        .user_rows_left(community_id, run.pubkey)
        .await?;
    let left: Vec<String> = rows_left
        .iter()
        .filter(|(table, rows)| **rows > 0 && !uncovered.contains(&table.as_str()))
        .map(|(table, rows)| format!("{rows} row(s) in {table}"))
        .collect();
    if !left.is_empty() {
        return Err(not_verified(left.join(", ")));
    }
    run.beat("verify", 0).await?;

    let mut objects_checked = 0u64;
    for decision in eraser
        .store
        .media_decisions(run.attempt.request_id, community_id)
        .await?
        .into_iter()
        .filter(|d| d.decision == MediaDecisionKind::Delete)
    {
        // The media object and the objects derived from it that the decision covers.
        let keys: BTreeSet<&str> = std::iter::once(decision.object_key.as_str())
            .chain(decision.versions.iter().map(|v| v.key.as_str()))
            .collect();
        for key in keys {
            let now = exact_versions(eraser, key).await?;
            if let Some(left) = decision.versions.iter().find(|v| now.contains(v)) {
                return Err(not_verified(format!(
                    "version {} of object {} is still there",
                    left.version_id, left.key
                )));
            }
            objects_checked += 1;
        }
    }

    let mut namespaces = vec![user_key_scan_pattern(community_id, run.pubkey)];
    if !uncovered.contains(&AGENTS_TABLE) {
        namespaces.extend(
            eraser
                .store
                .erased_subjects(
                    run.attempt.request_id,
                    community_id,
                    PurgeLogKind::AgentKeys,
                )
                .await?,
        );
    }
    for pattern in &namespaces {
        match eraser.cache.verify_absent_matching(pattern).await {
            Ok(()) => {}
            Err(CacheError::KeyStillPresent { key }) => {
                return Err(not_verified(format!("Redis key {key} is still there")));
            }
            Err(other) => return Err(other.into()),
        }
    }
    let agents_left = rows_left.get(AGENTS_TABLE).copied().unwrap_or(0);
    Ok(Verified {
        rows_left,
        agents_left,
        objects_checked,
        namespaces_checked: namespaces,
    })
}
