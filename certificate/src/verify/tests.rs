//! The acceptance tests of the crate: a realistic certificate verifies, and every single
//! mutation of its JSON is rejected with a problem that names the mutated field.

use super::*;
use crate::canonical::canonical_json;
use crate::certificate::{ConsistencyProof, assemble, sign_receipt};
use crate::keys::{ReceiptSigningKey, random_bytes};
use crate::receipt::tests::{
    receipt_with_relations, sample_chunk_stamps, sample_receipt, sample_receipt_v2,
    sample_request_id, sample_subject,
};
use crate::receipt::{Subject, check_counts};
use chrono::{TimeZone, Utc};
use serde_json::json;

/// Everything a test needs: keys, the log, checkpoints and the certificate.
struct Fixture {
    receipt_key: ReceiptSigningKey,
    log_key: ReceiptSigningKey,
    leaves: Vec<[u8; 32]>,
    older: Checkpoint,
    certificate: Value,
}

impl Fixture {
    fn ring(&self) -> KeyRing {
        KeyRing::new(vec![
            self.receipt_key.public_key(),
            self.log_key.public_key(),
        ])
    }
}

fn at(minute: u32) -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 21, minute, 0).unwrap()
}

/// A community receipt (2 tables, 3 chunks of which 1 late) signed by `receipt_key`, placed at
/// index 3 of a 5-leaf log whose checkpoints `log_key` signs; the certificate carries a
/// consistency proof from the checkpoint of size 3.
fn fixture_with(receipt_key: ReceiptSigningKey, log_key: ReceiptSigningKey) -> Fixture {
    let receipt = sample_receipt(&receipt_key.key_id());
    assert!(check_counts(&receipt).is_empty());
    fixture_of(receipt, receipt_key, log_key)
}

/// `receipt` signed and placed in the log as [`fixture_with`] does, whatever its counts say.
fn fixture_of(
    receipt: Receipt,
    receipt_key: ReceiptSigningKey,
    log_key: ReceiptSigningKey,
) -> Fixture {
    let signed = sign_receipt(receipt, &receipt_key).unwrap();
    let mut leaves: Vec<[u8; 32]> = (0..5).map(|_| random_bytes::<32>().unwrap()).collect();
    leaves[3] = signed.digest().unwrap();
    let older = Checkpoint::sign(&log_key, 3, merkle::root(&leaves[..3]), at(0)).unwrap();
    let checkpoint = Checkpoint::sign(&log_key, 5, merkle::root(&leaves), at(30)).unwrap();
    let consistency = ConsistencyProof {
        from: older.clone(),
        proof: merkle::consistency_proof(&leaves, 3, 5).unwrap(),
    };
    let inclusion = merkle::inclusion_proof(&leaves, 3, 5).unwrap();
    // A v2 receipt's certificate carries the sample's stamps (a v1 one ignores them).
    let stamps = Some(sample_chunk_stamps());
    let certificate =
        assemble(signed, 3, inclusion, checkpoint, Some(consistency), stamps).unwrap();
    Fixture {
        receipt_key,
        log_key,
        leaves,
        older,
        certificate: serde_json::to_value(&certificate).unwrap(),
    }
}

fn fixture() -> Fixture {
    fixture_with(
        ReceiptSigningKey::generate().unwrap(),
        ReceiptSigningKey::generate().unwrap(),
    )
}

fn fields(problems: &[CertificateProblem]) -> Vec<&str> {
    problems.iter().map(|p| p.field.as_str()).collect()
}

#[test]
fn realistic_certificate_verifies() {
    let f = fixture();
    let verified = verify_certificate(&f.certificate, &f.ring(), Some(&f.older)).unwrap();
    assert_eq!(
        verified,
        Verified {
            request_id: sample_request_id(),
            kind: ReceiptKind::Community,
            subject: sample_subject(),
            completed_at: "2026-11-30T20:20:00.000000Z".to_owned(),
            receipt_key_id: f.receipt_key.key_id(),
            checkpoint_key_id: f.log_key.key_id(),
            tree_size: 5,
            leaf_index: 3,
            consistency_from: Some(3),
        }
    );
    // Without the older checkpoint the carried consistency proof is still checked.
    let verified = verify_certificate(&f.certificate, &f.ring(), None).unwrap();
    assert_eq!(verified.consistency_from, Some(3));
    // Through text and back (any member order): still verifies.
    let text = serde_json::to_string_pretty(&f.certificate).unwrap();
    let reparsed: Value = serde_json::from_str(&text).unwrap();
    verify_certificate(&reparsed, &f.ring(), Some(&f.older)).unwrap();
    // The certificate holds what the fixture built.
    assert_eq!(
        f.certificate["log"]["receipt_digest"],
        hex::encode(f.leaves[3])
    );
    assert_eq!(
        f.certificate["receipt"]["manifest"]["chunks"][2]["late"],
        true
    );
}

