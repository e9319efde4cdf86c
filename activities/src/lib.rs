//! Side effects of buzz-deletion: the Postgres exclusion-proof store, the S3 and Redis adapters,
//! the key taxonomy, the serving-write lease library, and the activity implementations that bind
//! them to the contracts declared in the `workflows` crate.
#![deny(unsafe_code)]

mod activity_impl;
pub mod certificates;
pub mod community;
pub mod failure;
pub mod identity;
pub mod metrics;
pub mod redis;
pub mod s3;
pub mod serving;
pub mod stack_check;
pub mod stack_settings;
/// The PostgreSQL exclusion proof, from the `store` crate.
pub use ::store;
pub mod sweep;
/// The key taxonomy, from the `store` crate (every stamped manifest entry is checked against it).
pub use ::store::taxonomy;
pub mod user;
