//! A node: a Redis master (or, for a cluster node, a shard's master and its replica; for a
//! replicated node, a primary behind Redis Sentinel and its replica), its keys
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

/// A marker's id: drawn at random (told apart from every other), or a word written by hand
/// (`manual`, the same on every server marked that way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MarkerId {
    /// Drawn: this number, spelt as 16 hex digits.
    Drawn(u8),
    /// Written by hand.
    Hand,
}

impl MarkerId {
    fn text(self) -> String {
        match self {
            MarkerId::Drawn(k) => format!("5f0c2a9e7d13b8{k:02x}"),
            MarkerId::Hand => "manual".to_owned(),
        }
    }
}

/// What a marker says of itself (the `marker` module's grammar).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MarkerTag {
    /// Written after a loss was seen (or by a launcher, or by hand).
    Plain,
    /// Written by a client that saw the node for the first time without one (`new.`).
    New,
    /// Vouched for by an operator for the run `run` (`ok.`).
    Operator {
        /// The run it vouches for.
        run: u8,
    },
    /// Vouched for by the group's first sight at node time `at_ms` for the run `run` (`okg.`).
    Group {
        /// When.
        at_ms: u64,
        /// The run it vouches for.
        run: u8,
    },
}

/// The fingerprint of the one group of nodes the model's clients list.
pub const GROUP: &str = "9e1f00c0ffee4a11";

/// The marker key on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MarkerKey {
    /// The owner it names (a cluster master's): `run_id`, and `master_replid` when the rule
    /// names it.
    pub owner: Option<(u8, Option<u8>)>,
    /// Its id.
    pub id: MarkerId,
    /// What it says of itself.
    pub tag: MarkerTag,
    /// The node time (Unix ms) from which it vouches; 0: at once.
    pub from_ms: u64,
}

impl MarkerKey {
    /// A plain marker with a drawn id.
    pub fn plain(owner: Option<(u8, Option<u8>)>, id: u8, from_ms: u64) -> Self {
        MarkerKey {
            owner,
            id: MarkerId::Drawn(id),
            tag: MarkerTag::Plain,
            from_ms,
        }
    }

