//! What a user deletion may be asked to delete: a `demo:<name>` (the orchestration on dummy
//! handlers, nothing real is touched) or a `user:<pubkey>` (one real user's footprint in every
//! community, identified by the 64-hex public key the relay's tenant rows carry).

/// Prefix of a demo target.
pub const DEMO_TARGET_PREFIX: &str = "demo:";
/// Prefix of a real user target.
pub const USER_TARGET_PREFIX: &str = "user:";
/// Longest target accepted (prefix included).
pub const MAX_TARGET_LEN: usize = 200;
/// Length of a user's public key in hex.
pub const PUBKEY_HEX_LEN: usize = 64;

/// A target that passed validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserTarget<'a> {
    /// `demo:<name>`: dummy handlers, an artificial inventory.
    Demo {
        /// The name after the prefix.
        name: &'a str,
    },
    /// `user:<pubkey>`: a real user.
    User {
        /// 64 lowercase hex characters.
        pubkey: &'a str,
    },
}

/// Why a target cannot be submitted. Every message says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Neither prefix.
    #[error(
        "target {0:?} names no kind of user: write user:<64-hex public key> for a real user, or \
         demo:<name> for the demo orchestration"
    )]
    UnknownKind(String),
    /// `demo:` with nothing after it.
    #[error("the demo target names no user: write demo:<name>")]
    EmptyName,
    /// Whitespace or control characters, or longer than [`MAX_TARGET_LEN`].
    #[error("target {0:?} must be at most 200 characters without whitespace or control characters")]
    Malformed(String),
    /// `user:` followed by anything but 64 lowercase hex characters.
    #[error(
        "target {target:?} is not a user's public key: {problem}; write user:<64 lowercase hex \
         characters>, the key the relay stores in events.pubkey (an npub1… key must be decoded to \
         hex first)"
    )]
    MalformedPubkey {
        /// The target as given.
        target: String,
        /// What is wrong with the key.
        problem: PubkeyProblem,
    },
    /// A demo inventory of no community, or of more than the limit.
    #[error(
        "a demo inventory of {0} communities cannot be frozen: it must list 1 to {limit} communities",
        limit = super::inventory::MAX_INVENTORY_COMMUNITIES
    )]
    CommunityCount(u32),
    /// A `user:` target's inventory is not taken yet (workflow state until `user.take_inventory`
    /// answers; never shown to an operator).
    #[error("the inventory of this user is still being taken")]
    InventoryPending,
    /// `--demo-communities` with a real user: a real inventory is discovered, never sized.
    #[error("--demo-communities only applies to demo: targets; a user: inventory is discovered")]
    SizedRealTarget,
}

/// What is wrong with the key of a `user:` target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PubkeyProblem {
    /// Not 64 characters.
    #[error("it has {0} characters, not 64")]
    Length(usize),
    /// Upper-case hex: the relay stores keys in lower case, so it would match no row.
    #[error("it has upper-case letters (the relay stores keys in lower case)")]
    UpperCase,
    /// Not hex at all.
    #[error("it has characters that are not hexadecimal")]
    NotHex,
}

/// Checks `target` and says which kind it is.
pub fn parse_target(target: &str) -> Result<UserTarget<'_>, TargetError> {
    if target.len() > MAX_TARGET_LEN || target.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(TargetError::Malformed(target.to_string()));
    }
    if let Some(name) = target.strip_prefix(DEMO_TARGET_PREFIX) {
        if name.is_empty() {
            return Err(TargetError::EmptyName);
        }
        return Ok(UserTarget::Demo { name });
    }
    if let Some(pubkey) = target.strip_prefix(USER_TARGET_PREFIX) {
        return match pubkey_problem(pubkey) {
            None => Ok(UserTarget::User { pubkey }),
            Some(problem) => Err(TargetError::MalformedPubkey {
                target: target.to_string(),
                problem,
            }),
        };
    }
    Err(TargetError::UnknownKind(target.to_string()))
}

/// What is wrong with `pubkey` as a user's key, if anything.
pub fn pubkey_problem(pubkey: &str) -> Option<PubkeyProblem> {
    if pubkey.chars().count() != PUBKEY_HEX_LEN {
        return Some(PubkeyProblem::Length(pubkey.chars().count()));
    }
    if !pubkey.chars().all(|c| c.is_ascii_hexdigit()) {
        return Some(PubkeyProblem::NotHex);
    }
    if pubkey.chars().any(|c| c.is_ascii_uppercase()) {
        return Some(PubkeyProblem::UpperCase);
    }
    None
}

/// The pubkey of a `user:` target, if it is one.
pub fn real_user_pubkey(target: &str) -> Option<&str> {
    match parse_target(target) {
        Ok(UserTarget::User { pubkey }) => Some(pubkey),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "3bf0c63fcb93463407af97a5e5ee64fa883d107ef9e558472c4eb9aaaefa459d";

    #[test]
    fn demo_and_user_targets_are_told_apart() {
        assert_eq!(
            parse_target("demo:alice"),
            Ok(UserTarget::Demo { name: "alice" })
        );
        assert_eq!(
            parse_target(&format!("user:{KEY}")),
            Ok(UserTarget::User { pubkey: KEY })
        );
        assert_eq!(real_user_pubkey(&format!("user:{KEY}")), Some(KEY));
        assert_eq!(real_user_pubkey("demo:alice"), None);
    }

    #[test]
    fn malformed_user_keys_are_refused_with_what_is_wrong() {
        let short = parse_target("user:abc").unwrap_err();
        assert_eq!(
            short,
            TargetError::MalformedPubkey {
                target: "user:abc".into(),
                problem: PubkeyProblem::Length(3)
            }
        );
        assert!(
            short.to_string().contains("user:<64 lowercase hex"),
            "{short}"
        );
        let upper = KEY.to_uppercase();
        assert!(matches!(
            parse_target(&format!("user:{upper}")),
            Err(TargetError::MalformedPubkey {
                problem: PubkeyProblem::UpperCase,
                ..
            })
        ));
        let not_hex = format!("user:{}", "g".repeat(64));
        assert!(matches!(
            parse_target(&not_hex),
            Err(TargetError::MalformedPubkey {
                problem: PubkeyProblem::NotHex,
                ..
            })
        ));
        // 64 characters, but not 64 bytes: counted as characters and refused as not hex.
        let multibyte = format!("user:{}é", &KEY[..63]);
        assert!(matches!(
            parse_target(&multibyte),
            Err(TargetError::MalformedPubkey {
                problem: PubkeyProblem::NotHex,
                ..
            })
        ));
        assert!(matches!(
            parse_target("user:"),
            Err(TargetError::MalformedPubkey {
                problem: PubkeyProblem::Length(0),
                ..
            })
        ));
    }

    #[test]
    fn other_targets_are_refused() {
        assert_eq!(
            parse_target("npub1realuser"),
            Err(TargetError::UnknownKind("npub1realuser".into()))
        );
        assert_eq!(parse_target("demo:"), Err(TargetError::EmptyName));
        assert!(matches!(
            parse_target("demo:a b"),
            Err(TargetError::Malformed(_))
        ));
        assert!(matches!(
            parse_target(&format!("user: {KEY}")),
            Err(TargetError::Malformed(_))
        ));
    }
}
