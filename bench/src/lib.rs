//! The benchmarks' shared parts: connections to the local stack, seeding plans, the raw floor,
//! the workflow runner (real worker and CLI processes), outcome checks and the report. The
//! binaries under `src/bin/` and `src/main.rs` are the benchmarks themselves; none is a test.
#![deny(unsafe_code)]

pub mod args;
pub mod check;
pub mod document;
pub mod double;
pub mod fence_cost;
pub mod floor;
pub mod history;
pub mod log_fill;
pub mod machine;
pub mod plan;
pub mod probe;
pub mod report;
pub mod stack;
pub mod table_reads;
pub mod workflow;
