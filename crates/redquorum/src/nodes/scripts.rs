//! The Lua scripts the nodes run, and the keys each takes: what goes to Redis besides the plain
//! `SET` and the health check's commands ([`commands`](crate::nodes::commands) sends them).
//!
//! Each script is hashed once (`EVALSHA`), and declares the keys it needs next to each lock key
//! ([`KeyGroup`]): every key a script touches is passed as a key, so an ACL can name them and a
//! refused one can be reported by name. Those keys' prefixes are the library's own: no resource
//! may be named with them ([`check_resource`]).

use std::sync::LazyLock;

use crate::base::defaults::{FENCE_PREFIX, RESERVED_PREFIXES, WRITER_WAITING_PREFIX};
use crate::base::error::ConfigError;
use crate::base::resources::Resources;
use crate::protocol::quarantine::MARKER_KEY;

/// A Lua script with its SHA1, computed once.
pub(crate) struct LuaScript {
    pub(crate) source: &'static str,
    pub(crate) sha: String,
    /// The keys it takes after the resources, one group of `n` per kind, in this order.
    pub(crate) groups: &'static [KeyGroup],
}

impl LuaScript {
    fn new(source: &'static str, groups: &'static [KeyGroup]) -> Self {
        Self {
            source,
            sha: redis::Script::new(source).get_hash().to_owned(),
            groups,
        }
    }
}

/// A key a script needs next to each lock key. Other Redlock clients never touch these, so the
/// lock key itself keeps the standard format. (The waiting queue's keys are not declared: see
/// `scripts/queue.lua`.)
#[derive(Debug, Clone, Copy)]
pub(crate) enum KeyGroup {
    /// The resource's fencing counter.
    Fence,
    /// The node's marker key (the same for every resource).
    Marker,
    /// A read-write lock's writer-waiting key: while it exists, no new reader is let in.
    WriterWaiting,
}

impl KeyGroup {
    pub(crate) fn key(self, resource: &str) -> String {
        match self {
            KeyGroup::Fence => fence_key(resource),
            KeyGroup::Marker => MARKER_KEY.to_owned(),
            KeyGroup::WriterWaiting => format!("{WRITER_WAITING_PREFIX}{resource}"),
        }
    }
}

const FENCED: &[KeyGroup] = &[KeyGroup::Fence];
const FENCED_MARKED: &[KeyGroup] = &[KeyGroup::Fence, KeyGroup::Marker];
const READ_WRITE: &[KeyGroup] = &[KeyGroup::WriterWaiting, KeyGroup::Fence];

/// A script that uses the waiting queue, with the queue's shared functions in front (and, for
/// the releases, the lock-delay's judgement and their shared answer; for the acquisition, the
/// fenced scripts' shared advance of the counters).
macro_rules! queue_script {
    ($file:literal) => {
        concat!(
            include_str!("scripts/queue.lua"),
            include_str!("scripts/outlived.lua"),
            include_str!("scripts/released.lua"),
            include_str!($file)
        )
    };
    ($file:literal, fenced) => {
        concat!(
            include_str!("scripts/queue.lua"),
            include_str!("scripts/fence_advance.lua"),
            include_str!($file)
        )
    };
}

/// A script that judges whether a key outlived its holder's validity (`engine` invariants 6 and
/// 10), the shared judgement in front.
macro_rules! late_script {
    ($file:literal) => {
        concat!(include_str!("scripts/outlived.lua"), include_str!($file))
    };
}

pub(crate) static RELEASE_STANDARD: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("scripts/release_standard.lua"), &[]));
pub(crate) static RELEASE_TIMELY: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        concat!(
            include_str!("scripts/released.lua"),
            late_script!("scripts/release_timely.lua")
        ),
        &[],
    )
});
pub(crate) static RELEASE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(queue_script!("scripts/release.lua"), &[]));
pub(crate) static EXTEND: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(late_script!("scripts/extend.lua"), &[]));
pub(crate) static MARKER: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("scripts/marker.lua"), &[]));
/// Sent as `EVAL`, a few times in a process's life (`first_sight`, `redlock nodes mark`).
pub(crate) const VOUCH: &str = include_str!("scripts/vouch.lua");
/// A replicated primary's receipts for its replicas' runs (`succession` invariant 5).
pub(crate) const RECEIPTS: &str = include_str!("scripts/receipts.lua");
pub(crate) static INSPECT: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("scripts/inspect.lua"), &[]));
/// A fenced acquisition's script, the counters' shared advance in front.
macro_rules! fenced_script {
    ($file:literal) => {
        concat!(
            include_str!("scripts/fence_advance.lua"),
            include_str!($file)
        )
    };
}

/// A script for a set's keys that needs them all to hold our value, the shared check in front.
macro_rules! set_script {
    ($file:literal) => {
        concat!(include_str!("scripts/set_ours.lua"), include_str!($file))
    };
}

/// A script that stores a fencing token (fencing step 3), the shared store in front.
macro_rules! store_script {
    ($script:expr) => {
        concat!(include_str!("scripts/fence_store.lua"), $script)
    };
}

