//! Deterministic workflow code for buzz-deletion and the contracts of the activities it calls.
//!
//! This crate does no I/O and depends on no I/O crate (`cargo tree -p workflows` shows no sqlx,
//! aws-sdk or redis): the workflow code cannot reach the network even by accident. The
//! `activities` crate implements every contract declared here under the same name.
#![deny(unsafe_code)]

pub mod approval;
pub mod community;
pub mod contract;
pub mod delivery;
pub mod host;
pub mod operator;
pub mod retry;
pub mod search;
pub mod stack_check;
pub mod sweep;
pub mod user;

/// Task queue every buzz-deletion worker polls.
pub const TASK_QUEUE: &str = "buzz-deletion";
