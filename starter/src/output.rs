//! JSON on stdout by default, human tables with `--output table`.

use serde::Serialize;

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputFormat {
    /// Pretty JSON, one document per command (machine-readable).
    #[default]
    Json,
    /// Aligned text tables for people.
    Table,
}

/// Prints `value` as pretty JSON.
pub fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
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
mod tests {
    use super::*;

    #[test]
    fn table_columns_align_to_the_widest_cell() {
        let mut table = Table::new("t", &["a", "bb"]);
        table.row(vec!["long-cell".into(), "x".into()]);
        let rendered = table.render();
        let lines: Vec<&str> = rendered.lines().collect();
        assert_eq!(lines[1], "a          bb");
        assert_eq!(lines[3], "long-cell  x");
    }
}
