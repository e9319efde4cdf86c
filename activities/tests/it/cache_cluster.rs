//! The Redis adapter against the local Redis Cluster (`deploy/local/up`: three primaries with
//! one replica each on loopback): a community with keys in every slot range and a user with keys
//! on every primary are purged and verified; a neighbour's keys are byte-identical; a primary
//! failed over between purge pages and a slot migrated mid-purge leave nothing behind; a
//! single-node setting pointed at a cluster node is refused naming the fix.
//!
//! Tests that change the topology (failover, migration) hold [`topology_lock`] for writing, the
//! others for reading: each proves its own story, not a neighbour test's timing.

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use activities::failure::{Classified, Severity};
use activities::redis::{Cache, CacheError, RedisConfig, namespace_pattern};
use activities::taxonomy::user_keys::{
    user_key_prefix, user_key_scan_pattern, user_key_shape, user_keys_everywhere_pattern,
};
use futures::StreamExt;
use testkit::redis_cluster::{
    self, SeededPair, cluster_cache, fail_over, finish_migration, key_slot,
    keys_in_every_slot_range, keys_on_node, namespace_key, node_connection, node_ports, owner_of,
    primaries, primaries_holding, seed_keys, start_migration,
};
use uuid::Uuid;

fn topology_lock() -> &'static tokio::sync::RwLock<()> {
    static LOCK: OnceLock<tokio::sync::RwLock<()>> = OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::RwLock::new(()))
}

/// For a test that changes the topology: the lock held for writing, and a cache on the cluster
/// once it is ready again.
async fn topology_changing() -> (tokio::sync::RwLockWriteGuard<'static, ()>, Cache) {
    let exclusive = topology_lock().write().await;
    redis_cluster::wait_until_ready();
    (exclusive, cluster_cache().await)
}

/// Waits (at most 10 s) until no node, replicas included, holds a key matching `pattern`.
async fn assert_no_node_holds(pattern: &str) {
    let mut left = Vec::new();
    for _ in 0..100 {
        left = node_ports()
            .into_iter()
            .flat_map(|port| {
                keys_on_node(port, pattern)
                    .into_iter()
                    .map(move |k| (port, k))
            })
            .collect::<Vec<_>>();
        if left.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "keys of {pattern} are left on nodes: {:?}",
        &left[..left.len().min(5)]
    );
}

#[tokio::test]
async fn the_hash_slot_the_tests_compute_is_the_clusters() {
    let _shared = topology_lock().read().await;
    let mut connection = node_connection(node_ports()[0]);
    for key in [
        "buzz:x:k",
        "a{user1000}b",
        "{}x",
        "{x}{y}",
        "buzz:{c}:event:7",
    ] {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut connection)
            .unwrap();
        assert_eq!(key_slot(key), slot, "{key}");
    }
}

#[tokio::test]
async fn a_community_with_keys_in_every_slot_range_is_purged_and_verified_and_a_neighbour_is_byte_identical()
 {
    let _shared = topology_lock().read().await;
    let cache = cluster_cache().await;
    let target = Uuid::new_v4();
    let neighbour = Uuid::new_v4();
    let mut target_keys = keys_in_every_slot_range(target, 8);
    // Fifty keys of one slot: one UNLINK of many keys, which must not span slots.
    let tag = Uuid::new_v4();
    target_keys.extend((0..50).map(|i| namespace_key(target, &format!("room:{{{tag}}}:m:{i}"))));
    let neighbour_keys = keys_in_every_slot_range(neighbour, 2);
    let lookalikes = [
        format!("buzz:{target}"),
        format!("buzz:{target}-x:k"),
        format!("xbuzz:{target}:k"),
        format!("buzz:{}:k", target.to_string().to_uppercase()),
    ];
    seed_keys(&cache, &target_keys).await;
    seed_keys(&cache, &neighbour_keys).await;
    seed_keys(&cache, &lookalikes).await;
    let all_primaries: BTreeSet<u16> = primaries().iter().map(|p| p.port).collect();
    assert_eq!(primaries_holding(&target_keys), all_primaries);
    assert_eq!(primaries_holding(&neighbour_keys), all_primaries);
    let total = target_keys.len() as u64;
    // What a single-node client would have seen: one shard's share.
    let one_shard = keys_on_node(*all_primaries.first().unwrap(), &namespace_pattern(target));
    assert!(
        (one_shard.len() as u64) < total / 2,
        "{} of {total}",
        one_shard.len()
    );
    assert_eq!(cache.count_namespace(target).await.unwrap(), total);
    let neighbour_before = cache.snapshot_namespace(neighbour).await.unwrap();
    assert_eq!(neighbour_before.len(), neighbour_keys.len());
    let mut lookalikes_before = Vec::new();
    for key in &lookalikes {
        lookalikes_before.extend(cache.snapshot_matching(key).await.unwrap());
    }
    assert_eq!(lookalikes_before.len(), lookalikes.len());

    let (unlinked, progress) = crate::cache::purge_reporting(&cache, target).await;

    assert_eq!(unlinked, total);
    assert!(
        progress.len() >= 3,
        "a page at least per primary: {progress:?}"
    );
    assert!(progress.windows(2).all(|w| w[0] <= w[1]), "{progress:?}");
    assert_eq!(progress.last(), Some(&total));
    cache.verify_absent(target).await.unwrap();
    assert_eq!(cache.count_namespace(target).await.unwrap(), 0);
    assert_no_node_holds(&namespace_pattern(target)).await;
    assert_eq!(
        cache.snapshot_namespace(neighbour).await.unwrap(),
        neighbour_before
    );
    let mut lookalikes_after = Vec::new();
    for key in &lookalikes {
        lookalikes_after.extend(cache.snapshot_matching(key).await.unwrap());
    }
    assert_eq!(lookalikes_after, lookalikes_before);

    cache.purge_namespace(neighbour, |_| {}).await.unwrap();
    for key in &lookalikes {
        cache.purge_matching(key, |_| {}).await.unwrap();
    }
}

