//! Must-show 5 of issue 17: the worker is SIGKILLed at a random moment in every stage of a real
//! user deletion, and the deletion still completes with no row deleted twice or left behind.
//!
//! The run is driven one stage at a time (`user run ID --next-step`). For each stage the test
//! waits for the stage's anchor (its row turned `running`, or its first row batch logged), sleeps
//! a random 0..=T ms drawn from a seeded xorshift (the seed is printed; `BUZZ_KILL_SEED` replays
//! one), kills the worker, starts a new one on the same queue and waits for the CLI: the new
//! worker takes the handler over once the dead attempt's 5 s heartbeat timeout expires. Where
//! each kill landed is read from Postgres right after it (handler before its first logged
//! delete, mid-purge, or after its result was saved) and printed. Rows are deleted 20 per
//! transaction (`BUZZ_USER_ROW_BATCH`) and the user has over a thousand rows per community, so
//! the row phase of a purge lasts long enough for a kill to land inside it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::process::Stdio;
use std::time::Duration;

use activities::taxonomy::derived_keys;
use demo::user::media_key;
use sqlx::PgPool;
use testkit::prelude::*;
use testkit::records::as_serving;
use tokio::time::Instant;
use uuid::Uuid;

use super::{
    ThreeCommunities, ThreeCommunityCounts, USER_COLUMNS, fresh_pubkey, seed_three_communities,
    without_user,
};

/// The seed used unless `BUZZ_KILL_SEED` gives another (decimal or 0x-hex).
///
/// Why it is sure to test something: with this seed the first `purge_db` kill is anchored on the
/// stage's first logged row batch, 29 ms after it, while the row phase of every community lasts
/// about 250 ms unloaded (60 batches of 20 rows at ~4 ms) and only longer under load: that kill
/// lands mid-purge on any machine, and its stage's rows end up logged under two generations. The
/// other draws: the second `purge_db` 31 ms after `running` (before its first delete: the
/// catalog checks alone take longer), the third 497 ms after `running` (mid-purge or after the
/// result, depending on the community and the load), `purge_agents` 175 ms after `running`
/// (among its key scans), `gate_user` 53 ms after `running` (about its whole duration).
const DEFAULT_SEED: u64 = 0x5eed_0017_02b3;

/// Rows per delete transaction for the workers of this test.
const ROW_BATCH: &str = "20";

/// Events the user authors in each community (60 delete batches at 20 rows).
const USER_EVENTS: i64 = 1200;

/// Agents of the user in the agents community beyond the two seeded with keys (rows only).
const EXTRA_AGENTS: i64 = 60;

/// Events another user authors in each community (they must all stay).
const OTHER_EVENTS: i64 = 60;

/// Longest time to wait for one `user run --next-step` (kill, 5 s heartbeat timeout, retry
/// backoff, the workflow task timeout of the dead worker, the handler again, the transition).
const STEP_TIMEOUT: Duration = Duration::from_secs(90);

/// A tiny deterministic generator (xorshift64*): no new crate for a few numbers.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> XorShift {
        // Zero is xorshift's fixed point.
        XorShift(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform enough in `0..=max`.
    fn up_to(&mut self, max: u64) -> u64 {
        self.next() % (max + 1)
    }
}

/// The seed of this run: `BUZZ_KILL_SEED` (decimal or 0x-hex) or [`DEFAULT_SEED`].
fn kill_seed() -> u64 {
    match std::env::var("BUZZ_KILL_SEED") {
        Ok(text) => {
            let text = text.trim();
            let parsed = match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => text.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("BUZZ_KILL_SEED={text}: {e}"))
        }
        Err(_) => DEFAULT_SEED,
    }
}

/// What the kill of one stage waits for before its random delay starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Anchor {
    /// The stage row turned `running` (the handler started).
    Running,
    /// The stage's first row batch was logged (the handler is deleting rows).
    FirstRowBatch,
}

/// Where and when to kill the worker in one stage: the anchor and the delay after it.
#[derive(Debug, Clone, Copy)]
struct KillPlan {
    anchor: Anchor,
    delay_ms: u64,
}

