//! Permanent versus transient failure, decided once by type and never by message text, and the
//! one mapping from a classified error to the failure Temporal sees.

use std::fmt::Display;

use temporalio_common::error::ApplicationFailure;
use temporalio_sdk::activities::ActivityError;
use workflows::contract::PERMANENT_FAILURE_TYPE;

pub use store::failure::{Classified, Report, Severity};

/// A pattern matching any of the listed variants of an error enum, whatever their fields:
/// `variants!(CacheError: Denied, Rejected)` is `CacheError::Denied { .. } | CacheError::Rejected
/// { .. }`. A classification lists every variant once under its verdict, so a new variant must be
/// placed before the crate compiles.
macro_rules! variants {
    ($ty:ident: $($variant:ident),+ $(,)?) => {
        $($ty::$variant { .. })|+
    };
}
pub(crate) use variants;

/// The Temporal failure type of a transient failure (retried with backoff).
pub const TRANSIENT_FAILURE_TYPE: &str = "BuzzTransientFailure";

/// The one mapping from a classified error to the error an activity returns.
pub fn activity_error<E: Classified + Display>(error: E) -> ActivityError {
    let (type_name, non_retryable) = match (error.report(), error.severity()) {
        (Report::Cancelled, _) => return ActivityError::cancelled(),
        (
            Report::Typed {
                type_name,
                non_retryable,
            },
            _,
        ) => (type_name, non_retryable),
        (Report::BySeverity, Severity::Permanent) => (PERMANENT_FAILURE_TYPE, true),
        (Report::BySeverity, Severity::Transient) => (TRANSIENT_FAILURE_TYPE, false),
    };
    ActivityError::application(
        ApplicationFailure::builder(error.to_string())
            .type_name(type_name.to_owned())
            .non_retryable(non_retryable)
            .build(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("test error")]
    struct Test(Severity, Report);

    impl Classified for Test {
        fn severity(&self) -> Severity {
            self.0
        }
        fn report(&self) -> Report {
            self.1
        }
    }

    fn sent(error: Test) -> Option<(String, bool, String)> {
        match activity_error(error) {
            ActivityError::Application(failure) => Some((
                failure.type_name().map(str::to_owned).unwrap_or_default(),
                failure.is_non_retryable(),
                failure.to_string(),
            )),
            _ => None,
        }
    }

    #[test]
    fn severity_decides_unless_the_error_has_a_type_of_its_own() {
        let permanent = sent(Test(Severity::Permanent, Report::BySeverity)).unwrap();
        assert_eq!(
            (permanent.0.as_str(), permanent.1),
            (PERMANENT_FAILURE_TYPE, true)
        );
        assert!(permanent.2.contains("test error"), "{}", permanent.2);
        let transient = sent(Test(Severity::Transient, Report::BySeverity)).unwrap();
        assert_eq!(
            (transient.0.as_str(), transient.1),
            (TRANSIENT_FAILURE_TYPE, false)
        );
        let typed = Report::Typed {
            type_name: "X",
            non_retryable: false,
        };
        let own = sent(Test(Severity::Permanent, typed)).unwrap();
        assert_eq!((own.0.as_str(), own.1), ("X", false));
        assert!(matches!(
            activity_error(Test(Severity::Transient, Report::Cancelled)),
            ActivityError::Cancelled { .. }
        ));
    }
}
