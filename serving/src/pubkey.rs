//! The rule of a user's key: 64 lowercase hexadecimal characters, as the relay stores it.
//!
//! The `workflows` crate keeps a copy of this rule (`workflows::user::target::pubkey_problem`):
//! it is deterministic workflow code and may not link sqlx, which this crate does. The
//! `activities` crate, which links both, tests that the two agree.

/// Length of a user's key in hexadecimal characters.
pub const PUBKEY_HEX_LEN: usize = 64;

/// What is wrong with a user's key.
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

/// What is wrong with `pubkey` as a user's key, if anything.
pub fn pubkey_problem(pubkey: &str) -> Option<PubkeyProblem> {
    let length = pubkey.chars().count();
    if length != PUBKEY_HEX_LEN {
        return Some(PubkeyProblem::Length(length));
    }
    if !pubkey.chars().all(|c| c.is_ascii_hexdigit()) {
        return Some(PubkeyProblem::NotHex);
    }
    if pubkey.chars().any(|c| c.is_ascii_uppercase()) {
        return Some(PubkeyProblem::UpperCase);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_64_lowercase_hex_is_a_pubkey() {
        assert_eq!(pubkey_problem(&"0a".repeat(32)), None);
        assert_eq!(pubkey_problem(""), Some(PubkeyProblem::Length(0)));
        assert_eq!(
            pubkey_problem(&"0a".repeat(31)),
            Some(PubkeyProblem::Length(62))
        );
        assert_eq!(
            pubkey_problem(&"0A".repeat(32)),
            Some(PubkeyProblem::UpperCase)
        );
        assert_eq!(
            pubkey_problem(&format!("{}g", "0".repeat(63))),
            Some(PubkeyProblem::NotHex)
        );
        assert_eq!(
            pubkey_problem(&format!("{}'", "0".repeat(63))),
            Some(PubkeyProblem::NotHex)
        );
    }
}
