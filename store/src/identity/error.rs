//! Why an operator key or signature is refused; every refusal is permanent but a database hiccup.

use workflows::approval::TwoPersonRefusal;
use workflows::operator::SignatureRefusal;

/// Why a key is not registered or a signature does not count.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The statement is malformed or bound to something else.
    #[error(transparent)]
    Statement(#[from] SignatureRefusal),
    /// No registered key has this fingerprint.
    #[error(
        "signature refused: key {fingerprint} is not a registered operator key; the owner \
         registers it with `buzz-deletion operators add --name NAME --public-key FILE`"
    )]
    UnknownKey {
        /// The fingerprint the statement names.
        fingerprint: String,
    },
    /// The key was revoked.
    #[error(
        "signature refused: key {fingerprint} of {name} was revoked at {revoked_at} by \
         {revoked_by} ({reason}); sign with a registered key"
    )]
    Revoked {
        /// The fingerprint.
        fingerprint: String,
        /// Its registered name.
        name: String,
        /// When.
        revoked_at: String,
        /// By whom.
        revoked_by: String,
        /// Why.
        reason: String,
    },
    /// The operator name given does not belong to the signing key.
    #[error(
        "signature refused: the operator named {label:?} is not the owner of key {fingerprint}, \
         which is registered as {name:?}"
    )]
    NameMismatch {
        /// The name the message gave.
        label: String,
        /// The fingerprint.
        fingerprint: String,
        /// The registered name.
        name: String,
    },
    /// The SSHSIG signature does not verify over the statement with the registered key.
    #[error("signature refused: it does not verify with key {fingerprint}: {reason}")]
    BadSignature {
        /// The fingerprint.
        fingerprint: String,
        /// The verifier's explanation.
        reason: String,
    },
    /// Signed too long ago.
    #[error(
        "signature refused: signed at {signed_at}, {age_secs} s ago by the database clock; a \
         signature counts for {max_secs} s, sign again"
    )]
    Expired {
        /// The statement's time.
        signed_at: String,
        /// Its age.
        age_secs: i64,
        /// The window.
        max_secs: i64,
    },
    /// Signed in the future.
    #[error(
        "signature refused: signed at {signed_at}, {ahead_secs} s ahead of the database clock \
         (at most {max_secs} s allowed); check the signer's clock"
    )]
    FromTheFuture {
        /// The statement's time.
        signed_at: String,
        /// How far ahead.
        ahead_secs: i64,
        /// The allowed skew.
        max_secs: i64,
    },
    /// The nonce was consumed by another action.
    #[error(
        "signature refused: it was already used (key {fingerprint}, nonce {nonce}, by \
         {consumed_by}); a signature counts once, sign again"
    )]
    Replayed {
        /// The fingerprint.
        fingerprint: String,
        /// The nonce.
        nonce: String,
        /// Who consumed it.
        consumed_by: String,
    },
    /// The public key cannot be read.
    #[error("public key refused: {reason}")]
    InvalidKey {
        /// Why.
        reason: String,
    },
    /// The key's algorithm is not accepted.
    #[error(
        "public key refused: algorithm {algorithm} is not accepted; use ssh-ed25519, \
         ecdsa-sha2-nistp256/384, sk-ssh-ed25519@openssh.com or sk-ecdsa-sha2-nistp256@openssh.com"
    )]
    UnsupportedAlgorithm {
        /// The algorithm.
        algorithm: String,
    },
    /// The operator name is not a valid label.
    #[error(
        "operator name {name:?} refused: 1 to 64 characters, letters, digits and . _ @ -, \
         starting with a letter or digit"
    )]
    InvalidName {
        /// The name.
        name: String,
    },
    /// The key is registered already (under another name, or revoked).
    #[error("key {fingerprint} is already registered as {name:?}{}", if *revoked { " and was revoked; generate a new key" } else { "" })]
    DuplicateKey {
        /// The fingerprint.
        fingerprint: String,
        /// Its registered name.
        name: String,
        /// Whether that registration was revoked.
        revoked: bool,
    },
    /// Another live key carries the name.
    #[error(
        "operator name {name:?} is already registered for key {fingerprint}; revoke it first \
         (`buzz-deletion operators revoke {name}`) or choose another name"
    )]
    DuplicateName {
        /// The name.
        name: String,
        /// The key holding it.
        fingerprint: String,
    },
    /// No live key carries the name.
    #[error(
        "no registered, unrevoked operator is named {name:?}: see `buzz-deletion operators list`"
    )]
    UnknownName {
        /// The name.
        name: String,
    },
    /// The approver gives the requester's name (another key of the requester); the same key is
    /// [`SignatureRefusal::SameOperator`].
    #[error(transparent)]
    SecondPerson(TwoPersonRefusal),
    /// The database failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

impl From<TwoPersonRefusal> for IdentityError {
    fn from(refusal: TwoPersonRefusal) -> Self {
        match refusal {
            TwoPersonRefusal::SameKey { fingerprint } => {
                IdentityError::Statement(SignatureRefusal::SameOperator { fingerprint })
            }
            refusal @ TwoPersonRefusal::SameName { .. } => IdentityError::SecondPerson(refusal),
        }
    }
}

// A database error by its SQLSTATE; every other refusal is permanent.
crate::failure::database_else_permanent!(IdentityError);

/// Shorthand for identity results.
pub type IdentityResult<T> = Result<T, IdentityError>;
