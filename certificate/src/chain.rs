//! The hash-chained audit trail: one chain per deletion request.
//!
//! # Encoding (the documented encoding of issue 15)
//!
//! Every audit event of a request gets a sequence number `seq` (1, 2, 3, … without gaps) and
//! two hashes: `prev_hash`, the `row_hash` of the event with `seq - 1` (for `seq` 1 the
//! [`GENESIS_HASH`], 64 zeros), and its own `row_hash`:
//!
//! ```text
//! row_hash = lowercase hex( SHA-256( JCS( {
//!     "request_id": "<request uuid, hyphenated, lowercase>",
//!     "seq":        <seq, a JSON integer>,
//!     "at":         "<event time as canonical::timestamp: 2026-11-30T21:13:39.123456Z>",
//!     "actor":      "<actor>",
//!     "event":      "<event name>",
//!     "detail":     <the event's detail JSON, as stored>,
//!     "prev_hash":  "<prev_hash>"
//! } ) ) )
//! ```
//!
//! where JCS is RFC 8785 canonical JSON ([`crate::canonical::canonical_json`]): members sorted,
//! no whitespace. The object has exactly these seven members.
//!
//! Because each hash covers the previous one, editing an event changes its hash (detected at
//! that row), and deleting, inserting or reordering events breaks a `seq` or a `prev_hash`
//! link (detected at the first row after the damage). Removing events at the END of the chain
//! leaves a shorter valid chain; that is detected only against a signed head
//! ([`verify_against_head`]): the receipt records the chain's length and head hash.
//!
//! Numbers in `detail` are hashed as RFC 8785 numbers (IEEE doubles): integers beyond 2^53
//! are not pinned exactly, so event details should carry large values as strings.
//!
//! Rows written before the chain existed (legacy rows, `seq` NULL) are accepted only before
//! the first chained row.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::canonical::{CanonicalError, canonical_json, sha256_hex, timestamp};

/// The `prev_hash` of a request's first event (seq 1): 64 zeros.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The content of one audit event, as it is hashed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EventContent<'a> {
    /// The deletion request the event belongs to.
    pub request_id: Uuid,
    /// Position in the request's chain, from 1.
    pub seq: i64,
    /// When the event was recorded (hashed at microsecond precision).
    pub at: DateTime<Utc>,
    /// Who caused it (operator identity or worker).
    pub actor: &'a str,
    /// The event name.
    pub event: &'a str,
    /// Event details as stored.
    pub detail: &'a serde_json::Value,
    /// The `row_hash` of the previous event, or [`GENESIS_HASH`] for seq 1.
    pub prev_hash: &'a str,
}

/// The `row_hash` of an event: lowercase hex SHA-256 of the canonical JSON described in the
/// module documentation.
pub fn event_hash(content: &EventContent<'_>) -> Result<String, CanonicalError> {
    let object = serde_json::json!({
        "request_id": content.request_id.hyphenated().to_string(),
        "seq": content.seq,
        "at": timestamp(content.at),
        "actor": content.actor,
        "event": content.event,
        "detail": content.detail,
        "prev_hash": content.prev_hash,
    });
    Ok(sha256_hex(&canonical_json(&object)?))
}

/// One stored audit row as read from Postgres; rows are given in `id` order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainRow {
    /// The row's primary key (insertion order).
    pub id: i64,
    /// The request it belongs to.
    pub request_id: Uuid,
    /// Chain position; `None` for a legacy row written before the chain existed.
    pub seq: Option<i64>,
    /// Event time.
    pub at: DateTime<Utc>,
    /// Who caused the event.
    pub actor: String,
    /// Event name.
    pub event: String,
    /// Event details.
    pub detail: serde_json::Value,
    /// Stored link to the previous row's hash.
    pub prev_hash: Option<String>,
    /// Stored hash of this row.
    pub row_hash: Option<String>,
}

