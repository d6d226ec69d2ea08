//! `redlock acquire RESOURCE --ttl DUR [--wait DUR]`: take a lock and leave it held.
//!
//! Prints the lock's value, which `extend` and `release` need (with `--json`, also its fencing
//! token). The lock stays held after this process exits, until it is released or its TTL runs
//! out: that is the point of the command.
//!
//! The library releases a dropped [`Lock`] handle in the background (its
//! invariant 2). Here that would be wrong, and also a race: exiting right after the drop might
//! or might not get the release out. So the handle is deliberately detached
//! ([`redquorum::Lock::detach`]): no release is sent, on drop or on exit.
//!
//! Before exiting, it waits for the round's requests still in flight, so the lock ends up on
//! every node that takes it, not on a bare quorum ([`Global::let_stragglers_land`]).

use std::time::Duration;

use redquorum::{ConfigError, Error, Kind, Lock, Request, Retry};
use serde::Serialize;

use crate::duration;
use crate::exit::Outcome;
use crate::exit::{self, OK};
use crate::global::Global;
use crate::output;
use crate::waiting::Awaited;

const AFTER_HELP: &str = "\
Prints the lock's value, and nothing else (with --json: {\"resource\", \"value\", \"fence\",
\"validity_ms\", \"ttl_ms\"}, and \"permit\" with --permits). The lock stays held after redlock exits: release it with
`redlock release RESOURCE VALUE`, or let it expire. validity_ms is how long it may be relied on: the
TTL minus the time taken and a clock-drift allowance. fence is the fencing token, larger than every
earlier one for RESOURCE (null with --no-fencing): have the protected resource refuse writes that
carry a smaller token than the largest it has seen. The TTL may not exceed --max-ttl.

Without --wait, one attempt is made; with --wait, attempts repeat (100-200 ms apart) until the lock
is taken or the time is up.

With --permits K, RESOURCE is a semaphore with K permits, and the lock taken is one permit: the
key RESOURCE:permit:I (--json: \"resource\" is that key, \"permit\" is I), which `release` and
`extend` take like any lock.

Examples:
  value=$(redlock acquire invoice:42 --ttl 30s) || exit 1
  redlock acquire --permits 3 exports --ttl 1m --json
  redlock acquire nightly --ttl 45s --wait 1m --json

Exit status: 0 acquired; 75 not acquired, the lock is busy (held by someone else); 69 not acquired
because of the servers (unreachable, too slow, or nodes quarantined after a restart: the message
says which); 65 the resource exists with another Redis type; 64 bad arguments (also a TTL above
--max-ttl).";

/// Take a lock and leave it held; prints its value.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The resource to lock: the Redis key.
    #[arg(value_parser = output::resource)]
    resource: String,

    /// How long the lock lives unless extended or released, e.g. 30s.
    #[arg(long, value_name = "DUR", value_parser = duration::parse)]
    ttl: Duration,

    /// Keep trying for up to this long while the resource is busy [default: one attempt].
    #[arg(long, value_name = "DUR", value_parser = duration::parse)]
    wait: Option<Duration>,

    /// Print one JSON object instead of the bare value.
    #[arg(long)]
    json: bool,

    /// Treat RESOURCE as a semaphore with this many permits, and take one of them.
    #[arg(long, value_name = "K", value_parser = output::permits)]
    permits: Option<u32>,
}

#[derive(Debug, Serialize)]
struct Acquired<'a> {
    resource: &'a str,
    value: &'a str,
    /// `null` with fencing off.
    fence: Option<u64>,
    /// Only for a semaphore's permit.
    #[serde(skip_serializing_if = "Option::is_none")]
    permit: Option<u32>,
    validity_ms: u128,
    ttl_ms: u128,
}

pub async fn run(args: &Args, global: &Global) -> Outcome {
    global.check_ttl(args.ttl)?;
    let retry = match args.wait {
        None => Retry::once(),
        Some(wait) => Retry::forever().max_wait(wait),
    };
    let waits = args.wait.is_some_and(|wait| !wait.is_zero());
    let awaited = match args.permits {
        Some(_) => Awaited::other("a permit of", &args.resource),
        None => Awaited::lock(std::slice::from_ref(&args.resource)),
    };
    let (manager, retry, notice) = global.for_acquiring(retry, waits, awaited).await?;
    let kind = match args.permits {
        Some(permits) => Kind::Permit { permits },
        None => Kind::Lock,
    };
    let request = Request::new(kind, [&args.resource], args.ttl).retry(retry);
    let lock = manager
        .request(&request)
        .await
        .and_then(lock_of)
        .map_err(|e| global.not_acquired(e))?;
    // The token is printed (--json) for the process the lock is handed to: issued now, while
    // the lock is surely ours (`fencing` invariant 8).
    let mut lock = lock;
    if !global.no_fencing
        && let Err(e) = lock.fence().await
    {
        lock.release().await;
        return Err(exit::from_error(e));
    }
    drop(notice);
    tracing::debug!(resource = %args.resource, remaining = ?lock.remaining(), "acquired");
    global.let_stragglers_land(&manager, lock.remaining()).await;
    let acquired = Acquired {
        resource: lock.resource(),
        value: lock.value(),
        fence: redquorum::LockInfo::fence(&lock),
        permit: lock.permit(),
        validity_ms: lock.remaining().as_millis(),
        ttl_ms: args.ttl.as_millis(),
    };
    let line = if args.json {
        output::json(&acquired)
    } else {
        lock.value().to_owned()
    };
    if let Err(failure) = output::print(&line) {
        // Nobody could release a lock whose value was never seen: give it back.
        lock.release().await;
        return Err(failure);
    }
    // Keep the lock held after we exit (see the module docs): no background release.
    lock.detach();
    Ok(OK)
}

/// The lock a request for a lock won. Only a campaign's request comes kept alive, which the CLI
/// makes through `elect` instead: reported as a misuse, never a panic.
pub(crate) fn lock_of(acquired: redquorum::Acquired) -> Result<Lock, Error> {
    match acquired {
        redquorum::Acquired::Lock(lock) => Ok(lock),
        _ => Err(ConfigError::InvalidSetting {
            setting: "kind",
            reason: "a campaign is `redlock elect`'s".into(),
        }
        .into()),
    }
}
