//! User deletion (`UserDeletion`, reference 003 on Temporal), end to end.
//!
//! Modules:
//! - `reference`: `demo:` targets through the operator's `buzz-deletion user …` commands on a
//!   time-skipping test server with in-process workers: the invocation tables of reference 003,
//!   step-by-step runs, stop and resume, failure and retry, the store's guarantees.
//! - `erasure`: real `user:<pubkey>` targets through the CLI and the worker binary: one user's
//!   footprint erased across communities while everyone else's data stays byte-identical.

pub(crate) mod erasure;
mod reference;
