//! The Redis adapter against the real local Redis (`deploy/local/up`).
//!
//! Every test uses its own random communities, so tests run in parallel on a shared server.

use std::time::Duration;

use activities::failure::{Classified, Severity};
use activities::redis::{Cache, CacheError, control_channel, namespace_pattern};
use futures::StreamExt;
use testkit::env::{HOW_TO_START, required};
use uuid::Uuid;

/// The local Redis's URL, as the stack's environment names it.
fn redis_url() -> String {
    required(stack_config::env::REDIS_URL)
}

/// A connected cache, or a panic saying how to start the server.
async fn cache() -> Cache {
    let url = redis_url();
    Cache::connect(&url)
        .await
        .unwrap_or_else(|error| panic!("Redis not reachable at {url}: {error}; {HOW_TO_START}"))
}

fn namespace_key(community: Uuid, suffix: &str) -> String {
    namespace_pattern(community).replacen('*', suffix, 1)
}

/// Keys that look like the target's namespace but are not in it.
fn lookalike_keys(target: Uuid) -> Vec<String> {
    vec![
        format!("buzz:{target}"),
        format!("buzz:{target}-x:k"),
        format!("xbuzz:{target}:k"),
        format!("buzz:{}:k", target.to_string().to_uppercase()),
        format!("buzz::{target}:k"),
    ]
}