/// One random stream per stage kind, so that a kind's draws do not depend on where in the run
/// the other kinds' stages fall (the communities' order follows their random ids).
struct KillPlanner {
    streams: BTreeMap<&'static str, XorShift>,
}

impl KillPlanner {
    fn new(seed: u64) -> KillPlanner {
        let streams = [
            ("gate_user", 0x9a7e),
            ("purge_db", 0xdb),
            ("purge_agents", 0xa6e7),
        ]
        .into_iter()
        .map(|(kind, salt)| (kind, XorShift::new(seed ^ (salt << 32))))
        .collect();
        KillPlanner { streams }
    }

    /// The kill of the next stage of kind `stage`. T (the longest delay) is about the stage's
    /// duration on this stack after the anchor, so the draws spread over "before the first
    /// delete", "mid-purge" and "after the result was saved": `gate_user` takes ~50 ms,
    /// `purge_db` ~300 ms before its row phase (catalog checks, media) and ~250 ms of rows,
    /// `purge_agents` ~450 ms (one key scan per agent, then the rows).
    fn next(&mut self, stage: &str) -> KillPlan {
        let Some(rng) = self.streams.get_mut(stage) else {
            panic!("no kill plan for stage {stage}");
        };
        let anchor = match (stage, rng.up_to(2)) {
            ("gate_user", _) | (_, 1 | 2) => Anchor::Running,
            _ => Anchor::FirstRowBatch,
        };
        let max = match (stage, anchor) {
            ("gate_user", _) => 60,
            (_, Anchor::FirstRowBatch) => 120,
            ("purge_db", Anchor::Running) => 700,
            (_, Anchor::Running) => 500,
        };
        KillPlan {
            anchor,
            delay_ms: rng.up_to(max),
        }
    }
}

/// Where a kill landed, read from Postgres once the worker was dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Landed {
    /// The handler ran but had logged nothing irreversible under its generation.
    BeforeFirstDelete,
    /// The handler had logged batches under its generation and saved no result.
    MidPurge,
    /// The gate was running (it deletes nothing; it fences).
    MidGate,
    /// The handler's result was already saved.
    AfterResultSaved,
}

/// One kill.
struct Kill {
    stage: String,
    community: Option<Uuid>,
    stage_id: Uuid,
    plan: KillPlan,
    generation: i64,
    batches_logged: i64,
    landed: Landed,
    /// From the kill until `user run --next-step` exited (the new worker took over).
    recovered_in: Duration,
}

impl fmt::Display for Kill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let community = self
            .community
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".to_owned());
        write!(
            f,
            "{:<12} {community:<36} killed {:>3} ms after {:<13?} (generation {}, {} batches \
             logged): {:?}, recovered in {:.1?}",
            self.stage,
            self.plan.delay_ms,
            self.plan.anchor,
            self.generation,
            self.batches_logged,
            self.landed,
            self.recovered_in
        )
    }
}

/// The current stage row of the request, as (id, stage, community, status, generation).
type CurrentRow = (Uuid, String, Option<Uuid>, String, Option<i64>);

async fn current_row(owner: &PgPool, id: Uuid) -> Option<CurrentRow> {
    sqlx::query_as(
        "SELECT id, stage, community_id, status, exec_generation \
         FROM deletion.user_stage_history WHERE request_id = $1 AND is_current",
    )
    .bind(id)
    .fetch_optional(owner)
    .await
    .unwrap_or_else(|e| panic!("current stage row of {id}: {e}"))
}

async fn request_stage(owner: &PgPool, id: Uuid) -> String {
    sqlx::query_scalar("SELECT stage FROM deletion.requests WHERE id = $1")
        .bind(id)
        .fetch_one(owner)
        .await
        .unwrap_or_else(|e| panic!("request {id}: {e}"))
}

