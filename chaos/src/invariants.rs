//! The invariants checked after every run. Each broken one is a [`Violation`] that names the
//! community or request and says exactly what differs, so a failing seed can be diagnosed from
//! the report alone.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use activities::serving::ServingLeaseConfig;
use anyhow::Result;
use demo::simulator::{
    AdmittedWrites, HostWriter, RowTable, UnconfirmedWrite, WriteKind, WriteOutcome,
};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::population::Snapshot;
use crate::stack::Stores;

/// One broken invariant.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub invariant: &'static str,
    /// The community host or request id.
    pub subject: String,
    /// What is wrong.
    pub detail: String,
}

fn violation(invariant: &'static str, subject: &str, detail: String) -> Violation {
    Violation {
        invariant,
        subject: subject.to_owned(),
        detail,
    }
}

/// A completed target holds nothing in any store: no row, version, delete marker, unfinished
/// upload or Redis key.
pub fn target_is_empty(host: &str, after: &Snapshot) -> Vec<Violation> {
    if after.is_empty() {
        return Vec::new();
    }
    let tables: Vec<String> = after
        .rows
        .iter()
        .filter(|t| !t.rows.is_empty())
        .map(|t| format!("{} ({})", t.table, t.rows.len()))
        .collect();
    vec![violation(
        "completed target is empty",
        host,
        format!(
            "left behind: rows in [{}], {} object version(s) of which {} delete marker(s), {} unfinished upload(s), {} Redis key(s); first version: {:?}",
            tables.join(", "),
            after.versions.len(),
            after.delete_markers(),
            after.uploads.len(),
            after.keys.len(),
            after.versions.first().map(|v| (&v.key, &v.version_id)),
        ),
    )]
}

/// The key that identifies a row the simulator writes, from its JSON.
fn row_identity(table: &str, json: &str) -> Option<(RowTable, String)> {
    let row: Value = serde_json::from_str(json).ok()?;
    match table {
        "buzz.events" => Some((RowTable::Events, row.get("id")?.as_str()?.to_owned())),
        "buzz.memberships" => Some((
            RowTable::Memberships,
            row.get("pubkey")?.as_str()?.to_owned(),
        )),
        _ => None,
    }
}