#[tokio::test]
async fn verification_finds_a_key_left_on_any_primary() {
    let _shared = topology_lock().read().await;
    let cache = cluster_cache().await;
    for primary in primaries() {
        let community = Uuid::new_v4();
        let straggler = (0..)
            .map(|i| namespace_key(community, &format!("late:{i}")))
            .find(|key| primary.serves(key_slot(key)))
            .unwrap();
        crate::cache::assert_verification_finds(&cache, community, &straggler).await;
    }
}

/// A random canonical pubkey (64 lowercase hex).
fn pubkey() -> String {
    format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple())
}

/// Every declared shape of `pk` in `community`, with sessions enough to reach every primary.
fn user_keys(community: Uuid, pk: &str) -> Vec<String> {
    let prefix = user_key_prefix(community, pk);
    let mut keys = vec![
        prefix.clone(),
        format!("{prefix}:presence"),
        format!("{prefix}:inbox"),
        format!("{prefix}:served:run-1:7"),
    ];
    keys.extend((0..40).map(|i| format!("{prefix}:session:s{i}")));
    keys
}

#[tokio::test]
async fn a_user_with_keys_on_every_primary_is_found_purged_by_declared_shape_and_verified() {
    let _shared = topology_lock().read().await;
    let cache = cluster_cache().await;
    let communities = [Uuid::new_v4(), Uuid::new_v4()];
    let (user, other) = (pubkey(), pubkey());
    let mut mine = Vec::new();
    let mut theirs = Vec::new();
    for community in communities {
        mine.extend(user_keys(community, &user));
        theirs.extend(user_keys(community, &other));
    }
    seed_keys(&cache, &mine).await;
    seed_keys(&cache, &theirs).await;
    let all_primaries: BTreeSet<u16> = primaries().iter().map(|p| p.port).collect();
    assert_eq!(primaries_holding(&mine), all_primaries);
    let others_before = user_keys_of(&cache, &communities, &other).await;
    assert_eq!(others_before.len(), theirs.len());

    // The inventory: every community holding one of the user's keys, found on whichever primary.
    let mut found = BTreeSet::new();
    cache
        .for_each_matching(&user_keys_everywhere_pattern(&user), |key| {
            found.insert(key.split(':').nth(1).unwrap().to_owned());
        })
        .await
        .unwrap();
    let expected: BTreeSet<String> = communities.iter().map(Uuid::to_string).collect();
    assert_eq!(found, expected);

    // An undeclared key under the prefix blocks the purge naming it; removed, the purge completes.
    let stray = format!("{}:stray", user_key_prefix(communities[0], &user));
    cache.set(&stray, b"no declared shape").await.unwrap();
    let pattern = user_key_scan_pattern(communities[0], &user);
    let declared = |key: &str| user_key_shape(communities[0], &user, key).is_some();
    let error = cache
        .purge_declared_matching(&pattern, declared, |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(&error, CacheError::UndeclaredKey { key, .. } if *key == stray),
        "{error:?}"
    );
    assert_eq!(error.severity(), Severity::Permanent);
    redis::cmd("UNLINK")
        .arg(&stray)
        .query::<u64>(&mut node_connection(owner_of(key_slot(&stray)).port))
        .unwrap();

    let mut unlinked = 0;
    for community in communities {
        let pattern = user_key_scan_pattern(community, &user);
        let declared = |key: &str| user_key_shape(community, &user, key).is_some();
        unlinked += cache
            .purge_declared_matching(&pattern, declared, |_| {})
            .await
            .unwrap();
        cache.verify_absent_matching(&pattern).await.unwrap();
        assert_eq!(cache.count_matching(&pattern).await.unwrap(), 0);
    }
    assert!(unlinked <= mine.len() as u64);
    assert_no_node_holds(&user_keys_everywhere_pattern(&user)).await;
    let others_after = user_keys_of(&cache, &communities, &other).await;
    for community in communities {
        cache
            .purge_matching(&user_key_scan_pattern(community, &other), |_| {})
            .await
            .unwrap();
    }
    assert_eq!(others_after, others_before);
}