/// The user's rows per (community, table) in the declared tables, counted as the owner.
async fn user_row_counts(
    owner: &PgPool,
    communities: &[Uuid],
    pubkey: &str,
) -> BTreeMap<(Uuid, String), i64> {
    let mut counts = BTreeMap::new();
    for community in communities {
        for (table, column) in USER_COLUMNS {
            let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT count(*) FROM buzz.{table} WHERE community_id = $1 AND {column} = $2"
            )))
            .bind(community)
            .bind(pubkey)
            .fetch_one(owner)
            .await
            .unwrap_or_else(|e| panic!("counting buzz.{table}: {e}"));
            if n > 0 {
                counts.insert((*community, format!("buzz.{table}")), n);
            }
        }
    }
    counts
}

/// Bulk rows as the serving role (the relay's role, so the write fences judge them): `events`
/// events by `pubkey` in `community`, and `agents` agents (rows only, no keys).
async fn seed_bulk(stack: &Stack, community: Uuid, pubkey: &str, events: i64, agents: i64) {
    let salt = Uuid::new_v4().to_string();
    let bulk_events = sqlx::query(
        "INSERT INTO buzz.events (id, community_id, pubkey, kind, content) \
         SELECT encode(sha256(convert_to($3 || g::text, 'UTF8')), 'hex'), $1, $2, 1, \
                'bulk note ' || g \
         FROM generate_series(1, $4::int8) AS g",
    );
    let bulk_events = bulk_events
        .bind(community)
        .bind(pubkey)
        .bind(&salt)
        .bind(events);
    as_serving(stack, bulk_events, &format!("bulk events in {community}")).await;
    let bulk_agents = sqlx::query(
        "INSERT INTO buzz.agents (id, community_id, pubkey, name) \
         SELECT gen_random_uuid(), $1, $2, 'bulk agent ' || g FROM generate_series(1, $3::int8) AS g",
    );
    let bulk_agents = bulk_agents.bind(community).bind(pubkey).bind(agents);
    as_serving(stack, bulk_agents, &format!("bulk agents in {community}")).await;
}

/// Where the kill of the attempt of generation `generation` on `stage_id` landed.
async fn where_it_landed(
    owner: &PgPool,
    stage: &str,
    stage_id: Uuid,
    generation: i64,
) -> (Landed, i64) {
    let (status,): (String,) =
        sqlx::query_as("SELECT status FROM deletion.user_stage_history WHERE id = $1")
            .bind(stage_id)
            .fetch_one(owner)
            .await
            .unwrap_or_else(|e| panic!("stage row {stage_id}: {e}"));
    let batches: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM deletion.user_purge_log WHERE stage_id = $1 AND exec_generation = $2",
    )
    .bind(stage_id)
    .bind(generation)
    .fetch_one(owner)
    .await
    .unwrap_or_else(|e| panic!("purge log of {stage_id}: {e}"));
    let landed = match (status.as_str(), stage, batches) {
        ("completed", _, _) => Landed::AfterResultSaved,
        (_, "gate_user", _) => Landed::MidGate,
        (_, _, 0) => Landed::BeforeFirstDelete,
        _ => Landed::MidPurge,
    };
    (landed, batches)
}

