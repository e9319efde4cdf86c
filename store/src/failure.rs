//! Permanent versus transient failure, decided once by type and never by message text. Every
//! error of the store and of the activities' adapters implements [`Classified`]; the activities
//! crate maps a classified error to the failure Temporal sees.

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

/// How an error is reported to Temporal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// By its severity: permanent errors fail non-retryably as `workflows::contract::PERMANENT_FAILURE_TYPE`,
    /// transient ones retryably as the activities' transient failure type.
    BySeverity,
    /// The activity was cancelled.
    Cancelled,
    /// With a failure type of its own that a workflow tells apart (see `workflows::contract`).
    Typed {
        /// The failure type.
        type_name: &'static str,
        /// Whether Temporal must not retry it.
        non_retryable: bool,
    },
}

/// Implemented by every library error so the activity layer can map it to a retry decision.
pub trait Classified {
    /// The retry decision for this error.
    fn severity(&self) -> Severity;

    /// How the error is reported to Temporal; by its severity unless it needs a type of its own.
    fn report(&self) -> Report {
        Report::BySeverity
    }
}

/// Implements [`Classified`] for an error every variant of which is permanent: retrying cannot
/// change the answer.
macro_rules! permanent_failure {
    ($error:ty) => {
        impl $crate::failure::Classified for $error {
            fn severity(&self) -> $crate::failure::Severity {
                $crate::failure::Severity::Permanent
            }
        }
    };
}
pub(crate) use permanent_failure;

/// Implements [`Classified`] for an error whose `Database` variant is transient or permanent by
/// its SQLSTATE or driver error kind, as the store's own database errors are, and every other
/// variant permanent.
macro_rules! database_else_permanent {
    ($error:ident) => {
        impl $crate::failure::Classified for $error {
            fn severity(&self) -> $crate::failure::Severity {
                match self {
                    $error::Database(error) => $crate::sqlx_error_severity(error),
                    _ => $crate::failure::Severity::Permanent,
                }
            }
        }
    };
}
pub(crate) use database_else_permanent;
