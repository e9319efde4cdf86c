//! Declares an activity contract: a unit marker type bound to a name, an input and an output.

/// Declares marker types implementing [`temporalio_common::ActivityDefinition`], one per
/// `Marker = "name": Input => Output` entry (entries separated by `;`).
///
/// The workflow calls `ctx.execute_activity(Marker, input, options)`; the activities crate
/// implements it with `#[activity(definition = workflows::…::Marker)]`, which makes the compiler
/// check that name, input and output agree.
#[macro_export]
macro_rules! activity_contract {
    ($($(#[$meta:meta])* $marker:ident = $name:literal : $input:ty => $output:ty);+ $(;)?) => {
        $(
            $(#[$meta])*
            #[derive(Debug, Clone, Copy, Default)]
            pub struct $marker;

            impl ::temporalio_common::ActivityDefinition for $marker {
                type Input = $input;
                type Output = $output;

                fn name(&self) -> &str {
                    $name
                }
            }
        )+
    };
}

/// Declares every activity contract of a workflow (as [`activity_contract!`]) and
/// `ACTIVITY_NAMES`: their names in declaration order, for the test that checks the worker
/// registers them all.
#[macro_export]
macro_rules! activity_contracts {
    ($($(#[$meta:meta])* $marker:ident = $name:literal : $input:ty => $output:ty;)+) => {
        $crate::activity_contract!($($(#[$meta])* $marker = $name: $input => $output);+);

        /// Every activity name of this workflow, in declaration order (the order the worker
        /// registers them in).
        pub const ACTIVITY_NAMES: [&str; [$($name),+].len()] = [$($name),+];
    };
}

/// The `ApplicationFailure` type name the activities give a permanent failure. Permanent
/// failures are also marked non-retryable; the workflow reads the non-retryable flag, and this
/// name lets a person filter them in the Web UI.
pub const PERMANENT_FAILURE_TYPE: &str = "BuzzPermanentFailure";
/// The `ApplicationFailure` type name for a write refused because its generation is stale. The
/// community activities send it retryable: a stale generation means another attempt claimed the
/// request after this one, and only the current claimant's failures may block a request (the
/// retry re-claims; a timed-out zombie's failure is discarded by Temporal). The community
/// workflow never blocks on it either.
pub const STALE_GENERATION_FAILURE_TYPE: &str = "BuzzStaleGeneration";
/// The `ApplicationFailure` type name of a verification that found an object version under a
/// tenant prefix that is in no manifest chunk (it appeared after the freeze). Permanent: the
/// workflow blocks, and after the operator's unblock runs `community.delete_late_versions` before
/// verifying again.
pub const LATE_OBJECT_VERSION_FAILURE_TYPE: &str = "BuzzLateObjectVersion";
/// The `ApplicationFailure` type name of `community.abort` refusing because the database recorded
/// the irreversible point (`irreversible_at`) before the abort; the refusal is already in the
/// audit trail. Non-retryable.
pub const ABORT_REFUSED_FAILURE_TYPE: &str = "BuzzAbortRefused";
/// The `ApplicationFailure` type name of `user.execute_stage` refusing to start a handler because
/// the database's clock is still before the request's saved retry deadline. Non-retryable: the
/// workflow answers the run `retry_not_due` with the saved deadline instead of waiting.
pub const RETRY_NOT_DUE_FAILURE_TYPE: &str = "BuzzRetryNotDue";
