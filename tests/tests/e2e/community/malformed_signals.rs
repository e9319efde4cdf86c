//! Malformed operator signals, sent the way the Web UI's "Send a Signal" dialog sends them:
//! through Temporal's own signal API (the `temporal` CLI, plus a raw client call for the bytes
//! no dialog produces), at every point a signal can arrive — blocked before the irreversible
//! point, awaiting approval, while deleting, blocked after the irreversible point. None may fail
//! a workflow task: each is refused in the audit trail with its reason, the status query keeps
//! answering, the durable state does not move, and the correct message afterwards takes effect
//! until the deletion completes. The user workflow gets the same treatment.

use std::time::Duration;

use demo::SeedPlan;
use serde_json::Value;
use temporalio_client::{Client, UntypedSignal, WorkflowSignalOptions};
use temporalio_common::data_converters::RawValue;
use temporalio_common::protos::temporal::api::common::v1::Payload;
use uuid::Uuid;
use workflows::community::CommunityDeletion;

use testkit::poll;
use testkit::prelude::*;
use testkit::records::{as_owner, chunk_progress};
use testkit::refusal::{approved_by, audit_trail, request_row};
use testkit::temporal::{dev_client, temporal_cli};

/// The audit events a refused signal leaves, by signal name.
const REFUSAL_EVENTS: [(&str, &str); 3] = [
    ("approve", "approval_rejected"),
    ("abort", "abort_refused"),
    ("unblock", "unblock_rejected"),
];

/// One signal input: what an operator types into the dialog (the `temporal workflow signal`
/// input flags), or hand-made payloads.
enum Input {
    Typed(Vec<String>),
    Raw(Vec<Payload>),
}

/// A signal input and whether it is malformed (an empty-strings message decodes and is then
/// refused by the rules).
struct Case {
    input: Input,
    malformed: bool,
}

fn typed(args: &[&str]) -> Input {
    Input::Typed(args.iter().map(|a| (*a).to_owned()).collect())
}

fn payload(encoding: &str, data: &[u8]) -> Payload {
    Payload {
        metadata: [("encoding".to_owned(), encoding.as_bytes().to_vec())].into(),
        data: data.to_vec(),
        external_payloads: vec![],
    }
}