/// Mutated pointer → field at which the verifier may report it, when it cannot name the exact
/// field: a change anywhere in a signed checkpoint body shows as its signature failing, and
/// a change of the leaf index or of one proof element as the whole inclusion (or consistency)
/// proof failing.
const REPORTED_AT: &[(&str, &str)] = &[
    ("/log/leaf_index", "/log/inclusion_proof"),
    ("/log/inclusion_proof", "/log/inclusion_proof"),
    ("/log/checkpoint/tree_size", "/log/checkpoint/signature"),
    ("/log/checkpoint/root_hash", "/log/checkpoint/signature"),
    ("/log/checkpoint/signed_at", "/log/checkpoint/signature"),
    (
        "/log/consistency/from/tree_size",
        "/log/consistency/from/signature",
    ),
    (
        "/log/consistency/from/root_hash",
        "/log/consistency/from/signature",
    ),
    (
        "/log/consistency/from/signed_at",
        "/log/consistency/from/signature",
    ),
    ("/log/consistency/proof", "/log/consistency/proof"),
    // The root cannot tell which stamp changed: the list as a whole is named.
    ("/chunk_stamps", "/chunk_stamps"),
];

/// Whether a problem at `field` plainly names a mutation at `mutated`: the same pointer, a
/// descendant of it (e.g. the leaves of a removed array element), or the documented mapping.
fn names(field: &str, mutated: &str) -> bool {
    field == mutated
        || field.starts_with(&format!("{mutated}/"))
        || REPORTED_AT.iter().any(|(prefix, reported)| {
            (mutated == *prefix || mutated.starts_with(&format!("{prefix}/"))) && field == *reported
        })
}

fn changed_string(text: &str) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    match chars.first_mut() {
        Some(c) => *c = if *c == 'a' { 'b' } else { 'a' },
        None => chars.push('x'),
    }
    chars.into_iter().collect()
}

fn changed_scalar(value: &Value) -> Value {
    match value {
        Value::String(text) => Value::String(changed_string(text)),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => json!(u + 1),
            (None, Some(i), _) => json!(i + 1),
            (None, None, Some(x)) => json!(x + 1.0),
            _ => unreachable!(),
        },
        Value::Bool(b) => Value::Bool(!b),
        Value::Null => json!("x"),
        Value::Array(_) => json!(["x"]),
        Value::Object(_) => json!({"x": "x"}),
    }
}

/// One certificate per mutation: every leaf changed, every array element and object member
/// removed, an extra member added to every object and an extra element to every array.
fn mutations(root: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    walk(root, root, String::new(), &mut out);
    out
}

fn walk(root: &Value, value: &Value, pointer: String, out: &mut Vec<(String, String, Value)>) {
    let with = |change: &dyn Fn(&mut Value)| {
        let mut copy = root.clone();
        change(copy.pointer_mut(&pointer).unwrap());
        copy
    };
    match value {
        Value::Object(members) if !members.is_empty() => {
            for (name, member) in members {
                let child = format!("{pointer}/{}", escape_pointer_token(name));
                walk(root, member, child.clone(), out);
                let removed = with(&|v| {
                    v.as_object_mut().unwrap().remove(name);
                });
                out.push((child, "removed".to_owned(), removed));
            }
            let added = with(&|v| {
                v.as_object_mut()
                    .unwrap()
                    .insert("extra_member".to_owned(), json!("x"));
            });
            out.push((format!("{pointer}/extra_member"), "added".to_owned(), added));
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                let child = format!("{pointer}/{i}");
                walk(root, item, child.clone(), out);
                let removed = with(&|v| {
                    v.as_array_mut().unwrap().remove(i);
                });
                out.push((child, "removed".to_owned(), removed));
            }
            // A copy of the last element: well-formed, so only the proof can reject it.
            let added = with(&|v| {
                let items = v.as_array_mut().unwrap();
                let last = items.last().unwrap().clone();
                items.push(last);
            });
            out.push((
                format!("{pointer}/{}", items.len()),
                "added".to_owned(),
                added,
            ));
        }
        Value::Object(_) | Value::Array(_) => {
            // An empty container gets one element (arrays: index 0) or member ("x").
            let added = with(&|v| *v = changed_scalar(v));
            let sub = if value.is_array() { "0" } else { "x" };
            out.push((format!("{pointer}/{sub}"), "added".to_owned(), added));
        }
        scalar => {
            let changed = with(&|v| *v = changed_scalar(scalar));
            out.push((pointer, "changed".to_owned(), changed));
        }
    }
}

