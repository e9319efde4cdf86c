//! Issue 29, part 5: `certificate audit` verifies what it audits. An owner who lifts the
//! append-only guards can rewrite a receipt, its transparency-log leaf and the signed checkpoints
//! so that every hash, root and re-derived fact agrees again; only the signatures cannot be
//! redone without the signing key. The audit checks them with the auditor's public key, and
//! fails naming the receipt's and the checkpoint's signature.
//!
//! The story rewrites the transparency log, which every deletion of a database shares, so it runs
//! on a database of its own.

use certificate::certificate::{ReceiptSignature, SignedReceipt, field_digests, signed_message};
use certificate::checkpoint::Checkpoint;
use certificate::keys::ReceiptSigningKey;
use serde_json::Value;
use uuid::Uuid;

use testkit::prelude::*;
use testkit::private_db::{PrivateStory, drop_private_stack};
use testkit::stack::store_transaction;

/// A parameter of one statement.
enum Param {
    Id(Uuid),
    Int(i64),
    Text(String),
    Json(Value),
}

/// Runs `statements` as the schema owner in one transaction, each with its own parameters.
async fn owner_sql(stack: &Stack, statements: &[(&str, Vec<Param>)]) {
    let mut tx = store_transaction(stack).await;
    for (sql, params) in statements {
        let mut query = sqlx::query(sqlx::AssertSqlSafe(*sql));
        for param in params {
            query = match param {
                Param::Id(id) => query.bind(*id),
                Param::Int(n) => query.bind(*n),
                Param::Text(text) => query.bind(text.clone()),
                Param::Json(json) => query.bind(sqlx::types::Json(json.clone())),
            };
        }
        query
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    tx.commit().await.unwrap_or_else(|e| panic!("{e}"));
}

/// `certificate audit ID` (with the stack's public key from the environment).
async fn audit(cli: &Cli, id: &str) -> CliRun {
    cli.run(&["certificate", "audit", id]).await
}

/// A checkpoint over `leaves` signed by `forger` but claiming `key_id`.
fn forged_checkpoint(forger: &ReceiptSigningKey, leaves: &[[u8; 32]], key_id: &str) -> Checkpoint {
    let root = certificate::merkle::root(leaves);
    let mut checkpoint = Checkpoint::sign(forger, leaves.len() as u64, root, chrono::Utc::now())
        .unwrap_or_else(|e| panic!("{e}"));
    checkpoint.key_id = key_id.to_owned();
    checkpoint
}

/// Replaces every signed checkpoint with `checkpoint`.
async fn replace_checkpoints(stack: &Stack, checkpoint: &Checkpoint) {
    let json = serde_json::to_value(checkpoint).unwrap_or_else(|e| panic!("{e}"));
    owner_sql(
        stack,
        &[
            (
                "ALTER TABLE deletion.log_checkpoints DISABLE TRIGGER log_checkpoints_append_only",
                vec![],
            ),
            ("DELETE FROM deletion.log_checkpoints", vec![]),
            (
                "ALTER TABLE deletion.log_checkpoints ENABLE TRIGGER log_checkpoints_append_only",
                vec![],
            ),
            (
                "INSERT INTO deletion.log_checkpoints (tree_size, root_hash, checkpoint) \
                 VALUES ($1, $2, $3)",
                vec![
                    Param::Int(i64::try_from(checkpoint.tree_size).unwrap_or_default()),
                    Param::Text(checkpoint.root_hash.clone()),
                    Param::Json(json),
                ],
            ),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consistently_rewritten_receipt_or_checkpoint_fails_the_audit_on_its_signature() {
    let _shared = outage_lock().read().await;
    let story = PrivateStory::start("auditsig", &[]).await;
    let (name, stack, worker, cli) = (story.db.name, story.stack, story.worker, story.cli);
    let host = unique_host("auditsig");
    seed(&stack, &host, small_plan()).await;
    let (id, digest) = cli.submit(&host, "alice", &[]).await;
    cli.approve_and_finish(&id, &digest).await;
    worker.crash().await;
    audit(&cli, &id).await.expect_code(0);
    let request: Uuid = id.parse().unwrap_or_default();

    let stored: Value =
        sqlx::query_scalar("SELECT signed FROM deletion.receipts WHERE request_id = $1")
            .bind(request)
            .fetch_one(stack.store.pool())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    let signed = SignedReceipt::from_json(&stored).unwrap_or_else(|e| panic!("{e}"));
    let key_id = signed.receipt.key_id.clone();
    let forger = ReceiptSigningKey::generate().unwrap_or_else(|e| panic!("{e}"));

    // 1. Only the checkpoint rewritten (a later signing time), re-signed by another key under
    //    the stack's key id: the root still matches the log, the signature does not verify.
    let leaf = signed.digest().unwrap_or_else(|e| panic!("{e}"));
    replace_checkpoints(&stack, &forged_checkpoint(&forger, &[leaf], &key_id)).await;
    let failed = audit(&cli, &id).await;
    assert_eq!(failed.code, 1, "{}\n{}", failed.stdout, failed.stderr);
    let said = format!("{}{}", failed.stdout, failed.stderr);
    assert!(
        said.contains("the signed checkpoint of size 1: /signature"),
        "the audit names the checkpoint's signature: {said}"
    );
    assert!(!said.contains("receipt signature"), "{said}");

    // 2. The receipt rewritten too (its signing time), its field digests recomputed and signed
    //    by the forger under the stack's key id, its log leaf and the checkpoint made to match:
    //    every hash and every re-derived fact agrees, the receipt's signature does not.
    let mut receipt = signed.receipt.clone();
    receipt.signed_at = "2026-12-24T00:00:00.000000Z".to_owned();
    let receipt_json = serde_json::to_value(&receipt).unwrap_or_else(|e| panic!("{e}"));
    let digests = field_digests(&receipt_json).unwrap_or_else(|e| panic!("{e}"));
    let message = signed_message(&serde_json::to_value(&digests).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}"));
    let forged = SignedReceipt {
        receipt,
        field_digests: digests,
        signature: ReceiptSignature {
            algorithm: signed.signature.algorithm.clone(),
            key_id: key_id.clone(),
            value: forger.sign(&message),
        },
    };
    let forged_leaf = forged.digest().unwrap_or_else(|e| panic!("{e}"));
    let forged_json = forged.to_json().unwrap_or_else(|e| panic!("{e}"));
    let forged_digest = hex::encode(forged_leaf);
    owner_sql(
        &stack,
        &[
            (
                "ALTER TABLE deletion.receipts DISABLE TRIGGER receipts_append_only",
                vec![],
            ),
            (
                "ALTER TABLE deletion.transparency_log DISABLE TRIGGER transparency_log_append_only",
                vec![],
            ),
            (
                "DELETE FROM deletion.transparency_log WHERE request_id = $1",
                vec![Param::Id(request)],
            ),
            (
                "UPDATE deletion.receipts SET signed = $2, receipt_digest = $3 WHERE request_id = $1",
                vec![
                    Param::Id(request),
                    Param::Json(forged_json),
                    Param::Text(forged_digest.clone()),
                ],
            ),
            (
                "INSERT INTO deletion.transparency_log (leaf_index, receipt_digest, request_id) \
                 VALUES (0, $1, $2)",
                vec![Param::Text(forged_digest), Param::Id(request)],
            ),
            (
                "ALTER TABLE deletion.transparency_log ENABLE TRIGGER transparency_log_append_only",
                vec![],
            ),
            (
                "ALTER TABLE deletion.receipts ENABLE TRIGGER receipts_append_only",
                vec![],
            ),
        ],
    )
    .await;
    replace_checkpoints(&stack, &forged_checkpoint(&forger, &[forged_leaf], &key_id)).await;
    let failed = audit(&cli, &id).await;
    assert_eq!(failed.code, 1, "{}\n{}", failed.stdout, failed.stderr);
    let said = format!("{}{}", failed.stdout, failed.stderr);
    for named in [
        "receipt signature: /signature/value",
        "the signed checkpoint of size 1: /signature",
    ] {
        assert!(said.contains(named), "the audit names {named}: {said}");
    }
    // Nothing else gives it away: no re-derived fact, chain or root differs.
    assert!(!said.contains("database now states"), "{said}");
    assert!(!said.contains("no longer matches"), "{said}");

    drop_private_stack(&name, stack).await;
}
