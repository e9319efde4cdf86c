//! The buzz-deletion worker: configuration and start-up, shared by the binary and the tests.
#![deny(unsafe_code)]

pub mod capacity;
pub mod config;
pub mod deployment;
pub mod lease_reaper;
pub mod metrics;
pub mod predecessor;
pub mod request_sampler;
pub mod startup;
