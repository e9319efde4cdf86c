//! The one declaration of an activities type's `#[activities]` impl block: a table of
//! activities, each naming its contract, its input and output, and the body that runs it.

/// Declares the `#[activities]` impl block of `$ty`, one line per activity:
/// `name(Input) -> Output = contract::Path => body;`, where `body` is a future of the activity's
/// result written with the names the header gives the instance (`&Self`), the attempt's context
/// and the input. Every activity method gets the signature the Temporal macro requires
/// (`self: Arc<Self>`, the `ActivityContext`, the input; `Result<Output, ActivityError>`) and
/// returns `self.$run(&ctx, body)`: `$run` is the type's own method that awaits `body` and maps
/// its failure (timing it, for the community activities). `#[activity(definition = …)]` makes
/// the compiler check the name, input and output against the contract. The calling module
/// imports `Arc`, `ActivityContext` and `ActivityError`.
///
/// In tests, `$ty::assert_registered_as(names)` checks every activity's registered name against
/// its contract's and the contracts' list of names.
macro_rules! activities_impl {
    (
        impl $ty:ident, each run by $run:ident with |$this:ident, $ctx:ident, $input:ident|;
        $(
            $(#[$attr:meta])*
            $name:ident($in:tt) -> $out:tt = $($contract:ident)::+ => $body:expr;
        )*
    ) => {
        #[temporalio_macros::activities]
        impl $ty {
            $(
                $(#[$attr])*
                #[activity(definition = $($contract)::+)]
                pub async fn $name(
                    self: Arc<Self>,
                    $ctx: ActivityContext,
                    $input: $in,
                ) -> Result<$out, ActivityError> {
                    let $this: &Self = &self;
                    $this.$run(&$ctx, $body).await
                }
            )*
        }

        #[cfg(test)]
        impl $ty {
            /// Asserts that every activity is registered under its contract's name, and that
            /// these names, in declaration order, are `declared` (the contracts' own list).
            pub(crate) fn assert_registered_as(declared: &[&str]) {
                use temporalio_common::ActivityDefinition as _;
                let registered = [$(
                    (Self::$name.name().to_owned(), $($contract)::+.name().to_owned())
                ),*];
                for (implementation, contract) in &registered {
                    assert_eq!(implementation, contract);
                }
                let names: Vec<&str> = registered.iter().map(|(name, _)| name.as_str()).collect();
                assert_eq!(names, declared);
            }
        }
    };
}

pub(crate) use activities_impl;
