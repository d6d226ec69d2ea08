//! Enums named on the command line ([`Fault`](crate::Fault), [`Strategy`](crate::Strategy)):
//! shown by their name and parsed from it, with the same kind of message for an unknown name,
//! one that lists every known one.

/// The item of `all` whose `name_of` is `name`.
///
/// # Errors
/// `unknown KIND "NAME": expected EXPECTED a, b, c`, listing every name in `all`'s order.
pub(crate) fn parse_named<T: Copy>(
    name: &str,
    all: &[T],
    name_of: fn(T) -> &'static str,
    kind: &str,
    expected: &str,
) -> Result<T, String> {
    all.iter()
        .copied()
        .find(|item| name_of(*item) == name)
        .ok_or_else(|| {
            let names: Vec<_> = all.iter().map(|item| name_of(*item)).collect();
            format!(
                "unknown {kind} {name:?}: expected {expected} {}",
                names.join(", ")
            )
        })
}

/// Implements `Display` (the name) and `FromStr` ([`parse_named`] over `ALL`) for an enum with an
/// `ALL` array of its variants and a `name(self) -> &'static str` method. `$kind` and
/// `$expected` word the error, as in [`parse_named`].
macro_rules! named {
    ($type:ty, $kind:literal, $expected:literal) => {
        impl std::fmt::Display for $type {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for $type {
            type Err = String;

            fn from_str(name: &str) -> Result<Self, Self::Err> {
                $crate::named::parse_named(name, &<$type>::ALL, <$type>::name, $kind, $expected)
            }
        }
    };
}
pub(crate) use named;
