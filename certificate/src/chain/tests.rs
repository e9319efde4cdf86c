use super::*;
use chrono::TimeZone;
use serde_json::json;

const REQUEST: &str = "6f1c2b0e-8a44-4c57-9a0e-2f0b5a1d9c33";

fn request() -> Uuid {
    Uuid::parse_str(REQUEST).unwrap()
}

fn at(second: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 20, 0, second).unwrap() + chrono::Duration::microseconds(17)
}

/// Recomputes seq, prev_hash and row_hash of every chained row, as the worker writes them (and
/// as an attacker with database access could).
fn rehash(rows: &mut [ChainRow]) {
    let mut prev = GENESIS_HASH.to_owned();
    let mut seq = 0;
    for row in rows.iter_mut().filter(|row| row.seq.is_some()) {
        seq += 1;
        row.seq = Some(seq);
        row.prev_hash = Some(prev.clone());
        let hash = event_hash(&row.content(seq, &prev)).unwrap();
        row.row_hash = Some(hash.clone());
        prev = hash;
    }
}

fn row(id: i64, chained: bool, event: &str) -> ChainRow {
    ChainRow {
        id,
        request_id: request(),
        seq: chained.then_some(0),
        at: at(u32::try_from(id % 60).unwrap()),
        actor: "worker".to_owned(),
        event: event.to_owned(),
        detail: json!({"row": id, "note": format!("event {event}")}),
        prev_hash: None,
        row_hash: None,
    }
}

/// Two legacy rows (ids 1, 2), then six chained rows with ids 10, 20, … 60.
fn chain() -> Vec<ChainRow> {
    let mut rows = vec![row(1, false, "submitted"), row(2, false, "inventoried")];
    for (i, event) in [
        "approved",
        "fenced",
        "manifest_stamped",
        "purged",
        "verified",
        "completed",
    ]
    .iter()
    .enumerate()
    {
        rows.push(row(10 * (i64::try_from(i).unwrap() + 1), true, event));
    }
    rehash(&mut rows);
    rows
}

fn signed_head(rows: &[ChainRow]) -> ChainHead {
    verify_chain(rows).unwrap()
}

#[test]
fn event_hash_is_sha256_of_the_documented_canonical_json() {
    let detail = json!({"z": [1, 2], "a": "b"});
    let prev = "ab".repeat(32);
    let content = EventContent {
        request_id: request(),
        seq: 3,
        at: Utc.with_ymd_and_hms(2026, 11, 30, 21, 13, 39).unwrap()
            + chrono::Duration::nanoseconds(123_456_789),
        actor: "alice@example.org",
        event: "approved",
        detail: &detail,
        prev_hash: &prev,
    };
    let written = format!(
        "{{\"actor\":\"alice@example.org\",\"at\":\"2026-11-30T21:13:39.123456Z\",\
         \"detail\":{{\"a\":\"b\",\"z\":[1,2]}},\"event\":\"approved\",\
         \"prev_hash\":\"{}\",\"request_id\":\"{REQUEST}\",\"seq\":3}}",
        "ab".repeat(32)
    );
    assert_eq!(
        event_hash(&content).unwrap(),
        crate::canonical::sha256_hex(written.as_bytes())
    );
}

#[test]
fn intact_chain_verifies_and_names_its_head() {
    let rows = chain();
    let head = verify_chain(&rows).unwrap();
    assert_eq!(head.length, 6);
    assert_eq!(head.head_row_id, 60);
    assert_eq!(Some(head.head_hash.clone()), rows[7].row_hash);
    assert_eq!(rows[2].prev_hash.as_deref(), Some(GENESIS_HASH));
    assert_eq!(verify_against_head(&rows, &head).unwrap(), head);
}

#[test]
fn empty_and_legacy_only_chains_have_the_genesis_head() {
    assert_eq!(verify_chain(&[]).unwrap(), ChainHead::empty());
    let legacy = vec![row(1, false, "submitted"), row(2, false, "approved")];
    assert_eq!(verify_chain(&legacy).unwrap(), ChainHead::empty());
    assert_eq!(
        verify_against_head(&legacy, &ChainHead::empty()).unwrap(),
        ChainHead::empty()
    );
}

#[test]
fn events_appended_after_signing_still_match_the_signed_head() {
    let mut rows = chain();
    let signed = signed_head(&rows[..6]);
    rows.truncate(6);
    rows.push(row(70, true, "certificate_exported"));
    rows.push(row(80, true, "certificate_exported"));
    // The first six rows keep their hashes, the new ones are chained after them.
    rehash(&mut rows);
    let head = verify_against_head(&rows, &signed).unwrap();
    assert_eq!(head.length, 6);
    assert_eq!(head.head_row_id, 80);
}

