//! A primary with replicas behind Redis Sentinel: [`SentinelGroup`], the topology most Redis
//! users run, for testing what happens to locks when Sentinel fails the primary over.
//!
//! The data servers are plain nodes: the primary first, then replicas started with
//! `--replicaof` it. The sentinels are nodes started with [`NodeSpec::sentinel`], each told to
//! monitor the primary under one service name ([`SentinelGroup::SERVICE`]) with a quorum of a
//! majority of them. `start` returns once every replica's link to the primary is up and every
//! sentinel knows every replica and every other sentinel: a failover can then happen, and a
//! client that asks any sentinel gets the same answer.
//!
//! Timings are short so that a test sees a failover within seconds: a primary is judged down
//! after [`DOWN_AFTER_MS`] without an answer, and a failover that stalls is tried again after
//! [`FAILOVER_TIMEOUT_MS`]. A loaded machine may slow a failover, never cause one: a healthy
//! primary answers a sentinel's `PING` within milliseconds.

use std::thread;
use std::time::{Duration, Instant};

use crate::{Cluster, LaunchError, NodeSpec, RedisNode};

/// How long a sentinel waits for an answer before it calls the primary down (`sentinel
/// down-after-milliseconds`).
pub const DOWN_AFTER_MS: u64 = 1_000;

/// `sentinel failover-timeout`: how soon a failover that stalled may be tried again.
pub const FAILOVER_TIMEOUT_MS: u64 = 5_000;

/// The longest wait for the group to form, or for a failover to complete.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(50);

/// A primary, its replicas and the sentinels that watch them; all killed when dropped.
///
/// Data node 0 is the primary at start; a failover makes another one primary
/// ([`primary`](Self::primary) says which).
///
/// ```no_run
/// # fn main() -> Result<(), redquorum_nodes::LaunchError> {
/// use redquorum_nodes::{NodeSpec, SentinelGroup};
///
/// let mut group = SentinelGroup::start(1, 3, NodeSpec::new())?;
/// println!("give the library: {}", group.url());
/// let old = group.primary()?;
/// group.data_node(old).kill()?;
/// let new = group.await_new_primary(old)?; // the replica, promoted by the sentinels
/// # let _ = new;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct SentinelGroup {
    data: Vec<RedisNode>,
    sentinels: Cluster,
}

impl SentinelGroup {
    /// The service name the sentinels monitor the primary under.
    pub const SERVICE: &'static str = "redquorum";

    /// Starts a primary and `replicas` replicas from `spec` (its port, directory, persistence,
    /// marker and arguments apply to each: data node `i` listens on `port + i` and keeps its
    /// files in `dir/data-i`; only the primary is marked, the replicas get the marker by
    /// replication), then `sentinels` sentinels (on the following ports, in `dir/sentinel-i`),
    /// and waits until the group has formed (module docs).
    ///
    /// # Errors
    ///
    /// [`LaunchError::InvalidSpec`] for no sentinel, or ports past 65535; those of
    /// [`RedisNode::start`], [`Cluster::start`] and [`RedisNode::cli`];
    /// [`LaunchError::SentinelNotReady`] if the group does not form within 30 s. On any error,
    /// every server this call started is stopped.
    pub fn start(replicas: usize, sentinels: usize, spec: NodeSpec) -> Result<Self, LaunchError> {
        Self::start_with(replicas, sentinels, spec, |_, spec| spec)
    }

