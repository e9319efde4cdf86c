//! Objects the relay derives from a media object. For every upload it writes, next to the
//! original `media/{c}/{h}`, a rendered thumbnail `thumbs/{c}/{h}.webp` and a metadata document
//! `_meta/{c}/{h}.json`: the same community, the same content hash. They are the uploader's data
//! as much as the original, so a user erasure that deletes a media object deletes them too, and
//! keeps them when it keeps the original (someone else uploaded the same content).

use super::{KeyShape, PrefixRoot, classify_key};

/// The roots whose objects are derived from a media object, in the order [`derived_keys`]
/// returns their keys.
pub const DERIVED_ROOTS: [PrefixRoot; 2] = [PrefixRoot::Thumbs, PrefixRoot::Meta];

/// The keys derived from `media_key` (its thumbnail, then its metadata document), or `None` when
/// `media_key` is not an exact media key `media/{c}/{h}` of a canonical community id: nothing is
/// derived from a key of unknown shape, and the caller refuses it.
pub fn derived_keys(media_key: &str) -> Option<[String; 2]> {
    let KeyShape::Tenant {
        community,
        root: PrefixRoot::Media,
    } = classify_key(media_key)
    else {
        return None;
    };
    let hash = media_key.strip_prefix(&PrefixRoot::Media.prefix(community))?;
    Some(DERIVED_ROOTS.map(|root| root.object_key(community, hash)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taxonomy::is_tenant_owned_key;
    use uuid::Uuid;

    const C: &str = "6f1c2e0a-5b3d-4c8e-9a7f-0123456789ab";

    fn hash() -> String {
        "0123456789abcdef".repeat(4)
    }

    #[test]
    fn a_media_key_derives_its_thumbnail_and_metadata_under_the_same_community_and_hash() {
        let h = hash();
        assert_eq!(
            derived_keys(&format!("media/{C}/{h}")),
            Some([
                format!("thumbs/{C}/{h}.webp"),
                format!("_meta/{C}/{h}.json")
            ])
        );
    }

    #[test]
    fn every_derived_key_is_an_exact_tenant_key_of_the_same_community() {
        let community = Uuid::parse_str(C).unwrap_or_default();
        let derived = derived_keys(&PrefixRoot::Media.object_key(community, &hash()));
        for key in derived.into_iter().flatten() {
            assert!(is_tenant_owned_key(community, &key), "{key}");
        }
    }

    #[test]
    fn nothing_derives_from_a_key_that_is_not_an_exact_media_key() {
        let h = hash();
        for key in [
            format!("thumbs/{C}/{h}.webp"),
            format!("_meta/{C}/{h}.json"),
            format!("media/{C}/{h}.webp"),
            format!("media/{C}/{}", h.to_uppercase()),
            format!("media/{}/{h}", C.to_uppercase()),
            format!("media/{C}/{h}/x"),
            format!("media/{C}/short"),
            "media/not-a-uuid/x".to_owned(),
            String::new(),
        ] {
            assert_eq!(derived_keys(&key), None, "{key}");
        }
    }
}
