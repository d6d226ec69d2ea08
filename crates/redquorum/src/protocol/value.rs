//! Lock values: what makes a release or an extension ours, and what the holder's settings say to
//! whoever releases or extends the lock by value.
//!
//! A value is 40 random hex digits: 20 bytes from the operating system (`fresh`), which the
//! caller draws and passes in. Two things may follow them, in this order:
//! - under a lock-delay, what the *holder's* settings say to a sender by value ([`Carried`]):
//!   `-`, the late-release bound in milliseconds (invariant 1), `-`, and the lock-delay in
//!   milliseconds (invariant 2);
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
//! 2. **The holder's lock-delay outlives an extension by value, whoever sends it** (`engine`
//!    invariant 9). An extension sets each key to its TTL plus a delay. A process that extends by
//!    value with its own settings (no `--lock-delay`: a shell's `redlock extend`) would set the
//!    TTL alone, and a holder that vanished then frees the lock at its deadline instead of a
//!    delay later. Nor may it add a delay of its own choosing: a key that lives longer than the
//!    holder's delay past the deadline has more than the bound of invariant 1 left there, and a
//!    late release by value would be judged timely and delete it inside the delay. So the holder
//!    writes its delay too, and an extension by value sets exactly the TTL plus that delay. Not
//!    forgeable either, for the same reason. A value of ours written before the delay was
//!    carried (a bound alone), or another client's, carries none: the extender's own applies.

use std::sync::Arc;

/// What a holder under a lock-delay writes into its value for whoever releases or extends its
/// lock by value (invariants 1 and 2). Both 0 without a lock-delay: the value is then the plain
/// 40 hex digits every Redlock client uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Carried {
    /// The late-release bound for a sender that does not know the deadline (invariant 1).
    pub late_bound_ms: u64,
    /// The lock-delay every key of the lock lives past its TTL (invariant 2).
    pub lock_delay_ms: u64,
}

impl Carried {
    /// Nothing carried: no lock-delay.
    pub const NONE: Carried = Carried {
        late_bound_ms: 0,
        lock_delay_ms: 0,
    };
}

/// The longest a value's random part and what it carries take: 40 digits, then `-` and at most
/// 20 digits (a u64) twice.
const CAPACITY: usize = 40 + 2 * 21;

/// A lock value from 20 fresh random bytes (never repeated by a fork: `fresh` invariant 1),
/// carrying `carried` (invariants 1 and 2).
pub fn new(bytes: [u8; 20], carried: Carried) -> Arc<str> {
    // Built on the stack, so the `Arc` is the only allocation of an acquisition's value.
    let mut buf = [0u8; CAPACITY];
    let len = random(&mut buf, bytes, carried);
    Arc::from(std::str::from_utf8(&buf[..len]).unwrap_or_default())
}

/// A campaign's lock value (`election` invariant 3): a fresh value as [`new`]'s, a `:`, and the
/// candidate's identity, which observers read back from the key.
pub(crate) fn campaign(bytes: [u8; 20], identity: &str, carried: Carried) -> Arc<str> {
    let mut buf = [0u8; CAPACITY];
    let len = random(&mut buf, bytes, carried);
    let random = std::str::from_utf8(&buf[..len]).unwrap_or_default();
    Arc::from(format!("{random}:{identity}"))
}

/// Writes `bytes` as 40 hex digits (and what is carried, if anything) into `buf`; returns the
/// length.
fn random(buf: &mut [u8; CAPACITY], bytes: [u8; 20], carried: Carried) -> usize {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, b) in buf.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0xf)];
    }
    if carried.lock_delay_ms == 0 && carried.late_bound_ms == 0 {
        return 40;
    }
    let mut cursor = &mut buf[40..];
    // Two u64 have at most 20 digits each: the write cannot run out of room.
    let _ = std::io::Write::write_fmt(
        &mut cursor,
        format_args!("-{}-{}", carried.late_bound_ms, carried.lock_delay_ms),
    );
    CAPACITY - cursor.len()
}

/// The number at the start of `text` (`-` and digits), and what follows it.
fn tagged_number(text: &str) -> Option<(u64, &str)> {
    let tagged = text.strip_prefix('-')?;
    let digits = tagged
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(tagged.len());
    Some((tagged[..digits].parse().ok()?, &tagged[digits..]))
}

