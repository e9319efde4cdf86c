//! Operator identity: the registry of operators' SSH public keys, SSHSIG verification of signed
//! statements (`workflows::operator`), and the one-time consumption of a signature inside the
//! transaction that records the action it authorises.

mod consume;
mod error;
mod keys;
mod registry;

pub use consume::{
    ConsumedSignature, MAX_SIGNATURE_AGE_SECS, MAX_SIGNATURE_SKEW_SECS, StoredSignature,
    consume_signature, signatures_of_request,
};
pub use error::{IdentityError, IdentityResult};
pub use keys::{OperatorKey, fresh_nonce, parse_public_key, verify_signature};
pub use registry::{
    OperatorRecord, add_operator, list_operators, operator_by_fingerprint, revoke_operator,
};
