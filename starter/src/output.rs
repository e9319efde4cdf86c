//! The one place a command's result is printed: every command returns a [`Report`] and
//! [`emit`] writes it to stdout as JSON (default) or as text tables (`--output table`, built
//! with [`crate::render`]).
//! Progress and warnings go to stderr, except `community watch`'s live progress lines.
//!
//! JSON field names follow one convention (README, "CLI conventions"): a request's id is
//! `request_id` and its frozen inventory digest `inventory_digest`, in every command group.
//! [`current_names`] adds them next to the deprecated `id` / `digest` a document still carries
//! for one release.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::CliError;

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputFormat {
    /// Pretty JSON, one document per command (machine-readable).
    #[default]
    Json,
    /// Aligned text tables for people.
    Table,
}

/// What a command answers: one JSON document and the same for people, the exit code, and
/// optionally an error line for stderr (a command can show what it found and still fail).
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    document: Value,
    /// The document as printed, serialized from the command's own type so its fields keep
    /// their declared order (a [`Value`] would sort them).
    json: String,
    text: String,
    one_line: bool,
    exit_code: i32,
    error: Option<String>,
}

impl Report {
    /// A result shown as `document` (JSON) or `text` (table), exit code 0.
    pub fn new(document: &impl Serialize, text: impl Into<String>) -> Result<Report, CliError> {
        let json = serde_json::to_string_pretty(document).map_err(encoding_error)?;
        let document = serde_json::to_value(document).map_err(encoding_error)?;
        Ok(Report {
            document,
            json,
            text: text.into(),
            one_line: false,
            exit_code: 0,
            error: None,
        })
    }

    /// A result that is one compact JSON line in every format (a payload to paste elsewhere).
    pub fn json_line(document: &impl Serialize) -> Result<Report, CliError> {
        let mut report = Report::new(document, String::new())?;
        report.json = serde_json::to_string(document).map_err(encoding_error)?;
        report.one_line = true;
        Ok(report)
    }

    /// The same result with another exit code.
    pub fn with_exit_code(mut self, code: i32) -> Report {
        self.exit_code = code;
        self
    }

    /// The same result, failing with `code` and `message` on stderr after it is shown.
    pub fn failing(mut self, code: i32, message: impl Into<String>) -> Report {
        self.exit_code = code;
        self.error = Some(message.into());
        self
    }

    /// The JSON document.
    pub fn document(&self) -> &Value {
        &self.document
    }

    /// The exit code.
    pub fn exit_code(&self) -> i32 {
        self.exit_code
    }

    /// What goes to stdout in `format`.
    pub fn render(&self, format: OutputFormat) -> String {
        match (format, self.one_line) {
            (_, true) | (OutputFormat::Json, false) => format!("{}\n", self.json),
            (OutputFormat::Table, false) => self.text.clone(),
        }
    }
}

/// A result that cannot be written as JSON: a bug in the command, never the operator's doing.
pub fn encoding_error(error: serde_json::Error) -> CliError {
    CliError::Other(anyhow::anyhow!("encoding the result: {error}"))
}

/// Prints `report` (stdout, then its error line on stderr) and returns its exit code.
pub fn emit(format: OutputFormat, report: &Report) -> i32 {
    print!("{}", report.render(format));
    if let Some(error) = &report.error {
        eprintln!("error: {error}");
    }
    report.exit_code
}

/// Deprecated JSON field names and the names that replace them; both are emitted until the
/// release in [`crate::cli::DEPRECATED_SPELLINGS_REMOVED_IN`].
pub const DEPRECATED_FIELDS: [(&str, &str); 2] =
    [("id", "request_id"), ("digest", "inventory_digest")];

/// Adds `request_id` / `inventory_digest` next to `id` / `digest` in `value`, an object that
/// describes a request (or its approval). Other objects are left alone: a stage row's `id` is
/// not a request id, so this is applied where a request is described, never recursively.
pub fn current_names(mut value: Value) -> Value {
    if let Value::Object(map) = &mut value {
        add_current_names(map);
    }
    value
}

/// [`current_names`] on each element of an array of requests.
pub fn current_names_each(value: Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.into_iter().map(current_names).collect()),
        other => current_names(other),
    }
}

/// [`current_names`] on the object at `key` of `value`, if there is one.
pub fn current_names_at(mut value: Value, key: &str) -> Value {
    if let Some(Value::Object(map)) = value.get_mut(key) {
        add_current_names(map);
    }
    value
}

fn add_current_names(map: &mut Map<String, Value>) {
    for (old, new) in DEPRECATED_FIELDS {
        if let Some(v) = map.get(old).cloned() {
            map.entry(new).or_insert(v);
        }
    }
}

#[cfg(test)]
mod tests;
