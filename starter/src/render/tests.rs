//! The table layout and the progress bar.

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

#[test]
fn progress_bar_is_full_when_nothing_to_delete_and_proportional_otherwise() {
    assert_eq!(bar(0, 0, 4), "[####]");
    assert_eq!(bar(1, 4, 4), "[#---]");
    assert_eq!(bar(9, 4, 4), "[####]");
}
