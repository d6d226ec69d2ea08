//! What every subcommand writes and checks the same way: one line on stdout, one line of
//! JSON, a resource name (and the RESOURCE VALUE pair naming a held lock), the length of a timed
//! run.

#[cfg(feature = "tools")]
use std::time::Duration;

#[cfg(feature = "tools")]
use crate::duration;
use crate::exit::Failure;

#[cfg(feature = "tools")]
/// The longest `--duration` of `bench` and `demo`: a day, as `chaos` allows.
const LONGEST_RUN: Duration = Duration::from_secs(24 * 60 * 60);

#[cfg(feature = "tools")]
/// Checks the `--duration` of `bench` or `demo`: more than zero, and at most a day.
pub fn check_run_length(length: Duration) -> Result<(), Failure> {
    if length.is_zero() {
        return Err(Failure::usage("--duration must be greater than zero"));
    }
    if length > LONGEST_RUN {
        return Err(Failure::usage(format!(
            "--duration {} is longer than the longest run, 24h",
            duration::format(length)
        )));
    }
    Ok(())
}

/// Prints one line on stdout. Unlike `println!`, a closed pipe is an error, not a panic.
pub fn print(line: &str) -> Result<(), Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| Failure::os(format!("could not write to stdout: {e}")))
}

/// One line of JSON. Serialising our own plain structs cannot fail; should it ever, an empty
/// object is printed rather than a panic.
pub fn json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "{}".to_owned())
}

/// The `RESOURCE VALUE` arguments of `extend` and `release`: a lock taken by `acquire`, named by
/// its resource and the value `acquire` printed. One struct, flattened into both, so the two
/// commands take and explain them alike.
#[derive(Debug, clap::Args)]
pub struct HeldLock {
    /// The locked resource.
    #[arg(value_parser = resource)]
    pub resource: String,

    /// The lock's value, as printed by `redlock acquire`.
    pub value: String,
}

/// The `RESOURCE [--json]` arguments of `status` and `locked`, which look at a resource without
/// taking it. One struct, flattened into both, so the two commands take and explain them alike.
#[derive(Debug, clap::Args)]
pub struct LookedAt {
    /// The resource to look at.
    #[arg(value_parser = resource)]
    pub resource: String,

    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Checks a RESOURCE argument: any non-empty string (it is the Redis key, used as given).
pub fn resource(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("the resource name must not be empty".to_owned());
    }
    redquorum::check_resource(text).map_err(|e| e.to_string())?;
    Ok(text.to_owned())
}

/// Checks a `--permits K` argument: a whole number from 1 to the library's most.
pub fn permits(text: &str) -> Result<u32, String> {
    let most = redquorum::defaults::MAX_PERMITS;
    match text.parse::<u32>() {
        Ok(k) if (1..=most).contains(&k) => Ok(k),
        _ => Err(format!("{text:?} is not a permit count from 1 to {most}")),
    }
}
