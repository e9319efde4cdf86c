//! Text for people (`--output table`): the aligned table every command prints, key/value
//! blocks, the progress bar of `community watch`, and the renderers of the community and user
//! command groups. Commands decide what to show; this module decides how it reads.
//!
//! It sits next to [`crate::output`], which picks the format and prints: a command builds its
//! text here and hands it to [`crate::output::Report`] with its JSON document.

pub mod community;
pub mod user;

use chrono::{DateTime, Utc};
use serde_json::Value;

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

/// A text progress bar of `done` over `total`, `width` cells wide.
pub fn bar(done: u64, total: u64, width: usize) -> String {
    let filled = (done.min(total) * width as u64)
        .checked_div(total)
        .map_or(width, |cells| usize::try_from(cells).unwrap_or(width));
    format!("[{}{}]", "#".repeat(filled), "-".repeat(width - filled))
}

/// An optional instant as a table cell: RFC 3339, or empty.
pub fn rfc3339_or_empty(at: Option<DateTime<Utc>>) -> String {
    at.map(|t| t.to_rfc3339()).unwrap_or_default()
}

#[cfg(test)]
mod tests;
