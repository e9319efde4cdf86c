//! Operator identity on the real stack: every action is signed with a registered SSH key, the
//! two-person rule compares key fingerprints, and every bad signature — the requester's own key,
//! a revoked key, an unregistered key, a signature over another request or another digest, a
//! signature already used, an expired one — is refused with nothing changed, through the CLI's
//! update and as a Web UI signal (the JSON `community sign` prints, sent with `temporal workflow
//! signal`). A key held only by an ssh-agent signs; a completed deletion's two signatures verify
//! with `deploy/local/verify-signatures` (ssh-keygen -Y verify), and fail once a byte changes.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;
use uuid::Uuid;
use workflows::operator::{Action, Kind};

use testkit::cli::exec;
use testkit::operators::{TestOperator, fresh_operator, operator, unregistered_operator};
use testkit::poll;
use testkit::prelude::*;
use testkit::records::request_rows;
use testkit::refusal::{approved_by, audit_reasons, audit_trail, request_row};
use testkit::temporal::{temporal_signal, temporal_update};

/// What a refused action must leave unchanged, and what it leaves behind.
#[derive(Debug, PartialEq, Eq)]
struct Durable {
    stage: String,
    approved_by: Option<String>,
    signatures: i64,
}

async fn durable(stack: &Stack, id: Uuid) -> Durable {
    let signatures: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM deletion.operator_signatures WHERE request_id = $1",
    )
    .bind(id)
    .fetch_one(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    Durable {
        stage: request_row(stack, id).await.stage,
        approved_by: approved_by(stack, id).await,
        signatures,
    }
}

/// The reasons of the request's `approval_rejected` audit events.
async fn rejections(stack: &Stack, id: Uuid) -> Vec<String> {
    audit_reasons(stack, id, "approval_rejected").await
}

/// Sends `payload` as update `approve` (what the CLI does) and as signal `approve` (what the
/// Web UI does); both must be refused naming `expect`, the signal on record, nothing changed.
async fn refused_both_ways(
    stack: &Stack,
    id: Uuid,
    workflow_id: &str,
    payload: &str,
    expect: &str,
) {
    let before = durable(stack, id).await;
    let update = temporal_update(workflow_id, "approve", payload).await;
    assert_update_refused(&update, expect);
    assert_eq!(
        durable(stack, id).await,
        before,
        "a refused update changed state"
    );
    let recorded = rejections(stack, id).await.len();
    let signal = temporal_signal(workflow_id, "approve", payload).await;
    assert_eq!(signal.code, 0, "signal sent: {}", signal.stderr);
    let every = Duration::from_millis(200);
    let reasons = poll::until(Duration::from_secs(60), every, async || {
        let reasons = rejections(stack, id).await;
        match reasons.len() > recorded {
            true => Ok(reasons),
            false => Err(format!("the refused signal ({expect}) was never recorded")),
        }
    })
    .await;
    let last = reasons.last().cloned().unwrap_or_default();
    assert!(
        last.contains(expect),
        "recorded refusal should name {expect:?}: {last}"
    );
    assert_eq!(
        durable(stack, id).await,
        before,
        "a refused signal changed state"
    );
}

/// Panics unless the update `temporal` sent was refused, naming `expect`.
fn assert_update_refused(update: &CliRun, expect: &str) {
    assert_ne!(update.code, 0, "update must be refused: {}", update.stdout);
    assert!(
        format!("{}{}", update.stdout, update.stderr).contains(expect),
        "update refusal should name {expect:?}: {} {}",
        update.stdout,
        update.stderr
    );
}

