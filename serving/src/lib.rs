//! Serving-write leases as a relay's serving path uses them (DESIGN 2), in a crate of its own so
//! that a relay links PostgreSQL and nothing else of buzz-deletion: no Temporal, AWS, Redis or
//! SSH crates (`cargo tree -p serving -e normal`).
//!
//! Every external serving write (S3 put, Redis write, push) is wrapped in a guard:
//!
//! ```text
//! let db = ServingDb::connect(&serving_role_url).await?;                   // once per process
//! let guard = acquire_serving_write(&db, community, "s3_put").await?;       // refused once quiescing/fenced
//! let etag = guard.protect(s3.put_object(...)).await?;                      // cancelled if the lease is lost
//! guard.finish().await?;                                                   // released
//! ```
//!
//! While the guard lives, a background task renews the lease every `renew_every`. If a renewal
//! fails, or does not succeed before the lease would expire, the guard is *lost*: `protect` drops
//! the protected future at its next poll and returns [`ServingError::LeaseLost`], so a serving
//! process whose exclusion proof vanished stops its network I/O instead of racing the deletion.
//! A guard dropped without `finish` releases its lease from a spawned task; if even that cannot
//! run, the lease simply expires after one TTL.
//!
//! **The protected-operation bound.** No protected operation runs longer than
//! [`MAX_PROTECTED_OPERATION`]: `protect` takes its deadline *before* it verifies the lease, and
//! checks it (and the heartbeat's verdict) before every single poll of the operation, so a
//! process that was paused mid-write (a stopped container, a long GC pause, a slow PutObject)
//! never drives the write on once it resumes past the deadline — it gets
//! [`ServingError::OperationTooLong`] instead. Because the lease was valid when the deadline was
//! taken, the last moment this library lets a serving write touch the network is before
//! `expires_at + MAX_PROTECTED_OPERATION` of the lease's last renewal. The deletion's drain
//! waits exactly that long for every lease left unreleased at fence time (see
//! `docs/operations.md`, "Stalled serving-write leases").
//!
//! Layout: [`ServingDb`] (`db.rs`) is the handle on the serving role's pool; `acquire.rs` and
//! `check.rs` are its calls of the SECURITY DEFINER lease functions; `guard.rs` (with
//! `heartbeat.rs` and `bounded.rs`) wraps a lease around one write; `config.rs` holds the timing;
//! `error.rs` the one error type; `pubkey.rs` the rule of a user's key. How a relay adopts it:
//! `docs/serving-integration.md`.
#![deny(unsafe_code)]

mod acquire;
mod bounded;
mod check;
mod config;
mod db;
mod error;
mod guard;
mod heartbeat;
mod lease;
mod pubkey;

pub use check::{live_serving_writes_in, live_user_serving_writes_in};
pub use config::{MAX_PROTECTED_OPERATION, ServingLeaseConfig, default_owner};
pub use db::ServingDb;
pub use error::ServingError;
pub use guard::{
    ServingWriteGuard, acquire_serving_write, acquire_serving_write_with,
    acquire_user_serving_write_with,
};
pub use lease::{LiveServingWrites, ServingWriteLease};
pub use pubkey::{PUBKEY_HEX_LEN, PubkeyProblem, pubkey_problem};
