//! How much a benchmark tenant holds for a given size, in one place so the report can state it.
//!
//! A size is a number of object versions. Keys are spread evenly over the three tenant prefix
//! families with two versions each; one key in ten also carries a delete marker (markers are
//! listed and deleted like versions). Each of the six tenant tables gets `size / 5` rows and the
//! Redis namespace `size / 5` keys, so rows (1.2 × size) and keys grow with the object count.

use demo::SeedPlan;

/// Versions written per object key.
pub const VERSIONS_PER_KEY: u32 = 2;

/// Tenant prefix families (media, thumbs, _meta).
pub const PREFIX_FAMILIES: u32 = 3;

/// Rows per table and Redis keys are `size / ROWS_DIVISOR`.
pub const ROWS_DIVISOR: u32 = 5;

/// One key in `MARKER_EVERY` gets a delete marker.
pub const MARKER_EVERY: u32 = 10;

/// The seed plan of a tenant of `size` object versions.
pub fn tenant_plan(size: u32, parallelism: usize) -> SeedPlan {
    let keys = size.div_ceil(PREFIX_FAMILIES * VERSIONS_PER_KEY).max(1);
    SeedPlan {
        objects: keys,
        versions: VERSIONS_PER_KEY,
        delete_markers: keys / MARKER_EVERY,
        rows: (size / ROWS_DIVISOR).max(1),
        redis_keys: (size / ROWS_DIVISOR).max(1),
        parallelism: parallelism.max(1),
    }
}

/// The neighbour that must stay untouched: a tenth of the largest target, at least 600 versions.
pub fn neighbour_plan(sizes: &[u32], parallelism: usize) -> SeedPlan {
    let largest = sizes.iter().copied().max().unwrap_or(0);
    tenant_plan((largest / 10).max(600), parallelism)
}

/// One sentence describing the scaling, for the report.
pub fn describe() -> String {
    format!(
        "a size of N object versions is N/{} keys per prefix family (media, thumbs, _meta) × \
         {VERSIONS_PER_KEY} versions, a delete marker on one media key in {MARKER_EVERY}, \
         N/{ROWS_DIVISOR} rows in each of the 6 tenant tables (plus the community row) and \
         N/{ROWS_DIVISOR} Redis keys",
        PREFIX_FAMILIES * VERSIONS_PER_KEY
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_is_met_or_exceeded_by_at_most_one_key_per_family() {
        for size in [1, 5_000, 50_000, 50_001] {
            let plan = tenant_plan(size, 16);
            let versions = plan.objects * PREFIX_FAMILIES * VERSIONS_PER_KEY;
            assert!(versions >= size);
            assert!(versions < size + PREFIX_FAMILIES * VERSIONS_PER_KEY);
        }
    }

    #[test]
    fn rows_keys_and_markers_scale_tenfold_with_the_size() {
        let small = tenant_plan(5_000, 16);
        let large = tenant_plan(50_000, 16);
        assert_eq!((small.rows, large.rows), (1_000, 10_000));
        assert_eq!((small.redis_keys, large.redis_keys), (1_000, 10_000));
        assert_eq!(small.delete_markers, small.objects / 10);
        assert_eq!(large.delete_markers, large.objects / 10);
    }

    #[test]
    fn the_neighbour_is_a_tenth_of_the_largest_target() {
        assert_eq!(neighbour_plan(&[5_000, 50_000], 16), tenant_plan(5_000, 16));
        assert_eq!(neighbour_plan(&[1_000], 16), tenant_plan(600, 16));
    }
}
