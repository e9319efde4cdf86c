//! The per-user Redis key shapes the platform declares: the one list a user erasure matches,
//! counts, deletes and verifies by (`docs/data-model.md`, "Per-user Redis keys").
//!
//! Every per-user key lives in its community's namespace under the user's prefix
//! `buzz:{c}:user:{pk}` (`c` the community id as a lowercase hyphenated UUID, `pk` the user's
//! 64-hex pubkey, both exactly as the relay writes them). The declared shapes:
//!
//! | shape            | key                                          | what the relay keeps there  |
//! | ---------------- | -------------------------------------------- | --------------------------- |
//! | `profile`        | `buzz:{c}:user:{pk}`                         | the user's profile hash     |
//! | `presence`       | `buzz:{c}:user:{pk}:presence`                | last seen, online state     |
//! | `inbox`          | `buzz:{c}:user:{pk}:inbox`                   | unread notifications        |
//! | `session`        | `buzz:{c}:user:{pk}:session:{token}`         | one connection's session    |
//! | `served`         | `buzz:{c}:user:{pk}:served:{run}:{seq}`      | a served write's record     |
//!
//! `{token}`, `{run}` and `{seq}` are one segment each: 1 to 128 of `A-Z a-z 0-9 _ -`. Anything
//! else that starts with a user's prefix (another suffix, an empty or over-long segment, a
//! non-canonical community id, a longer "pubkey") matches no shape: the erasure refuses it by
//! name before deleting anything, as it refuses an object key of unknown shape. A shape the
//! platform starts writing is added here, with its row in the table above and in the docs.

use uuid::Uuid;

/// One segment of a declared shape after the user's prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    /// Exactly this text.
    Literal(&'static str),
    /// Any one segment of 1 to [`MAX_TOKEN_LEN`] characters of `A-Z a-z 0-9 _ -`.
    Token,
}

/// One declared per-user key shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserKeyShape {
    /// Its name in the docs and in refusals.
    pub name: &'static str,
    /// The segments after `buzz:{c}:user:{pk}`, each preceded by `:` (none: the bare key).
    pub segments: &'static [Segment],
}

/// The longest token segment a declared shape accepts.
pub const MAX_TOKEN_LEN: usize = 128;

/// Every per-user key shape the platform writes; see the module documentation.
pub const USER_KEY_SHAPES: &[UserKeyShape] = &[
    UserKeyShape {
        name: "profile",
        segments: &[],
    },
    UserKeyShape {
        name: "presence",
        segments: &[Segment::Literal("presence")],
    },
    UserKeyShape {
        name: "inbox",
        segments: &[Segment::Literal("inbox")],
    },
    UserKeyShape {
        name: "session",
        segments: &[Segment::Literal("session"), Segment::Token],
    },
    UserKeyShape {
        name: "served",
        segments: &[Segment::Literal("served"), Segment::Token, Segment::Token],
    },
];

impl UserKeyShape {
    /// Whether `rest` (what follows the user's prefix) is this shape.
    fn matches(&self, rest: &str) -> bool {
        if self.segments.is_empty() {
            return rest.is_empty();
        }
        let Some(rest) = rest.strip_prefix(':') else {
            return false;
        };
        let parts: Vec<&str> = rest.split(':').collect();
        parts.len() == self.segments.len()
            && parts
                .iter()
                .zip(self.segments)
                .all(|(part, segment)| match segment {
                    Segment::Literal(text) => part == text,
                    Segment::Token => is_token(part),
                })
    }

    /// The shape written out with placeholders, e.g. `buzz:{c}:user:{pk}:session:{token}`.
    pub fn spelled(&self) -> String {
        let mut spelled = "buzz:{c}:user:{pk}".to_owned();
        for segment in self.segments {
            spelled.push(':');
            spelled.push_str(match segment {
                Segment::Literal(text) => text,
                Segment::Token => "{token}",
            });
        }
        spelled
    }
}

