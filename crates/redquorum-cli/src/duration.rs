//! Durations as people type them on a command line: `500ms`, `30s`, `2m`, `1h`, also `1.5s` and
//! `1m30s`.
//!
//! Our own parser rather than a crate: the grammar is four units and a decimal point, the error
//! messages should be in our words, and exact integer arithmetic (no floats) keeps `0.1s` exactly
//! 100 ms. A bare number is refused on purpose: `--ttl 30` could mean seconds or milliseconds, and
//! guessing wrong by a factor of 1000 is how locks silently stop protecting anything.

use std::time::Duration;

const UNITS: [(&str, u128); 4] = [
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60 * 1_000_000_000),
    ("h", 3600 * 1_000_000_000),
];

const HINT: &str = "write a number with a unit, e.g. 500ms, 30s, 2m, 1h or 1m30s";

/// Parses `text` as a sum of `<number><unit>` parts, units `ms`, `s`, `m`, `h`.
///
/// # Errors
/// A one-line explanation (without the input, which clap already quotes) when `text` is empty,
/// lacks a unit, has an unknown unit or a malformed number, or is too large.
pub fn parse(text: &str) -> Result<Duration, String> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(format!("empty duration: {HINT}"));
    }
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        if number.is_empty() {
            return Err(format!("expected a number at {rest:?}: {HINT}"));
        }
        let unit_len = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(format!("missing unit after {number}: {HINT}"));
        }
        let Some(&(_, unit_nanos)) = UNITS.iter().find(|(name, _)| *name == unit) else {
            return Err(format!("unknown unit {unit:?}: {HINT}"));
        };
        let nanos = scaled(number, unit_nanos).ok_or_else(|| format!("bad number {number:?}"))?;
        total_nanos = total_nanos.saturating_add(nanos);
        rest = after;
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000).map_err(|_| "too large".to_owned())?;
    // The remainder is below 10^9, so it fits.
    let subsec = u32::try_from(total_nanos % 1_000_000_000).unwrap_or(0);
    Ok(Duration::new(secs, subsec))
}

/// `number` (digits, optionally one `.` and more digits) times `unit_nanos`, exactly; fractions of
/// a nanosecond are dropped.
fn scaled(number: &str, unit_nanos: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let digits = |s: &str| -> Option<u128> {
        if s.is_empty() {
            Some(0)
        } else {
            s.parse().ok()
        }
    };
    let fraction = &fraction[..fraction.len().min(18)];
    let scale = 10u128.checked_pow(u32::try_from(fraction.len()).ok()?)?;
    let whole_nanos = digits(whole)?.checked_mul(unit_nanos)?;
    let fraction_nanos = digits(fraction)?.checked_mul(unit_nanos)? / scale;
    whole_nanos.checked_add(fraction_nanos)
}

/// A duration for people: `850ms`, `29.9s`, `2m30s`.
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{}.{}s", ms / 1000, ms % 1000 / 100)
    } else {
        let secs = d.as_secs();
        match (secs / 60, secs % 60) {
            (m, 0) => format!("{m}m"),
            (m, s) => format!("{m}m{s}s"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_units() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(parse(" 5s "), Ok(Duration::from_secs(5)));
    }

    #[test]
    fn fractions_are_exact() {
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("0.1s"), Ok(Duration::from_millis(100)));
        assert_eq!(parse(".25s"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("2.s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("1.5ms"), Ok(Duration::from_micros(1500)));
        assert_eq!(parse("0.5h"), Ok(Duration::from_secs(1800)));
    }

    #[test]
    fn parts_add_up() {
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1h2m3s4ms"), Ok(Duration::new(3723, 4_000_000)));
    }

    #[test]
    fn bad_input_is_explained() {
        for (input, expected) in [
            ("", "empty duration"),
            ("   ", "empty duration"),
            ("30", "missing unit after 30"),
            ("30 s", "missing unit after 30"),
            ("30x", "unknown unit \"x\""),
            ("30sec", "unknown unit \"sec\""),
            ("s", "expected a number"),
            ("-1s", "expected a number"),
            ("1.2.3s", "bad number"),
            (".s", "bad number"),
            ("1s-", "expected a number"),
        ] {
            let err = parse(input).expect_err(input);
            assert!(err.contains(expected), "{input:?}: {err}");
            assert!(!err.contains('\n'), "{input:?}: {err}");
        }
    }

    #[test]
    fn huge_values_are_refused_not_wrapped() {
        assert!(parse("99999999999999999999999h").is_err());
        assert!(parse("9999999999999999h").is_err());
        assert_eq!(
            parse("18446744073709551615s"),
            Ok(Duration::from_secs(u64::MAX))
        );
    }

    #[test]
    fn formats_for_people() {
        assert_eq!(format(Duration::from_millis(850)), "850ms");
        assert_eq!(format(Duration::from_millis(29_950)), "29.9s");
        assert_eq!(format(Duration::from_secs(60)), "1m");
        assert_eq!(format(Duration::from_secs(150)), "2m30s");
    }
}
