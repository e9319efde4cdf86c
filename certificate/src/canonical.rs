//! The byte encodings everything else hashes or signs.
//!
//! - JSON is hashed and signed only in its RFC 8785 (JCS) canonical form: object members sorted
//!   by their UTF-16 code units, no insignificant whitespace, numbers in the ECMAScript
//!   shortest form, strings with the minimal JSON escapes. Two JSON texts with the same meaning
//!   therefore hash alike, whatever key order or spacing Postgres `jsonb` or an editor produced.
//!   Consequence worth knowing: `5` and `5.0` are the same canonical number, and integers beyond
//!   2^53 cannot be represented exactly (all our counts are far below that).
//! - Hashes are SHA-256, written as 64 lowercase hex characters.
//! - Every timestamp inside hashed or signed content is written by [`timestamp`]: RFC 3339 in
//!   UTC with a `Z` suffix and exactly six fractional digits, e.g.
//!   `2026-11-30T21:13:39.123456Z`. Six digits because Postgres `timestamptz` stores
//!   microseconds: a value read back from the database encodes to the same text it had when it
//!   was hashed. Finer precision is truncated, never rounded.

use chrono::{DateTime, SecondsFormat, Utc};
use sha2::{Digest, Sha256};

/// A value could not be encoded as RFC 8785 canonical JSON.
///
/// For a [`serde_json::Value`] this does not happen in practice (a `Value` cannot hold NaN,
/// infinities or duplicate keys); it is a type rather than a panic because the canonicalizer's
/// API is fallible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot encode the value as RFC 8785 canonical JSON: {reason}")]
pub struct CanonicalError {
    /// What the canonicalizer reported.
    pub reason: String,
}

/// The RFC 8785 (JCS) canonical bytes of `value`.
pub fn canonical_json(value: &serde_json::Value) -> Result<Vec<u8>, CanonicalError> {
    canonical_bytes(value)
}

/// The RFC 8785 (JCS) canonical bytes of what `value` serializes to: the same bytes as
/// [`canonical_json`] of its `serde_json::to_value`, without building that `Value` first (a
/// receipt's field digests of a 10M-version tenant are tens of thousands of members).
pub fn canonical_bytes<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    serde_json_canonicalizer::to_vec(value).map_err(|error| CanonicalError {
        reason: error.to_string(),
    })
}

/// SHA-256 of `bytes` as 64 lowercase hex characters.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// SHA-256 of `bytes` as raw 32 bytes.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The one timestamp encoding used in hashed and signed content: RFC 3339, UTC, `Z`, exactly
/// six fractional digits (microseconds; finer precision is truncated).
pub fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// A text is not a timestamp in the form [`timestamp`] writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a timestamp of the form 2026-01-31T23:59:59.123456Z: {reason}")]
pub struct TimestampError {
    /// The text that was given.
    pub text: String,
    /// Why it was refused.
    pub reason: String,
}

/// Parses a timestamp written by [`timestamp`], refusing any other spelling of the same instant
/// (another offset, fewer or more fractional digits), so that a parsed value encodes back to
/// exactly the text that was hashed.
pub fn parse_timestamp(text: &str) -> Result<DateTime<Utc>, TimestampError> {
    let parsed = DateTime::parse_from_rfc3339(text).map_err(|error| TimestampError {
        text: text.to_owned(),
        reason: error.to_string(),
    })?;
    let at = parsed.with_timezone(&Utc);
    if timestamp(at) != text {
        return Err(TimestampError {
            text: text.to_owned(),
            reason: "not in the canonical form (UTC, Z, six fractional digits)".to_owned(),
        });
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_members_and_drops_whitespace() {
        let value: serde_json::Value =
            serde_json::from_str(r#"{ "b": [1, 2.0, "x"], "a": {"d": null, "c": true} }"#).unwrap();
        assert_eq!(
            canonical_json(&value).unwrap(),
            br#"{"a":{"c":true,"d":null},"b":[1,2,"x"]}"#.to_vec()
        );
    }

    #[test]
    fn canonical_json_matches_rfc8785_string_and_number_rules() {
        // RFC 8785 section 3.2.3: members sorted by UTF-16 code units, so "\u{20ac}" (euro,
        // U+20AC) sorts before "\u{1f600}" (a surrogate pair starting 0xD83D).
        let value = json!({"\u{1f600}": 1, "\u{20ac}": 2, "\r": 3, "1": 4});
        assert_eq!(
            String::from_utf8(canonical_json(&value).unwrap()).unwrap(),
            "{\"\\r\":3,\"1\":4,\"\u{20ac}\":2,\"\u{1f600}\":1}"
        );
        let numbers: serde_json::Value =
            serde_json::from_str("[1e30, 0.000001, -0.0, 333333333.33333329, 9007199254740991]")
                .unwrap();
        assert_eq!(
            String::from_utf8(canonical_json(&numbers).unwrap()).unwrap(),
            "[1e+30,0.000001,0,333333333.3333333,9007199254740991]"
        );
        let text = json!("line\nbreak \u{7f} \u{1} \"quoted\" /");
        assert_eq!(
            String::from_utf8(canonical_json(&text).unwrap()).unwrap(),
            "\"line\\nbreak \u{7f} \\u0001 \\\"quoted\\\" /\""
        );
    }

    #[test]
    fn sha256_hex_is_lowercase_and_known() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(hex::encode(sha256(b"abc")), sha256_hex(b"abc"));
    }

    #[test]
    fn timestamp_has_six_digits_utc_and_truncates() {
        let at = Utc.with_ymd_and_hms(2026, 11, 30, 21, 13, 39).unwrap()
            + chrono::Duration::nanoseconds(123_456_999);
        assert_eq!(timestamp(at), "2026-11-30T21:13:39.123456Z");
        let whole = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        assert_eq!(timestamp(whole), "2026-01-02T03:04:05.000000Z");
    }

    #[test]
    fn parse_timestamp_accepts_only_the_canonical_spelling() {
        let at = parse_timestamp("2026-11-30T21:13:39.123456Z").unwrap();
        assert_eq!(timestamp(at), "2026-11-30T21:13:39.123456Z");
        for other in [
            "2026-11-30T21:13:39Z",
            "2026-11-30T21:13:39.123Z",
            "2026-11-30T22:13:39.123456+01:00",
            "2026-11-30T21:13:39.123456789Z",
            "2026-11-30 21:13:39.123456Z",
            "yesterday",
        ] {
            assert!(parse_timestamp(other).is_err(), "{other} was accepted");
        }
    }
}
