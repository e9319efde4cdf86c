//! Decoding of operator signals, which arrive as raw payloads.
//!
//! The Web UI's "Send a Signal" dialog (and `temporal workflow signal`) sends whatever the
//! operator typed. A signal handler whose argument is a typed struct makes the SDK decode it
//! before the handler runs, and a payload that does not decode fails every workflow task from
//! then on: the deletion is wedged. So the signal handlers take the payloads as they came
//! ([`RawValue`] accepts any number of payloads in any encoding) and decode them here, strictly:
//! exactly one `json/plain` payload holding an object with only the message's fields, each of
//! the right type. Anything else is a [`Malformed`] refusal the workflow records in the audit
//! trail, and nothing changes.
//!
//! The accepted JSON is exactly what the runbook documents and the update path sends, so a
//! history recorded before this decoding replays unchanged.

use serde::de::DeserializeOwned;
use serde_json::Value;
use temporalio_common::data_converters::RawValue;
use temporalio_common::protos::temporal::api::common::v1::Payload;
use thiserror::Error;

use super::contracts::{AbortRequest, ApproveRequest, UnblockRequest};

/// The payload metadata key naming the encoding.
const ENCODING_KEY: &str = "encoding";
/// The only encoding an operator message may use.
const JSON_ENCODING: &str = "json/plain";
/// The actor recorded for a message that names no operator.
pub const UNKNOWN_ACTOR: &str = "unknown";

/// An operator message that arrives as a signal.
pub trait Message: DeserializeOwned {
    /// The message name, as the Web UI's signal name.
    const NAME: &'static str;
    /// Every field the message may carry; any other field is refused.
    const FIELDS: &'static [&'static str];
    /// The field naming the operator (recorded as the refusal's actor when it is a string).
    const ACTOR_FIELD: &'static str;
    /// The JSON to send, quoted in every refusal so the operator can correct it.
    const SHAPE: &'static str;

    /// The operator the decoded message names (the value of [`Message::ACTOR_FIELD`]).
    fn actor(&self) -> &str;
}

/// Implements [`Message`] for each `Type: "name", actor field, [fields], shape` entry: the actor
/// field is named once, as [`Message::ACTOR_FIELD`] and as what [`Message::actor`] reads.
macro_rules! messages {
    ($($message:ty: $name:literal, actor $actor:ident, [$($field:literal),+], $shape:literal;)+) => {
        $(
            impl Message for $message {
                const NAME: &'static str = $name;
                const FIELDS: &'static [&'static str] = &[$($field),+];
                const ACTOR_FIELD: &'static str = stringify!($actor);
                const SHAPE: &'static str = $shape;

                fn actor(&self) -> &str {
                    &self.$actor
                }
            }
        )+
    };
}

messages! {
    ApproveRequest: "approve", actor approved_by, ["approved_by", "digest", "note", "signed"],
        r#"{"approved_by": "<operator>", "digest": "<frozen digest>", "note": "<optional>", "signed": {…}} as printed by `buzz-deletion community sign approve`"#;
    AbortRequest: "abort", actor actor, ["actor", "reason", "signed"],
        r#"{"actor": "<operator>", "reason": "<why>", "signed": {…}} as printed by `buzz-deletion community sign abort`"#;
    UnblockRequest: "unblock", actor actor, ["actor", "reason", "signed"],
        r#"{"actor": "<operator>", "reason": "<remediation done>", "signed": {…}} as printed by `buzz-deletion community sign unblock`"#;
}

