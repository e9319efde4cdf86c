//! What a community deletion's receipt states, read from the append-only evidence only (the
//! request's frozen inventory and digests, its closed world's relations included; its approval,
//! stage checkpoints and milestones, stamped manifest chunks, purge counts and the chained audit
//! trail), so `certificate audit` can derive the same receipt again later and any rewrite of
//! that evidence shows up as a difference.

use futures::TryStreamExt;

use certificate::canonical::timestamp;
use certificate::chain::ChainHead;
use certificate::receipt::{
    ChunkStamp, DeclarationFacts, Generations, InventoriedRelation, InventoryFacts, ManifestFacts,
    PurgeFacts, Receipt, ReceiptKind, StageReached, StampFold, Subject, TableRows,
};
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::error::{CertificateResult, CertificateStoreError};
use super::facts::{Signing, StampForm, approval_facts, count, stages_reached};
use crate::community::scope_verification::SCOPE_VERIFIED;

/// The receipt of community request `request_id`, as of its evidence, stating `audit_chain`
/// as the trail it covers, as `signing` states it (key, time, the manifest's form).
pub(crate) async fn community_receipt(
    conn: &mut PgConnection,
    request_id: Uuid,
    audit_chain: ChainHead,
    signing: Signing<'_>,
) -> CertificateResult<Receipt> {
    let Signing {
        key_id,
        signed_at,
        form,
    } = signing;
    let request: RequestFacts = sqlx::query_as(
        "SELECT community_id, host, requested_by, created_at, inventory, inventory_digest, \
         destructive_manifest_digest FROM deletion.requests WHERE id = $1 AND kind = 'community'",
    )
    .bind(request_id)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or_else(|| CertificateStoreError::certificate("community request", "not found"))?;
    let community_id = request
        .community_id
        .ok_or_else(|| CertificateStoreError::certificate("community request", "no community"))?;
    let stages = stages_reached(conn, request_id).await?;
    let checkpoint = |stage: &str| {
        stages
            .iter()
            .find(|(name, _, _, _)| name == stage)
            .map(|(_, _, generation, detail)| (*generation, detail.clone()))
    };
    let (completed_generation, _) = checkpoint("retention_pending").ok_or_else(|| {
        CertificateStoreError::certificate("community receipt", "retention_pending not reached")
    })?;
    let completed_at = stages
        .iter()
        .find(|(name, _, _, _)| name == "retention_pending")
        .map(|(_, at, _, _)| timestamp(*at))
        .unwrap_or_default();
    let fence_generation = checkpoint("fenced")
        .and_then(|(_, detail)| detail.get("fence_generation").and_then(|v| v.as_u64()));
    let keys_purged = checkpoint("cache_purged")
        .and_then(|(_, detail)| detail.get("keys_unlinked").and_then(|v| v.as_u64()))
        .unwrap_or(0);
    let verification = verification_facts(
        checkpoint("logically_verified").map(|(_, detail)| detail),
        checkpoint(SCOPE_VERIFIED).map(|(_, detail)| detail),
    );
    let inventory = inventory_facts(
        request.inventory.as_ref().map(|json| &json.0),
        request.inventory_digest.clone().unwrap_or_default(),
    );
    Ok(Receipt {
        format: form.format().to_owned(),
        request_id,
        kind: ReceiptKind::Community,
        subject: Subject::Community {
            community_id,
            host: request.host.unwrap_or_default(),
        },
        requested_by: request.requested_by,
        requested_at: timestamp(request.created_at),
        approval: approval_facts(conn, request_id).await?,
        inventory,
        manifest: manifest_facts(
            conn,
            request_id,
            request.destructive_manifest_digest.unwrap_or_default(),
            form,
        )
        .await?,
        purge: purge_facts(
            conn,
            request_id,
            checkpoint("postgres_purged").map(|(_, detail)| detail),
            keys_purged,
        )
        .await?,
        generations: Generations {
            fence_generation,
            exec_generation: count(completed_generation),
        },
        verification,
        stages: stages
            .iter()
            .map(|(stage, at, _, _)| StageReached {
                stage: stage.clone(),
                reached_at: timestamp(*at),
            })
            .collect(),
        audit_chain,
        completed_at,
        key_id: key_id.to_owned(),
        signed_at: timestamp(signed_at),
    })
}

#[derive(sqlx::FromRow)]
struct RequestFacts {
    community_id: Option<Uuid>,
    host: Option<String>,
    requested_by: String,
    created_at: DateTime<Utc>,
    inventory: Option<sqlx::types::Json<serde_json::Value>>,
    inventory_digest: Option<String>,
    destructive_manifest_digest: Option<String>,
}