/// Everything but the documented JSON an operator can send as signal `name`. The inputs with a
/// typo'd extra field and the two-inputs one carry an otherwise valid message (the frozen
/// digest, a second operator): a lenient decoder would approve, abort or unblock on them.
fn cases(name: &str, digest: &str) -> Vec<Case> {
    let (valid, missing, mistyped, empty) = match name {
        "approve" => (
            format!(r#"{{"approved_by": "mallory", "digest": "{digest}""#),
            r#"{"approved_by": "mallory"}"#.to_owned(),
            format!(r#"{{"approved_by": 7, "digest": "{digest}"}}"#),
            r#"{"approved_by": "", "digest": ""}"#,
        ),
        _ => (
            r#"{"actor": "mallory", "reason": "typed in the web ui""#.to_owned(),
            r#"{"actor": "mallory"}"#.to_owned(),
            r#"{"actor": "mallory", "reason": 7}"#.to_owned(),
            r#"{"actor": "", "reason": ""}"#,
        ),
    };
    let with_typo = format!(r#"{valid}, "force": true}}"#);
    let whole = format!("{valid}}}");
    let malformed = |input| Case {
        input,
        malformed: true,
    };
    vec![
        malformed(typed(&["--input", r#"{"garbage": 1}"#])),
        malformed(typed(&["--input", &missing])),
        malformed(typed(&["--input", &mistyped])),
        malformed(typed(&["--input", &with_typo])),
        malformed(typed(&["--input", "null"])),
        malformed(typed(&["--input", r#"["mallory", "x"]"#])),
        malformed(typed(&[])),
        malformed(typed(&["--input", &whole, "--input", &whole])),
        malformed(typed(&[
            "--input",
            "please do it",
            "--input-meta",
            "encoding=binary/plain",
        ])),
        malformed(Input::Raw(vec![payload("json/plain", b"{not json")])),
        malformed(Input::Raw(vec![payload("binary/null", b"")])),
        Case {
            input: typed(&["--input", empty]),
            malformed: false,
        },
    ]
}

/// Signals to one community deletion's workflow.
struct Signals {
    client: Client,
    workflow_id: String,
}

impl Signals {
    async fn send(&self, name: &str, input: &Input) {
        match input {
            Input::Typed(args) => {
                let mut all = vec![
                    "workflow",
                    "signal",
                    "-w",
                    &self.workflow_id,
                    "--name",
                    name,
                ];
                all.extend(args.iter().map(String::as_str));
                let run = temporal_cli(&all).await;
                assert_eq!(run.code, 0, "signal {name} {args:?}: {}", run.stderr);
            }
            Input::Raw(payloads) => self
                .client
                .get_workflow_handle::<CommunityDeletion>(&self.workflow_id)
                .signal(
                    UntypedSignal::new(name),
                    RawValue::new(payloads.clone()),
                    WorkflowSignalOptions::default(),
                )
                .await
                .unwrap_or_else(|e| panic!("raw signal {name}: {e}")),
        }
    }
}

/// The request's durable state a refused message must not move.
#[derive(Debug, PartialEq, Eq)]
struct Durable {
    stage: String,
    blocked_reason: Option<String>,
    approved_by: Option<String>,
    fence_generation: Option<i64>,
    irreversible: bool,
    decisions: Vec<String>,
}

async fn durable(stack: &Stack, id: Uuid) -> Durable {
    let request = request_row(stack, id).await;
    let decisions = audit(stack, id)
        .await
        .into_iter()
        .map(|(event, ..)| event)
        .filter(|e| ["unblocked", "aborted", "approved"].contains(&e.as_str()))
        .collect();
    Durable {
        stage: request.stage,
        blocked_reason: request.blocked_reason,
        approved_by: approved_by(stack, id).await,
        fence_generation: request.fence_generation,
        irreversible: request.irreversible_at.is_some(),
        decisions,
    }
}

/// The audit trail as (event, actor, reason).
async fn audit(stack: &Stack, id: Uuid) -> Vec<(String, String, String)> {
    audit_trail(stack, id)
        .await
        .into_iter()
        .map(|e| {
            let reason = e.detail["reason"].as_str().unwrap_or_default().to_owned();
            (e.event, e.actor, reason)
        })
        .collect()
}

async fn refusals(stack: &Stack, id: Uuid) -> Vec<(String, String, String)> {
    audit(stack, id)
        .await
        .into_iter()
        .filter(|(event, ..)| REFUSAL_EVENTS.iter().any(|(_, e)| e == event))
        .collect()
}

/// Every event type in the workflow's history (all runs share the id; this follows the latest).
async fn history_event_types(workflow_id: &str) -> Vec<String> {
    let run = temporal_cli(&["workflow", "show", "-w", workflow_id, "--output", "json"]).await;
    assert_eq!(run.code, 0, "workflow show: {}", run.stderr);
    let history: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("workflow show printed no JSON ({e}): {}", run.stdout));
    let mut types = Vec::new();
    collect_event_types(&history, &mut types);
    types
}

fn collect_event_types(value: &Value, into: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match v {
                    Value::String(s) if key == "eventType" => into.push(s.clone()),
                    other => collect_event_types(other, into),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_event_types(v, into)),
        _ => {}
    }
}

fn is_task_failure(event_type: &str) -> bool {
    let normalized = event_type.to_ascii_lowercase().replace('_', "");
    normalized.contains("workflowtaskfailed")
}

/// Sends every malformed input as each signal, then checks: each is refused in the audit trail
/// with its reason, the status query answers, the durable state did not move, and no workflow
/// task failed.
async fn every_malformed_signal(
    stack: &Stack,
    cli: &Cli,
    signals: &Signals,
    id: Uuid,
    digest: &str,
    point: &str,
) {
    let before = durable(stack, id).await;
    let refused_before = refusals(stack, id).await.len();
    let mut sent = 0;
    for (name, _) in REFUSAL_EVENTS {
        for case in cases(name, digest) {
            signals.send(name, &case.input).await;
            sent += 1;
        }
    }
    let every = Duration::from_millis(200);
    let new = poll::until(Duration::from_secs(90), every, async || {
        let all = refusals(stack, id).await;
        if all.len() >= refused_before + sent {
            return Ok(all[refused_before..].to_vec());
        }
        Err(format!(
            "{point}: {} of {sent} signals refused on record; history {:?}",
            all.len() - refused_before,
            history_event_types(&signals.workflow_id).await
        ))
    })
    .await;
    assert_eq!(new.len(), sent, "{point}: one refusal per signal: {new:#?}");
    for (name, event) in REFUSAL_EVENTS {
        let of_kind: Vec<_> = new.iter().filter(|(e, ..)| e == event).collect();
        let expected = cases(name, digest);
        assert_eq!(
            of_kind.len(),
            expected.len(),
            "{point}: {event}: {of_kind:#?}"
        );
        let malformed = of_kind
            .iter()
            .filter(|(_, _, reason)| reason.starts_with(&format!("malformed {name} signal")))
            .count();
        assert_eq!(
            malformed,
            expected.iter().filter(|c| c.malformed).count(),
            "{point}: {event} reasons: {of_kind:#?}"
        );
        assert!(
            of_kind.iter().all(|(_, _, reason)| !reason.is_empty()),
            "{point}: every refusal says why: {of_kind:#?}"
        );
        assert!(
            of_kind
                .iter()
                .any(|(_, actor, reason)| actor == "mallory" && reason.contains("\"force\"")),
            "{point}: the typo'd field is named and the sender kept: {of_kind:#?}"
        );
    }
    let status = cli.run(&["community", "status", &id.to_string()]).await;
    let status = status.json();
    assert!(
        status["phase"].is_string() && status["answered_by_workflow"].is_null(),
        "{point}: the workflow answers its status query: {status}"
    );
    assert_eq!(
        durable(stack, id).await,
        before,
        "{point}: a refused signal changed nothing"
    );
    let failures: Vec<String> = history_event_types(&signals.workflow_id)
        .await
        .into_iter()
        .filter(|t| is_task_failure(t))
        .collect();
    assert!(
        failures.is_empty(),
        "{point}: workflow tasks failed: {failures:?}"
    );
}

impl Signals {
    /// Sends the unblock of `id` by carol giving `reason` as the Web UI's dialog does: the
    /// signed JSON `community sign unblock` prints, pasted as the signal's input.
    async fn unblock(&self, cli: &Cli, id: Uuid, reason: &str) {
        let id = id.to_string();
        let signed = [
            "unblock",
            &id,
            "--unblocked-by",
            "carol",
            "--reason",
            reason,
        ];
        let unblock = cli.signed_payload(&signed).await;
        self.send("unblock", &typed(&["--input", &unblock])).await;
    }
}

/// Waits until Postgres shows `done` for the request.
async fn wait_request(stack: &Stack, id: Uuid, what: &str, done: impl Fn(&Durable) -> bool) {
    poll::until(
        Duration::from_secs(180),
        Duration::from_millis(100),
        async || {
            let state = durable(stack, id).await;
            match done(&state) {
                true => Ok(()),
                false => Err(format!("never {what}: {state:?}")),
            }
        },
    )
    .await;
}

/// The last manifest chunk's entries as stored.
async fn last_chunk(stack: &Stack, id: Uuid) -> (i32, String) {
    sqlx::query_as(
        "SELECT chunk_no, entries::text FROM deletion.manifest_chunks WHERE request_id = $1 \
         ORDER BY chunk_no DESC LIMIT 1",
    )
    .bind(id)
    .fetch_one(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

async fn set_chunk_entries(stack: &Stack, id: Uuid, chunk_no: i32, entries: &str) {
    let update = sqlx::query(
        "UPDATE deletion.manifest_chunks SET entries = $3::jsonb \
         WHERE request_id = $1 AND chunk_no = $2",
    );
    let update = update.bind(id).bind(chunk_no).bind(entries);
    as_owner(stack, update, "the manifest chunk's entries").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_signals_at_every_point_are_refused_on_record_and_never_wedge_the_deletion() {
    // Small chunks deleted slowly leave time to signal while deleting.
    let worker_env = [
        ("BUZZ_MANIFEST_CHUNK_ENTRIES", "50"),
        ("BUZZ_DELETE_RATE_PER_PREFIX", "15"),
    ];
    let (stack, cli, _worker) = with_worker("malformed", &worker_env).await;
    let plan = SeedPlan {
        objects: 100,
        versions: 2,
        delete_markers: 4,
        rows: 5,
        redis_keys: 5,
        parallelism: 16,
    };
    let target = Tenant::seed(&stack, "malformed", plan).await;
    let community = target.id;
    // An unknown key shape blocks the inventory: the point before the irreversible one.
    let (stray, _) = plant_stray_key(&stack, community).await;
    let (id, _) = cli
        .submit_blocked(
            &target.host,
            &[
                "--delete-parallelism",
                "1",
                "--chunks-per-call",
                "1",
                "--delete-rounds-per-run",
                "500",
            ],
        )
        .await;
    let workflow_id = request_row(&stack, id).await.workflow_id;
    let signals = Signals {
        client: dev_client().await,
        workflow_id,
    };

    // 1. Blocked before the irreversible point.
    let untouched = snapshot(&stack, community).await;
    every_malformed_signal(&stack, &cli, &signals, id, "", "blocked before the point").await;
    assert_unchanged(&stack, community, &untouched, "community").await;
    remove_stray_key(&stack, community, &stray).await;
    signals.unblock(&cli, id, "removed the stray upload").await;
    let waiting = cli
        .wait_status(&id.to_string(), 90, |s| {
            s["phase"] == "awaiting_approval" && s["blocked"].is_null()
        })
        .await;
    let digest = inventory_digest(&waiting);

    // 2. Awaiting approval: even the frozen digest beside a typo'd field approves nothing.
    let untouched = snapshot(&stack, community).await;
    // Updates whose input does not decode are refused by the decoder before the validator.
    for (name, input) in [
        ("approve", r#"{"garbage": 1}"#.to_owned()),
        (
            "approve",
            format!(r#"[{{"approved_by": "mallory", "digest": "{digest}"}}]"#),
        ),
        ("abort", "null".to_owned()),
        ("unblock", r#"{"actor": 7, "reason": "x"}"#.to_owned()),
    ] {
        let run = temporal_cli(&[
            "workflow",
            "update",
            "execute",
            "-w",
            &signals.workflow_id,
            "--name",
            name,
            "--input",
            &input,
        ])
        .await;
        assert_ne!(
            run.code, 0,
            "update {name} {input} must be refused: {}",
            run.stdout
        );
    }
    let after_updates = durable(&stack, id).await;
    assert_eq!(
        (after_updates.stage.as_str(), after_updates.approved_by),
        ("inventoried", None),
        "malformed updates changed nothing"
    );
    every_malformed_signal(&stack, &cli, &signals, id, &digest, "awaiting approval").await;
    assert_unchanged(&stack, community, &untouched, "community").await;
    let id_arg = id.to_string();
    let signed = [
        "approve",
        &id_arg,
        "--approved-by",
        "bob",
        "--inventory-digest",
        &digest,
    ];
    let approve = cli.signed_payload(&signed).await;
    signals
        .send("approve", &typed(&["--input", &approve]))
        .await;

    // 3. While deleting. The last chunk is made to name a foreign key, so deletion blocks there
    // (after the irreversible point) once the earlier chunks are gone: its entries no longer
    // match the partial digest the freeze stored with them, so nothing of it is deleted.
    wait_request(&stack, id, "irreversible", |d| d.irreversible).await;
    let (last_no, original) = last_chunk(&stack, id).await;
    let foreign = original.replace(&community.to_string(), &Uuid::new_v4().to_string());
    assert_ne!(foreign, original);
    set_chunk_entries(&stack, id, last_no, &foreign).await;
    poll::until(
        Duration::from_secs(120),
        Duration::from_millis(100),
        async || match chunk_progress(&stack, id).await.chunks_stamped {
            0 => Err("no chunk stamped".to_owned()),
            _ => Ok(()),
        },
    )
    .await;
    every_malformed_signal(&stack, &cli, &signals, id, &digest, "while deleting").await;
    let progress = chunk_progress(&stack, id).await;
    assert!(
        progress.chunks_stamped < progress.chunks_total,
        "the deletion must still be running after the signals: {progress:?}"
    );

    // 4. Blocked after the irreversible point.
    let edited = format!("chunk {last_no}: its entries hash to");
    wait_request(&stack, id, "blocked on the edited chunk", |d| {
        d.blocked_reason
            .as_deref()
            .is_some_and(|r| r.contains(&edited) && r.contains("changed after the freeze"))
    })
    .await;
    every_malformed_signal(
        &stack,
        &cli,
        &signals,
        id,
        &digest,
        "blocked after the point",
    )
    .await;
    set_chunk_entries(&stack, id, last_no, &original).await;
    signals
        .unblock(&cli, id, "restored the manifest chunk")
        .await;
    cli.run(&[
        "community",
        "watch",
        &id.to_string(),
        "--timeout-secs",
        "300",
    ])
    .await
    .expect_code(0);

    target.assert_gone(&stack, "the target").await;
    let end = durable(&stack, id).await;
    assert_eq!(
        end.approved_by.as_deref(),
        Some("bob"),
        "approved once, by bob"
    );
    let unblocks = audit(&stack, id)
        .await
        .into_iter()
        .filter(|(event, ..)| event == "unblocked")
        .map(|(_, actor, _)| actor)
        .collect::<Vec<_>>();
    assert_eq!(
        unblocks,
        ["carol", "carol"],
        "only the two correct unblocks"
    );
    let history = history_event_types(&signals.workflow_id).await;
    assert!(!history.iter().any(|t| is_task_failure(t)), "{history:?}");
    let signalled = history
        .iter()
        .filter(|t| t.to_ascii_lowercase().replace('_', "").contains("signaled"))
        .count();
    assert!(
        signalled >= 4 * 36 + 3,
        "every signal is in the history ({signalled})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_signals_and_updates_never_fail_a_user_deletion_workflow_task() {
    let (_stack, cli, _worker) = with_worker("malformed-user", &[]).await;
    let target = format!("demo:malformed-{}", Uuid::new_v4().simple());
    let (id, digest) = cli.user_submit(&target, "alice").await;
    let workflow_id = workflows::user::workflow_id(id.parse().unwrap_or_default());

    // The user workflow takes one signal, `stop`, whose payload it never decodes (and with no
    // run in progress it changes nothing); any other signal must be ignored, never decoded.
    for name in ["approve", "run", "registration", "abort", "stop"] {
        for args in [
            vec!["--input", r#"{"garbage": 1}"#],
            vec!["--input", "null"],
            vec![],
            vec!["--input", "[1, 2]", "--input", "{}"],
            vec![
                "--input",
                "not json",
                "--input-meta",
                "encoding=binary/plain",
            ],
        ] {
            let mut all = vec!["workflow", "signal", "-w", &workflow_id, "--name", name];
            all.extend(args);
            let run = temporal_cli(&all).await;
            assert_eq!(run.code, 0, "signal {name}: {}", run.stderr);
        }
    }
    // Updates with malformed input are rejected by the decoder or validator, not the task.
    for (name, input) in [
        ("approve", r#"{"garbage": 1}"#),
        ("approve", "[1, 2]"),
        ("run", r#"{"next_step": "yes"}"#),
        ("registration", r#"{"garbage": 1}"#),
        ("stop", "[1, 2]"),
    ] {
        let run = temporal_cli(&[
            "workflow",
            "update",
            "execute",
            "-w",
            &workflow_id,
            "--name",
            name,
            "--input",
            input,
        ])
        .await;
        assert_ne!(
            run.code, 0,
            "update {name} {input} must be refused: {}",
            run.stdout
        );
    }
    let query = temporal_cli(&["workflow", "query", "-w", &workflow_id, "--name", "status"]).await;
    assert_eq!(query.code, 0, "the status query answers: {}", query.stderr);
    assert!(
        query.stdout.contains("awaiting_approval"),
        "{}",
        query.stdout
    );

    cli.user_approve(&id, "bob", &digest).await.expect_code(0);
    let query = temporal_cli(&["workflow", "query", "-w", &workflow_id, "--name", "status"]).await;
    assert!(query.stdout.contains("\"approved\""), "{}", query.stdout);
    let history = history_event_types(&workflow_id).await;
    assert!(!history.iter().any(|t| is_task_failure(t)), "{history:?}");
}
