//! Redis Cluster's hash slots, and the names that keep a lock's own keys in its lock key's slot.
//!
//! A cluster runs a script only when every key it declares hashes to one slot (else
//! `CROSSSLOT`). The lock key stays the resource name, byte for byte, so that other Redlock
//! clients see our locks; every other key of a lock (its fencing counter, and the node's marker
//! key) is named with a *slot tag*: a short hash tag `{t}` chosen so that `t` hashes to the lock
//! key's slot. That works for any resource name, including names with braces of their own
//! (`{user}:a`, `a}{b`, `{}`), which a tag taken from the name itself would not: the first `{`
//! of the derived key is always ours.
//!
//! The slot of a key follows Redis: CRC16 (XMODEM) of the key, or of its hash tag (the bytes
//! between the first `{` and the first `}` after it, when not empty), modulo 16,384.

use std::sync::LazyLock;

/// How many hash slots a Redis Cluster has.
pub(crate) const SLOTS: u16 = 16_384;

/// The hash slot of `key`, as Redis Cluster computes it.
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key).unwrap_or(key)) % SLOTS
}

/// The hash tag of `key`: what is between its first `{` and the first `}` after it, if that is
/// not empty.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|b| *b == b'{')?;
    let close = key[open + 1..].iter().position(|b| *b == b'}')?;
    let tag = &key[open + 1..open + 1 + close];
    (!tag.is_empty()).then_some(tag)
}

/// The alphabet slot tags are spelled in: letters and digits, so that a derived key stays
/// readable and needs no escaping anywhere.
const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";

/// For each slot, the first string (shortest, then in alphabet order) of [`ALPHABET`] that
/// hashes to it. Found once, by enumerating strings of up to four characters (1.7 million
/// CRCs at most: about 20 ms in a release build), the first time a cluster node names a key.
static TAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let mut tags = vec![String::new(); usize::from(SLOTS)];
    let mut missing = tags.len();
    let mut word = Vec::with_capacity(4);
    for len in 1..=4 {
        let combinations = ALPHABET.len().pow(len);
        for mut n in 0..combinations {
            word.clear();
            for _ in 0..len {
                word.push(ALPHABET[n % ALPHABET.len()]);
                n /= ALPHABET.len();
            }
            let slot = usize::from(slot_of(&word));
            if tags[slot].is_empty() {
                tags[slot] = String::from_utf8_lossy(&word).into_owned();
                missing -= 1;
                if missing == 0 {
                    return tags;
                }
            }
        }
    }
    // Unreachable with this alphabet (every slot has a tag of four characters at most: see the
    // test), and safe if it were: an empty tag hashes the whole key, and its script would fail
    // with CROSSSLOT, never act on the wrong slot.
    tags
});

/// A hash tag, without its braces, that hashes to `slot`.
pub(crate) fn slot_tag(slot: u16) -> &'static str {
    TAGS.get(usize::from(slot)).map_or("", String::as_str)
}

/// `prefix` and `resource` named so that the key hashes to `resource`'s slot:
/// `prefix{tag}resource`.
pub(crate) fn in_slot_of(prefix: &str, resource: &str) -> String {
    let tag = slot_tag(slot_of(resource.as_bytes()));
    format!("{prefix}{{{tag}}}{resource}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_redis_for_plain_keys_and_hash_tags() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"lock:1"), slot_of(b"lock:1"));
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        assert_eq!(
            slot_of(b"foo{}{bar}"),
            slot_of(b"foo{}{bar}"),
            "empty tag: whole key"
        );
        assert_ne!(slot_of(b"foo{}{bar}"), slot_of(b"bar"));
        assert_eq!(slot_of(b"foo{{bar}}zap"), slot_of(b"{bar"));
        assert_eq!(slot_of(b"foo{bar}{zap}"), slot_of(b"bar"));
    }

    #[test]
    fn every_slot_has_a_short_tag_that_hashes_to_it() {
        for slot in 0..SLOTS {
            let tag = slot_tag(slot);
            assert!(!tag.is_empty() && tag.len() <= 4, "slot {slot}: {tag:?}");
            assert_eq!(slot_of(tag.as_bytes()), slot, "tag {tag:?}");
        }
    }

    #[test]
    fn a_derived_key_shares_its_resources_slot_whatever_braces_the_name_has() {
        for resource in [
            "lock:1", "{user}:a", "a}{b", "{}", "x{", "}{", "", "{a}{b}", "é{ü}",
        ] {
            let key = in_slot_of("redlock-fence:", resource);
            assert_eq!(
                slot_of(key.as_bytes()),
                slot_of(resource.as_bytes()),
                "{resource:?} -> {key:?}"
            );
            assert!(
                key.ends_with(resource),
                "the name stays in the key: {key:?}"
            );
        }
    }
}
