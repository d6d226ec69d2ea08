//! A node: a Redis master (or, for a cluster node, a shard's master and its replica), its keys
//! with expiry on its own clock, its fencing counter, its marker and its `run_id`; and what its
//! commands and scripts do to them. Every function here mirrors a script or a command, named in
//! its doc: the node's side is modelled, not the library's code.

use crate::clock::{node_unix_ms, node_us};

/// The lock key on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    /// The lock value: the acquisition attempt that set it.
    pub value: u8,
    /// The node time (ms) at which it expires.
    pub expires: u16,
}

/// The marker key on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MarkerKey {
    /// The owner it names (a cluster master's): `run_id`, and `master_replid` when the rule
    /// names it.
    pub owner: Option<(u8, Option<u8>)>,
    /// Its random id.
    pub id: u8,
    /// The node time (Unix ms) from which it vouches; 0: at once.
    pub from_ms: u64,
}

impl MarkerKey {
    /// The value as the library reads it (`marker` module grammar).
    pub fn value(&self) -> String {
        let owner = match self.owner {
            None => String::new(),
            Some((run, Some(replid))) => format!("{}/", owner_name(run, Some(replid))),
            Some((run, None)) => format!("{}/", owner_name(run, None)),
        };
        format!("{owner}m{}:{}", self.id, self.from_ms)
    }
}

/// The owner a marker names, as `marker_owner` spells it: `<run_id>.<master_replid>`.
pub fn owner_name(run: u8, replid: Option<u8>) -> String {
    match replid {
        Some(replid) => format!("{}.{}", run_id(run), repl_id(replid)),
        None => format!("{}.", run_id(run)),
    }
}

/// A process's `run_id` (hex, as the marker grammar requires of an owner).
pub fn run_id(run: u8) -> String {
    format!("a{run:02x}")
}

/// A `master_replid` (hex).
pub fn repl_id(replid: u8) -> String {
    format!("b{replid:02x}")
}

/// What a Redis process holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Data {
    /// The lock key.
    pub lock: Option<Key>,
    /// The resource's fencing counter (`redlock-fence:<resource>`).
    pub counter: Option<u64>,
    /// The marker key.
    pub marker: Option<MarkerKey>,
}

/// One Redis process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Process {
    /// Its `run_id` (a new one at every start).
    pub run: u8,
    /// Its `master_replid` (a new one at every promotion; a replica takes its master's).
    pub replid: u8,
    /// The node time (ms) it started at: negative for a node up long before the run.
    pub started: i32,
    /// Its data.
    pub data: Data,
}

/// A node of the manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Node {
    /// The master that serves the lock key.
    pub master: Process,
    /// A cluster node's replica: a prefix of the master's writes (as of its last sync).
    pub replica: Option<Process>,
    /// How many ms this node's clock is behind real time.
    pub lag: u16,
    /// The next identities this node's events draw: a `run_id` (a restart), a `master_replid`
    /// (a promotion), a marker id (a health check that writes one). Identities are compared only
    /// within one node, so each node draws its own: two nodes in the same situation are then
    /// the same up to their place in the list, which the checker's symmetry reduction uses
    /// ([`crate::symmetry`]).
    pub next: Fresh,
}

/// The next identities a node draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fresh {
    /// The next `run_id`.
    pub run: u8,
    /// The next `master_replid`.
    pub replid: u8,
    /// The next marker id.
    pub marker: u8,
}

/// What a node answered to a native fenced acquisition (`node::set_fenced_natively`'s pipeline:
/// `SET NX PX`, `SET NX` of the counter, `INCR`, `PEXPIRE`, `TIME`) or to the cluster's
/// `acquire_fenced.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AcquireReply {
    /// The `SET NX` succeeded.
    pub granted: bool,
    /// The counter after the advance.
    pub counter: Option<u64>,
    /// The node's clock (µs) after it ran.
    pub clock_us: u64,
    /// The marker read back in the same step.
    pub marker: Option<MarkerKey>,
    /// Whether the proposal came from the script path (always stored).
    pub scripted: bool,
}

impl Node {
    /// A node up for an hour, with a marker that vouches at once (naming its owner as
    /// `names_replid` says, on a cluster node). Every node starts alike: its identities are its
    /// own ([`Node::next`]).
    pub fn new(cluster: bool, names_replid: bool) -> Self {
        let marker = MarkerKey {
            owner: cluster.then_some((0, names_replid.then_some(0))),
            id: 0,
            from_ms: 0,
        };
        let master = Process {
            run: 0,
            replid: 0,
            started: -3_600_000,
            data: Data {
                marker: Some(marker),
                ..Data::default()
            },
        };
        let replica = cluster.then_some(Process { run: 1, ..master });
        Node {
            master,
            replica,
            lag: 0,
            next: Fresh {
                run: 2,
                replid: 1,
                marker: 1,
            },
        }
    }