pub(crate) static ACQUIRE_FENCED: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(fenced_script!("scripts/acquire_fenced.lua"), FENCED));
// The same script, also reading the marker back (invariant 7) for a single resource.
pub(crate) static ACQUIRE_FENCED_MARKED: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(fenced_script!("scripts/acquire_fenced.lua"), FENCED_MARKED));
/// A token on request (fencing invariant 8): the set check and the counters' advance in front.
pub(crate) static FENCE_HELD: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        concat!(
            include_str!("scripts/set_ours.lua"),
            include_str!("scripts/fence_advance.lua"),
            include_str!("scripts/fence_held.lua")
        ),
        FENCED,
    )
});
pub(crate) static FENCE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(store_script!(include_str!("scripts/fence.lua")), FENCED));
pub(crate) static ACQUIRE_MANY: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("scripts/acquire_many.lua"), &[]));
pub(crate) static ACQUIRE_MANY_FENCED: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(fenced_script!("scripts/acquire_many_fenced.lua"), FENCED));
pub(crate) static FENCE_MANY: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(store_script!(set_script!("scripts/fence_many.lua")), FENCED));
pub(crate) static EXTEND_MANY: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(set_script!("scripts/extend_many.lua"), &[]));
pub(crate) static EXTEND_FENCED: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(late_script!("scripts/extend_fenced.lua"), FENCED));
pub(crate) static EXTEND_MANY_FENCED: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(set_script!("scripts/extend_many_fenced.lua"), FENCED));
pub(crate) static RELEASE_MANY: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(queue_script!("scripts/release_many.lua"), &[]));
pub(crate) static ACQUIRE_QUEUED: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(queue_script!("scripts/acquire_queued.lua", fenced), &[]));
// The same script: it finds the counters after the resources.
pub(crate) static ACQUIRE_QUEUED_FENCED: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(queue_script!("scripts/acquire_queued.lua", fenced), FENCED));

/// A read-write lock's script, its shared functions in front.
macro_rules! rw_script {
    ($file:literal) => {
        concat!(include_str!("scripts/rw_common.lua"), include_str!($file))
    };
}

pub(crate) static RW_ACQUIRE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        concat!(
            include_str!("scripts/fence_advance.lua"),
            rw_script!("scripts/rw_acquire.lua")
        ),
        READ_WRITE,
    )
});
pub(crate) static RW_FENCE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        store_script!(rw_script!("scripts/rw_fence.lua")),
        READ_WRITE,
    )
});
pub(crate) static RW_EXTEND: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(rw_script!("scripts/rw_extend.lua"), READ_WRITE));
pub(crate) static RW_RELEASE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        rw_script!("scripts/rw_release.lua"),
        &[KeyGroup::WriterWaiting],
    )
});

pub(crate) static LINGER: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("scripts/linger.lua"), &[]));
pub(crate) static RW_LINGER: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(rw_script!("scripts/rw_linger.lua"), &[]));
pub(crate) static LEADER: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("scripts/leader.lua"), FENCED));

pub(crate) fn all() -> [&'static LuaScript; 25] {
    [
        &MARKER,
        &RELEASE_STANDARD,
        &RELEASE_TIMELY,
        &RELEASE,
        &EXTEND,
        &INSPECT,
        &ACQUIRE_FENCED,
        &ACQUIRE_FENCED_MARKED,
        &FENCE,
        // Loaded with the others: a token on request is often a connection's first use of it
        // (the CLI's every `run`), and `NOSCRIPT` would cost it a round trip more.
        &FENCE_HELD,
        &ACQUIRE_MANY,
        &ACQUIRE_MANY_FENCED,
        &FENCE_MANY,
        &EXTEND_MANY,
        &EXTEND_FENCED,
        &EXTEND_MANY_FENCED,
        &RELEASE_MANY,
        &ACQUIRE_QUEUED,
        &RW_ACQUIRE,
        &RW_FENCE,
        &RW_EXTEND,
        &RW_RELEASE,
        &LEADER,
        &LINGER,
        &RW_LINGER,
    ]
}

/// The script for one resource (the standard format, where there is one) or for a set of them
/// ([`resources`](crate::base::resources) invariant 2).
pub(crate) fn one_or_many(
    resources: &Resources,
    one: &'static LazyLock<LuaScript>,
    many: &'static LazyLock<LuaScript>,
) -> &'static LuaScript {
    if resources.keys().len() > 1 {
        many
    } else {
        one
    }
}

/// The key that holds a resource's fencing counter, next to the lock key.
pub(crate) fn fence_key(resource: &str) -> String {
    format!("{FENCE_PREFIX}{resource}")
}

/// Refuses a resource name that starts with one of [`RESERVED_PREFIXES`] (a fenced acquisition
/// of `x` would overwrite a lock named `redlock-fence:x`, a marker named as a lock would be
/// taken for the node's evidence). Every acquisition checks its names; tools that take names
/// from users (the `redlock` command) check them up front.
///
/// # Errors
/// [`ConfigError::ReservedName`], naming the prefix.
pub fn check_resource(name: &str) -> Result<(), ConfigError> {
    match RESERVED_PREFIXES.iter().find(|p| name.starts_with(**p)) {
        Some(prefix) => Err(ConfigError::ReservedName {
            name: name.to_owned(),
            prefix,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_s_own_key_prefixes_are_reserved_and_others_are_not() {
        for name in [
            "redlock-fence:x",
            "redlock-queue:x",
            "redlock-queue-lease:x",
            "redlock-writer-waiting:x",
            "redlock-node-marker",
            "redlock-node-marker{abc}",
        ] {
            assert!(
                matches!(check_resource(name), Err(ConfigError::ReservedName { .. })),
                "{name}"
            );
        }
        for name in ["redlock-demo", "fence:x", "invoice:42", "jobs:permit:0", ""] {
            assert_eq!(check_resource(name), Ok(()), "{name}");
        }
        // The prefixes are the ones the scripts use.
        for script in all() {
            for prefix in ["redlock-queue:", "redlock-queue-lease:"] {
                if script.source.contains("redlock-queue") {
                    assert!(script.source.contains(prefix), "{prefix}");
                }
            }
        }
    }
}