    /// [`start`](Self::start), with replica `r`'s spec (`r` from 1) passed through `replica`
    /// before it starts: options of one replica only (`--replica-priority`, `--masteruser`).
    ///
    /// # Errors
    ///
    /// Those of [`start`](Self::start).
    pub fn start_with(
        replicas: usize,
        sentinels: usize,
        spec: NodeSpec,
        replica: impl Fn(usize, NodeSpec) -> NodeSpec,
    ) -> Result<Self, LaunchError> {
        if sentinels == 0 {
            return Err(LaunchError::InvalidSpec(
                "a Sentinel group needs at least one sentinel".to_owned(),
            ));
        }
        let port_of = |i: usize| -> Result<Option<u16>, LaunchError> {
            spec.port
                .map(|base| {
                    u16::try_from(i)
                        .ok()
                        .and_then(|i| base.checked_add(i))
                        .ok_or_else(|| {
                            LaunchError::InvalidSpec(format!("ports from {base} pass 65535"))
                        })
                })
                .transpose()
        };
        let in_dir = |name: String, spec: NodeSpec| match &spec.dir {
            Some(dir) => {
                let dir = dir.join(name);
                spec.dir(dir)
            }
            None => spec,
        };
        let mut group = Self {
            data: Vec::with_capacity(1 + replicas),
            sentinels: Cluster::empty(),
        };
        let started = (|| {
            // A replica's first sync starts at once, not after the default 5 s wait for more
            // replicas to share one diskless transfer.
            let data_spec = spec.clone().arg("--repl-diskless-sync-delay").arg("0");
            let mut primary_spec = in_dir("data-0".to_owned(), data_spec.clone());
            primary_spec.port = port_of(0)?;
            group.data.push(RedisNode::start(primary_spec)?);
            let primary_port = group.data[0].port().to_string();
            for r in 1..=replicas {
                let mut replica_spec = in_dir(format!("data-{r}"), data_spec.clone())
                    .marked(false)
                    .arg("--replicaof")
                    .arg("127.0.0.1")
                    .arg(&primary_port);
                if let Some(password) = spec.password() {
                    replica_spec = replica_spec.arg("--masterauth").arg(password);
                }
                replica_spec = replica(r, replica_spec);
                replica_spec.port = port_of(r)?;
                group.data.push(RedisNode::start(replica_spec)?);
            }
            let quorum = (sentinels / 2 + 1).to_string();
            let mut sentinel_spec = NodeSpec::new()
                .sentinel(true)
                .detached(spec.detached)
                .die_with_parent(spec.die_with_parent)
                .startup_timeout(spec.startup_timeout)
                .arg("--sentinel")
                .arg("monitor")
                .arg(Self::SERVICE)
                .arg("127.0.0.1")
                .arg(&primary_port)
                .arg(&quorum)
                .arg("--sentinel")
                .arg("down-after-milliseconds")
                .arg(Self::SERVICE)
                .arg(DOWN_AFTER_MS.to_string())
                .arg("--sentinel")
                .arg("failover-timeout")
                .arg(Self::SERVICE)
                .arg(FAILOVER_TIMEOUT_MS.to_string());
            if let Some(password) = spec.password() {
                sentinel_spec = sentinel_spec
                    .arg("--sentinel")
                    .arg("auth-pass")
                    .arg(Self::SERVICE)
                    .arg(password);
            }
            if let Some(binary) = &spec.binary {
                sentinel_spec = sentinel_spec.binary(binary.clone());
            }
            sentinel_spec.dir = spec.dir.as_ref().map(|dir| dir.join("sentinels"));
            sentinel_spec.port = port_of(1 + replicas)?;
            group.sentinels = Cluster::start(sentinels, sentinel_spec)?;
            group.await_formed()
        })();
        if let Err(e) = started {
            group.kill_all();
            return Err(e);
        }
        Ok(group)
    }

    /// `redis+sentinel://127.0.0.1:PORT,…/SERVICE`: every sentinel, and the service.
    pub fn url(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect();
        format!("redis+sentinel://{}/{}", sentinels.join(","), Self::SERVICE)
    }

    /// Data node `i` (0 is the primary at start), to kill, pause or restart it.
    ///
    /// # Panics
    ///
    /// If `i` is not a data node of the group, like slice indexing.
    pub fn data_node(&mut self, i: usize) -> &mut RedisNode {
        &mut self.data[i]
    }

    /// How many data nodes there are: the primary and its replicas.
    pub fn data_len(&self) -> usize {
        self.data.len()
    }

    /// Sentinel `i`.
    ///
    /// # Panics
    ///
    /// If `i` is not a sentinel of the group, like slice indexing.
    pub fn sentinel(&mut self, i: usize) -> &mut RedisNode {
        self.sentinels.node(i)
    }

    /// How many sentinels there are.
    pub fn sentinels_len(&self) -> usize {
        self.sentinels.len()
    }

    /// The data node every sentinel names as the primary now.
    ///
    /// # Errors
    ///
    /// [`LaunchError::SentinelNotReady`] when the sentinels that answer disagree, none answers,
    /// or the one they name is not a data node of the group; those of [`RedisNode::cli`].
    pub fn primary(&self) -> Result<usize, LaunchError> {
        let mut named = None;
        for sentinel in self.sentinels.iter().filter(|s| s.pid().is_some()) {
            let port = self.primary_port_by(sentinel)?;
            if named.is_some_and(|p| p != port) {
                return Err(not_ready(
                    "one primary named by every sentinel",
                    Duration::ZERO,
                ));
            }
            named = Some(port);
        }
        let port = named.ok_or_else(|| not_ready("a running sentinel", Duration::ZERO))?;
        self.data
            .iter()
            .position(|node| node.port() == port)
            .ok_or_else(|| {
                not_ready(
                    &format!("a primary of ours (the sentinels name port {port})"),
                    Duration::ZERO,
                )
            })
    }