impl ChainRow {
    /// The hashed content of this row, with the given seq and prev_hash.
    fn content<'a>(&'a self, seq: i64, prev_hash: &'a str) -> EventContent<'a> {
        EventContent {
            request_id: self.request_id,
            seq,
            at: self.at,
            actor: &self.actor,
            event: &self.event,
            detail: &self.detail,
            prev_hash,
        }
    }
}

/// The head of a verified chain: what a receipt signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainHead {
    /// Number of chained events (the seq of the last one); 0 for an empty chain.
    pub length: i64,
    /// `row_hash` of the last chained event; [`GENESIS_HASH`] for an empty chain.
    pub head_hash: String,
    /// `id` of the last chained row; 0 for an empty chain.
    pub head_row_id: i64,
}

impl ChainHead {
    /// The head of a chain with no events.
    pub fn empty() -> ChainHead {
        ChainHead {
            length: 0,
            head_hash: GENESIS_HASH.to_owned(),
            head_row_id: 0,
        }
    }
}

/// The first audit row that breaks the chain, and what that means.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChainBreak {
    /// The row's content no longer hashes to its stored `row_hash`.
    #[error(
        "audit row id {id} (seq {seq}): its content does not match its hash (stored {stored}, computed {computed}): the row was edited"
    )]
    ContentChanged {
        /// Row id.
        id: i64,
        /// Row seq.
        seq: i64,
        /// The stored `row_hash`.
        stored: String,
        /// The hash of the row's content as it is now.
        computed: String,
    },
    /// The row's `prev_hash` is not the previous chained row's `row_hash`.
    #[error(
        "audit row id {id} (seq {seq}): its prev_hash is not {expected_prev}, the hash of the chained row before it: a row before it was deleted, inserted or reordered"
    )]
    LinkBroken {
        /// Row id.
        id: i64,
        /// Row seq.
        seq: i64,
        /// The hash it should link to.
        expected_prev: String,
    },
    /// The row's seq does not follow the previous chained row's seq.
    #[error(
        "audit row id {id} has seq {seq} where seq {expected} was due: a row was deleted, inserted or reordered"
    )]
    SeqGap {
        /// Row id.
        id: i64,
        /// Row seq.
        seq: i64,
        /// The seq that should have come next.
        expected: i64,
    },
    /// A row without seq after the chain started.
    #[error(
        "audit row id {id} has no seq although chained rows precede it: a row was inserted outside the chain"
    )]
    Unchained {
        /// Row id.
        id: i64,
    },
    /// A chained row lacks its `prev_hash` or `row_hash`.
    #[error("audit row id {id} (seq {seq}) has a seq but no {missing}: the row was altered")]
    HashMissing {
        /// Row id.
        id: i64,
        /// Row seq.
        seq: i64,
        /// Which column is NULL: `prev_hash` or `row_hash`.
        missing: &'static str,
    },
    /// The rows are not in strictly increasing `id` order (a caller error, or duplicated ids).
    #[error(
        "audit row id {id} follows row id {previous}: rows must be given in increasing id order"
    )]
    NotInIdOrder {
        /// Row id.
        id: i64,
        /// The id of the row before it.
        previous: i64,
    },
    /// The row belongs to another request than the first row.
    #[error(
        "audit row id {id} belongs to request {found}, not {expected}: rows of two requests were mixed"
    )]
    ForeignRow {
        /// Row id.
        id: i64,
        /// The request id of the first row.
        expected: Uuid,
        /// The row's request id.
        found: Uuid,
    },
    /// The row's content cannot be canonically encoded (does not happen for JSON values).
    #[error("audit row id {id}: {error}")]
    Unencodable {
        /// Row id.
        id: i64,
        /// The encoding error.
        error: CanonicalError,
    },
    /// The chain has no row at the signed length.
    #[error(
        "the signed receipt covers {length} events ending in hash {head_hash}, but the chain has no event with seq {length}: rows were removed at the end or rewritten"
    )]
    SignedHeadMissing {
        /// Signed chain length.
        length: i64,
        /// Signed head hash.
        head_hash: String,
    },
    /// The row at the signed length has another hash than the signed head.
    #[error(
        "the signed receipt covers {seq} events ending in another hash than audit row id {id} (seq {seq}) has now: rows were removed at the end or rewritten"
    )]
    SignedHeadDiffers {
        /// Id of the row at the signed length.
        id: i64,
        /// The signed length.
        seq: i64,
    },
}

