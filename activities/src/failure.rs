//! Permanent versus transient failure, decided once by type and never by message text.

/// How the orchestrator must treat a failed side effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Severity {
    /// Retrying cannot help (a safety check failed, input is invalid, permission is missing):
    /// the deletion blocks until an operator remediates and unblocks it.
    Permanent,
    /// A dependency hiccup or a condition that resolves by itself (a lease still draining):
    /// Temporal retries the activity with backoff.
    Transient,
}

/// Implemented by every library error so the activity layer can map it to a retry decision.
pub trait Classified {
    /// The retry decision for this error.
    fn severity(&self) -> Severity;
}