/// The verification report as recorded at `logically_verified`, with the relations the scope
/// verification found empty (its `scope_verified` milestone, when recorded) as `relations`.
fn verification_facts(
    report: Option<serde_json::Value>,
    scope: Option<serde_json::Value>,
) -> serde_json::Value {
    let mut report = report.unwrap_or_else(|| serde_json::json!({}));
    let relations = scope.and_then(|detail| detail.get("relations").cloned());
    if let (Some(object), Some(relations)) = (report.as_object_mut(), relations) {
        object.insert("relations".to_owned(), relations);
    }
    report
}

/// The frozen inventory's counts (`FrozenInventory` as stored: catalog row counts, prefixes,
/// Redis keys, multipart uploads) and the relations of its closed world, when it recorded one.
fn inventory_facts(inventory: Option<&serde_json::Value>, digest: String) -> InventoryFacts {
    let empty = serde_json::Value::Null;
    let inventory = inventory.unwrap_or(&empty);
    let list = |value: &serde_json::Value| value.as_array().cloned().unwrap_or_default();
    let number = |value: &serde_json::Value, field: &str| {
        value.get(field).and_then(|v| v.as_u64()).unwrap_or(0)
    };
    let text = |value: &serde_json::Value, field: &str| {
        value[field].as_str().unwrap_or_default().to_owned()
    };
    let mut tables: Vec<TableRows> = list(&inventory["catalog"]["row_counts"])
        .iter()
        .map(|row| TableRows {
            table: row["table"].as_str().unwrap_or_default().to_owned(),
            rows: number(row, "rows"),
        })
        .collect();
    tables.sort_by(|a, b| a.table.cmp(&b.table));
    let prefixes = list(&inventory["prefixes"]);
    let relations = list(&inventory["catalog"]["closed_world"]["relations"])
        .iter()
        .map(|r| InventoriedRelation {
            relation: text(r, "relation"),
            oid: number(r, "oid"),
            role: text(r, "role"),
            root: text(r, "root"),
            relkind: text(r, "relkind"),
            tenant_column: r["tenant_column"].as_str().map(str::to_owned),
        })
        .collect();
    let mut declarations: Vec<DeclarationFacts> =
        list(&inventory["catalog"]["closed_world"]["declarations"])
            .iter()
            .map(|d| DeclarationFacts {
                object: text(d, "object"),
                declaration: text(d, "declaration"),
            })
            .collect();
    declarations.sort_by(|a, b| a.object.cmp(&b.object));
    InventoryFacts {
        digest,
        tables,
        object_versions: prefixes.iter().map(|p| number(p, "versions")).sum(),
        object_bytes: prefixes.iter().map(|p| number(p, "bytes")).sum(),
        redis_keys: number(inventory, "redis_keys"),
        multipart_uploads: list(&inventory["uploads"])
            .iter()
            .map(|u| number(u, "uploads"))
            .sum(),
        relations,
        declarations,
    }
}

/// The manifest facts in `form`: v1 lists every chunk stamp, v2 folds them into their count and
/// Merkle root as they stream from the database, so a receipt of any size is built in the same
/// memory.
async fn manifest_facts(
    conn: &mut PgConnection,
    request_id: Uuid,
    digest: String,
    form: StampForm,
) -> CertificateResult<ManifestFacts> {
    match form {
        StampForm::Listed => Ok(ManifestFacts::listed(
            digest,
            chunk_stamps(conn, request_id).await?,
        )),
        StampForm::Rooted => {
            let mut fold = StampFold::new("/chunk_stamps");
            for_each_stamp(conn, request_id, |stamp| {
                fold.push(&stamp)
                    .map_err(|e| CertificateStoreError::certificate("a chunk stamp", e))
            })
            .await?;
            Ok(ManifestFacts::rooted(digest, &fold))
        }
    }
}

