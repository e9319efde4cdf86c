//! Search attributes set by the workflows so the Web UI can filter deletions.

use temporalio_common::search_attributes::SearchAttributeKey;

/// `community` or `user`.
pub const KIND: SearchAttributeKey<String> = SearchAttributeKey::keyword("BuzzDeletionKind");
/// The current phase name (see `community::Phase::as_str`).
pub const STAGE: SearchAttributeKey<String> = SearchAttributeKey::keyword("BuzzDeletionStage");
/// The target community id (lowercase hyphenated UUID).
pub const COMMUNITY_ID: SearchAttributeKey<String> = SearchAttributeKey::keyword("BuzzCommunityId");
/// True while the deletion waits for an operator's `unblock`.
pub const BLOCKED: SearchAttributeKey<bool> = SearchAttributeKey::bool("BuzzBlocked");

/// Every custom search attribute name with its Temporal type, for registration.
pub const ALL: [(&str, &str); 4] = [
    ("BuzzDeletionKind", "Keyword"),
    ("BuzzDeletionStage", "Keyword"),
    ("BuzzCommunityId", "Keyword"),
    ("BuzzBlocked", "Bool"),
];