fn is_token(part: &str) -> bool {
    (1..=MAX_TOKEN_LEN).contains(&part.len())
        && part
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The user's prefix in a community: `buzz:{c}:user:{pk}` (also the bare profile key).
pub fn user_key_prefix(community: Uuid, pubkey: &str) -> String {
    format!("buzz:{}:user:{pubkey}", community.hyphenated())
}

/// The SCAN pattern of everything under the user's prefix in a community, declared or not:
/// `buzz:{c}:user:{pk}*` (the bare key included).
pub fn user_key_scan_pattern(community: Uuid, pubkey: &str) -> String {
    format!("{}*", user_key_prefix(community, pubkey))
}

/// The SCAN pattern of everything naming the user's prefix in any namespace: `buzz:*:user:{pk}*`.
pub fn user_keys_everywhere_pattern(pubkey: &str) -> String {
    format!("buzz:*:user:{pubkey}*")
}

/// The declared shape `key` has as one of `pubkey`'s keys in `community`, if any.
pub fn user_key_shape(community: Uuid, pubkey: &str, key: &str) -> Option<&'static UserKeyShape> {
    let rest = key.strip_prefix(&user_key_prefix(community, pubkey))?;
    USER_KEY_SHAPES.iter().find(|shape| shape.matches(rest))
}

/// The community of `key` when it is a declared per-user key of `pubkey`: the namespace
/// segment is a canonical community id and the rest a declared shape. `None` for anything else
/// that [`user_keys_everywhere_pattern`] matches, which a caller refuses.
pub fn community_of_user_key(key: &str, pubkey: &str) -> Option<Uuid> {
    let (segment, _) = key.strip_prefix("buzz:")?.split_once(':')?;
    let community = Uuid::parse_str(segment).ok()?;
    (community.hyphenated().to_string() == segment
        && user_key_shape(community, pubkey, key).is_some())
    .then_some(community)
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: &str = "00000000-0000-0000-0000-000000000abc";

    fn pk() -> String {
        "ab".repeat(32)
    }

    fn c() -> Uuid {
        Uuid::from_u128(0xabc)
    }

    #[test]
    fn every_declared_shape_is_recognised_the_bare_key_included() {
        let pk = pk();
        for (key, shape) in [
            (format!("buzz:{C}:user:{pk}"), "profile"),
            (format!("buzz:{C}:user:{pk}:presence"), "presence"),
            (format!("buzz:{C}:user:{pk}:inbox"), "inbox"),
            (format!("buzz:{C}:user:{pk}:session:3"), "session"),
            (format!("buzz:{C}:user:{pk}:served:ab_12-Z:7"), "served"),
        ] {
            assert_eq!(
                user_key_shape(c(), &pk, &key).map(|s| s.name),
                Some(shape),
                "{key}"
            );
            assert_eq!(community_of_user_key(&key, &pk), Some(c()), "{key}");
        }
    }

    #[test]
    fn anything_else_under_the_users_prefix_matches_no_shape() {
        let pk = pk();
        let long = "x".repeat(MAX_TOKEN_LEN + 1);
        for key in [
            format!("buzz:{C}:user:{pk}:"),
            format!("buzz:{C}:user:{pk}:k0"),
            format!("buzz:{C}:user:{pk}:session"),
            format!("buzz:{C}:user:{pk}:session:"),
            format!("buzz:{C}:user:{pk}:session:a:b"),
            format!("buzz:{C}:user:{pk}:session:{long}"),
            format!("buzz:{C}:user:{pk}:session:a b"),
            format!("buzz:{C}:user:{pk}:presence:x"),
            format!("buzz:{C}:user:{pk}0"),
            format!("buzz:{C}:user:{pk}:served:1"),
        ] {
            assert_eq!(user_key_shape(c(), &pk, &key), None, "{key}");
            assert_eq!(community_of_user_key(&key, &pk), None, "{key}");
        }
    }

    #[test]
    fn only_the_canonical_community_spelling_is_the_users_namespace() {
        let pk = pk();
        for key in [
            format!("buzz:{}:user:{pk}:inbox", C.to_uppercase()),
            format!("buzz:{}:user:{pk}:inbox", C.replace('-', "")),
            format!("buzz:{C}:users:{pk}:inbox"),
            format!("buzz:not-a-uuid:user:{pk}:inbox"),
        ] {
            assert_eq!(community_of_user_key(&key, &pk), None, "{key}");
        }
    }

    #[test]
    fn the_scan_patterns_cover_the_bare_key_and_every_suffix() {
        let pk = pk();
        assert_eq!(
            user_key_scan_pattern(c(), &pk),
            format!("buzz:{C}:user:{pk}*")
        );
        assert_eq!(
            user_keys_everywhere_pattern(&pk),
            format!("buzz:*:user:{pk}*")
        );
        for shape in USER_KEY_SHAPES {
            assert!(shape.spelled().starts_with("buzz:{c}:user:{pk}"));
        }
    }
}