/// What is wrong with a signal's payloads.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Malformed {
    /// The signal carried no payload.
    #[error("no input")]
    NoInput,
    /// The signal carried several payloads (several inputs).
    #[error("{count} inputs instead of one")]
    SeveralInputs {
        /// How many.
        count: usize,
    },
    /// The payload is not JSON (binary, protobuf, …).
    #[error("input encoding is {encoding:?}, not json/plain")]
    NotJson {
        /// The encoding the payload declared.
        encoding: String,
    },
    /// The payload claims JSON but does not parse.
    #[error("input is not valid JSON: {detail}")]
    InvalidJson {
        /// The parser's message.
        detail: String,
    },
    /// The JSON is not an object.
    #[error("input is JSON {kind}, not an object")]
    NotAnObject {
        /// `null`, `an array`, `a string`, …
        kind: &'static str,
    },
    /// The object has a field the message does not know (a typo would otherwise be dropped).
    #[error("unknown field {field:?}")]
    UnknownField {
        /// The field.
        field: String,
    },
    /// A field is missing or has the wrong type.
    #[error("{detail}")]
    WrongShape {
        /// serde's message, e.g. ``missing field `digest` ``.
        detail: String,
    },
}

/// A signal that could not be decoded: who sent it (as far as the payload says) and why it is
/// refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecodable {
    /// The operator named in the payload, or [`UNKNOWN_ACTOR`].
    pub actor: String,
    /// The refusal, as recorded in the audit trail.
    pub reason: String,
}

/// Decodes a signal's payloads as `M`, or says why they are refused.
pub fn decode<M: Message>(raw: &RawValue) -> Result<M, Undecodable> {
    let mut actor = UNKNOWN_ACTOR.to_owned();
    let decoded = parse(&raw.payloads).and_then(|value| {
        if let Some(name) = value.get(M::ACTOR_FIELD).and_then(Value::as_str)
            && !name.trim().is_empty()
        {
            actor = name.trim().to_owned();
        }
        typed::<M>(value)
    });
    decoded.map_err(|malformed| Undecodable {
        actor,
        reason: format!(
            "malformed {} signal, ignored: {malformed}; send one JSON object {}",
            M::NAME,
            M::SHAPE
        ),
    })
}

/// The single payload as a JSON object.
fn parse(payloads: &[Payload]) -> Result<Value, Malformed> {
    let payload = match payloads {
        [] => return Err(Malformed::NoInput),
        [one] => one,
        several => {
            return Err(Malformed::SeveralInputs {
                count: several.len(),
            });
        }
    };
    let encoding = payload
        .metadata
        .get(ENCODING_KEY)
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .unwrap_or_default();
    if encoding == "binary/null" {
        return Err(Malformed::NotAnObject { kind: "null" });
    }
    if encoding != JSON_ENCODING {
        return Err(Malformed::NotJson { encoding });
    }
    let value: Value =
        serde_json::from_slice(&payload.data).map_err(|e| Malformed::InvalidJson {
            detail: e.to_string(),
        })?;
    match value {
        Value::Object(_) => Ok(value),
        Value::Null => Err(Malformed::NotAnObject { kind: "null" }),
        Value::Bool(_) => Err(Malformed::NotAnObject { kind: "a boolean" }),
        Value::Number(_) => Err(Malformed::NotAnObject { kind: "a number" }),
        Value::String(_) => Err(Malformed::NotAnObject { kind: "a string" }),
        Value::Array(_) => Err(Malformed::NotAnObject { kind: "an array" }),
    }
}