    /// The value as the library reads it (`marker` module grammar).
    pub fn value(&self) -> String {
        let owner = match self.owner {
            None => String::new(),
            Some((run, replid)) => format!("{}/", owner_name(run, replid)),
        };
        let id = self.id.text();
        let body = match self.tag {
            MarkerTag::Plain => id,
            MarkerTag::New => format!("new.{id}"),
            MarkerTag::Operator { run } => format!("ok.{}.{id}", run_id(run)),
            MarkerTag::Group { at_ms, run } => {
                format!("okg.{GROUP}.{at_ms}.{}.{id}", run_id(run))
            }
        };
        format!("{owner}{body}:{}", self.from_ms)
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

/// A `master_replid2`: the history continued at the last promotion, or forty zeros (never
/// promoted), as Redis spells it.
pub fn previous_id(previous: Option<u8>) -> String {
    previous.map_or_else(|| "0".repeat(40), repl_id)
}

/// A replicated node's server's address (`ip:port`, as the sentinels name it).
pub fn address(addr: u8) -> String {
    format!("10.0.0.{}:6379", u16::from(addr) + 1)
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
    /// Its `master_replid2`: the history it continued when it was last promoted (`None`: never
    /// promoted, `000…` in `INFO`).
    pub previous: Option<u8>,
    /// Which of the node's two servers it is (its address, [`address`]): the master is 0 and its
    /// replica 1 when the run begins; a failover swaps their roles, not their addresses.
    pub addr: u8,
    /// The node time (ms) it started at, as its uptime says: negative for a node up long before
    /// the run (or one whose host clock stepped forward after it started: the uptime lies).
    pub started: i32,
    /// Whether it ran `FLUSHALL` since it started (`INFO commandstats`).
    pub flushed: bool,
    /// Its data.
    pub data: Data,
}

/// A node of the manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Node {
    /// The master that serves the lock key.
    pub master: Process,
    /// A cluster node's or a replicated node's replica: a prefix of the master's writes (as of
    /// its last sync).
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

/// The markers nodes start with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Markers {
    /// A marker with a drawn id that vouches at once (a launcher's, or clients' long ago).
    Drawn,
    /// `manual:0`, written by hand on every server by the deployment's provisioning.
    Hand,
    /// None: servers no client of ours ever used.
    None,
}

/// What `scripts/vouch.lua` found on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Found {
    /// No marker.
    None,
    /// A first-sight marker still pending.
    New,
    /// One that vouches.
    Vouched,
    /// Anything else (a loss's marker still pending).
    Other,
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

/// What a node answered to a native fenced acquisition (`commands::set_fenced_natively`'s pipeline:
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
        Self::marked(cluster, names_replid, Markers::Drawn)
    }

    /// A node up for an hour, with the markers `markers` (see [`Markers`]).
    pub fn marked(cluster: bool, names_replid: bool, markers: Markers) -> Self {
        let owner = cluster.then_some((0, names_replid.then_some(0)));
        let marker = match markers {
            Markers::Drawn => Some(MarkerKey::plain(owner, 0, 0)),
            Markers::Hand => Some(MarkerKey {
                id: MarkerId::Hand,
                ..MarkerKey::plain(owner, 0, 0)
            }),
            Markers::None => None,
        };
        let master = Process {
            run: 0,
            replid: 0,
            previous: None,
            addr: 0,
            started: -3_600_000,
            flushed: false,
            data: Data {
                marker,
                ..Data::default()
            },
        };
        let replica = cluster.then_some(Process {
            run: 1,
            addr: 1,
            ..master
        });
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

    /// A replicated node (a primary behind Redis Sentinel, `sentinels`), up for an hour: a
    /// primary and one replica in sync with it, with the markers `markers`, plain ones (the
    /// key is the same on every server: replicated, it names no owner).
    pub fn sentinel(markers: Markers) -> Self {
        let mut node = Self::marked(false, false, markers);
        node.replica = Some(Process {
            run: 1,
            addr: 1,
            ..node.master
        });
        node
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

    /// `INFO server`, `replication`, `stats` and `commandstats` as the health check and a first
    /// look read them.
    pub fn info(&self, now: u16) -> String {
        let up_ms = i64::from(now) - i64::from(self.master.started);
        let second_offset = if self.master.previous.is_some() {
            "1"
        } else {
            "-1"
        };
        let flushed = if self.master.flushed {
            "cmdstat_flushall:calls=1,usec=9\r\n"
        } else {
            ""
        };
        format!(
            "# Server\r\nredis_version:7.2.4\r\nrun_id:{}\r\nuptime_in_seconds:{}\r\n\
             # Replication\r\nrole:master\r\nmaster_replid:{}\r\nmaster_replid2:{}\r\n\
             second_repl_offset:{second_offset}\r\n# Stats\r\nevicted_keys:0\r\n# Commandstats\r\ncmdstat_set:calls=1,usec=2\r\n{flushed}",
            run_id(self.master.run),
            up_ms.max(0) / 1000,
            repl_id(self.master.replid),
            previous_id(self.master.previous),
        )
    }

    /// `INFO replication` as the health check reads it.
    pub fn info_replication(&self) -> String {
        format!(
            "# Replication\r\nrole:master\r\nmaster_replid:{}\r\nmaster_replid2:{}\r\n",
            repl_id(self.master.replid),
            previous_id(self.master.previous),
        )
    }

    /// `scripts/marker.lua`: the marker, or a new one (`id`, tagged `new.` on first sight)
    /// that vouches `max_ttl_ms` from now, written where there is none (1), where one names
    /// another owner (2), or where the key still holds exactly `undrawn`, a marker read before
    /// whose id was not drawn (3).
    pub fn marker_script(
        &mut self,
        now: u16,
        owner: Option<(u8, Option<u8>)>,
        id: u8,
        max_ttl_ms: u64,
        first_sight: bool,
        undrawn: Option<MarkerKey>,
    ) -> (MarkerKey, u8) {
        let found = self.master.data.marker;
        let replaces_undrawn = undrawn.is_some() && found == undrawn;
        if let Some(found) = found
            && found.owner == owner
            && !replaces_undrawn
        {
            return (found, 0);
        }
        let written = match found {
            _ if replaces_undrawn => 3,
            Some(_) => 2,
            None => 1,
        };
        let marker = MarkerKey {
            tag: if first_sight {
                MarkerTag::New
            } else {
                MarkerTag::Plain
            },
            ..MarkerKey::plain(owner, id, node_unix_ms(now) + max_ttl_ms)
        };
        self.master.data.marker = Some(marker);
        (marker, written)
    }

    /// What `scripts/vouch.lua` finds: `none`, `new` (a first-sight marker pending by more than
    /// `margin_ms`), `vouched`, or `other`; with the id.
    fn found(&self, now: u16, margin_ms: u64) -> (Found, Option<MarkerId>) {
        let now_ms = node_unix_ms(now);
        match self.master.data.marker {
            None => (Found::None, None),
            Some(m) => {
                let found = match m.tag {
                    MarkerTag::New if m.from_ms > now_ms + margin_ms => Found::New,
                    MarkerTag::Operator { .. } | MarkerTag::Group { .. } if m.from_ms == 0 => {
                        Found::Vouched
                    }
                    MarkerTag::Plain if m.from_ms <= now_ms => Found::Vouched,
                    _ => Found::Other,
                };
                (found, Some(m.id))
            }
        }
    }

    /// `scripts/vouch.lua`'s `extend`: the first-sight marker `id`, still pending by more than
    /// `margin_ms`, pending for another `max_ttl_ms`. Whether it was done, and what was found.
    pub fn vouch_extend(
        &mut self,
        now: u16,
        id: MarkerId,
        max_ttl_ms: u64,
        margin_ms: u64,
    ) -> (bool, Found) {
        let (done, found, _) = self.change_pending(now, id, margin_ms, |m| {
            m.from_ms = node_unix_ms(now) + max_ttl_ms;
        });
        (done, found)
    }

    /// `scripts/vouch.lua`'s `vouch`: the first-sight marker `id` vouched for by the group, for
    /// the run `run` the look read (`vouch::look`); done too when another client's protocol
    /// vouched it already.
    pub fn vouch_group(
        &mut self,
        now: u16,
        id: MarkerId,
        run: u8,
        margin_ms: u64,
    ) -> (bool, Found) {
        let (done, found, at) = self.change_pending(now, id, margin_ms, |m| {
            m.tag = MarkerTag::Group {
                at_ms: node_unix_ms(now),
                run,
            };
            m.from_ms = 0;
        });
        (done || (found == Found::Vouched && at == Some(id)), found)
    }

    /// The step `vouch.lua`'s `extend` and `vouch` share: when the first-sight marker `id` is
    /// still pending by more than `margin_ms`, `change` it. Whether it did, what was found, and
    /// the id of the marker found.
    fn change_pending(
        &mut self,
        now: u16,
        id: MarkerId,
        margin_ms: u64,
        change: impl FnOnce(&mut MarkerKey),
    ) -> (bool, Found, Option<MarkerId>) {
        let (found, at) = self.found(now, margin_ms);
        let pending = found == Found::New && at == Some(id);
        if pending && let Some(m) = self.master.data.marker.as_mut() {
            change(m);
        }
        (pending, found, at)
    }

    /// What `vouch.lua`'s `peek` finds (`mark::peek`): whether the node shows a marker that
    /// vouches or records a loss (`vouched`, `other`).
    pub fn peek_marked(&self, now: u16) -> bool {
        matches!(self.found(now, 0).0, Found::Vouched | Found::Other)
    }

    /// `scripts/vouch.lua`'s `mark` (an operator's, after `mark`'s own refusals): where there is
    /// no marker, a fresh one (`fresh`); over a first-sight one, or any with `force`, an
    /// operator's vouch for this run keeping the id. Whether it was done.
    pub fn vouch_mark(&mut self, now: u16, fresh: u8, force: bool) -> bool {
        let (found, at) = self.found(now, 0);
        let id = match (found, at) {
            (Found::None, _) | (_, None) => MarkerId::Drawn(fresh),
            (Found::New, Some(id)) => id,
            (_, Some(id)) if force => id,
            _ => return false,
        };
        let run = self.master.run;
        self.master.data.marker = Some(MarkerKey {
            owner: None,
            id,
            tag: MarkerTag::Operator { run },
            from_ms: 0,
        });
        true
    }

    /// The lock's `SET NX PX` (`life_ms`): the key set to `value` where there is none. Whether
    /// it was set.
    fn set_nx(&mut self, now: u16, value: u8, life_ms: u16) -> bool {
        let data = &mut self.master.data;
        let granted = data.lock.is_none();
        if granted {
            data.lock = Some(Key {
                value,
                expires: now.saturating_add(life_ms),
            });
        }
        granted
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
        let granted = self.set_nx(now, value, life_ms);
        let data = &mut self.master.data;
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

    /// A plain acquisition (`SET NX PX` alone, no counter touched: an exclusive lock whose token
    /// is issued on request, `fencing` invariant 8), with the marker read back in the same step.
    pub fn set_plain(&mut self, now: u16, value: u8, life_ms: u16) -> AcquireReply {
        let granted = self.set_nx(now, value, life_ms);
        AcquireReply {
            granted,
            counter: None,
            clock_us: node_us(now),
            marker: self.master.data.marker,
            scripted: false,
        }
    }

    /// `scripts/fence_held.lua`: only while the lock holds `value` (or anywhere, with
    /// `needs_key` false: the rule removed), the counter goes to `max(counter + 1, the node's
    /// clock in µs rounded down to the grain)`, as `fence_advance.lua` does, and the new counter
    /// is the reply (a stored proposal); elsewhere nothing changes and the node refuses.
    pub fn fence_held(
        &mut self,
        now: u16,
        value: u8,
        grain_us: u64,
        needs_key: bool,
    ) -> Option<u64> {
        let data = &mut self.master.data;
        if needs_key && data.lock.map(|k| k.value) != Some(value) {
            return None;
        }
        let clock_us = node_us(now);
        let rounded = clock_us - clock_us % grain_us.max(1);
        let counter = data.counter.unwrap_or(0).saturating_add(1).max(rounded);
        data.counter = Some(counter);
        Some(counter)
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

    /// `scripts/linger.lua`: a key of ours is kept for at least `delay_ms` from now (never
    /// shorter than it had).
    pub fn linger(&mut self, now: u16, value: u8, delay_ms: u16) {
        if let Some(key) = self.master.data.lock.as_mut()
            && key.value == value
        {
            key.expires = key.expires.max(now.saturating_add(delay_ms));
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
