//! How a command fails, and the exit code each failure maps to.

/// A command's failure, as the operator sees it.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The invocation itself is wrong (missing or malformed argument). Exit 2.
    #[error("{0}")]
    Usage(String),
    /// The request was understood and refused; nothing changed. Exit 1.
    #[error("{0}")]
    Refused(String),
    /// A dependency could not be reached. Exit 1.
    #[error("{service} is not reachable at {address}: {detail}\nhint: {hint}")]
    Unavailable {
        /// Which service.
        service: &'static str,
        /// Where we looked.
        address: String,
        /// The underlying error.
        detail: String,
        /// What to do.
        hint: &'static str,
    },
    /// No worker answered within `--worker-wait`; the message says whether anything was sent,
    /// which task queue has no worker and how to start one. Exit 1.
    #[error("{0}")]
    NoWorker(String),
    /// Anything else; the cause chain is printed. Exit 1.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl CliError {
    /// The process exit code: 2 for usage errors, 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Refused(_)
            | CliError::Unavailable { .. }
            | CliError::NoWorker(_)
            | CliError::Other(_) => 1,
        }
    }
}

impl From<stack_config::env::StackEnvError> for CliError {
    /// A missing variable of the stack's environment is a usage error (exit 2); the message
    /// names the variable and how to set it.
    fn from(error: stack_config::env::StackEnvError) -> Self {
        CliError::Usage(error.to_string())
    }
}

impl From<activities::user::UserStoreError> for CliError {
    /// The user-deletion store failed (a refusal it decides is mapped by the caller).
    fn from(error: activities::user::UserStoreError) -> Self {
        CliError::Other(anyhow::Error::new(error).context("Postgres"))
    }
}

/// Result of a command: its report (which carries its exit code) when it ran to an answer.
pub type CliResult = Result<crate::output::Report, CliError>;
