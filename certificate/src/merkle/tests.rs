use super::*;
use proptest::prelude::*;
use sha2::{Digest, Sha256 as RefSha256};

// RFC 6962 test data as used by transparency-dev/merkle (reference_test.go) and ct-merkle.
const RFC_LEAVES: &[&str] = &[
    "",
    "00",
    "10",
    "2021",
    "3031",
    "40414243",
    "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
];

// Roots of the trees of the first 1..=8 leaves.
const RFC_ROOTS: &[&str] = &[
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
];

/// The root of the tree of the first `size` RFC leaves.
fn rfc_root(size: u64) -> &'static str {
    RFC_ROOTS[usize::try_from(size).unwrap() - 1]
}

fn rfc_leaves() -> Vec<Vec<u8>> {
    RFC_LEAVES.iter().map(|l| hex::decode(l).unwrap()).collect()
}

#[test]
fn rfc6962_roots() {
    let leaves = rfc_leaves();
    for (size, expected) in RFC_ROOTS.iter().enumerate() {
        assert_eq!(root_of(&leaves[..=size]), *expected, "size {}", size + 1);
    }
    assert_eq!(
        root(&[]),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

// Subtree hashes MTH(D[i:j]) of the RFC leaves that the proofs below are made of (the roots of
// the first 1, 2 and 4 leaves are also in RFC_ROOTS).
const MTH_0_1: &str = "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d";
const MTH_0_2: &str = "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125";
const MTH_0_4: &str = "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7";
const MTH_1_2: &str = "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7";
const MTH_2_4: &str = "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e";
const MTH_4_5: &str = "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b";
const MTH_4_6: &str = "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a";
const MTH_4_8: &str = "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4";
const MTH_6_8: &str = "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0";

#[test]
fn rfc6962_inclusion_proofs() {
    let leaves = rfc_leaves();
    let vectors: &[(u64, u64, &[&str])] = &[
        (0, 1, &[]),
        (0, 2, &[MTH_1_2]),
        (1, 2, &[MTH_0_1]),
        (2, 3, &[MTH_0_2]),
        (1, 5, &[MTH_0_1, MTH_2_4, MTH_4_5]),
        (5, 8, &[MTH_4_5, MTH_6_8, MTH_0_4]),
    ];
    for (index, size, expected) in vectors {
        let proof = inclusion_proof(&leaves, *index, *size).unwrap();
        assert_eq!(proof, *expected, "index {index} size {size}");
        let root = rfc_root(*size);
        let leaf = &leaves[usize::try_from(*index).unwrap()];
        verify_inclusion(leaf, *index, *size, &proof, root).unwrap();
    }
}

#[test]
fn rfc6962_consistency_proofs() {
    let leaves = rfc_leaves();
    let vectors: &[(u64, u64, &[&str])] = &[
        (1, 1, &[]),
        (1, 8, &[MTH_1_2, MTH_2_4, MTH_4_8]),
        (2, 5, &[MTH_2_4, MTH_4_5]),
        (6, 8, &[MTH_4_6, MTH_6_8, MTH_0_4]),
    ];
    for (old, new, expected) in vectors {
        let proof = consistency_proof(&leaves, *old, *new).unwrap();
        assert_eq!(proof, *expected, "{old} -> {new}");
        let old_root = rfc_root(*old);
        let new_root = rfc_root(*new);
        verify_consistency(*old, old_root, *new, new_root, &proof).unwrap();
        if old != new {
            assert!(verify_consistency(*old, new_root, *new, old_root, &proof).is_err());
        }
    }
}

// An independent implementation of RFC 6962 §2.1 (MTH, PATH, PROOF), straight from the text.
fn h(parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = RefSha256::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize().into()
}

fn split(n: usize) -> usize {
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

fn mth(d: &[[u8; 32]]) -> [u8; 32] {
    match d.len() {
        0 => h(&[]),
        1 => h(&[&[0], &d[0]]),
        n => {
            let k = split(n);
            h(&[&[1], &mth(&d[..k]), &mth(&d[k..])])
        }
    }
}

fn path(m: usize, d: &[[u8; 32]]) -> Vec<[u8; 32]> {
    if d.len() == 1 {
        return vec![];
    }
    let k = split(d.len());
    if m < k {
        let mut p = path(m, &d[..k]);
        p.push(mth(&d[k..]));
        p
    } else {
        let mut p = path(m - k, &d[k..]);
        p.push(mth(&d[..k]));
        p
    }
}

fn subproof(m: usize, d: &[[u8; 32]], complete: bool) -> Vec<[u8; 32]> {
    let n = d.len();
    if m == n {
        return if complete { vec![] } else { vec![mth(d)] };
    }
    let k = split(n);
    if m <= k {
        let mut p = subproof(m, &d[..k], complete);
        p.push(mth(&d[k..]));
        p
    } else {
        let mut p = subproof(m - k, &d[k..], false);
        p.push(mth(&d[..k]));
        p
    }
}

fn hexes(nodes: Vec<[u8; 32]>) -> Vec<String> {
    nodes.into_iter().map(hex::encode).collect()
}

fn u(n: usize) -> u64 {
    u64::try_from(n).unwrap()
}

fn tweak(text: &str) -> String {
    let mut bytes = text.as_bytes().to_vec();
    bytes[0] = if bytes[0] == b'0' { b'1' } else { b'0' };
    String::from_utf8(bytes).unwrap()
}

#[test]
fn malformed_inputs_are_refused_not_panicking() {
    let leaves: Vec<[u8; 32]> = (0..5u8).map(|i| [i; 32]).collect();
    let r = root(&leaves);
    use MerkleError as E;
    type Refusal = fn(&MerkleError) -> bool;
    let refusals: [(Result<Vec<String>, MerkleError>, Refusal); 5] = [
        (inclusion_proof(&leaves, 0, 6), |e| {
            matches!(
                e,
                E::BeyondLog {
                    size: 6,
                    log_size: 5
                }
            )
        }),
        (inclusion_proof(&leaves, 5, 5), |e| {
            matches!(e, E::IndexOutOfRange { .. })
        }),
        (inclusion_proof(&leaves, 0, 0), |e| {
            matches!(e, E::IndexOutOfRange { .. })
        }),
        (consistency_proof(&leaves, 4, 3), |e| {
            matches!(e, E::OldLargerThanNew { .. })
        }),
        (consistency_proof(&leaves, 3, 9), |e| {
            matches!(e, E::BeyondLog { .. })
        }),
    ];
    for (refused, expected) in refusals {
        assert!(refused.as_ref().is_err_and(expected), "{refused:?}");
    }
    let proof = inclusion_proof(&leaves, 2, 5).unwrap();
    let mut upper = proof.clone();
    upper[1] = upper[1].to_uppercase();
    assert_eq!(
        verify_inclusion(&leaves[2], 2, 5, &upper, &r),
        Err(MerkleError::MalformedHash {
            what: "proof element 1".to_owned()
        })
    );
    let mut short = proof.clone();
    short[0].pop();
    assert!(verify_inclusion(&leaves[2], 2, 5, &short, &r).is_err());
    assert!(verify_inclusion(&leaves[2], 2, 5, &proof, "xyz").is_err());
    assert!(verify_inclusion(&leaves[2], 5, 5, &proof, &r).is_err());
    assert!(verify_inclusion(&leaves[2], u64::MAX, u64::MAX, &proof, &r).is_err());
    assert_eq!(
        verify_inclusion(&leaves[2], u64::MAX - 1, u64::MAX, &proof, &r),
        Err(MerkleError::TreeTooLarge { size: u64::MAX })
    );
    assert!(verify_consistency(u64::MAX, &r, u64::MAX, &r, &[]).is_err());
    assert!(verify_consistency(3, &r, u64::MAX, &r, &proof).is_err());
    assert!(verify_consistency(MAX_TREE_SIZE, &r, MAX_TREE_SIZE, &r, &[]).is_ok());
    // From the empty log: empty proof and the empty root only.
    assert!(verify_consistency(0, &root(&[]), 5, &r, &[]).is_ok());
    assert!(verify_consistency(0, &r, 5, &r, &[]).is_err());
    assert!(consistency_proof(&leaves, 0, 5).unwrap().is_empty());
    // Equal sizes: equal roots, empty proof.
    assert!(verify_consistency(5, &r, 5, &r, &[]).is_ok());
    assert!(verify_consistency(5, &r, 5, &root(&leaves[..4]), &[]).is_err());
    assert!(verify_consistency(5, &r, 5, &r, &proof[..1]).is_err());
}

/// The roots the proofs are built on (ct-merkle's tree) and the roots the log signs (the
/// frontier) are the same for every size up to 300, and equal RFC 6962's MTH: a checkpoint never
/// signs a root its own proofs cannot reach.
#[test]
fn frontier_roots_equal_the_tree_roots_and_mth_at_every_size() {
    let leaves: Vec<[u8; 32]> = (0..300u32).map(|i| h(&[&i.to_be_bytes()])).collect();
    let mut frontier = Frontier::new();
    for size in 0..=leaves.len() {
        assert_eq!(frontier.size(), u(size));
        let expected = hex::encode(tree(&leaves[..size]).root().as_bytes());
        assert_eq!(frontier.root_hex(), expected, "size {size}");
        assert_eq!(frontier.root(), mth(&leaves[..size]), "size {size}");
        assert_eq!(Frontier::of(&leaves[..size]), frontier, "size {size}");
        if let Some(leaf) = leaves.get(size) {
            frontier.push(leaf);
        }
    }
}

/// An edge restored from its stored peaks is the same edge: same root, and the same roots after
/// every further append; a peak list of the wrong length for its size is refused.
#[test]
fn a_frontier_restored_from_its_peaks_appends_as_the_original() {
    let leaves: Vec<[u8; 32]> = (0..200u32).map(|i| h(&[&i.to_be_bytes()])).collect();
    let mut original = Frontier::new();
    for (size, leaf) in leaves.iter().enumerate() {
        let mut restored = Frontier::from_peaks(original.size(), original.peaks().to_vec())
            .unwrap_or_else(|| panic!("size {size}: its own peaks refused"));
        assert_eq!(restored, original, "size {size}");
        original.push(leaf);
        restored.push(leaf);
        assert_eq!(restored.root(), original.root(), "size {}", size + 1);
        assert_eq!(restored.root(), mth(&leaves[..=size]), "size {}", size + 1);
        let mut short = original.peaks().to_vec();
        short.pop();
        assert_eq!(
            Frontier::from_peaks(original.size(), short),
            None,
            "size {}",
            size + 1
        );
        let mut long = original.peaks().to_vec();
        long.push([0; 32]);
        assert_eq!(
            Frontier::from_peaks(original.size(), long),
            None,
            "size {}",
            size + 1
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn proofs_match_rfc6962_verify_and_any_change_fails(
        leaves in proptest::collection::vec(any::<[u8; 32]>(), 1..40),
        pick in any::<proptest::sample::Index>(),
        old_pick in any::<proptest::sample::Index>(),
        element in any::<proptest::sample::Index>(),
    ) {
        let size = leaves.len();
        let r = root(&leaves);
        prop_assert_eq!(&r, &hex::encode(mth(&leaves)));

        // Every inclusion proof is RFC 6962's PATH and verifies.
        for index in 0..size {
            let proof = inclusion_proof(&leaves, u(index), u(size)).unwrap();
            prop_assert_eq!(&proof, &hexes(path(index, &leaves)));
            prop_assert!(verify_inclusion(&leaves[index], u(index), u(size), &proof, &r).is_ok());
        }

        // A changed leaf, index, size, root or proof element fails.
        let index = pick.index(size);
        let proof = inclusion_proof(&leaves, u(index), u(size)).unwrap();
        let mut other_leaf = leaves[index];
        other_leaf[0] ^= 1;
        prop_assert!(verify_inclusion(&other_leaf, u(index), u(size), &proof, &r).is_err());
        if size > 1 {
            let other_index = (index + 1) % size;
            prop_assert!(verify_inclusion(&leaves[index], u(other_index), u(size), &proof, &r).is_err());
        }
        prop_assert!(verify_inclusion(&leaves[index], u(index), u(size), &proof, &tweak(&r)).is_err());
        if !proof.is_empty() {
            let mut changed = proof.clone();
            let i = element.index(changed.len());
            changed[i] = tweak(&changed[i]);
            prop_assert!(verify_inclusion(&leaves[index], u(index), u(size), &changed, &r).is_err());
            prop_assert!(verify_inclusion(&leaves[index], u(index), u(size), &proof[1..], &r).is_err());
        }
        let mut longer = proof.clone();
        longer.push(r.clone());
        prop_assert!(verify_inclusion(&leaves[index], u(index), u(size), &longer, &r).is_err());

        // Every consistency proof is RFC 6962's PROOF and verifies.
        for old in 1..=size {
            let old_root = root(&leaves[..old]);
            let proof = consistency_proof(&leaves, u(old), u(size)).unwrap();
            prop_assert_eq!(&proof, &hexes(subproof(old, &leaves, true)));
            prop_assert!(verify_consistency(u(old), &old_root, u(size), &r, &proof).is_ok());
        }

        // A rewritten log is not consistent with the old root, and a changed proof fails.
        let old = old_pick.index(size) + 1;
        let old_root = root(&leaves[..old]);
        let proof = consistency_proof(&leaves, u(old), u(size)).unwrap();
        let mut rewritten = leaves.clone();
        rewritten[old - 1][5] ^= 0x80;
        let rewritten_root = root(&rewritten);
        prop_assert!(verify_consistency(u(old), &old_root, u(size), &rewritten_root, &proof).is_err());
        let rewritten_proof = consistency_proof(&rewritten, u(old), u(size)).unwrap();
        prop_assert!(verify_consistency(u(old), &old_root, u(size), &rewritten_root, &rewritten_proof).is_err());
        prop_assert!(verify_consistency(u(old), &tweak(&old_root), u(size), &r, &proof).is_err());
        if !proof.is_empty() {
            let mut changed = proof.clone();
            let i = element.index(changed.len());
            changed[i] = tweak(&changed[i]);
            prop_assert!(verify_consistency(u(old), &old_root, u(size), &r, &changed).is_err());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A certificate is untrusted input: no index, size or proof makes verification panic.
    #[test]
    fn verification_never_panics(
        index in prop_oneof![any::<u64>(), 0..64u64, (u64::MAX / 2 - 2)..=(u64::MAX / 2 + 2)],
        tree_size in prop_oneof![any::<u64>(), 0..64u64, (MAX_TREE_SIZE - 2)..=(MAX_TREE_SIZE + 2), (u64::MAX / 2 - 2)..=u64::MAX],
        old_size in prop_oneof![any::<u64>(), 0..64u64, (u64::MAX / 2 - 2)..=(u64::MAX / 2 + 2)],
        proof_len in 0..70usize,
        leaf in any::<[u8; 32]>(),
    ) {
        let proof: Vec<String> = (0..proof_len).map(|i| hex::encode([u8::try_from(i).unwrap(); 32])).collect();
        let r = hex::encode(leaf);
        let _ = verify_inclusion(&leaf, index, tree_size, &proof, &r);
        let _ = verify_consistency(old_size, &r, tree_size, &r, &proof);
        let _ = verify_consistency(old_size.min(tree_size), &r, tree_size, &r, &proof);
    }
}