#[test]
fn every_mutation_of_the_certificate_is_rejected_naming_the_field() {
    every_mutation_is_rejected_naming_the_field(&fixture());
}

fn every_mutation_is_rejected_naming_the_field(f: &Fixture) {
    let ring = f.ring();
    let mutations = mutations(&f.certificate);
    let leaves = leaves(&f.certificate, "").len();
    assert!(leaves > 120, "only {leaves} leaves");
    assert!(
        mutations.len() > 2 * leaves,
        "only {} mutations",
        mutations.len()
    );

    let mut failures = Vec::new();
    for (pointer, how, mutated) in &mutations {
        assert_ne!(mutated, &f.certificate, "{how} {pointer} changed nothing");
        match verify_certificate(mutated, &ring, Some(&f.older)) {
            Ok(_) => failures.push(format!("{how} {pointer}: VERIFIED")),
            Err(problems) => {
                if !problems.iter().any(|p| names(&p.field, pointer)) {
                    failures.push(format!(
                        "{how} {pointer}: reported only at {:?}",
                        fields(&problems)
                    ));
                }
                for problem in &problems {
                    assert!(!problem.to_string().contains('\n'), "{problem}");
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} mutations not rejected as expected:\n{}",
        failures.len(),
        mutations.len(),
        failures.join("\n")
    );
}

/// [`fixture`] of the v2 receipt: the certificate carries the chunk stamps.
fn fixture_v2() -> Fixture {
    let receipt_key = ReceiptSigningKey::generate().unwrap();
    let receipt = sample_receipt_v2(&receipt_key.key_id());
    assert!(check_counts(&receipt).is_empty());
    fixture_of(receipt, receipt_key, ReceiptSigningKey::generate().unwrap())
}

#[test]
fn a_v2_certificate_carries_the_stamps_its_receipt_signs_by_root_and_verifies() {
    let f = fixture_v2();
    assert_eq!(f.certificate["format"], CERTIFICATE_FORMAT);
    assert_eq!(f.certificate["receipt"]["format"], RECEIPT_FORMAT);
    assert_eq!(f.certificate["chunk_stamps"][2]["late"], true);
    assert!(f.certificate["receipt"]["manifest"].get("chunks").is_none());
    let verified = verify_certificate(&f.certificate, &f.ring(), Some(&f.older)).unwrap();
    assert_eq!(verified.request_id, sample_request_id());
    // The receipt's size does not depend on the stamps: one more chunk, same number of fields.
    let leaves_of = |receipt: &Receipt| leaves(&serde_json::to_value(receipt).unwrap(), "").len();
    let mut bigger = sample_receipt_v2("k");
    let mut fold = StampFold::new(CHUNK_STAMPS);
    let mut stamps = sample_chunk_stamps();
    let mut extra = stamps[0].clone();
    extra.chunk_no = 3;
    stamps.push(extra);
    stamps.iter().for_each(|s| fold.push(s).unwrap());
    bigger.manifest = ManifestFacts::rooted(bigger.manifest.digest.clone(), &fold);
    assert_eq!(leaves_of(&bigger), leaves_of(&sample_receipt_v2("k")));
}

#[test]
fn every_mutation_of_a_v2_certificate_is_rejected_naming_the_field() {
    every_mutation_is_rejected_naming_the_field(&fixture_v2());
}

#[test]
fn v2_stamps_that_break_a_rule_or_the_root_are_named() {
    let f = fixture_v2();
    let ring = f.ring();
    let problems_after = |edit: &dyn Fn(&mut Value)| {
        let mut mutated = f.certificate.clone();
        edit(&mut mutated);
        verify_certificate(&mutated, &ring, Some(&f.older)).unwrap_err()
    };
    // One stamp's balance broken: named at the stamp, and the root no longer matches.
    let problems = problems_after(&|c| c["chunk_stamps"][1]["versions_deleted"] = json!(3));
    assert!(
        fields(&problems).contains(&"/chunk_stamps/1/entries"),
        "{problems:?}"
    );
    assert!(fields(&problems).contains(&"/chunk_stamps"), "{problems:?}");
    // Reordered: numbering named, root differs.
    let problems = problems_after(&|c| {
        c["chunk_stamps"].as_array_mut().unwrap().swap(0, 2);
    });
    assert!(
        fields(&problems).contains(&"/chunk_stamps/0/chunk_no"),
        "{problems:?}"
    );
    // The stamps left out of a v2 certificate: named as missing.
    let problems = problems_after(&|c| {
        c.as_object_mut().unwrap().remove("chunk_stamps");
    });
    assert_eq!(
        problems
            .iter()
            .find(|p| p.field == "/chunk_stamps")
            .map(|p| p.problem.as_str()),
        Some("is missing"),
        "{problems:?}"
    );
    // A v2 certificate relabelled v1: its stamps are an added member, its receipt the wrong
    // format.
    let problems = problems_after(&|c| c["format"] = json!(CERTIFICATE_FORMAT_V1));
    assert!(fields(&problems).contains(&"/chunk_stamps"), "{problems:?}");
    assert!(
        fields(&problems).contains(&"/receipt/format"),
        "{problems:?}"
    );
}

#[test]
fn mutations_are_named_exactly_where_the_field_is_known() {
    let f = fixture();
    let ring = f.ring();
    let check = |pointer: &str, value: Value, expected: &str| {
        let mut mutated = f.certificate.clone();
        *mutated.pointer_mut(pointer).unwrap() = value;
        let problems = verify_certificate(&mutated, &ring, Some(&f.older)).unwrap_err();
        assert!(
            problems.iter().any(|p| p.field == expected),
            "{pointer}: {:?}",
            problems
        );
        problems
    };
    let problems = check(
        "/receipt/purge/tables/0/rows",
        json!(1199),
        "/receipt/purge/tables/0/rows",
    );
    let problem = problems
        .iter()
        .find(|p| p.field == "/receipt/purge/tables/0/rows")
        .unwrap();
    assert_eq!(
        problem.to_string(),
        "/receipt/purge/tables/0/rows: changed after signing: its digest does not match the signed digest"
    );
    // The changed count also breaks the receipt's own arithmetic.
    assert!(fields(&problems).contains(&"/receipt/purge/rows_total"));
    check("/receipt/purge/tables/0/rows", json!("1200"), "/receipt");
    check(
        "/log/checkpoint/root_hash",
        json!("00".repeat(32)),
        "/log/checkpoint/signature",
    );
    check(
        "/log/inclusion_proof/1",
        json!("00".repeat(32)),
        "/log/inclusion_proof",
    );
    check(
        "/log/inclusion_proof/1",
        json!("XYZ"),
        "/log/inclusion_proof/1",
    );
    check("/signature/value", json!("AAAA"), "/signature/value");
    check("/format", json!("buzz-deletion-certificate/v3"), "/format");
    check(
        "/receipt/format",
        json!("buzz-deletion-receipt/v3"),
        "/receipt/format",
    );
    // A v1 certificate (this fixture's) whose receipt claims v2: the formats disagree.
    check(
        "/receipt/format",
        json!("buzz-deletion-receipt/v2"),
        "/receipt/format",
    );
    check(
        "/receipt/verification/rows_remaining/posts",
        json!(3),
        "/receipt/verification/rows_remaining/posts",
    );
    let problems = check(
        "/receipt/inventory/object_bytes",
        json!(9007199254740993_u64),
        "/receipt/inventory/object_bytes",
    );
    assert!(problems.iter().any(|p| p.problem.contains("2^53")));
}

#[test]
fn rotated_out_key_verifies_only_when_given() {
    let old = ReceiptSigningKey::generate().unwrap();
    let new = ReceiptSigningKey::generate().unwrap();
    let old_public = old.public_key();
    let old_id = old.key_id();
    // The receipt was signed with the old key; the log is signed with the current key.
    let f = fixture_with(old, new);
    let both = KeyRing::new(vec![f.log_key.public_key(), old_public]);
    let verified = verify_certificate(&f.certificate, &both, Some(&f.older)).unwrap();
    assert_eq!(verified.receipt_key_id, old_id);
    assert_eq!(verified.checkpoint_key_id, f.log_key.key_id());

    let only_new = KeyRing::new(vec![f.log_key.public_key()]);
    let problems = verify_certificate(&f.certificate, &only_new, Some(&f.older)).unwrap_err();
    assert_eq!(fields(&problems), ["/signature/key_id"], "{problems:?}");
    assert!(problems[0].problem.contains(&old_id), "{}", problems[0]);
    assert!(
        problems[0]
            .problem
            .contains("pass the key that was current at signing time")
    );

    // A key that merely claims the old id does not help: the signature must verify.
    let impostor = ReceiptSigningKey::generate().unwrap();
    let ring = KeyRing::new(vec![f.log_key.public_key(), impostor.public_key()]);
    assert!(verify_certificate(&f.certificate, &ring, None).is_err());
}

/// The fixture's log rewritten at leaf 1 (after the older checkpoint was taken), re-signed by
/// the log key, and the certificate exported against it.
fn rewritten(f: &Fixture, from: Option<Checkpoint>) -> Value {
    let mut leaves = f.leaves.clone();
    leaves[1] = random_bytes::<32>().unwrap();
    let checkpoint = Checkpoint::sign(&f.log_key, 5, merkle::root(&leaves), at(45)).unwrap();
    let mut certificate = f.certificate.clone();
    certificate["log"]["checkpoint"] = serde_json::to_value(&checkpoint).unwrap();
    certificate["log"]["inclusion_proof"] = json!(merkle::inclusion_proof(&leaves, 3, 5).unwrap());
    let from = from.unwrap_or_else(|| {
        Checkpoint::sign(&f.log_key, 3, merkle::root(&leaves[..3]), at(40)).unwrap()
    });
    certificate["log"]["consistency"] = json!({
        "from": from,
        "proof": merkle::consistency_proof(&leaves, 3, 5).unwrap(),
    });
    certificate
}

#[test]
fn rewritten_log_is_caught_by_the_older_checkpoint() {
    let f = fixture();
    let ring = f.ring();
    // A self-consistent rewritten log verifies on its own ...
    let forged = rewritten(&f, None);
    verify_certificate(&forged, &ring, None).unwrap();
    // ... but not against the checkpoint the verifier kept.
    let problems = verify_certificate(&forged, &ring, Some(&f.older)).unwrap_err();
    assert_eq!(fields(&problems), ["/log/consistency/from"], "{problems:?}");
    // Claiming the kept checkpoint as the origin of the proof does not work either.
    let forged = rewritten(&f, Some(f.older.clone()));
    let problems = verify_certificate(&forged, &ring, Some(&f.older)).unwrap_err();
    assert_eq!(
        fields(&problems),
        ["/log/consistency/proof"],
        "{problems:?}"
    );
    assert!(problems[0].problem.starts_with(
        "the log was rewritten since the older checkpoint: a receipt was removed or changed"
    ));
}

#[test]
fn older_checkpoint_cases() {
    let f = fixture();
    let ring = f.ring();
    // No consistency proof: the verifier is told how to get one.
    let mut bare = f.certificate.clone();
    bare["log"]["consistency"] = Value::Null;
    verify_certificate(&bare, &ring, None).unwrap();
    let problems = verify_certificate(&bare, &ring, Some(&f.older)).unwrap_err();
    assert_eq!(fields(&problems), ["/log/consistency"]);
    assert!(problems[0].problem.contains(
        "carries no consistency proof from tree size 3: export it again with --checkpoint OLD"
    ));

    // The older checkpoint is the certificate's own checkpoint: roots must be equal.
    let same: Checkpoint =
        serde_json::from_value(f.certificate["log"]["checkpoint"].clone()).unwrap();
    assert_eq!(
        verify_certificate(&bare, &ring, Some(&same))
            .unwrap()
            .consistency_from,
        Some(5)
    );
    let mut leaves = f.leaves.clone();
    leaves[0][0] ^= 1;
    let other = Checkpoint::sign(&f.log_key, 5, merkle::root(&leaves), at(50)).unwrap();
    let problems = verify_certificate(&bare, &ring, Some(&other)).unwrap_err();
    assert_eq!(fields(&problems), ["/log/checkpoint/root_hash"]);

    // A kept checkpoint larger than the certificate's.
    let mut more = f.leaves.clone();
    more.push(random_bytes::<32>().unwrap());
    let larger = Checkpoint::sign(&f.log_key, 6, merkle::root(&more), at(55)).unwrap();
    let problems = verify_certificate(&f.certificate, &ring, Some(&larger)).unwrap_err();
    assert_eq!(fields(&problems), ["/log/checkpoint/tree_size"]);

    // A forged older checkpoint (bad signature) is reported as such.
    let mut forged = f.older.clone();
    forged.root_hash = "00".repeat(32);
    let problems = verify_certificate(&f.certificate, &ring, Some(&forged)).unwrap_err();
    assert_eq!(fields(&problems), ["older checkpoint/signature"]);
}

#[test]
fn wrong_documents_are_reported_not_panicking() {
    let ring = KeyRing::new(vec![]);
    for document in [json!(null), json!([]), json!("certificate"), json!(42)] {
        let problems = verify_certificate(&document, &ring, None).unwrap_err();
        assert_eq!(fields(&problems), [""]);
    }
    // Without a format, it is checked as the current (v2) certificate.
    let problems = verify_certificate(&json!({}), &ring, None).unwrap_err();
    assert_eq!(
        fields(&problems),
        [
            "/format",
            "/receipt",
            "/chunk_stamps",
            "/field_digests",
            "/signature",
            "/log"
        ]
    );
    let f = fixture();
    let mut swapped = f.certificate.clone();
    swapped["log"] = json!([1, 2]);
    swapped["signature"] = json!("sig");
    swapped["field_digests"] = json!([]);
    let problems = verify_certificate(&swapped, &f.ring(), None).unwrap_err();
    for field in ["/log", "/signature", "/field_digests"] {
        assert!(fields(&problems).contains(&field), "{problems:?}");
    }
}

#[test]
fn user_deletion_certificate_verifies() {
    let key = ReceiptSigningKey::generate().unwrap();
    let mut receipt = sample_receipt(&key.key_id());
    receipt.kind = ReceiptKind::User;
    let salt = crate::receipt::new_salt().unwrap();
    receipt.subject = Subject::User {
        target_hash: crate::receipt::target_commitment("@carol:example.org", &salt).unwrap(),
        target_salt: salt,
    };
    receipt.generations.fence_generation = None;
    receipt.verification =
        json!({"communities": [{"host": "chess.example.org", "rows_remaining": 0}]});
    let signed = sign_receipt(receipt, &key).unwrap();
    let leaves = [signed.digest().unwrap()];
    let checkpoint = Checkpoint::sign(&key, 1, merkle::root(&leaves), at(10)).unwrap();
    let certificate = assemble(signed, 0, vec![], checkpoint, None, None).unwrap();
    let json = serde_json::to_value(&certificate).unwrap();
    let verified = verify_certificate(&json, &KeyRing::new(vec![key.public_key()]), None).unwrap();
    assert_eq!(verified.kind, ReceiptKind::User);
    assert_eq!(verified.consistency_from, None);
    // The commitment can be checked by whoever knows the user id, and nobody else learns it.
    assert!(!json.to_string().contains("carol"));
}

#[test]
fn changed_shape_of_the_free_form_report_is_named() {
    // ["a", "b"] and {"0": "a", "1": "b"} have the same leaf pointers and digests.
    let key = ReceiptSigningKey::generate().unwrap();
    let mut receipt = sample_receipt(&key.key_id());
    receipt.verification = json!({"checked": ["posts", "members"], "passed": true});
    let signed = sign_receipt(receipt, &key).unwrap();
    let leaves = [signed.digest().unwrap()];
    let checkpoint = Checkpoint::sign(&key, 1, merkle::root(&leaves), at(10)).unwrap();
    let certificate = assemble(signed, 0, vec![], checkpoint, None, None).unwrap();
    let mut json = serde_json::to_value(&certificate).unwrap();
    let ring = KeyRing::new(vec![key.public_key()]);
    verify_certificate(&json, &ring, None).unwrap();
    json["receipt"]["verification"]["checked"] = json!({"0": "posts", "1": "members"});
    let problems = verify_certificate(&json, &ring, None).unwrap_err();
    assert_eq!(fields(&problems), ["/receipt"], "{problems:?}");
    assert!(problems[0].problem.contains("shape changed after signing"));
}

/// A fixture whose receipt states its inventoried relations ([`receipt_with_relations`]), edited
/// by `edit` before signing.
fn fixture_with_relations(edit: impl FnOnce(&mut Receipt)) -> Fixture {
    let receipt_key = ReceiptSigningKey::generate().unwrap();
    let mut receipt = receipt_with_relations(&receipt_key.key_id());
    edit(&mut receipt);
    fixture_of(receipt, receipt_key, ReceiptSigningKey::generate().unwrap())
}

#[test]
fn a_certificate_stating_its_relations_verifies_and_none_of_them_can_change() {
    let f = fixture_with_relations(|_| {});
    verify_certificate(&f.certificate, &f.ring(), Some(&f.older)).unwrap();
    assert_eq!(
        f.certificate["receipt"]["inventory"]["relations"][4]["relation"],
        "buzz.posts_2026"
    );
    every_mutation_is_rejected_naming_the_field(&f);
}

#[test]
fn a_receipt_signed_with_a_relation_missing_from_its_purge_facts_fails() {
    // What an issuer that skipped a relation would sign: the signature is valid, the receipt
    // is not.
    let f = fixture_with_relations(|r| {
        r.purge.tables.retain(|t| t.table != "buzz.post_tags");
    });
    let problems = verify_certificate(&f.certificate, &f.ring(), Some(&f.older)).unwrap_err();
    assert_eq!(fields(&problems), ["/receipt/inventory/relations/2"]);
    assert_eq!(
        problems[0].to_string(),
        "/receipt/inventory/relations/2: buzz.post_tags (key child through post_tags_post_fk) \
         was inventoried, but /purge/tables has no count for buzz.post_tags, which covers it: \
         the purge facts cover fewer relations than the inventory"
    );
    let f = fixture_with_relations(|r| {
        r.verification["relations"] = json!(["buzz.communities", "buzz.members"]);
    });
    let problems = verify_certificate(&f.certificate, &f.ring(), Some(&f.older)).unwrap_err();
    assert_eq!(
        fields(&problems),
        [
            "/receipt/inventory/relations/2",
            "/receipt/inventory/relations/3",
            "/receipt/inventory/relations/4"
        ]
    );
}

#[test]
fn an_old_certificate_without_relations_still_verifies() {
    // Receipts signed before receipts stated relations have no such member; their digests,
    // signature and log leaf are unchanged by the new (optional) list.
    let f = fixture();
    assert!(
        f.certificate["receipt"]["inventory"]
            .get("relations")
            .is_none()
    );
    verify_certificate(&f.certificate, &f.ring(), Some(&f.older)).unwrap();
    let parsed: crate::certificate::Certificate =
        serde_json::from_value(f.certificate.clone()).unwrap();
    assert_eq!(
        canonical_json(&serde_json::to_value(&parsed).unwrap()).unwrap(),
        canonical_json(&f.certificate).unwrap(),
        "an old certificate re-encodes byte-identically"
    );
    // Adding a relations list to it afterwards is an unsigned addition.
    let mut added = f.certificate.clone();
    added["receipt"]["inventory"]["relations"] = json!([{
        "relation": "buzz.posts", "oid": 1, "role": "tenant table", "root": "buzz.posts",
        "relkind": "r", "tenant_column": "community_id"
    }]);
    let problems = verify_certificate(&added, &f.ring(), Some(&f.older)).unwrap_err();
    assert!(
        fields(&problems).contains(&"/receipt/inventory/relations/0/relation"),
        "{problems:?}"
    );
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    fn shared() -> &'static Fixture {
        static FIXTURE: OnceLock<Fixture> = OnceLock::new();
        FIXTURE.get_or_init(fixture)
    }

    /// Every pointer of the certificate: containers and leaves.
    fn pointers(value: &Value, pointer: String, out: &mut Vec<String>) {
        match value {
            Value::Object(members) => {
                for (name, member) in members {
                    pointers(
                        member,
                        format!("{pointer}/{}", escape_pointer_token(name)),
                        out,
                    );
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    pointers(item, format!("{pointer}/{i}"), out);
                }
            }
            _ => {}
        }
        out.push(pointer);
    }

    /// The value at `pointer` is a number written as a float (`0.0`, `5.0`).
    fn replacement_is_float(document: &Value, pointer: &str) -> bool {
        document.pointer(pointer).is_some_and(Value::is_f64)
    }

    fn any_json() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |x| x.is_finite())
                .prop_map(|x| json!(x)),
            ".{0,70}".prop_map(Value::String),
            "[0-9a-f]{64}".prop_map(Value::String),
            Just(json!([])),
            Just(json!({})),
            Just(json!([1, "x", null])),
            Just(json!({"a": 1})),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// Replacing any part of the certificate by any JSON value is reported, never a panic,
        /// unless the canonical form did not change (e.g. `5` written as `5.0` in the free-form
        /// verification report). A typed field keeps refusing an integer spelled as a float
        /// (`0.0` for a count) even though its canonical form is the same: that refusal is the
        /// only one allowed for an unchanged canonical form.
        #[test]
        fn any_replacement_is_rejected_without_panicking(
            pick in any::<proptest::sample::Index>(),
            replacement in any_json(),
        ) {
            let f = shared();
            let mut all = Vec::new();
            pointers(&f.certificate, String::new(), &mut all);
            let pointer = &all[pick.index(all.len())];
            let mut mutated = f.certificate.clone();
            *mutated.pointer_mut(pointer).unwrap() = replacement;
            let unchanged =
                canonical_json(&mutated).unwrap() == canonical_json(&f.certificate).unwrap();
            let float_spelling = replacement_is_float(&mutated, pointer);
            let result = verify_certificate(&mutated, &f.ring(), Some(&f.older));
            match (unchanged, &result) {
                (false, _) => prop_assert!(result.is_err(), "{} -> {:?}", pointer, result),
                (true, Ok(_)) => {}
                (true, Err(_)) => prop_assert!(
                    float_spelling,
                    "{} (same canonical form) -> {:?}",
                    pointer,
                    result
                ),
            }
        }
    }
}