    /// The node's clock (ms) at real time `t`.
    pub fn clock(&self, t: u16) -> u16 {
        t.saturating_sub(self.lag)
    }

    /// Which server a connection reaches: the master's `run_id` and `master_replid`.
    pub fn server(&self) -> (u8, u8) {
        (self.master.run, self.master.replid)
    }

    /// Drops keys that expired by node time `now` (Redis expires them lazily; the same to
    /// every reader).
    pub fn expire(&mut self, now: u16) {
        for data in [
            Some(&mut self.master.data),
            self.replica.as_mut().map(|r| &mut r.data),
        ]
        .into_iter()
        .flatten()
        {
            if data.lock.is_some_and(|k| k.expires <= now) {
                data.lock = None;
            }
        }
    }

    /// `INFO server` as the health check reads it.
    pub fn info_server(&self, now: u16) -> String {
        let up_ms = i64::from(now) - i64::from(self.master.started);
        format!(
            "# Server\r\nrun_id:{}\r\nuptime_in_seconds:{}\r\n",
            run_id(self.master.run),
            up_ms.max(0) / 1000
        )
    }

    /// `INFO replication` as the health check reads it.
    pub fn info_replication(&self) -> String {
        format!(
            "# Replication\r\nrole:master\r\nmaster_replid:{}\r\n",
            repl_id(self.master.replid)
        )
    }

    /// `scripts/marker.lua`: the marker, or a new one (`id`) that vouches `max_ttl_ms` from now,
    /// written where there is none (1) or where one names another owner (2).
    pub fn marker_script(
        &mut self,
        now: u16,
        owner: Option<(u8, Option<u8>)>,
        id: u8,
        max_ttl_ms: u64,
    ) -> (MarkerKey, u8) {
        if let Some(found) = self.master.data.marker
            && found.owner == owner
        {
            return (found, 0);
        }
        let written = if self.master.data.marker.is_some() {
            2
        } else {
            1
        };
        let marker = MarkerKey {
            owner,
            id,
            from_ms: node_unix_ms(now) + max_ttl_ms,
        };
        self.master.data.marker = Some(marker);
        (marker, written)
    }

    /// The acquisition. A standalone master runs the native pipeline: the lock's `SET NX PX`,
    /// the counter's `SET NX` to `initial` (our estimate, rounded to the grain, when we start
    /// counters), `INCR` (whatever the `SET` did), `TIME`. A cluster master runs
    /// `acquire_fenced.lua`: only when the `SET` succeeded, the counter goes to
    /// `max(counter + 1, clock rounded to the grain)`.
    pub fn acquire(
        &mut self,
        now: u16,
        value: u8,
        life_ms: u16,
        initial: Option<u64>,
        grain_us: u64,
        scripted: bool,
    ) -> AcquireReply {
        let data = &mut self.master.data;
        let granted = data.lock.is_none();
        if granted {
            data.lock = Some(Key {
                value,
                expires: now.saturating_add(life_ms),
            });
        }
        let clock_us = node_us(now);
        if scripted {
            if granted {
                let rounded = clock_us - clock_us % grain_us.max(1);
                data.counter = Some(data.counter.unwrap_or(0).saturating_add(1).max(rounded));
            }
        } else {
            if data.counter.is_none() {
                data.counter = initial;
            }
            data.counter = Some(data.counter.unwrap_or(0).saturating_add(1));
        }
        AcquireReply {
            granted,
            counter: data.counter,
            clock_us,
            marker: data.marker,
            scripted,
        }
    }

    /// `scripts/extend.lua` (compare-and-`PEXPIRE` to `life_ms` from now): whether it extended.
    pub fn extend(&mut self, now: u16, value: u8, life_ms: u16) -> bool {
        match self.master.data.lock.as_mut() {
            Some(key) if key.value == value => {
                key.expires = now.saturating_add(life_ms);
                true
            }
            _ => false,
        }
    }

    /// `scripts/fence.lua`: the counter goes up to `token`, only while the lock holds `value`.
    pub fn store(&mut self, value: u8, token: u64) -> bool {
        let data = &mut self.master.data;
        if data.lock.map(|k| k.value) != Some(value) {
            return false;
        }
        data.counter = Some(data.counter.unwrap_or(0).max(token));
        true
    }

    /// `scripts/release_timely.lua` (`bound_ms` > 0: a key with no more than that left is left
    /// to expire) or the standard compare-and-delete (`bound_ms` = 0). Returns whether it
    /// deleted the key, and whether it found ours and left it.
    pub fn release(&mut self, now: u16, value: u8, bound_ms: u16) -> (bool, bool) {
        let data = &mut self.master.data;
        match data.lock {
            Some(key) if key.value == value => {
                let left = key.expires.saturating_sub(now);
                if bound_ms > 0 && left <= bound_ms {
                    (false, true)
                } else {
                    data.lock = None;
                    (true, false)
                }
            }
            _ => (false, false),
        }
    }
}
