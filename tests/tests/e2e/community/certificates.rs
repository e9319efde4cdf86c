//! Deletion certificates through the real CLI and worker: a finished deletion exports a
//! certificate that verifies with nothing but the file and the public key; every single changed
//! field of it fails verification naming what is wrong; any edited, deleted or reordered audit
//! row fails `certificate audit` naming the first bad row; and a receipt removed from the
//! transparency log makes the consistency check against an older checkpoint fail; a replaced
//! stored edge of the log blocks the next append.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use certificate::keys::{KeyRing, ReceiptPublicKey};
use certificate::verify::verify_certificate;
use serde_json::Value;
use uuid::Uuid;

use testkit::env::required;
use testkit::prelude::*;
use testkit::private_db::{drop_private_stack, private_database};
use testkit::stack::store_transaction;

/// The stack's receipt public key (written by `deploy/local/up` next to the signing key).
fn public_key_path() -> PathBuf {
    PathBuf::from(required("BUZZ_RECEIPT_PUBLIC_KEY_FILE"))
}

/// A directory of this test's own for the files it writes.
fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("buzz-certificates-{tag}-{}", Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// Seeds a community on `stack`, deletes it through `cli` and returns the request id.
async fn finished_deletion(stack: &Stack, cli: &Cli, tag: &str) -> String {
    let host = unique_host(tag);
    seed(stack, &host, small_plan()).await;
    let (id, digest) = cli.submit(&host, "alice", &["--reason", "erasure"]).await;
    cli.approve_and_finish(&id, &digest).await;
    id
}

/// `community certificate ID --out FILE` (plus `extra`), which must succeed.
async fn export(cli: &Cli, id: &str, file: &Path, extra: &[&str]) -> Value {
    let file = file.display().to_string();
    let mut args = vec!["community", "certificate", id, "--out", file.as_str()];
    args.extend_from_slice(extra);
    cli.run(&args).await.expect_code(0).json()
}

/// `certificate verify FILE --public-key KEY` with the stack's public key, run with an EMPTY
/// environment (no database, no Temporal, no S3, no Redis variables), as on an auditor's machine.
async fn verify_offline(file: &Path, extra: &[&str]) -> CliRun {
    verify_with_keys(file, &[&public_key_path()], extra).await
}

/// `certificate checkpoint --out FILE`: the log's latest signed checkpoint, as an auditor keeps it.
async fn save_checkpoint(cli: &Cli, file: &Path) -> CliRun {
    cli.run(&[
        "certificate",
        "checkpoint",
        "--out",
        &file.display().to_string(),
    ])
    .await
}

/// `keys generate --dir DIR` (must succeed); returns the new public key's file.
async fn generated_public_key(cli: &Cli, dir: &Path) -> PathBuf {
    cli.run(&["keys", "generate", "--dir", &dir.display().to_string()])
        .await
        .expect_code(0);
    dir.join("receipt.pub")
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every leaf of a JSON document by its RFC 6901 pointer (the crate's own walk, which the
/// field digests use).
fn leaves(value: &Value) -> Vec<String> {
    certificate::certificate::leaves(value, "")
        .into_iter()
        .map(|(pointer, _)| pointer)
        .collect()
}

/// The document with the leaf at `pointer` changed in the smallest way its type allows.
fn changed(document: &Value, pointer: &str) -> Value {
    let mut copy = document.clone();
    let Some(leaf) = copy.pointer_mut(pointer) else {
        panic!("{pointer} is not in the document")
    };
    *leaf = match leaf.take() {
        Value::String(s) => {
            let mut chars: Vec<char> = s.chars().collect();
            match chars.first_mut() {
                Some(first) => *first = if *first == '0' { '1' } else { '0' },
                None => chars.push('x'),
            }
            Value::String(chars.into_iter().collect())
        }
        Value::Number(n) => Value::from(n.as_u64().map_or(1, |n| n + 1)),
        Value::Bool(b) => Value::Bool(!b),
        Value::Null => Value::String("x".to_owned()),
        Value::Array(_) => Value::Array(vec![Value::from(1)]),
        Value::Object(_) => serde_json::json!({ "x": 1 }),
    };
    copy
}

/// Whether a problem reported at `field` plainly names a change made at `pointer`: the same
/// field, an enclosing or enclosed one, or (for what only a signature covers) the signature
/// that covers it.
fn names(field: &str, pointer: &str) -> bool {
    let related = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}/"));
    related(field, pointer)
        || related(pointer, field)
        || (pointer.starts_with("/field_digests") && field.starts_with("/signature"))
        || (pointer.starts_with("/log/checkpoint") && field.starts_with("/log/checkpoint"))
        || (pointer.starts_with("/log/consistency/from") && field.starts_with("/log/consistency"))
        || (pointer.starts_with("/log/") && field.starts_with("/log/inclusion_proof"))
        || (pointer.starts_with("/log/leaf_index") && field.starts_with("/log"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_deletion_exports_a_certificate_that_verifies_offline_and_no_field_can_change() {
    let (stack, cli, _worker) = with_worker("certificate", &[]).await;
    let dir = scratch_dir("verify");

    // An older checkpoint held by an auditor before this deletion finished (none if the log is
    // still empty on a fresh stack).
    let older = dir.join("older-checkpoint.json");
    let had_checkpoint = save_checkpoint(&cli, &older).await.code == 0;

    let id = finished_deletion(&stack, &cli, "certified").await;
    let file = dir.join("certificate.json");
    let mut extra = Vec::new();
    let older_arg = older.display().to_string();
    if had_checkpoint {
        extra = vec!["--checkpoint", older_arg.as_str()];
    }
    let exported = export(&cli, &id, &file, &extra).await;
    assert_eq!(exported["request_id"], id.as_str(), "{exported}");
    assert!(
        exported["verify_command"]
            .as_str()
            .is_some_and(|c| c.contains("certificate verify")),
        "{exported}"
    );

    // Verifies with an empty environment: the file and the public key are all it needs.
    let mut verify_extra = Vec::new();
    if had_checkpoint {
        verify_extra = vec!["--checkpoint", older_arg.as_str()];
    }
    let verified = verify_offline(&file, &verify_extra)
        .await
        .expect_code(0)
        .json();
    assert_eq!(verified["valid"], true, "{verified}");

    // What it states is what happened.
    let certificate = read_json(&file);
    let receipt = &certificate["receipt"];
    assert_eq!(receipt["request_id"], id.as_str());
    assert_eq!(receipt["kind"], "community");
    assert_eq!(receipt["requested_by"], "alice");
    assert_eq!(receipt["approval"]["approved_by"], "bob");
    assert!(
        receipt["purge"]["rows_total"].as_u64().unwrap_or(0) > 0,
        "{receipt}"
    );
    assert_eq!(receipt["purge"]["redis_keys_purged"], 7, "{receipt}");
    assert!(
        receipt["manifest"]["versions_deleted"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{receipt}"
    );
    // The receipt states the chunk stamps by count and Merkle root (its size does not grow with
    // the tenant); the certificate carries the stamps, and they add up to the manifest's sums.
    assert_eq!(certificate["format"], "buzz-deletion-certificate/v2");
    assert_eq!(receipt["format"], "buzz-deletion-receipt/v2");
    assert!(receipt["manifest"].get("chunks").is_none(), "{receipt}");
    let stamps = certificate["chunk_stamps"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!stamps.is_empty(), "{certificate}");
    assert_eq!(
        receipt["manifest"]["stamps"]["count"].as_u64(),
        Some(stamps.len() as u64)
    );
    let listed: u64 = stamps.iter().filter_map(|s| s["entries"].as_u64()).sum();
    assert_eq!(receipt["manifest"]["versions_total"].as_u64(), Some(listed));
    let inspection = cli.inspect(&id).await;
    let audit_rows = inspection["audit"].as_array().map_or(0, Vec::len);
    assert_eq!(
        receipt["audit_chain"]["length"].as_u64(),
        Some(audit_rows as u64),
        "the receipt covers the whole audit trail"
    );
    assert_eq!(
        cli.run(&["certificate", "audit", &id]).await.code,
        0,
        "an untouched database audits clean"
    );

    // The signed receipt was also copied to the object-lock bucket, where it cannot be deleted.
    let request: Uuid = id.parse().unwrap_or_default();
    let (bucket, key, version): (String, String, Option<String>) = sqlx::query_as(
        "SELECT bucket, object_key, version_id FROM deletion.receipt_archives WHERE request_id = $1",
    )
    .bind(request)
    .fetch_one(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("the receipt was not archived: {e}"));
    assert_eq!(
        bucket,
        required(activities::certificates::ARCHIVE_BUCKET_ENV)
    );
    let version = version.unwrap_or_default();
    let archive = stack.objects.for_bucket(&bucket);
    let copy: Value = serde_json::from_slice(
        &archive
            .get_object_version(&key, &version)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(copy["signature"], certificate["signature"]);
    assert_eq!(copy["receipt"], certificate["receipt"]);
    let attempt = archive
        .delete_versions(&[activities::s3::ObjectVersionRef {
            key: key.clone(),
            version_id: version.clone(),
        }])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        attempt.deleted, 0,
        "object lock must refuse deleting the archived receipt: {attempt:?}"
    );
    assert!(
        archive.get_object_version(&key, &version).await.is_ok(),
        "the archived receipt must still be there"
    );

    // Every single field changed, one at a time: verification fails and names it.
    let key = ReceiptPublicKey::read_file(&public_key_path()).unwrap_or_else(|e| panic!("{e}"));
    let ring = KeyRing::new(vec![key]);
    let older_checkpoint: Option<certificate::checkpoint::Checkpoint> = had_checkpoint
        .then(|| serde_json::from_value(read_json(&older)).unwrap_or_else(|e| panic!("{e}")));
    assert!(verify_certificate(&certificate, &ring, older_checkpoint.as_ref()).is_ok());
    let pointers = leaves(&certificate);
    assert!(pointers.len() > 60, "{} fields only", pointers.len());
    for pointer in &pointers {
        let tampered = changed(&certificate, pointer);
        let problems = match verify_certificate(&tampered, &ring, older_checkpoint.as_ref()) {
            Ok(_) => panic!("changing {pointer} went unnoticed"),
            Err(problems) => problems,
        };
        assert!(
            problems.iter().any(|p| names(&p.field, pointer)),
            "changing {pointer} was refused, but no problem names it: {problems:?}"
        );
    }
    // And through the CLI, for a sample: exit 1, the field named on stderr.
    for pointer in [
        "/receipt/purge/rows_total",
        "/receipt/subject/host",
        "/signature/value",
    ] {
        let tampered_file = dir.join("tampered.json");
        std::fs::write(&tampered_file, changed(&certificate, pointer).to_string())
            .unwrap_or_else(|e| panic!("{e}"));
        let run = verify_offline(&tampered_file, &[]).await.expect_code(1);
        assert!(
            run.stderr.contains(pointer) || run.stdout.contains(pointer),
            "{pointer}: {}\n{}",
            run.stdout,
            run.stderr
        );
    }

    // An unknown key: refused naming the key id.
    let other = generated_public_key(&cli, &dir.join("other")).await;
    let key_id = certificate["signature"]["key_id"].as_str().unwrap_or("?");
    refused_naming(verify_with_keys(&file, &[&other], &[]).await, key_id);

    // A stamped chunk rewritten in the database after signing (as its owner, guards lifted):
    // the audit re-derives the stamps' root and names it, and the re-exported certificate no
    // longer verifies.
    owner_sql(
        &stack,
        &[
            "ALTER TABLE deletion.manifest_chunks DISABLE TRIGGER manifest_chunks_stamped_are_final",
            "UPDATE deletion.manifest_chunks SET deleted_at = deleted_at + interval '1 second' \
             WHERE request_id = $1 AND chunk_no = 0",
            "ALTER TABLE deletion.manifest_chunks ENABLE TRIGGER manifest_chunks_stamped_are_final",
        ],
        request,
    )
    .await;
    refused_naming(
        cli.run(&["certificate", "audit", &id]).await,
        "receipt/manifest/stamps/merkle_root",
    );
    let rewritten = dir.join("rewritten.json");
    export(&cli, &id, &rewritten, &[]).await;
    refused_naming(verify_offline(&rewritten, &[]).await, "/chunk_stamps");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One audit row as stored (every column, to put it back exactly).
#[derive(Debug, Clone, sqlx::FromRow)]
struct AuditRow {
    id: i64,
    request_id: Uuid,
    at: chrono::DateTime<chrono::Utc>,
    actor: String,
    event: String,
    detail: Value,
    seq: Option<i64>,
    prev_hash: Option<String>,
    row_hash: Option<String>,
}

async fn audit_rows(stack: &Stack, id: Uuid) -> Vec<AuditRow> {
    sqlx::query_as(
        "SELECT id, request_id, at, actor, event, detail, seq, prev_hash, row_hash \
         FROM deletion.audit_events WHERE request_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("audit rows: {e}"))
}

/// The triggers that guard the audit trail (append-only, chain extension).
const AUDIT_GUARDS: [&str; 2] = ["audit_events_append_only", "audit_events_extend_chain"];

/// A transaction of the schema owner's with the audit trail's guards lifted (they are never off
/// outside it); [`commit_guarded`] puts them back and commits.
async fn unguarded(stack: &Stack) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut tx = store_transaction(stack).await;
    set_audit_guards(&mut tx, "DISABLE").await;
    tx
}

async fn commit_guarded(mut tx: sqlx::Transaction<'static, sqlx::Postgres>) {
    set_audit_guards(&mut tx, "ENABLE").await;
    tx.commit().await.unwrap_or_else(|e| panic!("{e}"));
}

async fn set_audit_guards(tx: &mut sqlx::PgConnection, action: &str) {
    for trigger in AUDIT_GUARDS {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER TABLE deletion.audit_events {action} TRIGGER {trigger}"
        )))
        .execute(&mut *tx)
        .await
        .unwrap_or_else(|e| panic!("{action} {trigger}: {e}"));
    }
}

/// Runs `statements` (each binding ids) as the schema owner with the audit trail's guards lifted,
/// in one transaction.
async fn as_owner_unguarded(stack: &Stack, statements: &[(String, Vec<i64>)]) {
    let mut tx = unguarded(stack).await;
    for (sql, binds) in statements {
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.clone()));
        for bind in binds {
            query = query.bind(*bind);
        }
        query
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    commit_guarded(tx).await;
}

/// Puts `row` back exactly as it was.
async fn restore(stack: &Stack, row: &AuditRow) {
    let mut tx = unguarded(stack).await;
    sqlx::query("DELETE FROM deletion.audit_events WHERE id = $1")
        .bind(row.id)
        .execute(&mut *tx)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    sqlx::query(
        "INSERT INTO deletion.audit_events \
         (id, request_id, at, actor, event, detail, seq, prev_hash, row_hash) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(row.id)
    .bind(row.request_id)
    .bind(row.at)
    .bind(&row.actor)
    .bind(&row.event)
    .bind(&row.detail)
    .bind(row.seq)
    .bind(&row.prev_hash)
    .bind(&row.row_hash)
    .execute(&mut *tx)
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    commit_guarded(tx).await;
}

/// `certificate audit ID` must fail (exit 1) naming audit row `row_id`.
async fn audit_fails_naming(cli: &Cli, id: &str, row_id: i64, what: &str) {
    eprintln!("{what}: `certificate audit` must fail naming audit row id {row_id}");
    refused_naming(
        cli.run(&["certificate", "audit", id]).await,
        &format!("audit row id {row_id} "),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_deleting_or_reordering_any_audit_row_fails_the_audit_naming_the_first_bad_row() {
    let (stack, cli, worker) = with_worker("chain", &[]).await;
    let id = finished_deletion(&stack, &cli, "chained").await;
    drop(worker.process);
    let request: Uuid = id.parse().unwrap_or_default();
    cli.run(&["certificate", "audit", &id]).await.expect_code(0);
    let inspection = cli.inspect(&id).await;
    assert_eq!(inspection["audit_chain"]["intact"], true, "{inspection}");
    assert!(
        inspection["receipt"]["leaf_index"].is_number(),
        "{inspection}"
    );
    let rows = audit_rows(&stack, request).await;
    assert!(rows.len() >= 10, "{} audit rows only", rows.len());

    for (index, row) in rows.iter().enumerate() {
        // Edit: any column of the row's content.
        as_owner_unguarded(
            &stack,
            &[(
                "UPDATE deletion.audit_events SET detail = detail || '{\"forged\": true}' \
                 WHERE id = $1"
                    .to_owned(),
                vec![row.id],
            )],
        )
        .await;
        audit_fails_naming(&cli, &id, row.id, &format!("edited row {}", row.id)).await;
        // Reading the trail re-checks the chain too.
        let inspection = cli.inspect(&id).await;
        let chain = &inspection["audit_chain"];
        assert_eq!(chain["intact"], false, "{chain}");
        assert!(
            chain["first_bad_row"]
                .as_str()
                .is_some_and(|bad| bad.starts_with(&format!("audit row id {} ", row.id))),
            "{chain}"
        );
        restore(&stack, row).await;

        // Delete: the row after it no longer follows its predecessor; the last row is missed
        // by the signed chain head.
        as_owner_unguarded(
            &stack,
            &[(
                "DELETE FROM deletion.audit_events WHERE id = $1".to_owned(),
                vec![row.id],
            )],
        )
        .await;
        match rows.get(index + 1) {
            Some(next) => {
                audit_fails_naming(&cli, &id, next.id, &format!("deleted row {}", row.id)).await;
            }
            None => {
                let run = cli.run(&["certificate", "audit", &id]).await.expect_code(1);
                assert!(
                    run.stderr.contains("signed receipt covers"),
                    "deleting the last row must be caught by the signed head: {}",
                    run.stderr
                );
            }
        }
        restore(&stack, row).await;

        // Reorder: swap this row's id with the next one's.
        if let Some(next) = rows.get(index + 1) {
            let swap = |from: i64, to: i64| {
                (
                    "UPDATE deletion.audit_events SET id = $2 WHERE id = $1".to_owned(),
                    vec![from, to],
                )
            };
            let swapped = [
                swap(row.id, -row.id),
                swap(next.id, row.id),
                swap(-row.id, next.id),
            ];
            as_owner_unguarded(&stack, &swapped).await;
            audit_fails_naming(&cli, &id, row.id, &format!("swapped rows {}", row.id)).await;
            // Swapping again puts both back.
            as_owner_unguarded(&stack, &swapped).await;
        }
        cli.run(&["certificate", "audit", &id]).await.expect_code(0);
    }
}

/// Runs `statements` as the schema owner in one transaction (binding `id` where `$1` appears).
async fn owner_sql(stack: &Stack, statements: &[&str], id: Uuid) {
    let mut tx = store_transaction(stack).await;
    for sql in statements {
        let query = sqlx::query(sqlx::AssertSqlSafe(*sql));
        let query = if sql.contains("$1") {
            query.bind(id)
        } else {
            query
        };
        query
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    tx.commit().await.unwrap_or_else(|e| panic!("{e}"));
}

/// `certificate verify FILE` with exactly `keys` (and `extra`), from an empty environment.
async fn verify_with_keys(file: &Path, keys: &[&Path], extra: &[&str]) -> CliRun {
    let mut command = tokio::process::Command::new(bin("buzz-deletion"));
    command
        .env_clear()
        .arg("certificate")
        .arg("verify")
        .arg(file);
    for key in keys {
        command.arg("--public-key").arg(key);
    }
    let output = command
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap_or_else(|e| panic!("could not run buzz-deletion: {e}"));
    CliRun::from_output(&output)
}

/// Asserts `run` failed naming `what` (on stdout or stderr).
fn refused_naming(run: CliRun, what: &str) {
    let run = run.expect_code(1);
    assert!(
        run.stderr.contains(what) || run.stdout.contains(what),
        "must be refused naming {what}:\n{}\n{}",
        run.stdout,
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_keys_stay_verifiable_and_a_receipt_removed_from_the_log_breaks_consistency() {
    let _shared = outage_lock().read().await;
    let shared = stack().await;
    // Rotating the signing key and rewriting the log would break every other test's
    // certificates: this story runs on a database (and so a log) of its own.
    let db = private_database("certlog").await;
    let name = db.name.clone();
    let stack = db.migrated_stack(shared).await;
    let queue = unique_queue("certlog");
    let cli = Cli::new(&queue)
        .with_env("DATABASE_URL", &db.worker)
        .with_env("BUZZ_OWNER_DATABASE_URL", &db.owner);
    let dir = scratch_dir("log");
    let old_key = public_key_path();

    // The first deletion is signed with the stack's key ...
    let worker = WorkerProcess::start(&queue, &[("DATABASE_URL", db.worker.as_str())]).await;
    let first = finished_deletion(&stack, &cli, "first").await;
    worker.crash().await;
    // ... then the key is rotated: a new pair, the worker restarted with it.
    let keys = dir.join("keys");
    let generated = cli
        .run(&[
            "keys",
            "generate",
            "--dir",
            &keys.display().to_string(),
            "--name",
            "next",
        ])
        .await
        .expect_code(0)
        .json();
    let new_private = keys.join("next.key").display().to_string();
    let new_key = keys.join("next.pub");
    let new_key_id = generated["key_id"].as_str().unwrap_or_default().to_owned();
    let worker = WorkerProcess::start(
        &queue,
        &[
            ("DATABASE_URL", db.worker.as_str()),
            ("BUZZ_RECEIPT_SIGNING_KEY_FILE", new_private.as_str()),
        ],
    )
    .await;
    let second = finished_deletion(&stack, &cli, "second").await;

    // The first certificate: receipt by the rotated-out key, checkpoint by the new one.
    let first_file = dir.join("first.json");
    export(&cli, &first, &first_file, &[]).await;
    let first_cert = read_json(&first_file);
    let old_key_id = first_cert["signature"]["key_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_ne!(old_key_id, new_key_id);
    assert_eq!(
        first_cert["log"]["checkpoint"]["key_id"],
        new_key_id.as_str()
    );
    verify_with_keys(&first_file, &[&old_key, &new_key], &[])
        .await
        .expect_code(0);
    refused_naming(
        verify_with_keys(&first_file, &[&new_key], &[]).await,
        &old_key_id,
    );
    // A key nobody knows: refused naming the key the certificate needs.
    let stranger = generated_public_key(&cli, &dir.join("stranger")).await;
    refused_naming(
        verify_with_keys(&first_file, &[&stranger], &[]).await,
        &old_key_id,
    );

    // An auditor holds the checkpoint covering both receipts.
    let held = dir.join("held-checkpoint.json");
    let checkpoint = save_checkpoint(&cli, &held).await.expect_code(0).json();
    assert_eq!(checkpoint["tree_size"], 2, "{checkpoint}");
    let held_arg = held.display().to_string();
    let good = dir.join("second.json");
    export(&cli, &second, &good, &["--checkpoint", &held_arg]).await;
    verify_with_keys(&good, &[&old_key, &new_key], &["--checkpoint", &held_arg])
        .await
        .expect_code(0);

    // The owner removes the first deletion's receipt from the log and renumbers the rest so
    // the log has no gap. The worker refuses to sign a checkpoint over that log: the next
    // deletion blocks, naming the rewrite.
    let first_id: Uuid = first.parse().unwrap_or_default();
    owner_sql(
        &stack,
        &[
            "ALTER TABLE deletion.transparency_log DISABLE TRIGGER transparency_log_append_only",
            "DELETE FROM deletion.transparency_log WHERE request_id = $1",
            "UPDATE deletion.transparency_log SET leaf_index = leaf_index - 1",
            "ALTER TABLE deletion.transparency_log ENABLE TRIGGER transparency_log_append_only",
        ],
        first_id,
    )
    .await;
    let host = unique_host("third");
    seed(&stack, &host, small_plan()).await;
    let (third, digest) = cli.submit(&host, "alice", &[]).await;
    cli.approve(&third, "bob", &digest).await.expect_code(0);
    let blocked = cli
        .wait_status(&third, 120, |status| {
            status["blocked"]["reason"]
                .as_str()
                .is_some_and(|reason| reason.contains("transparency log was rewritten"))
        })
        .await;
    assert_eq!(blocked["phase"], "verifying", "{blocked}");

    // Whoever also holds the signing key can paper over that: drop the signed checkpoints and
    // sign one for the rewritten log. Then the deletion is unblocked and its receipt appended.
    let second_digest: String = sqlx::query_scalar(
        "SELECT receipt_digest FROM deletion.transparency_log WHERE request_id = $1",
    )
    .bind(second.parse::<Uuid>().unwrap_or_default())
    .fetch_one(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let leaf: [u8; 32] = hex::decode(&second_digest)
        .ok()
        .and_then(|bytes| bytes.try_into().ok())
        .unwrap_or_else(|| panic!("digest {second_digest}"));
    let key = certificate::keys::ReceiptSigningKey::read_file(Path::new(&new_private))
        .unwrap_or_else(|e| panic!("{e}"));
    let root = certificate::merkle::root(&[leaf]);
    let forged =
        certificate::checkpoint::Checkpoint::sign(&key, 1, root.clone(), chrono::Utc::now())
            .unwrap_or_else(|e| panic!("{e}"));
    owner_sql(
        &stack,
        &[
            "ALTER TABLE deletion.log_checkpoints DISABLE TRIGGER log_checkpoints_append_only",
            "DELETE FROM deletion.log_checkpoints",
            "ALTER TABLE deletion.log_checkpoints ENABLE TRIGGER log_checkpoints_append_only",
        ],
        first_id,
    )
    .await;
    sqlx::query(
        "INSERT INTO deletion.log_checkpoints (tree_size, root_hash, checkpoint) VALUES (1, $1, $2)",
    )
    .bind(&root)
    .bind(sqlx::types::Json(&forged))
    .execute(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    cli.unblock_and_finish(&third, "alice", "log restored")
        .await;

    // The third certificate is signed and included in the rewritten log, but that log does not
    // extend the checkpoint the auditor held: the consistency check fails.
    let rewritten = dir.join("third.json");
    export(&cli, &third, &rewritten, &[]).await;
    verify_with_keys(&rewritten, &[&old_key, &new_key], &[])
        .await
        .expect_code(0);
    let against_held = dir.join("third-against-held.json");
    export(&cli, &third, &against_held, &["--checkpoint", &held_arg]).await;
    refused_naming(
        verify_with_keys(
            &against_held,
            &[&old_key, &new_key],
            &["--checkpoint", &held_arg],
        )
        .await,
        "/log/consistency",
    );
    // And the database audit of the removed receipt finds it missing from the log.
    refused_naming(
        cli.run(&["certificate", "audit", &first]).await,
        "is not in the log",
    );

    worker.crash().await;
    let _ = std::fs::remove_dir_all(&dir);
    drop_private_stack(&name, stack).await;
}

/// The log's stored right edge (migration 0020) is trusted only when it folds to the root the
/// latest checkpoint signed: an owner who lifts the append-only guard and replaces it (here with
/// a well-formed hash of the right count) gets the next deletion blocked naming the rewrite, and
/// no receipt is appended to the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_log_edge_blocks_the_next_append_naming_the_rewrite() {
    let _shared = outage_lock().read().await;
    let shared = stack().await;
    // Rewriting the log would break every other test's certificates: a database of its own.
    let db = private_database("certedge").await;
    let name = db.name.clone();
    let stack = db.migrated_stack(shared).await;
    let queue = unique_queue("certedge");
    let cli = Cli::new(&queue)
        .with_env("DATABASE_URL", &db.worker)
        .with_env("BUZZ_OWNER_DATABASE_URL", &db.owner);
    let worker = WorkerProcess::start(&queue, &[("DATABASE_URL", db.worker.as_str())]).await;
    let first = finished_deletion(&stack, &cli, "edge-first").await;
    let edge: Option<Vec<String>> = sqlx::query_scalar(
        "SELECT frontier FROM deletion.log_checkpoints ORDER BY tree_size DESC LIMIT 1",
    )
    .fetch_one(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        edge.map(|peaks| peaks.len()),
        Some(1),
        "the checkpoint of a one-receipt log stores one peak"
    );

    owner_sql(
        &stack,
        &[
            "ALTER TABLE deletion.log_checkpoints DISABLE TRIGGER log_checkpoints_append_only",
            "UPDATE deletion.log_checkpoints SET frontier = ARRAY[repeat('0', 64)]",
            "ALTER TABLE deletion.log_checkpoints ENABLE TRIGGER log_checkpoints_append_only",
        ],
        first.parse().unwrap_or_default(),
    )
    .await;
    let host = unique_host("edge-second");
    seed(&stack, &host, small_plan()).await;
    let (second, digest) = cli.submit(&host, "alice", &[]).await;
    cli.approve(&second, "bob", &digest).await.expect_code(0);
    let blocked = cli
        .wait_status(&second, 120, |status| {
            status["blocked"]["reason"]
                .as_str()
                .is_some_and(|reason| reason.contains("transparency log was rewritten"))
        })
        .await;
    assert_eq!(blocked["phase"], "verifying", "{blocked}");
    let leaves: i64 = sqlx::query_scalar("SELECT count(*) FROM deletion.transparency_log")
        .fetch_one(stack.store.pool())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        leaves, 1,
        "nothing is appended to a log whose edge was replaced"
    );

    worker.crash().await;
    drop_private_stack(&name, stack).await;
}
