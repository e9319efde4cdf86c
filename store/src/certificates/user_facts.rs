//! What a user deletion's receipt states. The target is personal data: the receipt carries only
//! a salted SHA-256 commitment to it (`certificate::receipt::target_commitment`), so whoever
//! holds the target and the certificate can confirm whom it is about, and nobody else can tell.
//! The per-community stage outcomes go in `verification`; a user deletion has no object
//! manifest or row purge of its own (the dummy handlers of `demo:` targets report their results
//! there too).

use certificate::canonical::timestamp;
use certificate::chain::ChainHead;
use certificate::receipt::{
    Generations, InventoryFacts, ManifestFacts, PurgeFacts, Receipt, ReceiptKind, StageReached,
    StampFold, Subject, target_commitment,
};
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::error::{CertificateResult, CertificateStoreError};
use super::facts::{Signing, StampForm, approval_facts, count};

/// The receipt of user request `request_id`, committing to its target with `salt`, as `signing`
/// states it (its manifest has no chunks in either form).
pub(crate) async fn user_receipt(
    conn: &mut PgConnection,
    request_id: Uuid,
    salt: &str,
    audit_chain: ChainHead,
    signing: Signing<'_>,
) -> CertificateResult<Receipt> {
    let Signing {
        key_id,
        signed_at,
        form,
    } = signing;
    let request: UserRequestFacts = sqlx::query_as(
        "SELECT target, requested_by, created_at, completed_at, exec_generation, \
         inventory_digest FROM deletion.requests WHERE id = $1 AND kind = 'user'",
    )
    .bind(request_id)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or_else(|| CertificateStoreError::certificate("user request", "not found"))?;
    let rows: Vec<StageFacts> = sqlx::query_as(
        "SELECT stage, community_id, status, attempt, finished_at, result \
         FROM deletion.user_stage_history WHERE request_id = $1 \
         ORDER BY created_at, id",
    )
    .bind(request_id)
    .fetch_all(&mut *conn)
    .await?;
    let outcomes: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| {
            serde_json::json!({
                "stage": row.stage,
                "community_id": row.community_id,
                "status": row.status,
                "attempts": row.attempt,
                "result": row.result.as_ref().map(|json| json.0.clone()),
            })
        })
        .collect();
    // Every media decision, naming the object and each key it covered (the media object and the
    // thumbnail and metadata derived from it) with its versions: what was deleted, what was kept
    // because someone else shares it.
    let decisions: Vec<DecisionFacts> = sqlx::query_as(
        "SELECT community_id, object_key, decision, other_references, versions \
         FROM deletion.user_media_decisions WHERE request_id = $1 \
         ORDER BY community_id, object_key",
    )
    .bind(request_id)
    .fetch_all(&mut *conn)
    .await?;
    let media_decisions: Vec<serde_json::Value> = decisions.iter().map(decision_facts).collect();
    let mut verification = serde_json::json!({ "stages": outcomes });
    if !media_decisions.is_empty() {
        verification["media_decisions"] = serde_json::Value::Array(media_decisions);
    }
    let digest = request.inventory_digest.unwrap_or_default();
    Ok(Receipt {
        format: form.format().to_owned(),
        request_id,
        kind: ReceiptKind::User,
        subject: Subject::User {
            target_hash: target_commitment(&request.target.unwrap_or_default(), salt)
                .map_err(|e| CertificateStoreError::certificate("target commitment", e))?,
            target_salt: salt.to_owned(),
        },
        requested_by: request.requested_by,
        requested_at: timestamp(request.created_at),
        approval: approval_facts(conn, request_id).await?,
        inventory: InventoryFacts {
            digest,
            tables: Vec::new(),
            object_versions: 0,
            object_bytes: 0,
            redis_keys: 0,
            multipart_uploads: 0,
            // A user receipt states no relations (user erasure's scope is its own issue).
            relations: Vec::new(),
            declarations: Vec::new(),
        },
        manifest: match form {
            StampForm::Listed => ManifestFacts::listed(String::new(), Vec::new()),
            StampForm::Rooted => ManifestFacts::rooted(String::new(), &StampFold::new("")),
        },
        purge: PurgeFacts {
            tables: Vec::new(),
            rows_total: 0,
            redis_keys_purged: 0,
            multipart_uploads_aborted: 0,
        },
        generations: Generations {
            fence_generation: None,
            exec_generation: count(request.exec_generation),
        },
        verification,
        stages: rows
            .iter()
            .filter_map(|row| {
                row.finished_at.map(|at| StageReached {
                    stage: row.stage.clone(),
                    reached_at: timestamp(at),
                })
            })
            .collect(),
        audit_chain,
        completed_at: request.completed_at.map(timestamp).unwrap_or_default(),
        key_id: key_id.to_owned(),
        signed_at: timestamp(signed_at),
    })
}

#[derive(sqlx::FromRow)]
struct UserRequestFacts {
    target: Option<String>,
    requested_by: String,
    created_at: DateTime<Utc>,
    completed_at: Option<DateTime<Utc>>,
    exec_generation: i64,
    inventory_digest: Option<String>,
}

#[derive(sqlx::FromRow)]
struct StageFacts {
    stage: String,
    community_id: Option<Uuid>,
    status: String,
    attempt: i32,
    finished_at: Option<DateTime<Utc>>,
    result: Option<sqlx::types::Json<serde_json::Value>>,
}

#[derive(sqlx::FromRow)]
struct DecisionFacts {
    community_id: Uuid,
    object_key: String,
    decision: String,
    other_references: i64,
    versions: sqlx::types::Json<serde_json::Value>,
}

/// One media decision as the receipt names it: the object, the decision, and per key covered
/// (the object and what derives from it) the number of versions a delete listed.
fn decision_facts(row: &DecisionFacts) -> serde_json::Value {
    let mut keys: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for version in row.versions.0.as_array().into_iter().flatten() {
        if let Some(key) = version["key"].as_str() {
            *keys.entry(key.to_owned()).or_default() += 1;
        }
    }
    serde_json::json!({
        "community_id": row.community_id,
        "object_key": row.object_key,
        "decision": row.decision,
        "other_references": row.other_references,
        "versions_by_key": keys,
    })
}