/// The object as `M`: no field outside `M::FIELDS`, every field of the right type.
fn typed<M: Message>(value: Value) -> Result<M, Malformed> {
    if let Value::Object(fields) = &value
        && let Some(unknown) = fields.keys().find(|k| !M::FIELDS.contains(&k.as_str()))
    {
        return Err(Malformed::UnknownField {
            field: unknown.clone(),
        });
    }
    serde_json::from_value(value).map_err(|e| Malformed::WrongShape {
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn payload(encoding: &str, data: &[u8]) -> Payload {
        Payload {
            metadata: HashMap::from([(ENCODING_KEY.to_owned(), encoding.as_bytes().to_vec())]),
            data: data.to_vec(),
            external_payloads: vec![],
        }
    }

    fn json(text: &str) -> RawValue {
        RawValue::new(vec![payload(JSON_ENCODING, text.as_bytes())])
    }

    fn refusal<M: Message + std::fmt::Debug>(raw: RawValue) -> Undecodable {
        decode::<M>(&raw).expect_err("must be refused")
    }

    #[test]
    fn the_documented_json_decodes_exactly() {
        let approve: ApproveRequest =
            decode(&json(r#"{"approved_by": "bob", "digest": "sha256:d1"}"#)).expect("decodes");
        assert_eq!(
            approve,
            ApproveRequest {
                approved_by: "bob".into(),
                digest: "sha256:d1".into(),
                note: None,
                signed: None,
            }
        );
        let abort: AbortRequest =
            decode(&json(r#"{"actor": "carol", "reason": "wrong host"}"#)).expect("decodes");
        assert_eq!(abort.actor, "carol");
        let unblock: UnblockRequest =
            decode(&json(r#"{"actor": "dave", "reason": "removed the key"}"#)).expect("decodes");
        assert_eq!(unblock.reason, "removed the key");
    }

    #[test]
    fn the_reproduced_garbage_payload_is_refused_naming_the_missing_field_and_the_shape() {
        let refused = refusal::<ApproveRequest>(json(r#"{"garbage": 1}"#));
        assert_eq!(refused.actor, UNKNOWN_ACTOR);
        assert!(
            refused.reason.contains("unknown field \"garbage\""),
            "{refused:?}"
        );
        assert!(
            refused.reason.contains(ApproveRequest::SHAPE),
            "{refused:?}"
        );
        let missing = refusal::<ApproveRequest>(json(r#"{"approved_by": "bob"}"#));
        assert_eq!(missing.actor, "bob");
        assert!(
            missing.reason.contains("missing field `digest`"),
            "{missing:?}"
        );
    }

    #[test]
    fn every_malformed_shape_is_a_refusal_never_a_panic() {
        let cases: Vec<(RawValue, &str)> = vec![
            (RawValue::new(vec![]), "no input"),
            (
                RawValue::new(vec![
                    payload(JSON_ENCODING, br#"{"actor": "a", "reason": "b"}"#),
                    payload(JSON_ENCODING, br#"{"actor": "a", "reason": "b"}"#),
                ]),
                "2 inputs instead of one",
            ),
            (
                RawValue::new(vec![payload("binary/plain", b"abort please")]),
                "not json/plain",
            ),
            (RawValue::new(vec![Payload::default()]), "encoding is \"\""),
            (
                RawValue::new(vec![payload("binary/null", b"")]),
                "JSON null",
            ),
            (json("null"), "JSON null"),
            (json(r#"["carol", "why"]"#), "JSON an array"),
            (json(r#""carol""#), "JSON a string"),
            (json("{not json"), "not valid JSON"),
            (
                json(r#"{"actor": 7, "reason": "x"}"#),
                "invalid type: integer `7`",
            ),
            (json(r#"{"actor": "carol"}"#), "missing field `reason`"),
        ];
        for (raw, expected) in cases {
            let refused = refusal::<AbortRequest>(raw);
            assert!(
                refused
                    .reason
                    .starts_with("malformed abort signal, ignored: "),
                "{refused:?}"
            );
            assert!(refused.reason.contains(expected), "{expected}: {refused:?}");
        }
    }

    #[test]
    fn the_actor_is_taken_from_the_payload_only_when_it_is_a_non_empty_string() {
        let named = refusal::<UnblockRequest>(json(r#"{"actor": " erin ", "why": "x"}"#));
        assert_eq!(named.actor, "erin");
        let blank = refusal::<UnblockRequest>(json(r#"{"actor": " ", "oops": 1}"#));
        assert_eq!(blank.actor, UNKNOWN_ACTOR);
        let mistyped = refusal::<UnblockRequest>(json(r#"{"actor": ["erin"]}"#));
        assert_eq!(mistyped.actor, UNKNOWN_ACTOR);
    }
}