/// `buzz-deletion user run ID --next-step`, started in the background.
fn spawn_next_step(cli: &Cli, id: Uuid) -> tokio::process::Child {
    let id = id.to_string();
    cli.command(&["user", "run", &id, "--next-step"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("could not start `user run --next-step`: {e}"))
}

/// Waits until the current stage row is `running` (or already completed) and is not one of
/// `done`; its id, stage, community and generation.
async fn wait_running(
    owner: &PgPool,
    id: Uuid,
    done: &BTreeSet<Uuid>,
    seed: u64,
) -> (Uuid, String, Option<Uuid>, i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some((row, stage, community, status, generation)) = current_row(owner, id).await
            && !done.contains(&row)
            && matches!(status.as_str(), "running" | "completed")
            && let Some(generation) = generation
        {
            return (row, stage, community, generation);
        }
        assert!(
            Instant::now() < deadline,
            "seed {seed:#x}: no new stage row started running within 60 s: {:?}",
            current_row(owner, id).await
        );
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
}

/// Waits until the attempt of `generation` logged its first row batch on `stage_id`, or the row
/// completed without one (then the kill lands after the result was saved).
async fn wait_first_row_batch(owner: &PgPool, stage_id: Uuid, generation: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (logged, completed): (bool, bool) = sqlx::query_as(
            "SELECT EXISTS (SELECT 1 FROM deletion.user_purge_log WHERE stage_id = $1 \
                            AND exec_generation = $2 AND what = 'rows'), \
                    EXISTS (SELECT 1 FROM deletion.user_stage_history WHERE id = $1 \
                            AND status = 'completed')",
        )
        .bind(stage_id)
        .bind(generation)
        .fetch_one(owner)
        .await
        .unwrap_or_else(|e| panic!("purge log of {stage_id}: {e}"));
        if logged || completed {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "stage row {stage_id} logged no row batch within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_at_a_random_moment_in_every_stage_deletes_each_row_exactly_once() {
    let _shared = outage_lock().read().await;
    let kill_seed = kill_seed();
    eprintln!("worker_kills: seed {kill_seed:#x} (replay with BUZZ_KILL_SEED={kill_seed:#x})");
    let mut planner = KillPlanner::new(kill_seed);
    let stack = stack().await;
    let owner = stack.store.pool().clone();
    let queue = unique_queue("user-kill");
    let worker_env = [("BUZZ_USER_ROW_BATCH", ROW_BATCH)];
    let mut worker = WorkerProcess::start(&queue, &worker_env).await;
    let cli = Cli::new(&queue);
    let user = fresh_pubkey();
    let other = fresh_pubkey();

    // A: member, allow-listed, three uploads of their own and one shared with `other`.
    // B: member with agents (two with keys, many rows only); `other` has an agent too.
    // C: former member (events and keys left). Every community also holds a small tenant and
    // `other`'s events.
    let own: Vec<Vec<u8>> = (0..3)
        .map(|n| format!("picture {n} only the user uploaded {}", Uuid::new_v4()).into_bytes())
        .collect();
    let shared = format!("a picture both uploaded {}", Uuid::new_v4()).into_bytes();
    let counts = ThreeCommunityCounts {
        a_user_events: 2,
        user_keys: [3, 2, 2],
        b_other_keys: 1,
    };
    let ThreeCommunities { a, b, c, b_user } =
        seed_three_communities(&stack, "kill-", (&user, &other), (&own, &shared), &counts).await;
    for community in [a, b, c] {
        let agents = if community == b { EXTRA_AGENTS } else { 0 };
        seed_bulk(&stack, community, &user, USER_EVENTS, agents).await;
        seed_bulk(&stack, community, &other, OTHER_EVENTS, 0).await;
    }
    let mut b_agents = b_user.agents.clone();
    b_agents.extend(
        sqlx::query_scalar::<_, Uuid>(
            "SELECT id FROM buzz.agents WHERE community_id = $1 AND pubkey = $2",
        )
        .bind(b)
        .bind(&user)
        .fetch_all(&owner)
        .await
        .unwrap_or_else(|e| panic!("the user's agents: {e}")),
    );
    let own_keys: BTreeSet<String> = own.iter().map(|body| media_key(a, body).0).collect();
    let (shared_key, _) = media_key(a, &shared);

    let counted = user_row_counts(&owner, &[a, b, c], &user).await;
    let mut before = BTreeMap::new();
    for community in [a, b, c] {
        before.insert(community, snapshot(&stack, community).await);
    }

    let (id, digest) = cli.user_submit(&format!("user:{user}"), "alice").await;
    cli.user_approve(&id, "bob", &digest).await.expect_code(0);
    let id: Uuid = id
        .parse()
        .unwrap_or_else(|e| panic!("request id {id}: {e}"));

    // One stage per `--next-step`, one kill in each.
    let mut kills: Vec<Kill> = Vec::new();
    let mut done = BTreeSet::new();
    let started = Instant::now();
    while request_stage(&owner, id).await != "completed" {
        assert!(
            kills.len() < 8,
            "seed {kill_seed:#x}: more steps than the five stages of this request"
        );
        let step = spawn_next_step(&cli, id);
        let (stage_id, stage, community, generation) =
            wait_running(&owner, id, &done, kill_seed).await;
        let plan = planner.next(&stage);
        if plan.anchor == Anchor::FirstRowBatch {
            wait_first_row_batch(&owner, stage_id, generation).await;
        }
        tokio::time::sleep(Duration::from_millis(plan.delay_ms)).await;
        worker.crash().await;
        let killed_at = Instant::now();
        // A commit the dead worker had already sent is applied or not by now.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (landed, batches_logged) = where_it_landed(&owner, &stage, stage_id, generation).await;
        let mut kill = Kill {
            stage,
            community,
            stage_id,
            plan,
            generation,
            batches_logged,
            landed,
            recovered_in: Duration::ZERO,
        };
        done.insert(stage_id);
        worker = WorkerProcess::start(&queue, &worker_env).await;
        let output = tokio::time::timeout(STEP_TIMEOUT, step.wait_with_output())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "seed {kill_seed:#x}: `user run --next-step` did not finish within \
                     {STEP_TIMEOUT:?} after the kill (a crash loop?): {kill}"
                )
            })
            .unwrap_or_else(|e| panic!("`user run --next-step`: {e}"));
        CliRun::from_output(&output).expect_exit(0);
        kill.recovered_in = killed_at.elapsed();
        eprintln!("worker_kills: {kill}");
        kills.push(kill);
    }
    let report: Vec<String> = kills.iter().map(ToString::to_string).collect();
    let report = report.join("\n  ");
    eprintln!(
        "worker_kills: completed in {:?} with seed {kill_seed:#x}:\n  {report}",
        started.elapsed()
    );
    let context = format!("seed {kill_seed:#x}, kills:\n  {report}");

    // Nothing of the user is left, nothing of anyone else was touched, the shared object stays.
    for community in [a, b, c] {
        let erased: BTreeSet<String> = if community == a {
            own_keys.clone()
        } else {
            BTreeSet::new()
        };
        let agents: &[Uuid] = if community == b { &b_agents } else { &[] };
        let expected = without_user(&before[&community], community, &user, &erased, agents);
        assert_ne!(expected, before[&community], "{context}");
        let after = snapshot(&stack, community).await;
        assert_identical(
            &expected,
            &after,
            &format!("community {community} after the deletion ({context})"),
        );
    }
    assert!(
        object_versions(&stack, a)
            .await
            .iter()
            .any(|v| v.key == shared_key),
        "the object `other` also uploaded is kept ({context})"
    );

    // No row deleted twice or left behind: per (community, table) the logged batches add up to
    // exactly the user's rows counted before the deletion.
    let logged: Vec<(Uuid, String, i64)> = sqlx::query_as(
        "SELECT community_id, subject, sum(removed)::int8 FROM deletion.user_purge_log \
         WHERE request_id = $1 AND what = 'rows' GROUP BY community_id, subject",
    )
    .bind(id)
    .fetch_all(&owner)
    .await
    .unwrap_or_else(|e| panic!("purge log: {e}"));
    let logged: BTreeMap<(Uuid, String), i64> = logged
        .into_iter()
        .map(|(community, table, n)| ((community, table), n))
        .collect();
    assert_eq!(
        logged, counted,
        "rows logged deleted per (community, table) must equal the user's rows before ({context})"
    );
    assert_eq!(
        counted.get(&(a, "buzz.events".to_owned())),
        Some(&(USER_EVENTS + 2)),
        "{context}"
    );

    // Every stage completed; a stage whose handler was killed before saving its result ran again.
    let rows: Vec<(Uuid, String, i32, i64)> = sqlx::query_as(
        "SELECT id, status, attempt, exec_generation FROM deletion.user_stage_history \
         WHERE request_id = $1",
    )
    .bind(id)
    .fetch_all(&owner)
    .await
    .unwrap_or_else(|e| panic!("stage rows: {e}"));
    assert_eq!(rows.len(), 5, "{context}");
    assert_eq!(kills.len(), 5, "{context}");
    for (row, status, attempt, _) in &rows {
        assert_eq!(status, "completed", "stage row {row} ({context})");
        let kill = kills
            .iter()
            .find(|k| k.stage_id == *row)
            .unwrap_or_else(|| panic!("stage row {row} was never killed in ({context})"));
        if kill.landed == Landed::AfterResultSaved {
            assert_eq!(
                *attempt, 1,
                "stage row {row}: a saved result is not redone ({context})"
            );
        } else {
            assert!(
                *attempt >= 2,
                "stage row {row}: killed before its result was saved, it must have run again \
                 ({context})"
            );
        }
    }

    // At least one kill landed mid-purge, proven by the log: one stage row's rows were logged
    // under two generations (the killed attempt's and its successor's).
    let split: Vec<(Uuid, i64)> = sqlx::query_as(
        "SELECT stage_id, count(DISTINCT exec_generation)::int8 FROM deletion.user_purge_log \
         WHERE request_id = $1 AND what = 'rows' GROUP BY stage_id \
         HAVING count(DISTINCT exec_generation) >= 2",
    )
    .bind(id)
    .fetch_all(&owner)
    .await
    .unwrap_or_else(|e| panic!("purge log generations: {e}"));
    assert!(
        !split.is_empty() && kills.iter().any(|k| k.landed == Landed::MidPurge),
        "no kill landed mid-purge, so nothing was tested; choose another seed ({context})"
    );
    for (stage_id, _) in &split {
        let attempt = rows
            .iter()
            .find(|(row, ..)| row == stage_id)
            .map(|(_, _, attempt, _)| *attempt)
            .unwrap_or_default();
        assert!(attempt >= 2, "stage row {stage_id} ({context})");
    }

    // One media decision per object the user uploaded; the own ones deleted and stamped, each
    // of their versions logged deleted exactly once; the shared one kept.
    let decisions: Vec<(Uuid, String, String, bool, Option<i64>)> = sqlx::query_as(
        "SELECT community_id, object_key, decision, deleted_at IS NOT NULL, deleted_versions \
         FROM deletion.user_media_decisions WHERE request_id = $1 ORDER BY object_key",
    )
    .bind(id)
    .fetch_all(&owner)
    .await
    .unwrap_or_else(|e| panic!("media decisions: {e}"));
    let mut expected_decisions: Vec<(Uuid, String, String, bool, Option<i64>)> = own_keys
        .iter()
        .map(|key| (a, key.clone(), "delete".to_owned(), true, Some(3)))
        .collect();
    expected_decisions.push((a, shared_key.clone(), "keep_shared".to_owned(), false, None));
    expected_decisions.sort_by(|x, y| x.1.cmp(&y.1));
    assert_eq!(decisions, expected_decisions, "{context}");
    let versions_logged: Vec<(String, i64)> = sqlx::query_as(
        "SELECT subject, sum(removed)::int8 FROM deletion.user_purge_log \
         WHERE request_id = $1 AND what = 'object_versions' GROUP BY subject ORDER BY subject",
    )
    .bind(id)
    .fetch_all(&owner)
    .await
    .unwrap_or_else(|e| panic!("object versions logged: {e}"));
    // The media object, its thumbnail and its metadata document: one version each.
    let mut expected_versions: Vec<(String, i64)> = own_keys
        .iter()
        .flat_map(|k| std::iter::once(k.clone()).chain(derived_keys(k).into_iter().flatten()))
        .map(|k| (k, 1))
        .collect();
    expected_versions.sort();
    assert_eq!(versions_logged, expected_versions, "{context}");

    // Every purge stage is in the audit trail with its community exactly once, whatever attempt
    // wrote it (a retried attempt does not write it again).
    let audited: Vec<(String, String)> = sqlx::query_as(
        "SELECT detail->>'stage', detail->>'community_id' FROM deletion.audit_events \
         WHERE request_id = $1 AND event = 'user.community_purged'",
    )
    .bind(id)
    .fetch_all(&owner)
    .await
    .unwrap_or_else(|e| panic!("audit trail: {e}"));
    let once: BTreeSet<(String, String)> = audited.iter().cloned().collect();
    assert_eq!(
        once.len(),
        audited.len(),
        "an event written twice: {audited:?}"
    );
    let audited = once;
    let purged: BTreeSet<(String, String)> = kills
        .iter()
        .filter_map(|k| k.community.map(|c| (k.stage.clone(), c.to_string())))
        .collect();
    assert_eq!(audited, purged, "{context}");
}
