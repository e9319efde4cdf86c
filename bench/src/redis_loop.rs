//! The plain Redis purge loop the benchmarks compare against: SCAN MATCH COUNT 1000, then UNLINK
//! of each non-empty page, one after the other (what `Cache::purge_namespace` sent before its
//! UNLINKs went out beside the next SCAN).

use anyhow::Result;
use redis::aio::ConnectionLike;

/// `SCAN cursor MATCH pattern COUNT 1000`: the next cursor and the page.
pub async fn scan_page(
    connection: &mut impl ConnectionLike,
    pattern: &str,
    cursor: u64,
) -> Result<(u64, Vec<String>)> {
    Ok(redis::cmd("SCAN")
        .arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(1000)
        .query_async(connection)
        .await?)
}

/// Unlinks every key matching `pattern`, a page at a time; the keys unlinked.
pub async fn serial_purge(connection: &mut impl ConnectionLike, pattern: &str) -> Result<u64> {
    let (mut cursor, mut unlinked) = (0u64, 0u64);
    loop {
        let (next, keys) = scan_page(connection, pattern, cursor).await?;
        if !keys.is_empty() {
            let removed: u64 = redis::cmd("UNLINK")
                .arg(&keys)
                .query_async(connection)
                .await?;
            unlinked += removed;
        }
        if next == 0 {
            return Ok(unlinked);
        }
        cursor = next;
    }
}
