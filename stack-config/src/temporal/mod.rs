//! Reaching Temporal as a production cluster requires: TLS with a private CA or the system
//! roots, mutual TLS, an API key (Temporal Cloud), a server name override — configured by
//! Temporal's own environment variable names, with the key readable from a file, and every
//! refusal explained on one line that names the variable to fix (never a secret).
//!
//! - [`settings`]: which variables say what (pure);
//! - [`material`]: the named files, read and checked (PEM kind, validity dates);
//! - [`connect`]: the SDK's connection options, the connection, and the explanation of a failure.

pub mod connect;
pub mod material;
pub mod settings;

pub use connect::{ClientConnecting, TemporalConnectError, client_connect, connect};
pub use settings::{Secret, TemporalAccess};
