//! Real user deletion (`user:<pubkey>` targets) on the real stack, through the CLI and the worker
//! binary: one user's footprint erased across communities while everyone else's data stays
//! byte-identical.
//!
//! - `across_communities`: the user in three communities (member, member with agents, former
//!   member), with an upload shared with another user; malformed targets.
//! - `live_traffic`: the relay writing as the user and others while the deletion runs.
//! - `owned_communities`: an owned community blocks until ownership is transferred; a child
//!   community deletion of one the user owns alone.
//! - `gate_refusals`: an upload row naming another tenant's object, and data written in an
//!   uninventoried community, each block before anything is deleted.
//! - `undeclared_table`: a tenant table without a user-data declaration blocks the inventory.
//! - `key_shapes`: every declared per-user key shape (the bare profile key included) is erased,
//!   an undeclared key under the user's prefix blocks naming it, and the thumbnail and metadata
//!   of the user's own uploads go with them while a shared upload's stay.
//! - `demo_on_production_worker`: a `demo:` request run by the worker that has the real handlers
//!   changes no row, object, key, fence or lease.
//! - `abort`: the fence lifted on abort before the irreversible point, abort refused after it.
//! - `worker_kills`: the worker SIGKILLed at a seeded random moment in every stage; every row of
//!   the user deleted exactly once, nobody else's touched.

mod abort;
mod across_communities;
mod demo_on_production_worker;
mod gate_refusals;
mod key_shapes;
mod live_traffic;
mod owned_communities;
mod undeclared_table;
mod worker_kills;

use std::collections::{BTreeMap, BTreeSet};

use activities::taxonomy::derived_keys;
use activities::taxonomy::user_keys::user_key_prefix;
use demo::user::{UserSeed, UserSeedReport, seed_user};
use sha2::{Digest, Sha256};
use testkit::prelude::*;
use uuid::Uuid;

/// A fresh random 64-hex pubkey.
pub fn fresh_pubkey() -> String {
    hex::encode(Sha256::digest(Uuid::new_v4().as_bytes()))
}

/// What `user submit --target user:<pubkey>` answered.
pub struct Submitted {
    /// The request id.
    pub id: String,
    /// The frozen inventory's digest.
    pub digest: String,
    /// The whole answer (`inventory` included).
    pub json: serde_json::Value,
}

impl Submitted {
    /// The inventory's footprint of `community` (null when it is not listed).
    pub fn footprint(&self, community: Uuid) -> serde_json::Value {
        self.json["inventory"]["communities"]
            .as_array()
            .and_then(|all| {
                all.iter()
                    .find(|e| e["community_id"] == community.to_string())
            })
            .map(|e| e["footprint"].clone())
            .unwrap_or_default()
    }
}

/// `user submit --target user:<pubkey> --requested-by alice`, whatever it answers.
pub async fn user_submit(cli: &Cli, pubkey: &str) -> CliRun {
    cli.user_submit_run(&format!("user:{pubkey}"), "alice")
        .await
}

/// `user submit --target user:<pubkey> --requested-by alice` (must exit 0).
pub async fn submit_user(cli: &Cli, pubkey: &str) -> Submitted {
    let json = user_submit(cli, pubkey).await.expect_code(0).json();
    let field = |name: &str| json[name].as_str().unwrap_or_default().to_owned();
    let (id, digest) = (field("request_id"), field("inventory_digest"));
    assert!(
        !id.is_empty() && !digest.is_empty(),
        "submit printed {json}"
    );
    Submitted { id, digest, json }
}

/// Seeds `seed` for `pubkey` in `community` as the serving side.
pub async fn seed_footprint(
    stack: &Stack,
    community: Uuid,
    pubkey: &str,
    seed: &UserSeed,
) -> UserSeedReport {
    seed_user(
        &stack.serving,
        &stack.objects,
        &stack.cache,
        community,
        pubkey,
        seed,
    )
    .await
    .unwrap_or_else(|e| panic!("seeding {pubkey} in {community}: {e}"))
}

/// `user run ID`, which must stop blocked (exit 1); returns the reason the request records.
pub async fn run_until_blocked(stack: &Stack, cli: &Cli, id: &str) -> String {
    cli.user_run(id).await.expect_exit(1);
    testkit::refusal::blocked_reason(stack, id).await
}

/// The remedy applied: `user unblock ID` by alice giving `reason` (exit 0), then `user run ID`
/// to its end (exit 0).
pub async fn unblock_and_run_to_end(cli: &Cli, id: &str, reason: &str) {
    cli.user_unblock(id, "alice", reason).await.expect_code(0);
    cli.user_run(id).await.expect_exit(0);
}

/// How many events `pubkey` has, in every community.
pub async fn events_of(stack: &Stack, pubkey: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM buzz.events WHERE pubkey = $1")
        .bind(pubkey)
        .fetch_one(stack.store.pool())
        .await
        .unwrap_or_else(|e| panic!("events of {pubkey}: {e}"))
}

