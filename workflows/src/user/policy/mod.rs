//! The stage rules of a user deletion, and the reconstruction of progress from saved history.
//!
//! Pure code: the workflow feeds it the rows it loaded and saves what it returns. The rules
//! (inventory version 1):
//!
//! | stage | saved result read | decision | next |
//! | --- | --- | --- | --- |
//! | `gate_user` | — | `enter_communities` | `purge_db` of the first uncovered community |
//! | `purge_db` | `has_agents: true` | `purge_agents` | `purge_agents` of the same community |
//! | `purge_db` | `has_agents: false` | `community_complete` | `purge_db` of the next uncovered community |
//! | `purge_agents` | — | `community_complete` | `purge_db` of the next uncovered community |
//!
//! When no community is left uncovered, `next` is empty and the request completes. A `purge_db`
//! result without a boolean `has_agents` is an error, never an implicit skip.

//!
//! `transitions.rs` holds the rules and the rows they create; `history.rs` reads saved rows back
//! as progress with those same rules; `lifecycle.rs` cross-checks that progress against the
//! request row's lifecycle.

mod history;
mod lifecycle;
mod transitions;

pub use history::{MAX_STAGES, Position, Progress, ReconstructionError, reconstruct};
pub use lifecycle::lifecycle_problem;
pub use transitions::{
    Decision, NextStage, PolicyError, Transition, decide, initial_stage, successor_stage,
};

#[cfg(test)]
mod tests;