#[test]
fn edited_row_is_named() {
    for target in 2..8 {
        let mut rows = chain();
        rows[target].detail = json!({"row": rows[target].id, "note": "rewritten"});
        let id = rows[target].id;
        let seq = rows[target].seq.unwrap();
        match verify_chain(&rows).unwrap_err() {
            ChainBreak::ContentChanged {
                id: got_id,
                seq: got_seq,
                stored,
                computed,
            } => {
                assert_eq!((got_id, got_seq), (id, seq));
                assert_eq!(Some(stored), rows[target].row_hash);
                assert_ne!(computed, rows[target].row_hash.clone().unwrap());
            }
            other => panic!("edit of row {id} reported as {other:?}"),
        }
    }
}

type Edit = Box<dyn Fn(&mut ChainRow)>;

#[test]
fn every_hashed_column_is_covered() {
    let edits: Vec<Edit> = vec![
        Box::new(|row| row.actor.push('x')),
        Box::new(|row| row.event.push('x')),
        Box::new(|row| row.at += chrono::Duration::microseconds(1)),
        Box::new(|row| row.detail = json!({"row": row.id})),
        Box::new(|row| row.request_id = Uuid::nil()),
    ];
    for edit in edits {
        let mut rows: Vec<ChainRow> = chain().into_iter().skip(2).collect();
        edit(&mut rows[0]);
        // request_id edits of the first row are seen as the other rows being foreign.
        let error = verify_chain(&rows).unwrap_err();
        assert!(
            matches!(
                error,
                ChainBreak::ContentChanged { id: 10, .. } | ChainBreak::ForeignRow { id: 20, .. }
            ),
            "{error:?}"
        );
        let mut rows = chain();
        edit(&mut rows[4]);
        assert!(
            matches!(
                verify_chain(&rows).unwrap_err(),
                ChainBreak::ContentChanged { id: 30, .. } | ChainBreak::ForeignRow { id: 30, .. }
            ),
            "edit of a middle row"
        );
    }
}

#[test]
fn edited_and_rehashed_row_breaks_the_next_link() {
    let mut rows = chain();
    rows[4].detail = json!({"note": "rewritten"});
    let seq = rows[4].seq.unwrap();
    let prev = rows[4].prev_hash.clone().unwrap();
    rows[4].row_hash = Some(event_hash(&rows[4].content(seq, &prev)).unwrap());
    assert_eq!(
        verify_chain(&rows).unwrap_err(),
        ChainBreak::LinkBroken {
            id: 40,
            seq: 4,
            expected_prev: rows[4].row_hash.clone().unwrap(),
        }
    );
}

/// The chain without row `index`, which must break as a sequence gap named by the row after it:
/// `(id, seq, expected seq)`.
fn without_row(index: usize, (id, seq, expected): (i64, i64, i64)) -> Vec<ChainRow> {
    let mut rows = chain();
    rows.remove(index);
    assert_eq!(
        verify_chain(&rows).unwrap_err(),
        ChainBreak::SeqGap { id, seq, expected }
    );
    rows
}