/// Every key of `user` in `communities`, with its value, community by community.
async fn user_keys_of(cache: &Cache, communities: &[Uuid], user: &str) -> Vec<(String, Vec<u8>)> {
    let mut keys = Vec::new();
    for &community in communities {
        let pattern = user_key_scan_pattern(community, user);
        keys.extend(cache.snapshot_matching(&pattern).await.unwrap());
    }
    keys
}

#[tokio::test]
async fn a_primary_failed_over_between_purge_pages_leaves_no_key_and_the_purge_completes() {
    let (_exclusive, cache) = topology_changing().await;
    let pair = SeededPair::in_every_slot_range(&cache, 40, 4).await;
    let target = pair.target;
    let before = primaries();
    // The primary SCANned last (by address): its shard is purged after the failover.
    let failing = before.last().unwrap().port;

    let failed_over = AtomicBool::new(false);
    let mut promoted = None;
    let unlinked = cache
        .purge_namespace(target, |_| {
            if !failed_over.swap(true, Ordering::SeqCst) {
                promoted = Some(fail_over(failing));
            }
        })
        .await
        .unwrap();

    let promoted = promoted.expect("the failover ran between purge pages");
    let after: Vec<u16> = primaries().iter().map(|p| p.port).collect();
    assert!(
        after.contains(&promoted) && !after.contains(&failing),
        "{failing} should have handed its slots to {promoted}: {after:?}"
    );
    assert_eq!(unlinked, pair.target_keys.len() as u64);
    cache.verify_absent(target).await.unwrap();
    assert_no_node_holds(&namespace_pattern(target)).await;
    pair.assert_neighbour_byte_identical(&cache).await;
    cache.purge_namespace(pair.neighbour, |_| {}).await.unwrap();
}

/// Brings back the node a test crashed, even when the test fails half-way.
struct RestartStoppedNodes;

impl Drop for RestartStoppedNodes {
    fn drop(&mut self) {
        redis_cluster::restart_stopped_nodes();
    }
}

