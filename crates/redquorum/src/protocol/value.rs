//! Lock values: what makes a release or an extension ours, and what the holder's settings say to
//! whoever releases the lock by value.
//!
//! A value is 40 random hex digits: 20 bytes from the operating system (`fresh`), which the
//! caller draws and passes in. Two things may follow them, in this order:
//! - under a lock-delay, `-` and the late-release bound in milliseconds that the *holder's*
//!   settings give (invariant 1);
//! - for a campaign, `:` and the candidate's identity (`election` invariant 3).
//!
//! Other Redlock clients compare values as opaque strings, so the wire format is unchanged.
//!
//! # Invariants
//! 1. **The holder's timing bounds a release by value, whoever sends it** (`engine` invariant 6).
//!    A node judges a release late when the key has no more than a bound left: the lock-delay,
//!    the lag of the write that set the key (at most the holder's node timeout), and the drift
//!    allowance of the holder's `max_ttl`. All three are the holder's settings. A process that
//!    releases by value with settings of its own (no lock-delay at all, a shorter node timeout)
//!    would judge with a smaller bound and delete a key inside its holder's delay. So the holder
//!    writes its bound into the value, and a release by value judges against the larger of that
//!    bound and its own. The bound cannot be forged downwards: the script compares the whole
//!    value, so a value with another number matches no key of ours.

use std::sync::Arc;

/// A lock value from 20 fresh random bytes (never repeated by a fork: `fresh` invariant 1);
/// `late_bound_ms` is the holder's late-release bound for a sender that does not know the
/// deadline (invariant 1), 0 without a lock-delay (the value is then the plain 40 hex digits
/// every Redlock client uses).
pub fn new(bytes: [u8; 20], late_bound_ms: u64) -> Arc<str> {
    // Built on the stack, so the `Arc` is the only allocation of an acquisition's value.
    let mut buf = [0u8; 61]; // 40 digits, `-`, and at most 20 for a u64
    let len = random(&mut buf, bytes, late_bound_ms);
    Arc::from(std::str::from_utf8(&buf[..len]).unwrap_or_default())
}

/// A campaign's lock value (`election` invariant 3): a fresh value as [`new`]'s, a `:`, and the
/// candidate's identity, which observers read back from the key.
pub(crate) fn campaign(bytes: [u8; 20], identity: &str, late_bound_ms: u64) -> Arc<str> {
    let mut buf = [0u8; 61];
    let len = random(&mut buf, bytes, late_bound_ms);
    let random = std::str::from_utf8(&buf[..len]).unwrap_or_default();
    Arc::from(format!("{random}:{identity}"))
}

/// Writes `bytes` as 40 hex digits (and `-` with the bound, if any) into `buf`; returns the
/// length.
fn random(buf: &mut [u8; 61], bytes: [u8; 20], late_bound_ms: u64) -> usize {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, b) in buf.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0xf)];
    }
    if late_bound_ms == 0 {
        return 40;
    }
    buf[40] = b'-';
    let mut cursor = &mut buf[41..];
    // A u64 has at most 20 digits: the write cannot run out of room.
    let _ = std::io::Write::write_fmt(&mut cursor, format_args!("{late_bound_ms}"));
    61 - cursor.len()
}

/// The 40 random digits, the bound (if any) and the rest (a campaign's `:identity`, or empty) of
/// a value of ours; `None` for a value of another form (another client's, or one given by hand).
fn parts(value: &str) -> Option<(&str, Option<u64>, &str)> {
    let (random, rest) = value.split_at_checked(40)?;
    if !random.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let Some(tagged) = rest.strip_prefix('-') else {
        return Some((random, None, rest));
    };
    let digits = tagged
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(tagged.len());
    let bound = tagged[..digits].parse().ok()?;
    Some((random, Some(bound), &tagged[digits..]))
}

/// The holder's late-release bound carried in `value` (invariant 1); 0 when it carries none.
pub(crate) fn carried_bound(value: &str) -> u64 {
    parts(value).and_then(|(_, bound, _)| bound).unwrap_or(0)
}

/// The late-release bound a release by `value` sends when its sender does not know the
/// holder's deadline (`engine` invariant 6, invariant 1 here): the larger of the sender's own
/// (`own_ms`, from its settings) and the one the holder carried in the value, so that a sender
/// with other settings (a shorter lock-delay, none, another node timeout) still honours the
/// holder's.
pub fn release_bound_by_value(own_ms: u64, value: &str) -> u64 {
    own_ms.max(carried_bound(value))
}

/// The identity a lock value carries: what follows the random digits (and the bound) and the
/// `:`; the whole value when it is not a campaign's.
pub(crate) fn identity(value: &str) -> &str {
    match parts(value) {
        Some((_, _, rest)) if rest.starts_with(':') => &rest[1..],
        _ => value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 20 random bytes, as a caller draws them (`fresh`).
    const BYTES: [u8; 20] = [
        0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
    ];

    #[test]
    fn a_value_without_a_delay_is_the_standard_40_hex_digits_of_its_bytes() {
        let a = new(BYTES, 0);
        assert_eq!(&*a, "0123456789abcdef00ff00000000000000000010");
        assert_ne!(a, new([0; 20], 0));
        assert_eq!(carried_bound(&a), 0);
    }

    #[test]
    fn a_value_under_a_delay_carries_its_holders_bound() {
        let value = new(BYTES, 2_102);
        assert!(value.ends_with("-2102"), "{value}");
        assert_eq!(carried_bound(&value), 2_102);
        let campaign = campaign(BYTES, "worker-7:eu", 2_102);
        assert_eq!(carried_bound(&campaign), 2_102);
        assert_eq!(identity(&campaign), "worker-7:eu");
        assert_eq!(identity(&super::campaign(BYTES, "w", 0)), "w");
        assert_eq!(identity(&super::campaign(BYTES, "", 0)), "");
        // The largest bound fits the value's buffer.
        assert_eq!(carried_bound(&new(BYTES, u64::MAX)), u64::MAX);
    }

    #[test]
    fn values_of_other_forms_carry_nothing_and_are_their_own_identity() {
        for value in ["manual", "", "zz34567890123456789012345678901234567890-5"] {
            assert_eq!(carried_bound(value), 0, "{value}");
            assert_eq!(identity(value), value);
        }
        // 40 hex digits and a `-` with no number: not a bound.
        let odd = format!("{}-x", "a".repeat(40));
        assert_eq!(carried_bound(&odd), 0);
    }
}
