//! DDL the tests' own tenant tables need to be sound tenant data: what the relay's migrations
//! give every table in schema `buzz`.

/// The write fence and the user-data declaration of tenant relation `table` (`user_column`: the
/// column holding the user's pubkey, or `none`), both enabled ALWAYS.
pub fn tenant_guards(table: &str, user_column: &str) -> [String; 4] {
    [
        format!(
            "CREATE TRIGGER buzz_write_fence BEFORE INSERT OR UPDATE ON {table} \
             FOR EACH ROW EXECUTE FUNCTION buzz.refuse_fenced_write()"
        ),
        format!("ALTER TABLE {table} ENABLE ALWAYS TRIGGER buzz_write_fence"),
        format!(
            "CREATE TRIGGER buzz_user_data BEFORE INSERT OR UPDATE ON {table} \
             FOR EACH ROW EXECUTE FUNCTION buzz.user_data('{user_column}')"
        ),
        format!("ALTER TABLE {table} ENABLE ALWAYS TRIGGER buzz_user_data"),
    ]
}