/// The rows of `pubkey` left in `community`, per declared table (zeros included).
pub async fn rows_left(stack: &Stack, community: Uuid, pubkey: &str) -> BTreeMap<String, u64> {
    stack
        .store
        .user_rows_left(community, pubkey)
        .await
        .unwrap_or_else(|e| panic!("rows of {pubkey} left in {community}: {e}"))
}

/// A member who posted `events` events, with `agents` agents and `keys` Redis keys of their own.
pub fn member(events: u32, agents: u32, keys: u32) -> UserSeed {
    UserSeed {
        member: true,
        events,
        agents,
        keys,
        ..UserSeed::default()
    }
}

/// A member who posted `events` events, and nothing else.
pub fn member_with_events(events: u32) -> UserSeed {
    member(events, 0, 0)
}

/// How much of each the three-community story seeds; the stories telling it differ only here.
pub struct ThreeCommunityCounts {
    /// The user's events in A.
    pub a_user_events: u32,
    /// The user's keys in A, B and C.
    pub user_keys: [u32; 3],
    /// `other`'s keys in B.
    pub b_other_keys: u32,
}

/// The three communities of the story and what seeding the user in B reported.
pub struct ThreeCommunities {
    pub a: Uuid,
    pub b: Uuid,
    pub c: Uuid,
    pub b_user: UserSeedReport,
}

/// A user active in three communities, with `other` beside them: in A the user is a member,
/// allow-listed, with uploads `own` and `shared` (`other`, a member too, uploaded `shared`
/// as well); in B both are members, the user with two agents, `other` with one; in C the user
/// is a former member (events and keys left). Hosts are named `{prefix}uploads`,
/// `{prefix}agents` and `{prefix}former`.
pub async fn seed_three_communities(
    stack: &Stack,
    prefix: &str,
    (user, other): (&str, &str),
    (own, shared): (&[Vec<u8>], &[u8]),
    counts: &ThreeCommunityCounts,
) -> ThreeCommunities {
    let a = small_community(stack, &format!("{prefix}uploads")).await;
    let b = small_community(stack, &format!("{prefix}agents")).await;
    let c = small_community(stack, &format!("{prefix}former")).await;
    let [a_keys, b_keys, c_keys] = counts.user_keys;
    let mut uploads = own.to_vec();
    uploads.push(shared.to_vec());
    let in_a = UserSeed {
        allowlisted: true,
        uploads,
        ..member(counts.a_user_events, 0, a_keys)
    };
    seed_footprint(stack, a, user, &in_a).await;
    let other_in_a = UserSeed {
        uploads: vec![shared.to_vec()],
        ..member(2, 0, 1)
    };
    seed_footprint(stack, a, other, &other_in_a).await;
    let b_user = seed_footprint(stack, b, user, &member(2, 2, b_keys)).await;
    let other_in_b = member(1, 1, counts.b_other_keys);
    seed_footprint(stack, b, other, &other_in_b).await;
    let former_in_c = UserSeed {
        events: 2,
        keys: c_keys,
        ..UserSeed::default()
    };
    seed_footprint(stack, c, user, &former_in_c).await;
    ThreeCommunities { a, b, c, b_user }
}

/// Columns holding the pubkey of the user a row belongs to (the shipped declarations).
const USER_COLUMNS: [(&str, &str); 5] = [
    ("events", "pubkey"),
    ("memberships", "pubkey"),
    ("pubkey_allowlist", "pubkey"),
    ("agents", "pubkey"),
    ("media_uploads", "uploader_pubkey"),
];

/// `before` without everything of `pubkey`: its rows in the declared tables, the versions (and
/// bytes) of `erased_objects` and of the objects derived from them, and the keys under its
/// prefix (the bare profile key included) and of `agents`' namespaces. What a community must
/// look like after the user's deletion, byte for byte.
pub fn without_user(
    before: &Snapshot,
    community: Uuid,
    pubkey: &str,
    erased_objects: &BTreeSet<String>,
    agents: &[Uuid],
) -> Snapshot {
    let mut expected = before.clone();
    for table in &mut expected.rows {
        let column = USER_COLUMNS
            .iter()
            .find(|(name, _)| table.table.ends_with(name))
            .map(|(_, column)| *column);
        if let Some(column) = column {
            table.rows.retain(|row| {
                let row: serde_json::Value = serde_json::from_str(row).unwrap_or_default();
                row[column] != pubkey
            });
        }
    }
    let erased: BTreeSet<String> = erased_objects
        .iter()
        .flat_map(|key| std::iter::once(key.clone()).chain(derived_keys(key).into_iter().flatten()))
        .collect();
    expected.versions.retain(|v| !erased.contains(&v.key));
    expected.bodies.retain(|(key, _), _| !erased.contains(key));
    let user_prefix = user_key_prefix(community, pubkey);
    let agent_prefixes: Vec<String> = agents
        .iter()
        .map(|a| format!("buzz:{}:agent:{}:", community.hyphenated(), a.hyphenated()))
        .collect();
    expected.keys.retain(|(key, _)| {
        !key.starts_with(&user_prefix) && !agent_prefixes.iter().any(|p| key.starts_with(p))
    });
    expected
}