/// The JSON `community sign approve` prints.
async fn signed_approval(cli: &Cli, id: Uuid, digest: &str, key: &Path, extra: &[&str]) -> Value {
    let id = id.to_string();
    let key = key.display().to_string();
    let mut args = vec![
        "community",
        "sign",
        "approve",
        &id,
        "--inventory-digest",
        digest,
        "--key",
        &key,
    ];
    args.extend_from_slice(extra);
    let run = cli.run(&args).await.expect_code(0);
    serde_json::from_str(run.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

/// The actions of the request's stored signatures, as `inspect` or `user status` lists them.
fn signed_actions(status: &Value) -> Vec<&str> {
    status["signatures"]
        .as_array()
        .map(|s| s.iter().filter_map(|s| s["action"].as_str()).collect())
        .unwrap_or_default()
}

fn workflow_id_of(id: Uuid) -> String {
    workflows::community::workflow_id(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_second_registered_key_approves_and_every_bad_signature_changes_nothing() {
    let (stack, cli, _worker, target) = with_target("identity", &[]).await;
    let other = Tenant::seed(&stack, "identity-other", small_plan()).await;
    let alice = operator("alice").await;
    let bob = operator("bob").await;
    let (id, digest) = cli.submit(&target.host, "alice", &[]).await;
    let id: Uuid = id.parse().unwrap_or_default();
    let (other_id, other_digest) = cli.submit(&other.host, "alice", &[]).await;
    let other_id: Uuid = other_id.parse().unwrap_or_default();
    let workflow_id = workflow_id_of(id);
    let waiting = durable(&stack, id).await;
    assert_eq!(
        waiting,
        Durable {
            stage: "inventoried".into(),
            approved_by: None,
            signatures: 1,
        },
        "only the submit signature is recorded"
    );
    let id_arg = id.to_string();
    let refused = async |payload: Value, expect: &str| {
        refused_both_ways(&stack, id, &workflow_id, &payload.to_string(), expect).await;
    };

    // No signature at all: the JSON an operator typed before signatures existed.
    let unsigned = serde_json::json!({"approved_by": "bob", "digest": digest}).to_string();
    refused_both_ways(&stack, id, &workflow_id, &unsigned, "approve is not signed").await;

    // The requester's own key, through the CLI: the two-person rule compares fingerprints.
    let own = cli
        .run(&[
            "community",
            "approve",
            &id_arg,
            "--inventory-digest",
            &digest,
            "--key",
        ])
        .await;
    assert_eq!(own.code, 2, "--key needs a value: {}", own.stderr);
    let alice_key = alice.key_path.display().to_string();
    cli.approve_with_key(&id_arg, &digest, &alice_key, &[])
        .await
        .expect_refusal_naming(1, "two-person rule");
    // Naming another operator does not help: the name must be the key's.
    cli.approve_with_key(&id_arg, &digest, &alice_key, &["--approved-by", "bob"])
        .await
        .expect_refusal_naming(1, "registered as alice");
    let own_payload = signed_approval(&cli, id, &digest, &alice.key_path, &[]).await;
    refused(own_payload, "two-person rule").await;

    // A revoked key: registered, then revoked by the owner.
    let carol = fresh_operator("revoked").await;
    let revoked = cli
        .run(&[
            "operators",
            "revoke",
            &carol.name,
            "--reason",
            "left the team",
        ])
        .await
        .expect_code(0);
    assert!(
        revoked.json()["revoked_at"].is_string(),
        "{}",
        revoked.stdout
    );
    let revoked_payload = signed_approval(&cli, id, &digest, &carol.key_path, &[]).await;
    cli.approve_with_key(&id_arg, &digest, &carol.key_path.display().to_string(), &[])
        .await
        .expect_refusal_naming(1, "was revoked");
    refused(revoked_payload, "was revoked").await;

    // A key nobody registered.
    let stranger = unregistered_operator("stranger");
    cli.approve_with_key(
        &id_arg,
        &digest,
        &stranger.key_path.display().to_string(),
        &[],
    )
    .await
    .expect_refusal_naming(1, "not a registered operator key");
    let stranger_payload = signed_approval(&cli, id, &digest, &stranger.key_path, &[]).await;
    refused(stranger_payload, "not a registered operator key").await;

    // Bob's signature over the other request, sent to this one.
    let mut elsewhere = signed_approval(&cli, other_id, &other_digest, &bob.key_path, &[]).await;
    elsewhere["digest"] = Value::String(digest.clone());
    refused(elsewhere, "signature is for request").await;

    // Bob's signature over another digest, the message naming the frozen one.
    let mut stale = signed_approval(&cli, id, &"0".repeat(64), &bob.key_path, &[]).await;
    stale["digest"] = Value::String(digest.clone());
    refused(stale, "signature is for digest").await;

    // Signed eleven minutes ago: outside the window by the database clock.
    let old = (chrono::Utc::now() - chrono::Duration::minutes(11))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    cli.approve_with_key(
        &id_arg,
        &digest,
        &bob.key_path.display().to_string(),
        &["--signed-at", &old],
    )
    .await
    .expect_refusal_naming(1, "a signature counts for 600 s");
    let expired = signed_approval(&cli, id, &digest, &bob.key_path, &["--signed-at", &old]).await;
    refused(expired, "a signature counts for 600 s").await;

    // A signature already used: its (key, nonce) was consumed by another action first.
    let replayed = signed_approval(&cli, id, &digest, &bob.key_path, &[]).await;
    let nonce = replayed["signed"]["nonce"].as_str().unwrap_or_default();
    sqlx::query(
        "INSERT INTO deletion.operator_signatures (fingerprint, nonce, action, kind, request_id, \
         digest, statement, signature, signed_at, consumed_by) \
         VALUES ($1, $2, 'approve', 'community', $3, $4, 'captured', 'captured', now(), \
         'an earlier use of the same signature')",
    )
    .bind(&bob.fingerprint)
    .bind(nonce)
    .bind(other_id)
    .bind(&other_digest)
    .execute(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let waiting = Durable {
        stage: "inventoried".into(),
        approved_by: None,
        signatures: 1,
    };
    assert_eq!(durable(&stack, id).await, waiting);
    refused(replayed, "already used").await;

    // The second registered key approves; the deletion completes.
    let record = cli
        .approve(&id_arg, "bob", &digest)
        .await
        .expect_code(0)
        .json();
    assert_eq!(record["approved_by"], "bob");
    assert_eq!(record["signed"]["operator"], bob.fingerprint.as_str());
    cli.watch_to_end(&id_arg).await;
    target.assert_gone(&stack, "the target").await;
    let status = cli.inspect(&id_arg).await;
    assert_eq!(signed_actions(&status), ["submit", "approve"], "{status}");

    // An outside check with ssh-keygen -Y verify and the registered keys.
    let evidence = std::env::temp_dir().join(format!("buzz-evidence-{}", Uuid::new_v4().simple()));
    let script = repo_root().join("deploy/local/verify-signatures");
    let script = script.display().to_string();
    let evidence_arg = evidence.display().to_string();
    let verified = exec(&script, &[&id_arg, "--keep", &evidence_arg], &[]).await;
    let verified = verified.expect_code(0);
    assert!(
        verified
            .stdout
            .contains(&format!("submitted by {}", alice.fingerprint))
            && verified
                .stdout
                .contains(&format!("approved by {}", bob.fingerprint)),
        "{}",
        verified.stdout
    );
    let again = exec(&script, &["--dir", &evidence_arg], &[]).await;
    assert_eq!(again.code, 0, "{}", again.stdout);
    let statement = evidence.join("02-approve.statement");
    let mut bytes = std::fs::read(&statement).unwrap_or_else(|e| panic!("{e}"));
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&statement, &bytes).unwrap_or_else(|e| panic!("{e}"));
    // One changed byte must fail.
    let tampered = exec(&script, &["--dir", &evidence_arg], &[]).await;
    tampered.expect_printing(1, "FAIL approve");
    let _ = std::fs::remove_dir_all(&evidence);
    cli.abort(&other_id.to_string(), "alice", "test done")
        .await
        .expect_code(0);
}

/// Generates an ed25519 key pair with ssh-keygen at `path`.
async fn generate_key(path: &Path) {
    let path = path.display().to_string();
    exec(
        "ssh-keygen",
        &[
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "agent-held",
            "-f",
            &path,
        ],
        &[],
    )
    .await
    .expect_code(0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_held_only_by_an_ssh_agent_signs_an_approval() {
    let (stack, cli, _worker, target) = with_target("agent", &[]).await;
    let host = target.host;
    let dir = std::env::temp_dir().join(format!("buzz-agent-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let key = dir.join("id_ed25519");
    generate_key(&key).await;
    let public = dir.join("id_ed25519.pub");
    let name = format!("agent-{}", &Uuid::new_v4().simple().to_string()[..10]);
    cli.run(&[
        "operators",
        "add",
        "--name",
        &name,
        "--public-key",
        &public.display().to_string(),
    ])
    .await
    .expect_code(0);

    let socket = dir.join("agent.sock").display().to_string();
    let mut agent = Command::new("ssh-agent")
        .args(["-D", "-a", &socket])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("ssh-agent: {e}"));
    poll::until(
        Duration::from_secs(10),
        Duration::from_millis(50),
        async || {
            let listening = Path::new(&socket).exists();
            listening
                .then_some(())
                .ok_or("ssh-agent never listened".to_owned())
        },
    )
    .await;
    let agent_env = [("SSH_AUTH_SOCK", socket.as_str())];
    exec("ssh-add", &["-q", &key.display().to_string()], &agent_env)
        .await
        .expect_code(0);
    std::fs::remove_file(&key).unwrap_or_else(|e| panic!("{e}"));
    assert!(!key.exists(), "no private key file is left on disk");

    let (id, digest) = cli.submit(&host, "alice", &[]).await;
    let with_agent = cli.clone().with_env("SSH_AUTH_SOCK", &socket);
    let approved = with_agent
        .approve_with_key(&id, &digest, &public.display().to_string(), &[])
        .await
        .expect_code(0)
        .json();
    assert_eq!(approved["approved_by"], name.as_str());
    // Without the agent the public key alone cannot sign.
    let (other, other_digest) = {
        let other = Tenant::seed(&stack, "agent-gone", small_plan()).await;
        cli.submit(&other.host, "alice", &[]).await
    };
    let _ = agent.kill().await;
    with_agent
        .approve_with_key(&other, &other_digest, &public.display().to_string(), &[])
        .await
        .expect_refusal_naming(1, "ssh-keygen could not sign");
    cli.abort(&other, "alice", "test done").await.expect_code(0);
    cli.watch_to_end(&id).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_deletion_needs_a_second_key_whatever_name_the_approval_gives() {
    let (stack, cli, _worker) = with_worker("identity-user", &[]).await;
    let alice: TestOperator = operator("alice").await;
    let target = format!("demo:identity-{}", Uuid::new_v4().simple());
    let (id, digest) = cli.user_submit(&target, "alice").await;
    let id: Uuid = id
        .parse()
        .unwrap_or_else(|e| panic!("user submit printed a bad request id {id}: {e}"));
    let workflow_id = workflows::user::workflow_id(id);

    // Alice's key under Bob's name: the ledger sees two names, the signature one key.
    let posing = serde_json::json!({
        "approved_by": "bob",
        "inventory_digest": digest,
        "signed": alice.sign(Action::Approve, Kind::User, id, &target, Some(&digest)),
    });
    let update = temporal_update(&workflow_id, "approve", &posing.to_string()).await;
    assert_update_refused(&update, "two-person rule");
    cli.user_approve(&id.to_string(), "alice", &digest)
        .await
        .expect_refusal_naming(1, "two-person rule");
    let approvals = request_rows(&stack, "deletion.approvals", id).await;
    assert_eq!(approvals, 0, "refused approvals record nothing");

    let approved = cli
        .user_approve(&id.to_string(), "bob", &digest)
        .await
        .expect_code(0)
        .json();
    assert_eq!(approved["approval"]["approved_by"], "bob");
    assert_eq!(
        approved["approval"]["signed"]["operator"],
        operator("bob").await.fingerprint.as_str()
    );
    let status = cli
        .run(&["user", "status", &id.to_string()])
        .await
        .expect_code(0)
        .json();
    assert_eq!(signed_actions(&status), ["submit", "approve"], "{status}");
    let script = repo_root().join("deploy/local/verify-signatures");
    let verified = exec(&script.display().to_string(), &[&id.to_string()], &[]).await;
    verified.expect_code(0);
}

/// The request's blocked reason and the number of `unblocked` audit events.
async fn block_state(stack: &Stack, id: Uuid) -> (Option<String>, usize) {
    let unblocked = audit_trail(stack, id)
        .await
        .iter()
        .filter(|e| e.event == "unblocked")
        .count();
    (request_row(stack, id).await.blocked_reason, unblocked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_unblock_signature_replayed_on_the_next_block_is_refused() {
    let (stack, cli, _worker, target) = with_target("replay", &[]).await;
    // A key of unknown shape blocks the inventory, again after every unblock until removed.
    let _ = plant_stray_key(&stack, target.id).await;
    let (id, _) = cli.submit_blocked(&target.host, &[]).await;
    let id_arg = id.to_string();
    let workflow_id = workflow_id_of(id);
    let unblock = cli
        .signed_payload(&[
            "unblock",
            &id_arg,
            "--unblocked-by",
            "carol",
            "--reason",
            "retrying the inventory",
        ])
        .await;
    let signal = temporal_signal(&workflow_id, "unblock", &unblock).await;
    assert_eq!(signal.code, 0, "{}", signal.stderr);
    // Unblocked once, then blocked again by the same stray key.
    let every = Duration::from_millis(200);
    let blocked_again = poll::until(Duration::from_secs(90), every, async || match block_state(
        &stack, id,
    )
    .await
    {
        state @ (Some(_), 1) => Ok(state),
        state => Err(format!("never re-blocked: {state:?}")),
    })
    .await;
    cli.wait_status(&id_arg, 60, |s| !s["blocked"].is_null())
        .await;
    // The same signed payload again: as an update and as a signal, refused, still blocked.
    let update = temporal_update(&workflow_id, "unblock", &unblock).await;
    assert_update_refused(&update, "already used");
    let signal = temporal_signal(&workflow_id, "unblock", &unblock).await;
    assert_eq!(signal.code, 0, "{}", signal.stderr);
    poll::until(Duration::from_secs(60), every, async || {
        let refusals = audit_reasons(&stack, id, "unblock_rejected").await;
        match refusals.iter().any(|r| r.contains("already used")) {
            true => Ok(()),
            false => Err(format!("replay never recorded: {refusals:?}")),
        }
    })
    .await;
    assert_eq!(
        block_state(&stack, id).await,
        blocked_again,
        "a replay unblocks nothing"
    );
    cli.abort(&id_arg, "carol", "test done")
        .await
        .expect_code(0);
}