/// A community that must be whole is its snapshot plus exactly the serving writes admitted for
/// it, plus at most the writes whose outcome the writer could not know (each allowed only for
/// its own row, object key or Redis key). Nothing of the snapshot may be missing or changed.
pub fn whole(
    invariant: &'static str,
    host: &str,
    before: &Snapshot,
    after: &Snapshot,
    writes: &AdmittedWrites,
) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut say = |detail: String| found.push(violation(invariant, host, detail));
    if writes.truncated {
        say("the serving writes were not all recorded (raise the record limit): the neighbour cannot be proven whole".into());
    }
    let admitted_rows: HashSet<(RowTable, String)> = writes
        .rows
        .iter()
        .map(|r| (r.table, r.key.clone()))
        .collect();
    let unsure_rows = unconfirmed(writes, |w| match w {
        UnconfirmedWrite::Row(r) => Some((r.table, r.key.clone())),
        _ => None,
    });
    let unsure_objects = unconfirmed(writes, |w| match w {
        UnconfirmedWrite::ObjectKey(k) => Some(k.as_str()),
        _ => None,
    });
    let unsure_keys = unconfirmed(writes, |w| match w {
        UnconfirmedWrite::Key(k) => Some(k.as_str()),
        _ => None,
    });

    // Rows.
    let before_rows: BTreeMap<&str, BTreeSet<&str>> = before
        .rows
        .iter()
        .map(|t| {
            (
                t.table.as_str(),
                t.rows.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    let mut present_rows: HashSet<(RowTable, String)> = HashSet::new();
    for table in &after.rows {
        let was = before_rows
            .get(table.table.as_str())
            .cloned()
            .unwrap_or_default();
        let now: BTreeSet<&str> = table.rows.iter().map(String::as_str).collect();
        let lost = was.difference(&now).count();
        if lost > 0 {
            say(format!(
                "{lost} row(s) of {} lost or changed, e.g. {}",
                table.table,
                was.difference(&now).next().copied().unwrap_or_default()
            ));
        }
        for extra in now.difference(&was) {
            match row_identity(&table.table, extra) {
                Some(identity) => {
                    if !admitted_rows.contains(&identity) && !unsure_rows.contains(&identity) {
                        say(format!(
                            "a row nobody wrote appeared in {}: {extra}",
                            table.table
                        ));
                    }
                    present_rows.insert(identity);
                }
                None => say(format!(
                    "a row nobody wrote appeared in {}: {extra}",
                    table.table
                )),
            }
        }
    }
    for table in before_rows.keys() {
        if !after.rows.iter().any(|t| t.table == *table) {
            say(format!("table {table} is no longer listed"));
        }
    }
    let missing_rows = writes
        .rows
        .iter()
        .filter(|r| !present_rows.contains(&(r.table, r.key.clone())))
        .count();
    if missing_rows > 0 {
        say(format!("{missing_rows} admitted row(s) are gone"));
    }

    // Object versions (compared without `is_latest`, which a newer admitted version flips).
    let identity =
        |v: &activities::s3::ObjectVersion| (v.key.clone(), v.version_id.clone(), v.kind, v.size);
    let was: BTreeSet<_> = before.versions.iter().map(identity).collect();
    let now: BTreeSet<_> = after.versions.iter().map(identity).collect();
    let lost: Vec<_> = was.difference(&now).collect();
    if !lost.is_empty() {
        say(format!(
            "{} object version(s) lost or changed, e.g. {:?}",
            lost.len(),
            lost[0]
        ));
    }
    let admitted_versions: HashSet<(&str, &str)> = writes
        .objects
        .iter()
        .map(|o| (o.key.as_str(), o.version_id.as_str()))
        .collect();
    for extra in now.difference(&was) {
        let (key, version, _, _) = extra;
        if !admitted_versions.contains(&(key.as_str(), version.as_str()))
            && !unsure_objects.contains(key.as_str())
        {
            say(format!(
                "an object version nobody wrote appeared: {extra:?}"
            ));
        }
    }
    let present_versions: HashSet<(&str, &str)> = after
        .versions
        .iter()
        .map(|v| (v.key.as_str(), v.version_id.as_str()))
        .collect();
    let missing_versions = admitted_versions.difference(&present_versions).count();
    if missing_versions > 0 {
        say(format!(
            "{missing_versions} admitted object version(s) are gone"
        ));
    }

    // The bytes of every data version the snapshot held (a lost version is reported above).
    for ((key, version_id), body) in &before.bodies {
        if after
            .bodies
            .get(&(key.clone(), version_id.clone()))
            .is_some_and(|now| now != body)
        {
            say(format!("the bytes of {key}@{version_id} changed"));
        }
    }

    // Unfinished uploads: serving traffic starts none, so they must be exactly the same.
    if before.uploads != after.uploads {
        say(format!(
            "unfinished uploads changed: {} before, {} after",
            before.uploads.len(),
            after.uploads.len()
        ));
    }

    // Redis keys, byte for byte.
    let was: BTreeMap<&str, &Vec<u8>> = before.keys.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let now: BTreeMap<&str, &Vec<u8>> = after.keys.iter().map(|(k, v)| (k.as_str(), v)).collect();
    for (key, dump) in &was {
        match now.get(key) {
            None => say(format!("Redis key {key} lost")),
            Some(value) if value != dump => say(format!("Redis key {key} changed")),
            Some(_) => {}
        }
    }
    let admitted_keys: HashSet<&str> = writes.keys.iter().map(String::as_str).collect();
    for key in now.keys() {
        if !was.contains_key(key) && !admitted_keys.contains(key) && !unsure_keys.contains(key) {
            say(format!("a Redis key nobody wrote appeared: {key}"));
        }
    }
    let missing_keys = admitted_keys
        .iter()
        .filter(|k| !now.contains_key(*k))
        .count();
    if missing_keys > 0 {
        say(format!("{missing_keys} admitted Redis key(s) are gone"));
    }
    found
}

/// The unconfirmed writes `pick` keeps, as it names them.
fn unconfirmed<'a, T: Eq + std::hash::Hash>(
    writes: &'a AdmittedWrites,
    pick: impl Fn(&'a UnconfirmedWrite) -> Option<T>,
) -> HashSet<T> {
    writes.unconfirmed.iter().filter_map(pick).collect()
}

/// An aborted target is served again: a row and a Redis key written now are both admitted.
pub async fn served_again(stores: &Stores, host: &str, community_id: Uuid) -> Vec<Violation> {
    let writer = HostWriter {
        store: stores.serving.clone(),
        objects: stores.objects.clone(),
        cache: stores.cache.clone(),
        lease: ServingLeaseConfig::default(),
        community_id,
        run_tag: "chaos-check".into(),
        authors: Vec::new(),
    };
    let mut found = Vec::new();
    for (seq, kind) in [(0u64, WriteKind::Row), (3, WriteKind::CacheKey)] {
        match writer.write(kind, seq, None).await {
            WriteOutcome::Admitted(_) => {}
            other => found.push(violation(
                "aborted target is served again",
                host,
                format!("a {kind:?} write after the abort ended {other:?}"),
            )),
        }
    }
    found
}

/// The community stages in the order a request may pass them; `aborted` may follow any stage
/// before the irreversible point.
const STAGE_ORDER: [&str; 11] = [
    "submitted",
    "inventoried",
    "approved",
    "fenced",
    "drained",
    "bindings_removed",
    "postgres_purged",
    "cache_purged",
    "logically_verified",
    "retention_pending",
    "aborted",
];

/// The request's audit trail and manifest: each stage once and in order, each checkpoint with its
/// audit event (no audit row lost), each chunk stamped at most once (and, for a completed
/// request, every chunk stamped with all its versions acknowledged).
pub async fn proof_is_sound(
    stores: &Stores,
    request_id: Uuid,
    completed: bool,
) -> Result<Vec<Violation>> {
    let subject = request_id.to_string();
    let mut found = Vec::new();
    let pool = stores.store.pool();
    let events: Vec<(i64, String, Value)> = sqlx::query_as(
        "SELECT id, event, detail FROM deletion.audit_events WHERE request_id = $1 ORDER BY id",
    )
    .bind(request_id)
    .fetch_all(pool)
    .await?;
    let stages: Vec<&str> = events
        .iter()
        .map(|(_, e, _)| e.as_str())
        .filter(|e| STAGE_ORDER.contains(e))
        .collect();
    let mut last: Option<usize> = None;
    for stage in &stages {
        let position = STAGE_ORDER.iter().position(|s| s == stage).unwrap_or(0);
        if last.is_some_and(|l| position <= l) {
            found.push(violation(
                "audit trail has each stage once, in order",
                &subject,
                format!(
                    "stage events out of order or repeated: {}",
                    stages.join(" → ")
                ),
            ));
            break;
        }
        last = Some(position);
    }
    if completed {
        let expected = &STAGE_ORDER[2..10];
        let missing: Vec<&&str> = expected.iter().filter(|s| !stages.contains(s)).collect();
        if !missing.is_empty() {
            found.push(violation(
                "audit trail has each stage once, in order",
                &subject,
                format!(
                    "completed without audit events for {missing:?}: {}",
                    stages.join(" → ")
                ),
            ));
        }
    }

    let checkpoints: Vec<String> = sqlx::query_scalar(
        "SELECT stage FROM deletion.checkpoints WHERE request_id = $1 ORDER BY reached_at",
    )
    .bind(request_id)
    .fetch_all(pool)
    .await?;
    // A stage checkpoint has exactly one audit event (stages are reached once); a milestone
    // (`preflight`, `serving_writes_drained`) is audited at every attempt that reaches it, so a
    // retried phase may add one, but never none.
    for checkpoint in &checkpoints {
        let events_for = events.iter().filter(|(_, e, _)| e == checkpoint).count();
        let is_stage = STAGE_ORDER.contains(&checkpoint.as_str());
        if events_for == 0 || (is_stage && events_for != 1) {
            found.push(violation(
                "no audit row is lost",
                &subject,
                format!(
                    "checkpoint {checkpoint} has {events_for} audit event(s), expected {}",
                    if is_stage { "1" } else { "at least 1" }
                ),
            ));
        }
    }

    let chunks: Vec<(i32, bool, Option<i64>, i32)> = sqlx::query_as(
        "SELECT chunk_no, deleted_at IS NOT NULL, deleted_versions, entry_count \
         FROM deletion.manifest_chunks WHERE request_id = $1 ORDER BY chunk_no",
    )
    .bind(request_id)
    .fetch_all(pool)
    .await?;
    let mut stamps: BTreeMap<i64, usize> = BTreeMap::new();
    for (_, event, detail) in &events {
        if event == "chunk_stamped" {
            let chunk = detail.get("chunk_no").and_then(Value::as_i64).unwrap_or(-1);
            *stamps.entry(chunk).or_default() += 1;
        }
    }
    for (chunk_no, stamped, deleted_versions, entries) in &chunks {
        let recorded = stamps.get(&i64::from(*chunk_no)).copied().unwrap_or(0);
        let expected = usize::from(*stamped);
        if recorded != expected {
            found.push(violation(
                "no chunk is stamped twice",
                &subject,
                format!("chunk {chunk_no}: {recorded} chunk_stamped event(s), stamped = {stamped}"),
            ));
        }
        if completed && (!stamped || *deleted_versions != Some(i64::from(*entries))) {
            found.push(violation(
                "no chunk is stamped twice",
                &subject,
                format!(
                    "completed with chunk {chunk_no} stamped = {stamped}, {deleted_versions:?} of {entries} version(s) acknowledged"
                ),
            ));
        }
    }
    let known: BTreeSet<i64> = chunks.iter().map(|c| i64::from(c.0)).collect();
    for chunk in stamps.keys().filter(|c| !known.contains(c)) {
        found.push(violation(
            "no chunk is stamped twice",
            &subject,
            format!("a chunk_stamped event names chunk {chunk}, which the manifest does not have"),
        ));
    }
    if completed {
        found.extend(receipt_is_sound(stores, request_id).await);
    }
    Ok(found)
}

/// A finished deletion has exactly the receipt its evidence states (the audit chain intact up to
/// the signed head, every fact re-derived equal, its leaf in the log), and its certificate
/// verifies offline with the stack's public key (`BUZZ_RECEIPT_PUBLIC_KEY_FILE`).
async fn receipt_is_sound(stores: &Stores, request_id: Uuid) -> Vec<Violation> {
    const RULE: &str = "a finished deletion's receipt states what the database holds";
    let subject = request_id.to_string();
    let mut found = Vec::new();
    let ring = match stack_config::env::StackEnv::process()
        .optional("BUZZ_RECEIPT_PUBLIC_KEY_FILE")
        .map(|path| certificate::keys::ReceiptPublicKey::read_file(std::path::Path::new(&path)))
    {
        Some(Ok(key)) => certificate::keys::KeyRing::new(vec![key]),
        Some(Err(error)) => {
            return vec![violation(
                RULE,
                &subject,
                format!("the public key: {error}"),
            )];
        }
        None => {
            return vec![violation(
                RULE,
                &subject,
                "BUZZ_RECEIPT_PUBLIC_KEY_FILE is not set: no signature can be audited".to_owned(),
            )];
        }
    };
    match stores.store.audit_certificate(request_id, &ring).await {
        Ok(audit) => {
            for problem in audit.problems {
                found.push(violation(RULE, &subject, problem));
            }
        }
        Err(error) => found.push(violation(RULE, &subject, format!("no receipt: {error}"))),
    }
    let key = stack_config::env::StackEnv::process()
        .optional("BUZZ_RECEIPT_PUBLIC_KEY_FILE")
        .map(|path| certificate::keys::ReceiptPublicKey::read_file(std::path::Path::new(&path)));
    let ring = match key {
        Some(Ok(key)) => certificate::keys::KeyRing::new(vec![key]),
        Some(Err(error)) => {
            found.push(violation(RULE, &subject, format!("public key: {error}")));
            return found;
        }
        None => {
            found.push(violation(
                RULE,
                &subject,
                "BUZZ_RECEIPT_PUBLIC_KEY_FILE is not set: source the stack's env file".to_owned(),
            ));
            return found;
        }
    };
    match stores.store.certificate(request_id, None).await {
        Ok(certificate) => {
            let json = serde_json::to_value(&certificate).unwrap_or_default();
            if let Err(problems) = certificate::verify::verify_certificate(&json, &ring, None) {
                for problem in problems {
                    found.push(violation(RULE, &subject, format!("certificate: {problem}")));
                }
            }
        }
        Err(error) => found.push(violation(
            RULE,
            &subject,
            format!("no certificate: {error}"),
        )),
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use activities::s3::{ObjectVersion, ObjectVersionRef};
    use activities::store::TableSnapshot;
    use activities::taxonomy::VersionKind;
    use demo::simulator::AdmittedRow;

    fn version(key: &str, id: &str) -> ObjectVersion {
        ObjectVersion {
            key: key.into(),
            version_id: id.into(),
            kind: VersionKind::Object,
            size: 3,
            is_latest: true,
        }
    }

    fn snapshot(rows: &[&str], versions: &[ObjectVersion], keys: &[&str]) -> Snapshot {
        Snapshot {
            rows: vec![TableSnapshot {
                table: "buzz.events".into(),
                rows: rows.iter().map(|r| (*r).to_owned()).collect(),
            }],
            versions: versions.to_vec(),
            bodies: Default::default(),
            uploads: Vec::new(),
            keys: keys.iter().map(|k| ((*k).to_owned(), vec![1])).collect(),
        }
    }

    #[test]
    fn a_neighbour_with_exactly_its_admitted_writes_is_whole() {
        let before = snapshot(&[r#"{"id":"a"}"#], &[version("k", "1")], &["x"]);
        let after = snapshot(
            &[r#"{"id":"a"}"#, r#"{"id":"b"}"#],
            &[version("k", "1"), version("k", "2")],
            &["x", "y"],
        );
        let writes = AdmittedWrites {
            rows: vec![AdmittedRow {
                table: RowTable::Events,
                key: "b".into(),
            }],
            objects: vec![ObjectVersionRef {
                key: "k".into(),
                version_id: "2".into(),
            }],
            keys: vec!["y".into()],
            unconfirmed: Vec::new(),
            truncated: false,
        };
        assert_eq!(whole("w", "h", &before, &after, &writes), Vec::new());
    }

    #[test]
    fn a_lost_row_version_or_key_and_a_stranger_are_each_caught() {
        let before = snapshot(&[r#"{"id":"a"}"#], &[version("k", "1")], &["x"]);
        let writes = AdmittedWrites::default();
        let lost_all = snapshot(&[], &[], &[]);
        assert_eq!(whole("w", "h", &before, &lost_all, &writes).len(), 3);
        let stranger = snapshot(
            &[r#"{"id":"a"}"#, r#"{"id":"z"}"#],
            &[version("k", "1"), version("k", "9")],
            &["x", "q"],
        );
        assert_eq!(whole("w", "h", &before, &stranger, &writes).len(), 3);
    }

    #[test]
    fn a_changed_byte_of_a_kept_version_is_caught() {
        let mut before = snapshot(&[], &[version("k", "1")], &[]);
        before.bodies.insert(
            ("k".into(), "1".into()),
            testkit::snapshot::Body(b"abc".to_vec()),
        );
        let mut after = before.clone();
        let writes = AdmittedWrites::default();
        assert_eq!(whole("w", "h", &before, &after, &writes), Vec::new());
        after.bodies.insert(
            ("k".into(), "1".into()),
            testkit::snapshot::Body(b"abd".to_vec()),
        );
        assert_eq!(whole("w", "h", &before, &after, &writes).len(), 1);
    }

    #[test]
    fn an_unconfirmed_write_is_allowed_only_for_its_own_key() {
        let before = snapshot(&[], &[version("k", "1")], &[]);
        let after = snapshot(&[], &[version("k", "1"), version("k", "2")], &[]);
        let unsure_here = AdmittedWrites {
            unconfirmed: vec![UnconfirmedWrite::ObjectKey("k".into())],
            ..AdmittedWrites::default()
        };
        assert_eq!(whole("w", "h", &before, &after, &unsure_here), Vec::new());
        let unsure_elsewhere = AdmittedWrites {
            unconfirmed: vec![UnconfirmedWrite::ObjectKey("other".into())],
            ..AdmittedWrites::default()
        };
        assert_eq!(whole("w", "h", &before, &after, &unsure_elsewhere).len(), 1);
    }

    #[test]
    fn an_admitted_write_that_vanished_is_caught() {
        let before = snapshot(&[], &[], &[]);
        let writes = AdmittedWrites {
            keys: vec!["y".into()],
            ..AdmittedWrites::default()
        };
        let found = whole("w", "h", &before, &before, &writes);
        assert_eq!(found.len(), 1);
        assert!(found[0].detail.contains("admitted Redis key"), "{found:?}");
    }
}