#[test]
fn deleted_middle_row_is_named_by_the_row_after_it() {
    let mut rows = without_row(4, (40, 4, 3)); // id 30, seq 3
    // Renumbering the following seqs without rehashing leaves the link broken.
    for (offset, row) in rows.iter_mut().skip(4).enumerate() {
        row.seq = Some(3 + i64::try_from(offset).unwrap());
    }
    let error = verify_chain(&rows).unwrap_err();
    assert!(
        matches!(error, ChainBreak::LinkBroken { id: 40, seq: 3, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("audit row id 40"));
}

#[test]
fn deleted_first_chained_row_is_named() {
    without_row(2, (20, 2, 1)); // id 10, seq 1
}

#[test]
fn deleted_last_rows_are_caught_by_the_signed_head() {
    let full = chain();
    let signed = signed_head(&full);
    let mut rows = full.clone();
    rows.pop();
    // The shorter chain is internally valid ...
    assert_eq!(verify_chain(&rows).unwrap().length, 5);
    // ... but no longer holds what the receipt signed.
    let error = verify_against_head(&rows, &signed).unwrap_err();
    assert_eq!(
        error,
        ChainBreak::SignedHeadMissing {
            length: 6,
            head_hash: signed.head_hash.clone()
        }
    );
    assert!(error.to_string().contains("rows were removed at the end"));
    rows.truncate(2);
    assert!(matches!(
        verify_against_head(&rows, &signed).unwrap_err(),
        ChainBreak::SignedHeadMissing { length: 6, .. }
    ));
}

#[test]
fn rewritten_last_row_is_caught_by_the_signed_head() {
    let mut rows = chain();
    let signed = signed_head(&rows);
    rows[7].detail = json!({"note": "rewritten"});
    rehash(&mut rows);
    assert_eq!(verify_chain(&rows).unwrap().length, 6);
    assert_eq!(
        verify_against_head(&rows, &signed).unwrap_err(),
        ChainBreak::SignedHeadDiffers { id: 60, seq: 6 }
    );
}

#[test]
fn reordered_rows_are_named() {
    // Swap the ids of seq 3 (id 30) and seq 4 (id 40): in id order seq 4 now comes first.
    let mut rows = chain();
    rows[4].id = 40;
    rows[5].id = 30;
    rows.sort_by_key(|row| row.id);
    assert_eq!(
        verify_chain(&rows).unwrap_err(),
        ChainBreak::SeqGap {
            id: 30,
            seq: 4,
            expected: 3
        }
    );
    // Swapping the seqs as well (but not the hashes) breaks the link at the first swapped row.
    rows[4].seq = Some(3);
    rows[5].seq = Some(4);
    let error = verify_chain(&rows).unwrap_err();
    assert!(
        matches!(error, ChainBreak::LinkBroken { id: 30, seq: 3, .. }),
        "{error:?}"
    );
    // A fully rebuilt reordered chain is internally valid: only the signed head catches it.
    let signed = signed_head(&chain());
    rehash(&mut rows);
    verify_chain(&rows).unwrap();
    assert!(matches!(
        verify_against_head(&rows, &signed).unwrap_err(),
        ChainBreak::SignedHeadDiffers { id: 60, seq: 6 }
    ));
}

#[test]
fn inserted_rows_are_named() {
    // A forged row linked correctly after seq 2, slipped in between ids 20 and 30.
    let mut rows = chain();
    let mut forged = row(25, true, "approved");
    forged.seq = Some(3);
    forged.prev_hash = rows[3].row_hash.clone();
    forged.row_hash =
        Some(event_hash(&forged.content(3, rows[3].row_hash.as_deref().unwrap())).unwrap());
    rows.insert(4, forged.clone());
    assert_eq!(
        verify_chain(&rows).unwrap_err(),
        ChainBreak::SeqGap {
            id: 30,
            seq: 3,
            expected: 4
        }
    );
    // ... with the following seqs renumbered: the next row does not link to the forged one.
    for row in rows.iter_mut().skip(5) {
        row.seq = row.seq.map(|seq| seq + 1);
    }
    let error = verify_chain(&rows).unwrap_err();
    assert!(
        matches!(error, ChainBreak::LinkBroken { id: 30, seq: 4, .. }),
        "{error:?}"
    );
    // An unchained row inserted after the chain started.
    let mut rows = chain();
    rows.insert(5, row(35, false, "note"));
    let error = verify_chain(&rows).unwrap_err();
    assert_eq!(error, ChainBreak::Unchained { id: 35 });
    assert!(error.to_string().contains("audit row id 35"));
    // A duplicated row (same id twice).
    let mut rows = chain();
    rows.insert(5, rows[4].clone());
    assert_eq!(
        verify_chain(&rows).unwrap_err(),
        ChainBreak::NotInIdOrder {
            id: 30,
            previous: 30
        }
    );
}

#[test]
fn missing_hashes_and_foreign_rows_are_named() {
    let mut rows = chain();
    rows[3].row_hash = None;
    assert_eq!(
        verify_chain(&rows).unwrap_err(),
        ChainBreak::HashMissing {
            id: 20,
            seq: 2,
            missing: "row_hash"
        }
    );
    let mut rows = chain();
    rows[3].prev_hash = None;
    assert!(matches!(
        verify_chain(&rows).unwrap_err(),
        ChainBreak::HashMissing {
            id: 20,
            missing: "prev_hash",
            ..
        }
    ));
    let mut rows = chain();
    let mut foreign = rows.clone();
    for row in &mut foreign {
        row.request_id = Uuid::nil();
    }
    rehash(&mut foreign);
    rows[5] = foreign[5].clone();
    assert!(matches!(
        verify_chain(&rows).unwrap_err(),
        ChainBreak::ForeignRow { id: 40, .. }
    ));
}

#[test]
fn break_messages_are_one_line_and_name_the_row() {
    let mut rows = chain();
    rows[6].actor = "mallory".to_owned();
    let message = verify_chain(&rows).unwrap_err().to_string();
    assert!(!message.contains('\n'));
    assert!(
        message.starts_with("audit row id 50 (seq 5): its content does not match its hash"),
        "{message}"
    );
    assert!(message.ends_with("the row was edited"), "{message}");
}
