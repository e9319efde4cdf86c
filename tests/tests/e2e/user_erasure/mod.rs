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

use std::collections::BTreeSet;

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

/// `user submit --target user:<pubkey> --requested-by alice` (must exit 0).
pub async fn submit_user(cli: &Cli, pubkey: &str) -> Submitted {
    let json = cli
        .run(&[
            "user",
            "submit",
            "--target",
            &format!("user:{pubkey}"),
            "--requested-by",
            "alice",
        ])
        .await
        .expect_code(0)
        .json();
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
