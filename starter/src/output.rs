//! The one place a command's result is printed: every command returns a [`Report`] and
//! [`emit`] writes it to stdout as JSON (default) or as text tables (`--output table`).
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
        let encoding =
            |e: serde_json::Error| CliError::Other(anyhow::anyhow!("encoding the result: {e}"));
        let json = serde_json::to_string_pretty(document).map_err(encoding)?;
        let document = serde_json::to_value(document).map_err(encoding)?;
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
        report.json = serde_json::to_string(document)
            .map_err(|e| CliError::Other(anyhow::anyhow!("encoding the result: {e}")))?;
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

/// A JSON value as a table cell: strings bare, null empty, anything else as JSON.
pub fn display_json(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A JSON object as a two-column table of its fields (`title` first).
pub fn object_table(title: &str, value: &Value) -> String {
    let pairs: Vec<(String, String)> = match value {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| (k.clone(), display_json(v)))
            .collect(),
        other => vec![("result".to_owned(), display_json(other))],
    };
    let borrowed: Vec<(&str, String)> =
        pairs.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    key_values(title, &borrowed)
}

/// A text table with a title, column headers and rows.
#[derive(Debug, Default)]
pub struct Table {
    title: String,
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with the given title and headers.
    pub fn new(title: impl Into<String>, headers: &[&str]) -> Self {
        Self {
            title: title.into(),
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends one row (missing cells print empty).
    pub fn row(&mut self, cells: Vec<String>) -> &mut Self {
        self.rows.push(cells);
        self
    }

    /// Renders the table with columns padded to their widest cell.
    pub fn render(&self) -> String {
        let columns = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| -> String {
            let padded: Vec<String> = (0..columns)
                .map(|i| {
                    let cell = cells.get(i).map(String::as_str).unwrap_or("");
                    format!("{cell:<width$}", width = widths[i])
                })
                .collect();
            padded.join("  ").trim_end().to_owned()
        };
        let mut out = String::new();
        if !self.title.is_empty() {
            out.push_str(&self.title);
            out.push('\n');
        }
        out.push_str(&line(&self.headers));
        out.push('\n');
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        out.push_str(&rule.join("  "));
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(row));
            out.push('\n');
        }
        out
    }
}

/// Key/value pairs as a two-column table.
pub fn key_values(title: &str, pairs: &[(&str, String)]) -> String {
    let mut table = Table::new(title, &["field", "value"]);
    for (k, v) in pairs {
        table.row(vec![(*k).to_owned(), v.clone()]);
    }
    table.render()
}

#[cfg(test)]
mod tests;
