//! The inputs of the user workflow's operator signals (`approve`, `abort`, `unblock`): the
//! updates' inputs, decoded strictly from raw payloads as the community workflow's are (see
//! [`crate::community::decode`]). A command sends one when no worker answered its update in
//! time (see [`crate::delivery`]); the Web UI may send one too.

use serde::Deserialize;

use super::contracts::{UserApproveRequest, UserOperatorRequest};
use crate::community::decode::Message;

/// The `abort` signal's input: the update's, under the signal's own name.
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct AbortMessage(pub UserOperatorRequest);

/// The `unblock` signal's input: the update's, under the signal's own name.
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct UnblockMessage(pub UserOperatorRequest);

impl Message for UserApproveRequest {
    const NAME: &'static str = "approve";
    const FIELDS: &'static [&'static str] = &[
        "approved_by",
        "inventory_digest",
        "note",
        "child_deletions",
        "signed",
    ];
    const ACTOR_FIELD: &'static str = "approved_by";
    const SHAPE: &'static str = r#"{"approved_by": "<operator>", "inventory_digest": "<frozen digest>", "note": "<optional>", "signed": {…}}"#;

    fn actor(&self) -> &str {
        &self.approved_by
    }
}

/// Implements [`Message`] for the two signals whose input is a [`UserOperatorRequest`].
macro_rules! operator_message {
    ($($message:ty: $name:literal;)+) => {
        $(
            impl Message for $message {
                const NAME: &'static str = $name;
                const FIELDS: &'static [&'static str] = &["requested_by", "reason", "signed"];
                const ACTOR_FIELD: &'static str = "requested_by";
                const SHAPE: &'static str =
                    r#"{"requested_by": "<operator>", "reason": "<why>", "signed": {…}}"#;

                fn actor(&self) -> &str {
                    &self.0.requested_by
                }
            }
        )+
    };
}

operator_message! {
    AbortMessage: "abort";
    UnblockMessage: "unblock";
}