/// The 40 random digits, the bound and the delay (if any) and the rest (a campaign's
/// `:identity`, or empty) of a value of ours; `None` for a value of another form (another
/// client's, or one given by hand).
fn parts(value: &str) -> Option<(&str, Option<u64>, Option<u64>, &str)> {
    let (random, rest) = value.split_at_checked(40)?;
    if !random.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    if !rest.starts_with('-') {
        return Some((random, None, None, rest));
    }
    let (bound, rest) = tagged_number(rest)?;
    match tagged_number(rest) {
        Some((delay, rest)) => Some((random, Some(bound), Some(delay), rest)),
        None => Some((random, Some(bound), None, rest)),
    }
}

/// The holder's late-release bound carried in `value` (invariant 1); 0 when it carries none.
pub(crate) fn carried_bound(value: &str) -> u64 {
    parts(value).and_then(|(_, bound, _, _)| bound).unwrap_or(0)
}

/// What `value` carries (invariants 1 and 2): the holder's bound and lock-delay, `None` for a
/// value that says nothing of its holder's delay (another client's, one of ours without a
/// delay, or one written before the delay was carried).
pub fn carried(value: &str) -> Option<Carried> {
    match parts(value)? {
        (_, Some(late_bound_ms), Some(lock_delay_ms), _) => Some(Carried {
            late_bound_ms,
            lock_delay_ms,
        }),
        _ => None,
    }
}

/// The late-release bound a release by `value` sends when its sender does not know the
/// holder's deadline (`engine` invariant 6, invariant 1 here): the larger of the sender's own
/// (`own_ms`, from its settings) and the one the holder carried in the value, so that a sender
/// with other settings (a shorter lock-delay, none, another node timeout) still honours the
/// holder's.
pub fn release_bound_by_value(own_ms: u64, value: &str) -> u64 {
    own_ms.max(carried_bound(value))
}

/// The identity a lock value carries: what follows the random digits (and what is carried) and
/// the `:`; the whole value when it is not a campaign's.
pub(crate) fn identity(value: &str) -> &str {
    match parts(value) {
        Some((_, _, _, rest)) if rest.starts_with(':') => &rest[1..],
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

    /// What a holder with a 1.5 s lock-delay carries (its bound: the delay, a 50 ms node
    /// timeout, the 602 ms drift allowance of a 60 s `max_ttl`).
    const UNDER_DELAY: Carried = Carried {
        late_bound_ms: 2_152,
        lock_delay_ms: 1_500,
    };

    #[test]
    fn a_value_without_a_delay_is_the_standard_40_hex_digits_of_its_bytes() {
        let a = new(BYTES, Carried::NONE);
        assert_eq!(&*a, "0123456789abcdef00ff00000000000000000010");
        assert_ne!(a, new([0; 20], Carried::NONE));
        assert_eq!(carried_bound(&a), 0);
        assert_eq!(carried(&a), None);
    }

    #[test]
    fn a_value_under_a_delay_carries_its_holders_bound_and_delay() {
        let value = new(BYTES, UNDER_DELAY);
        assert!(value.ends_with("-2152-1500"), "{value}");
        assert_eq!(carried_bound(&value), 2_152);
        assert_eq!(carried(&value), Some(UNDER_DELAY));
        let campaign = campaign(BYTES, "worker-7:eu", UNDER_DELAY);
        assert_eq!(carried(&campaign), Some(UNDER_DELAY));
        assert_eq!(identity(&campaign), "worker-7:eu");
        assert_eq!(identity(&super::campaign(BYTES, "w", Carried::NONE)), "w");
        assert_eq!(identity(&super::campaign(BYTES, "", Carried::NONE)), "");
        // The largest numbers fit the value's buffer.
        let most = Carried {
            late_bound_ms: u64::MAX,
            lock_delay_ms: u64::MAX,
        };
        assert_eq!(carried(&new(BYTES, most)), Some(most));
    }

    #[test]
    fn a_value_that_carries_a_bound_alone_says_nothing_of_the_delay() {
        // The form before the delay was carried: a release still honours the bound.
        let older = format!("{}-2152", "a".repeat(40));
        assert_eq!(carried_bound(&older), 2_152);
        assert_eq!(carried(&older), None);
        let campaign = format!("{older}:w");
        assert_eq!((carried(&campaign), identity(&campaign)), (None, "w"));
    }

    #[test]
    fn values_of_other_forms_carry_nothing_and_are_their_own_identity() {
        for value in ["manual", "", "zz34567890123456789012345678901234567890-5"] {
            assert_eq!(carried_bound(value), 0, "{value}");
            assert_eq!(carried(value), None, "{value}");
            assert_eq!(identity(value), value);
        }
        // 40 hex digits and a `-` with no number: not a bound.
        let odd = format!("{}-x", "a".repeat(40));
        assert_eq!(carried_bound(&odd), 0);
    }
}
