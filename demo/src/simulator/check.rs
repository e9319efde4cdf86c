//! Checks that every write a simulation admitted is still stored: the proof that a deletion next
//! door took nothing it did not own.

use std::collections::HashSet;

use serde::Serialize;

use activities::redis::Cache;
use activities::s3::{ObjectStore, ObjectVersionRef};
use activities::store::{Store, StoreError};
use activities::taxonomy::tenant_prefixes;

use super::SimulationError;
use super::report::{AdmittedRow, CommunityReport, RowTable};

/// Admitted writes that are no longer stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MissingWrites {
    /// Rows gone.
    pub rows: Vec<AdmittedRow>,
    /// Object versions gone.
    pub objects: Vec<ObjectVersionRef>,
    /// Redis keys gone.
    pub keys: Vec<String>,
}

impl MissingWrites {
    /// Whether every admitted write is present.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.objects.is_empty() && self.keys.is_empty()
    }
}

/// Lists the recorded admitted writes of `report` that are absent from the three stores. Reads
/// the community's whole prefixes and namespace: meant for tests and demos of small tenants.
/// Fails with [`SimulationError::NotRecorded`] if the run recorded no admitted writes.
pub async fn missing_admitted_writes(
    store: &Store,
    objects: &ObjectStore,
    cache: &Cache,
    report: &CommunityReport,
) -> Result<MissingWrites, SimulationError> {
    let admitted = report
        .admitted
        .as_ref()
        .ok_or_else(|| SimulationError::NotRecorded {
            host: report.host.clone(),
        })?;
    let community = report.community_id;

    let mut present_rows = HashSet::new();
    for (table, sql) in [
        (
            RowTable::Events,
            "SELECT id FROM buzz.events WHERE community_id = $1 AND id = ANY($2)",
        ),
        (
            RowTable::Memberships,
            "SELECT pubkey FROM buzz.memberships WHERE community_id = $1 AND pubkey = ANY($2)",
        ),
    ] {
        let wanted: Vec<&str> = admitted
            .rows
            .iter()
            .filter(|row| row.table == table)
            .map(|row| row.key.as_str())
            .collect();
        let found: Vec<String> = sqlx::query_scalar(sql)
            .bind(community)
            .bind(&wanted)
            .fetch_all(store.pool())
            .await
            .map_err(StoreError::from)?;
        present_rows.extend(found.into_iter().map(|key| (table, key)));
    }

    let mut present_versions = HashSet::new();
    for prefix in tenant_prefixes(community) {
        for version in objects.snapshot_prefix(&prefix).await? {
            present_versions.insert(version.version_ref());
        }
    }

    let present_keys: HashSet<String> = cache
        .snapshot_namespace(community)
        .await?
        .into_iter()
        .map(|(key, _)| key)
        .collect();

    Ok(MissingWrites {
        rows: admitted
            .rows
            .iter()
            .filter(|row| !present_rows.contains(&(row.table, row.key.clone())))
            .cloned()
            .collect(),
        objects: admitted
            .objects
            .iter()
            .filter(|version| !present_versions.contains(*version))
            .cloned()
            .collect(),
        keys: admitted
            .keys
            .iter()
            .filter(|key| !present_keys.contains(*key))
            .cloned()
            .collect(),
    })
}