#[tokio::test]
async fn a_primary_that_crashes_mid_purge_and_is_replaced_by_its_replica_leaves_no_key() {
    let (_exclusive, cache) = topology_changing().await;
    let pair = SeededPair::in_every_slot_range(&cache, 40, 4).await;
    let target = pair.target;
    // The primary SCANned last crashes after the first page; its replica must hold what it
    // held (replication is asynchronous: wait until it does, so that the count is exact).
    let crashing = primaries().last().unwrap().clone();
    let replica = redis_cluster::nodes()
        .into_iter()
        .find(|n| n.primary_id.as_deref() == Some(crashing.id.as_str()))
        .unwrap();
    let pattern = namespace_pattern(target);
    for _ in 0..100 {
        if keys_on_node(replica.port, &pattern).len() == keys_on_node(crashing.port, &pattern).len()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let _restart = RestartStoppedNodes;
    let crashed = AtomicBool::new(false);
    let mut promoted = None;
    let unlinked = cache
        .purge_namespace(target, |_| {
            if !crashed.swap(true, Ordering::SeqCst) {
                promoted = Some(redis_cluster::crash_and_fail_over(crashing.port));
            }
        })
        .await
        .unwrap();

    assert_eq!(
        promoted,
        Some(replica.port),
        "the replica took over mid-purge"
    );
    assert_eq!(unlinked, pair.target_keys.len() as u64);
    cache.verify_absent(target).await.unwrap();
    pair.assert_neighbour_byte_identical(&cache).await;
    drop(_restart);
    // The crashed node is back, a replica of its successor, and holds nothing of the target.
    assert_no_node_holds(&pattern).await;
    cache.purge_namespace(pair.neighbour, |_| {}).await.unwrap();
}

/// A hash tag whose slot the primary on `port` serves.
fn tag_served_by(port: u16) -> (String, u16) {
    let owner = primaries().into_iter().find(|p| p.port == port).unwrap();
    (0..)
        .map(|i| format!("mig-{}-{i}", Uuid::new_v4().simple()))
        .map(|tag| {
            let slot = key_slot(&format!("{{{tag}}}"));
            (tag, slot)
        })
        .find(|(_, slot)| owner.serves(*slot))
        .unwrap()
}

#[tokio::test]
async fn a_slot_migrating_mid_purge_is_survived_and_its_keys_are_purged_where_they_land() {
    let (_exclusive, cache) = topology_changing().await;
    let target = Uuid::new_v4();
    let neighbour = Uuid::new_v4();
    let before = primaries();
    // The slot's keys move from the primary SCANned last to the one SCANned first, which the
    // pass has already passed: a pass that did not notice would miss them.
    let (from, to) = (before.last().unwrap().clone(), before[0].clone());
    let (tag, slot) = tag_served_by(from.port);
    let mut target_keys = keys_in_every_slot_range(target, 4);
    let moving: Vec<String> = (0..200)
        .map(|i| namespace_key(target, &format!("room:{{{tag}}}:m:{i}")))
        .collect();
    target_keys.extend(moving.iter().cloned());
    let mut neighbour_keys = keys_in_every_slot_range(neighbour, 1);
    neighbour_keys
        .extend((0..50).map(|i| namespace_key(neighbour, &format!("room:{{{tag}}}:m:{i}"))));
    let pair = SeededPair::seed(&cache, (target, target_keys), (neighbour, neighbour_keys)).await;

    struct Reopened(u16);
    impl Drop for Reopened {
        fn drop(&mut self) {
            redis_cluster::close_migration(self.0);
        }
    }
    let _stable_on_failure = Reopened(slot);
    let started = AtomicBool::new(false);
    let mut finisher = None;
    let unlinked = cache
        .purge_namespace(target, |_| {
            if started.swap(true, Ordering::SeqCst) {
                return;
            }
            // Half the slot's keys (the neighbour's among them) move now; the rest, and the
            // slot itself, a moment later, while the purge goes on.
            let mut source = node_connection(from.port);
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(125)
                .query(&mut source)
                .unwrap();
            start_migration(slot, &from, &to, &keys);
            let (from, to) = (from.clone(), to.clone());
            finisher = Some(std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                finish_migration(slot, &from, &to);
            }));
        })
        .await;
    finisher
        .expect("the migration started between purge pages")
        .join()
        .expect("the migration finished");
    let unlinked = unlinked.unwrap();

    assert!(
        owner_of(slot).port == to.port,
        "slot {slot} moved to {}",
        to.port
    );
    assert_eq!(unlinked, pair.target_keys.len() as u64);
    cache.verify_absent(target).await.unwrap();
    assert_no_node_holds(&namespace_pattern(target)).await;
    pair.assert_neighbour_byte_identical(&cache).await;
    cache.purge_namespace(pair.neighbour, |_| {}).await.unwrap();
}

#[tokio::test]
async fn a_single_node_setting_pointed_at_a_cluster_node_is_refused_naming_the_fix() {
    // Every node must answer: not while a topology test has one down.
    let _shared = topology_lock().read().await;
    for port in node_ports() {
        let url = format!("redis://127.0.0.1:{port}");
        let error = Cache::connect(&url).await.unwrap_err();
        assert_matches!(error, CacheError::ModeMismatch { .. });
        assert_eq!(error.severity(), Severity::Permanent);
        let message = error.to_string();
        assert!(
            message.contains(&url)
                && message.contains("Redis Cluster node")
                && message.contains("set BUZZ_REDIS_MODE=cluster"),
            "{message}"
        );
        assert!(!message.contains('\n'), "{message}");
    }
    // And the other way round: the cluster setting on the single server.
    let single = stack_config::env::StackEnv::process()
        .redis_url()
        .unwrap_or_else(|e| panic!("{e}"));
    let error = Cache::connect_with(&RedisConfig::cluster(&single))
        .await
        .unwrap_err();
    assert_matches!(error, CacheError::ModeMismatch { .. });
    assert!(
        error.to_string().contains("unset BUZZ_REDIS_MODE"),
        "{error}"
    );
}

#[tokio::test]
async fn the_disconnect_message_reaches_a_subscriber_on_another_node() {
    let _shared = topology_lock().read().await;
    let cache = cluster_cache().await;
    let community = Uuid::new_v4();
    let mut subscribers = Vec::new();
    for port in node_ports() {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
        let mut pubsub = client.get_async_pubsub().await.unwrap();
        pubsub
            .subscribe(activities::redis::control_channel(community))
            .await
            .unwrap();
        subscribers.push(pubsub);
    }

    cache.publish_disconnect(community).await.unwrap();

    for mut subscriber in subscribers {
        let message = tokio::time::timeout(Duration::from_secs(5), subscriber.on_message().next())
            .await
            .expect("every node delivers the disconnect")
            .expect("subscription open");
        assert_eq!(
            message.get_payload::<String>().unwrap(),
            r#"{"op":"DisconnectCommunity"}"#
        );
    }
}