/// Verifies a request's audit rows (given in `id` order) and returns the chain head.
///
/// Legacy rows (`seq` NULL) are allowed only before the first chained row. Each chained row
/// must have seq = previous seq + 1 (the first 1), `prev_hash` = the previous chained row's
/// `row_hash` ([`GENESIS_HASH`] for seq 1) and `row_hash` = [`event_hash`] of its content. The
/// error names the first row that breaks one of these rules.
pub fn verify_chain(rows: &[ChainRow]) -> Result<ChainHead, ChainBreak> {
    let mut head = ChainHead::empty();
    let mut previous_id: Option<i64> = None;
    let request_id = rows.first().map(|row| row.request_id);
    for row in rows {
        if let Some(previous) = previous_id
            && row.id <= previous
        {
            return Err(ChainBreak::NotInIdOrder {
                id: row.id,
                previous,
            });
        }
        previous_id = Some(row.id);
        if let Some(expected) = request_id
            && row.request_id != expected
        {
            return Err(ChainBreak::ForeignRow {
                id: row.id,
                expected,
                found: row.request_id,
            });
        }
        let Some(seq) = row.seq else {
            if head.length > 0 {
                return Err(ChainBreak::Unchained { id: row.id });
            }
            continue;
        };
        head = verify_link(row, seq, &head)?;
    }
    Ok(head)
}

/// Checks one chained row against the head of the chain before it; returns the new head.
fn verify_link(row: &ChainRow, seq: i64, before: &ChainHead) -> Result<ChainHead, ChainBreak> {
    let expected = before.length + 1;
    if seq != expected {
        return Err(ChainBreak::SeqGap {
            id: row.id,
            seq,
            expected,
        });
    }
    let Some(prev_hash) = row.prev_hash.as_deref() else {
        return Err(ChainBreak::HashMissing {
            id: row.id,
            seq,
            missing: "prev_hash",
        });
    };
    let Some(stored) = row.row_hash.as_deref() else {
        return Err(ChainBreak::HashMissing {
            id: row.id,
            seq,
            missing: "row_hash",
        });
    };
    if prev_hash != before.head_hash {
        return Err(ChainBreak::LinkBroken {
            id: row.id,
            seq,
            expected_prev: before.head_hash.clone(),
        });
    }
    let computed = event_hash(&row.content(seq, prev_hash))
        .map_err(|error| ChainBreak::Unencodable { id: row.id, error })?;
    if computed != stored {
        return Err(ChainBreak::ContentChanged {
            id: row.id,
            seq,
            stored: stored.to_owned(),
            computed,
        });
    }
    Ok(ChainHead {
        length: seq,
        head_hash: computed,
        head_row_id: row.id,
    })
}

/// [`verify_chain`], then checks that the chain still contains the head a receipt signed: the
/// row with `seq == signed.length` exists and has `row_hash == signed.head_hash`. Events
/// appended after signing are fine. Returns the current head.
pub fn verify_against_head(rows: &[ChainRow], signed: &ChainHead) -> Result<ChainHead, ChainBreak> {
    let head = verify_chain(rows)?;
    if signed.length == 0 {
        if signed.head_hash == GENESIS_HASH {
            return Ok(head);
        }
        return Err(ChainBreak::SignedHeadMissing {
            length: signed.length,
            head_hash: signed.head_hash.clone(),
        });
    }
    let Some(row) = rows.iter().find(|row| row.seq == Some(signed.length)) else {
        return Err(ChainBreak::SignedHeadMissing {
            length: signed.length,
            head_hash: signed.head_hash.clone(),
        });
    };
    if row.row_hash.as_deref() != Some(signed.head_hash.as_str()) {
        return Err(ChainBreak::SignedHeadDiffers {
            id: row.id,
            seq: signed.length,
        });
    }
    Ok(head)
}

#[cfg(test)]
mod tests;