/// Every chunk stamp of `request_id`, in chunk order (what a v2 certificate carries beside its
/// receipt, and a v1 receipt lists).
pub(crate) async fn chunk_stamps(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> CertificateResult<Vec<ChunkStamp>> {
    let mut stamps = Vec::new();
    for_each_stamp(conn, request_id, |stamp| {
        stamps.push(stamp);
        Ok(())
    })
    .await?;
    Ok(stamps)
}

/// Streams every manifest chunk of `request_id` with its stamp, in chunk order, into `visit`
/// (one row at a time: a 10M-version tenant has 10,000 chunks). The per-chunk deleted /
/// already-missing split comes from the chunk's first `chunk_stamped` audit event (the chunk
/// row records their sum); a chunk without one counts its row's sum as deleted.
async fn for_each_stamp(
    conn: &mut PgConnection,
    request_id: Uuid,
    mut visit: impl FnMut(ChunkStamp) -> CertificateResult<()>,
) -> CertificateResult<()> {
    let mut rows = sqlx::query_as::<_, ChunkRow>(
        "SELECT c.chunk_no, c.prefix, c.entry_count, c.deleted_versions, c.deleted_at, \
         c.late_at IS NOT NULL AS late, s.chunk_no AS stamped, s.deleted, s.already_missing \
         FROM deletion.manifest_chunks c \
         LEFT JOIN ( \
           SELECT DISTINCT ON ((detail->>'chunk_no')::bigint) \
             (detail->>'chunk_no')::bigint AS chunk_no, \
             (detail->>'deleted')::bigint AS deleted, \
             (detail->>'already_missing')::bigint AS already_missing \
           FROM deletion.audit_events \
           WHERE request_id = $1 AND event = 'chunk_stamped' \
           ORDER BY (detail->>'chunk_no')::bigint, id \
         ) s ON s.chunk_no = c.chunk_no \
         WHERE c.request_id = $1 ORDER BY c.chunk_no",
    )
    .bind(request_id)
    .fetch(&mut *conn);
    while let Some(row) = rows.try_next().await? {
        let (versions_deleted, already_missing) = match row.stamped {
            Some(_) => (
                row.deleted.map_or(0, count),
                row.already_missing.map_or(0, count),
            ),
            None => (count(row.deleted_versions.unwrap_or(0)), 0),
        };
        visit(ChunkStamp {
            chunk_no: count(i64::from(row.chunk_no)),
            prefix: row.prefix,
            entries: count(i64::from(row.entry_count)),
            versions_deleted,
            already_missing,
            late: row.late,
            stamped_at: row.deleted_at.map(timestamp).unwrap_or_default(),
        })?;
    }
    Ok(())
}

/// One manifest chunk row with its stamp, and the split of its `chunk_stamped` event (all
/// three `None` when it has none).
#[derive(sqlx::FromRow)]
struct ChunkRow {
    chunk_no: i32,
    prefix: String,
    entry_count: i32,
    deleted_versions: Option<i64>,
    deleted_at: Option<DateTime<Utc>>,
    late: bool,
    stamped: Option<i64>,
    deleted: Option<i64>,
    already_missing: Option<i64>,
}

/// Rows purged per table, keys purged and multipart uploads aborted.
async fn purge_facts(
    conn: &mut PgConnection,
    request_id: Uuid,
    postgres_purged: Option<serde_json::Value>,
    redis_keys_purged: u64,
) -> CertificateResult<PurgeFacts> {
    // The counts as the purge's last transaction recorded them in the append-only
    // `postgres_purged` checkpoint, not the `purge_progress` counters (which the worker role
    // writes as the purge goes): nobody but the owner with the guards lifted can change them.
    let detail = postgres_purged.ok_or_else(|| {
        CertificateStoreError::certificate("community receipt", "postgres_purged not reached")
    })?;
    let tables = purged_tables(&detail)?;
    let aborted: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM deletion.audit_events WHERE request_id = $1 \
         AND event = 'upload_aborted' AND detail->>'outcome' = 'aborted'",
    )
    .bind(request_id)
    .fetch_one(&mut *conn)
    .await?;
    Ok(PurgeFacts {
        rows_total: tables.iter().map(|t| t.rows).sum(),
        tables,
        redis_keys_purged,
        multipart_uploads_aborted: count(aborted),
    })
}

/// The rows purged per table (sorted) as the `postgres_purged` checkpoint's `detail` records
/// them; a missing list, or a count without a table or below zero, is refused.
fn purged_tables(detail: &serde_json::Value) -> CertificateResult<Vec<TableRows>> {
    let mut rows: Vec<(String, i64)> = detail["tables"]
        .as_array()
        .ok_or_else(|| {
            CertificateStoreError::certificate(
                "community receipt",
                "the postgres_purged checkpoint records no table counts",
            )
        })?
        .iter()
        .map(|count| {
            (
                count["table"].as_str().unwrap_or_default().to_owned(),
                count["rows"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    if let Some((table, _)) = rows
        .iter()
        .find(|(table, rows)| table.is_empty() || *rows < 0)
    {
        return Err(CertificateStoreError::certificate(
            "community receipt",
            format!("the postgres_purged checkpoint records a malformed count ({table:?})"),
        ));
    }
    rows.sort();
    Ok(rows
        .into_iter()
        .map(|(table, rows)| TableRows {
            table,
            rows: count(rows),
        })
        .collect())
}