    /// Waits until every running sentinel names a primary other than data node `old`, and that
    /// node says `role:master` (after `old` was killed, paused, or failed over). Returns it.
    ///
    /// # Errors
    ///
    /// [`LaunchError::SentinelNotReady`] after 30 s; those of [`RedisNode::cli`].
    pub fn await_new_primary(&self, old: usize) -> Result<usize, LaunchError> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            if let Ok(new) = self.primary()
                && new != old
                && self.data[new]
                    .cli(&["INFO", "replication"])
                    .is_ok_and(|info| info.contains("role:master"))
            {
                return Ok(new);
            }
            if Instant::now() >= deadline {
                return Err(not_ready("a new primary", SETTLE_TIMEOUT));
            }
            thread::sleep(POLL);
        }
    }

    /// Asks the sentinels for a failover now (`SENTINEL FAILOVER`, as an operator would), and
    /// waits for its new primary ([`await_new_primary`](Self::await_new_primary)). A replica
    /// still syncing (one just restarted) is waited for: Sentinel refuses with `NOGOODSLAVE`
    /// until one can be promoted; so is the end of a failover still in progress (`INPROG`: the
    /// sentinels were still reconfiguring the replicas after the last one; seen once in a full
    /// run, right after the old primary came back).
    ///
    /// # Errors
    ///
    /// [`LaunchError::SentinelNotReady`] when no failover can start within 30 s; those of
    /// [`primary`](Self::primary), [`RedisNode::cli`] and
    /// [`await_new_primary`](Self::await_new_primary).
    pub fn failover(&mut self) -> Result<usize, LaunchError> {
        let old = self.primary()?;
        let asked = self
            .sentinels
            .iter()
            .find(|s| s.pid().is_some())
            .ok_or_else(|| not_ready("a running sentinel", Duration::ZERO))?;
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            match asked.cli(&["SENTINEL", "FAILOVER", Self::SERVICE]) {
                Ok(_) => break,
                // Refusals that pass: no replica in sync yet, or the sentinel still finishing
                // the previous failover (it reconfigures the replicas after the promotion).
                Err(LaunchError::Cli { stderr, .. })
                    if refused_for_now(&stderr) && Instant::now() < deadline =>
                {
                    thread::sleep(POLL);
                }
                Err(LaunchError::Cli { stderr, .. }) if refused_for_now(&stderr) => {
                    return Err(not_ready("a failover it can start", SETTLE_TIMEOUT));
                }
                Err(e) => return Err(e),
            }
        }
        self.await_new_primary(old)
    }

    /// The primary's port as `sentinel` names it.
    fn primary_port_by(&self, sentinel: &RedisNode) -> Result<u16, LaunchError> {
        let reply = sentinel.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", Self::SERVICE])?;
        reply
            .lines()
            .nth(1)
            .and_then(|port| port.trim().parse().ok())
            .ok_or_else(|| {
                not_ready(
                    &format!("a primary's address (a sentinel answered {reply:?})"),
                    Duration::ZERO,
                )
            })
    }

    /// Waits until every replica follows the primary and every sentinel knows every replica
    /// and every other sentinel.
    fn await_formed(&self) -> Result<(), LaunchError> {
        let replicas = self.data.len() - 1;
        let others = self.sentinels.len() - 1;
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let linked = self.data[1..].iter().all(|replica| {
                replica
                    .cli(&["INFO", "replication"])
                    .is_ok_and(|info| info.contains("master_link_status:up"))
            });
            let known = self.sentinels.iter().all(|sentinel| {
                let count = |what: &str| {
                    sentinel
                        .cli(&["SENTINEL", what, Self::SERVICE])
                        .map(|reply| reply.lines().filter(|l| *l == "name").count())
                        .unwrap_or(0)
                };
                count("REPLICAS") == replicas && count("SENTINELS") == others
            });
            if linked && known {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(not_ready(
                    &format!(
                        "a formed group (replicas linked: {linked}, sentinels that know each \
                         other and the replicas: {known})"
                    ),
                    SETTLE_TIMEOUT,
                ));
            }
            thread::sleep(POLL);
        }
    }

    fn kill_all(&mut self) {
        for node in self.data.iter_mut().chain(self.sentinels.iter_mut()) {
            // Best effort: the error that brought us here is the one worth reporting.
            let _ = node.kill();
        }
    }
}

/// The group did not reach `what` within `waited` (zero: a state read once, not waited for).
fn not_ready(what: &str, waited: Duration) -> LaunchError {
    LaunchError::SentinelNotReady {
        what: what.to_owned(),
        waited,
    }
}

/// Whether Sentinel refused a failover only for now: no replica it can promote yet
/// (`NOGOODSLAVE`), or a failover of the group still in progress (`INPROG`).
fn refused_for_now(stderr: &str) -> bool {
    stderr.contains("NOGOODSLAVE") || stderr.contains("INPROG")
}