/// Everything a test writes outside the target namespace, with its DUMP, for byte comparison.
async fn dump_keys(keys: &[String]) -> Vec<(String, Option<Vec<u8>>)> {
    let client = redis::Client::open(redis_url().as_str()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let mut out = Vec::new();
    for key in keys {
        let dump: Option<Vec<u8>> = redis::cmd("DUMP")
            .arg(key)
            .query_async(&mut connection)
            .await
            .unwrap();
        out.push((key.clone(), dump));
    }
    out
}

async fn delete_keys(keys: &[String]) {
    let client = redis::Client::open(redis_url().as_str()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let _: u64 = redis::cmd("DEL")
        .arg(keys)
        .query_async(&mut connection)
        .await
        .unwrap();
}

#[tokio::test]
async fn purge_namespace_removes_every_target_key_and_no_neighbour_key() {
    let cache = cache().await;
    let target = Uuid::new_v4();
    let neighbour = Uuid::new_v4();
    // More than two SCAN pages' worth, so the purge must loop and UNLINK several times.
    let target_keys = 2_500;
    for i in 0..target_keys {
        let key = namespace_key(target, &format!("event:{i}"));
        cache
            .set(&key, format!("payload-{i}").as_bytes())
            .await
            .unwrap();
    }
    for i in 0..50 {
        let key = namespace_key(neighbour, &format!("event:{i}"));
        cache
            .set(&key, format!("payload-{i}").as_bytes())
            .await
            .unwrap();
    }
    let lookalikes = lookalike_keys(target);
    for key in &lookalikes {
        cache.set(key, b"not the target's").await.unwrap();
    }
    let neighbour_before = cache.snapshot_namespace(neighbour).await.unwrap();
    let lookalikes_before = dump_keys(&lookalikes).await;
    assert_eq!(cache.count_namespace(target).await.unwrap(), target_keys);

    let (unlinked, progress) = purge_reporting(&cache, target).await;

    assert_eq!(unlinked, target_keys);
    assert!(
        progress.len() >= 2,
        "one progress report per page: {progress:?}"
    );
    assert!(progress.windows(2).all(|w| w[0] < w[1]), "{progress:?}");
    assert_eq!(progress.last(), Some(&target_keys));
    assert_eq!(cache.count_namespace(target).await.unwrap(), 0);
    assert_eq!(
        cache.snapshot_namespace(neighbour).await.unwrap(),
        neighbour_before
    );
    assert_eq!(neighbour_before.len(), 50);
    assert_eq!(dump_keys(&lookalikes).await, lookalikes_before);
    assert!(lookalikes_before.iter().all(|(_, dump)| dump.is_some()));

    cache.purge_namespace(neighbour, |_| {}).await.unwrap();
    delete_keys(&lookalikes).await;
}

#[tokio::test]
async fn purging_an_already_purged_namespace_unlinks_nothing() {
    let cache = cache().await;
    let target = Uuid::new_v4();
    cache.set(&namespace_key(target, "k"), b"v").await.unwrap();

    assert_eq!(cache.purge_namespace(target, |_| {}).await.unwrap(), 1);
    let mut reports = 0;
    assert_eq!(
        cache
            .purge_namespace(target, |_| reports += 1)
            .await
            .unwrap(),
        0
    );
    assert_eq!(reports, 0);
}

#[tokio::test]
async fn verify_absent_fails_naming_a_remaining_key_and_passes_after_purge() {
    let cache = cache().await;
    let target = Uuid::new_v4();
    let straggler = namespace_key(target, "session:late-writer");
    assert_verification_finds(&cache, target, &straggler).await;
}

/// Purges `community`'s namespace: the keys unlinked, and every progress report on the way.
pub(crate) async fn purge_reporting(cache: &Cache, community: Uuid) -> (u64, Vec<u64>) {
    let mut progress = Vec::new();
    let unlinked = cache
        .purge_namespace(community, |so_far| progress.push(so_far))
        .await
        .unwrap();
    (unlinked, progress)
}

/// Writes `straggler` into `community`'s namespace: verification fails (transiently) naming it,
/// and passes once the namespace is purged.
pub(crate) async fn assert_verification_finds(cache: &Cache, community: Uuid, straggler: &str) {
    cache
        .set(straggler, b"written after the fence")
        .await
        .unwrap();
    let error = cache.verify_absent(community).await.unwrap_err();
    assert!(
        matches!(&error, CacheError::KeyStillPresent { key } if key == straggler),
        "{error:?}"
    );
    assert_eq!(error.severity(), Severity::Transient);
    assert!(error.to_string().contains(straggler));

    cache.purge_namespace(community, |_| {}).await.unwrap();
    cache.verify_absent(community).await.unwrap();
}

#[tokio::test]
async fn verify_absent_ignores_lookalike_keys_outside_the_namespace() {
    let cache = cache().await;
    let target = Uuid::new_v4();
    let lookalikes = lookalike_keys(target);
    for key in &lookalikes {
        cache.set(key, b"not the target's").await.unwrap();
    }

    let verdict = cache.verify_absent(target).await;

    delete_keys(&lookalikes).await;
    verdict.unwrap();
}

#[tokio::test]
async fn snapshot_namespace_holds_each_key_once_sorted_with_its_value_dump() {
    let cache = cache().await;
    let community = Uuid::new_v4();
    for suffix in ["b", "a", "c"] {
        cache
            .set(&namespace_key(community, suffix), suffix.as_bytes())
            .await
            .unwrap();
    }

    let snapshot = cache.snapshot_namespace(community).await.unwrap();
    cache.purge_namespace(community, |_| {}).await.unwrap();

    let keys: Vec<_> = snapshot.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(
        keys,
        ["a", "b", "c"]
            .map(|s| namespace_key(community, s))
            .to_vec()
    );
    assert_ne!(snapshot[0].1, snapshot[1].1, "dumps carry the values");
}

#[tokio::test]
async fn publish_disconnect_reaches_a_subscriber_on_the_control_channel() {
    let cache = cache().await;
    let community = Uuid::new_v4();
    let client = redis::Client::open(redis_url().as_str()).unwrap();
    let mut subscriber = client.get_async_pubsub().await.unwrap();
    subscriber
        .subscribe(control_channel(community))
        .await
        .unwrap();
    let mut other = client.get_async_pubsub().await.unwrap();
    other
        .subscribe(control_channel(Uuid::new_v4()))
        .await
        .unwrap();

    let receivers = cache.publish_disconnect(community).await.unwrap();

    assert_eq!(receivers, 1, "only the community's own channel subscriber");
    let message = tokio::time::timeout(Duration::from_secs(5), subscriber.on_message().next())
        .await
        .expect("the disconnect message must arrive")
        .expect("subscription stream open");
    assert_eq!(message.get_channel_name(), control_channel(community));
    assert_eq!(
        message.get_payload::<String>().unwrap(),
        r#"{"op":"DisconnectCommunity"}"#
    );
    let stray = tokio::time::timeout(Duration::from_millis(200), other.on_message().next()).await;
    assert!(
        stray.is_err(),
        "another community's channel must stay silent"
    );
}
