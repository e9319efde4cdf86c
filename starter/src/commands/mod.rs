//! One module per command family.

pub mod certificate;
pub mod community;
pub mod demo;
pub mod demo_serve;
pub mod migrate;
pub mod operators;
pub mod stack_check;
pub mod sweep;
pub mod user;