#[test]
fn a_stored_signed_receipt_verifies_only_with_the_signing_key_and_unchanged() {
    let key = ReceiptSigningKey::generate().unwrap();
    let forger = ReceiptSigningKey::generate().unwrap();
    let ring = KeyRing::new(vec![key.public_key()]);
    let signed = crate::certificate::sign_receipt(sample_receipt(&key.key_id()), &key).unwrap();
    let json = signed.to_json().unwrap();
    assert!(verify_signed_receipt(&json, &ring).is_empty());

    // Rewritten consistently (digests recomputed) and signed by another key under the
    // original key id: the signature does not verify.
    let mut rewritten = sample_receipt(&key.key_id());
    rewritten.signed_at = "2026-12-01T00:00:00.000000Z".to_owned();
    rewritten.key_id = forger.key_id();
    let mut forged = crate::certificate::sign_receipt(rewritten, &forger).unwrap();
    forged.receipt.key_id = key.key_id();
    forged.signature.key_id = key.key_id();
    let problems = verify_signed_receipt(&forged.to_json().unwrap(), &ring);
    assert!(
        fields(&problems).contains(&"/signature/value"),
        "{problems:?}"
    );

    // Signed by a key the auditor does not hold: named as unknown.
    let stranger =
        crate::certificate::sign_receipt(sample_receipt(&forger.key_id()), &forger).unwrap();
    let problems = verify_signed_receipt(&stranger.to_json().unwrap(), &ring);
    assert!(
        fields(&problems).contains(&"/signature/key_id"),
        "{problems:?}"
    );

    // One receipt field changed after signing: its digest no longer matches.
    let mut changed = json.clone();
    changed["receipt"]["requested_by"] = "ops:mallory".into();
    let problems = verify_signed_receipt(&changed, &ring);
    assert!(!problems.is_empty(), "{problems:?}");
}
