//! The lock designs under test, behind one small trait: [`LockClient`] acquires (giving a value,
//! maybe a fencing token, and the instant until which the holder believes itself valid) and
//! releases. The workload, the faults and the checker are the same for all of them; only the
//! design changes.
//!
//! | strategy | servers | what it is |
//! |---|---|---|
//! | `redlock` | `--nodes` independent masters | this library with its defaults: quarantine on, durable nodes trusted when they show their marker key (restart, flush and replace faults take their data although they run AOF), fencing on |
//! | `redlock-no-quarantine` | same | the same with `.quarantine(false)`: plain Redlock |
//! | `single-instance` | 1 | this library on one node (quarantine and fencing on) |
//! | `single-with-failover` | 1 master + 1 replica | this library on one node that fails over to a replica whose replication lags 2.5 s, longer than the TTL; quarantine off, as any single-instance client |
//! | `setnx-getset` | 1 | the old recipe: `SETNX lock <expiry>`, `GET`/`GETSET` to take over an expired one, `DEL` to release; no fencing |
//! | `redlock-cluster` | 3 Redis Clusters, each 1 master + 1 replica | this library with its defaults, one `redis+cluster://` node per cluster: a promoted replica is quarantined (its marker names the old master), votes do not wait for replicas |
//! | `redlock-cluster-wait` | same | `.quarantine(false).wait_for_replicas(true)`: every vote waits (`WAIT`) for the shard's replica |
//! | `redlock-cluster-no-failover-rule` | same | `.quarantine(false).wait_for_replicas(false)`: neither rule, plain writes to whichever master serves the slot |
//!
//! Every lock has the same TTL, [`TTL`], which is also the library's `max_ttl` (the restart
//! quarantine), so a restarted node may vote again after 2 s.
//!
//! `single-with-failover` turns the quarantine off on purpose: the promoted replica has a new
//! `run_id`, so with the quarantine on, our library would refuse its votes for `max_ttl` after
//! the failover, which is exactly long enough for every lock granted by the dead master to
//! expire. The strategy shows the race that a client trusting whatever master it is given runs
//! into.
//!
//! The three `redlock-cluster*` strategies run on the cluster layout and its `failover` fault
//! (a majority of the clusters promote a replica that missed more than a TTL of writes, see
//! [`faults`](crate::faults)). Expected verdicts: `redlock-cluster` and `redlock-cluster-wait`
//! safe, `redlock-cluster-no-failover-rule` caught granting a lock twice.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use redquorum::{Lock, Redlock, Retry};

use crate::faults::Fault;
use crate::named::named;

/// Every strategy's lock TTL, and the library's `max_ttl`: short, so that runs of a few seconds
/// see many expiries and restart quarantines.
pub const TTL: Duration = Duration::from_secs(2);

/// How long a client keeps trying for one resource before it picks one again.
const ACQUIRE_FOR: Duration = Duration::from_millis(400);
/// The longest delay between attempts; each delay is drawn from `[half, all]` of it.
const RETRY_DELAY: Duration = Duration::from_millis(40);
/// How long one Redis command of the `setnx-getset` recipe may take (the library's default node
/// timeout, for a fair comparison).
const COMMAND_TIMEOUT: Duration = redquorum::defaults::NODE_TIMEOUT;

/// A lock design under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// This library with its defaults: quarantine, durable-node trust on evidence, fencing.
    Redlock,
    /// This library with the restart quarantine off.
    RedlockNoQuarantine,
    /// This library on a single node.
    SingleInstance,
    /// This library on a single master that fails over to its asynchronous replica.
    SingleWithFailover,
    /// The old `SETNX` / `GETSET` recipe on a single node.
    SetnxGetset,
    /// This library with its defaults over three Redis Clusters (one master, one replica each).
    RedlockCluster,
    /// This library over three Redis Clusters, quarantine off, every vote waiting for the
    /// shard's replica (`WAIT`).
    RedlockClusterWait,
    /// This library over three Redis Clusters with neither failover rule: quarantine off, no
    /// `WAIT`.
    RedlockClusterNoFailoverRule,
}

/// How a strategy's servers are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Independent masters, each behind its own proxy.
    Independent(usize),
    /// Node 0 starts as master, node 1 as its replica through a delayed replication proxy;
    /// clients reach the current master through one proxy.
    Failover,
    /// Independent Redis Clusters of one master and one replica each, one slot per cluster.
    /// Clients reach them directly, without proxies (cluster routing needs the real addresses),
    /// so the proxy faults do not apply (see [`Layout::supports`]).
    Clusters(usize),
}

/// How many Redis Clusters the `redlock-cluster*` strategies run on.
pub const CLUSTERS: usize = 3;

/// The kinds the cluster layout supports, in the order they are drawn from when none are named.
pub const CLUSTER_FAULTS: [Fault; 4] = [
    Fault::Failover,
    Fault::Pause,
    Fault::ClientPause,
    Fault::Flush,
];

impl Layout {
    /// Whether `fault` applies to this layout. The cluster layout has no proxies, so `delay`,
    /// `drop`, `blackhole` and `replace` do not apply; `kill`, `restart` and `restart-burst`
    /// do not either (a one-master cluster whose master is down serves nothing until it is back,
    /// which is an outage, not a test of the lock). `failover` applies to it alone.
    pub(crate) fn supports(self, fault: Fault) -> bool {
        match self {
            Layout::Clusters(_) => CLUSTER_FAULTS.contains(&fault),
            Layout::Independent(_) | Layout::Failover => fault != Fault::Failover,
        }
    }
}

impl Strategy {
    /// Every strategy, in the order the CLI lists them.
    pub const ALL: [Strategy; 8] = [
        Strategy::Redlock,
        Strategy::RedlockNoQuarantine,
        Strategy::SingleInstance,
        Strategy::SingleWithFailover,
        Strategy::SetnxGetset,
        Strategy::RedlockCluster,
        Strategy::RedlockClusterWait,
        Strategy::RedlockClusterNoFailoverRule,
    ];

    /// The name used on the command line and in histories.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Redlock => "redlock",
            Strategy::RedlockNoQuarantine => "redlock-no-quarantine",
            Strategy::SingleInstance => "single-instance",
            Strategy::SingleWithFailover => "single-with-failover",
            Strategy::SetnxGetset => "setnx-getset",
            Strategy::RedlockCluster => "redlock-cluster",
            Strategy::RedlockClusterWait => "redlock-cluster-wait",
            Strategy::RedlockClusterNoFailoverRule => "redlock-cluster-no-failover-rule",
        }
    }

    /// One line on what the strategy is.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Strategy::Redlock => {
                "this library with its defaults: quarantine (trusting durable nodes that show their marker), fencing"
            }
            Strategy::RedlockNoQuarantine => "this library with .quarantine(false): plain Redlock",
            Strategy::SingleInstance => "this library on one node",
            Strategy::SingleWithFailover => {
                "one master failing over to a replica that lags 2.5 s, more than a TTL; quarantine off"
            }
            Strategy::SetnxGetset => "the old SETNX/GETSET recipe with DEL release, no fencing",
            Strategy::RedlockCluster => {
                "this library with its defaults over 3 Redis Clusters (1 master + 1 replica each): a promoted replica is quarantined"
            }
            Strategy::RedlockClusterWait => {
                "this library over 3 Redis Clusters, quarantine off, every vote waits for the shard's replica (WAIT)"
            }
            Strategy::RedlockClusterNoFailoverRule => {
                "this library over 3 Redis Clusters, quarantine off and no WAIT: no failover rule"
            }
        }
    }

    /// The servers this strategy runs on, given `--nodes`.
    pub(crate) fn layout(self, nodes: usize) -> Layout {
        match self {
            Strategy::Redlock | Strategy::RedlockNoQuarantine => Layout::Independent(nodes),
            Strategy::SingleInstance | Strategy::SetnxGetset => Layout::Independent(1),
            Strategy::SingleWithFailover => Layout::Failover,
            Strategy::RedlockCluster
            | Strategy::RedlockClusterWait
            | Strategy::RedlockClusterNoFailoverRule => Layout::Clusters(CLUSTERS),
        }
    }

    /// Whether `fault` applies to this strategy's servers (the cluster layout has no proxies,
    /// and `failover` needs Redis Clusters).
    #[must_use]
    pub fn supports(self, fault: Fault) -> bool {
        self.layout(1).supports(fault)
    }

    /// The kinds enabled when none are named: [`Fault::DEFAULT`], or for the cluster strategies
    /// [`CLUSTER_FAULTS`].
    #[must_use]
    pub fn default_faults(self) -> &'static [Fault] {
        match self.layout(1) {
            Layout::Clusters(_) => &CLUSTER_FAULTS,
            Layout::Independent(_) | Layout::Failover => &Fault::DEFAULT,
        }
    }

    /// How long to wait after the servers started before clients start: with the quarantine on,
    /// a node votes only once it has been up for `max_ttl`, which the library reads in whole
    /// seconds (rounded down), hence one more second. A cluster's masters are marked
    /// (`RedisCluster::mark_masters`) and durable, so they are trusted at once.
    pub(crate) fn warm_up(self) -> Duration {
        match self {
            Strategy::Redlock | Strategy::SingleInstance => TTL + Duration::from_secs(1),
            _ => Duration::ZERO,
        }
    }

    /// How this strategy's clients are made, over the proxies' `urls`.
    pub(crate) fn design(self, urls: &[String]) -> Design {
        // The library's defaults otherwise, durable-node trust included: restart, flush and
        // replace faults take a node's data although it runs with appendfsync always, and the
        // marker key is what must tell.
        let builder = Redlock::builder(urls.iter().cloned()).max_ttl(TTL);
        match self {
            Strategy::Redlock | Strategy::SingleInstance => Design::Library(builder),
            Strategy::RedlockNoQuarantine | Strategy::SingleWithFailover => {
                Design::Library(builder.quarantine(false))
            }
            Strategy::RedlockCluster => Design::Library(builder),
            Strategy::RedlockClusterWait => {
                Design::Library(builder.quarantine(false).wait_for_replicas(true))
            }
            Strategy::RedlockClusterNoFailoverRule => {
                Design::Library(builder.quarantine(false).wait_for_replicas(false))
            }
            Strategy::SetnxGetset => Design::OldRecipe,
        }
    }
}

/// How a strategy's clients are made.
#[derive(Debug)]
pub(crate) enum Design {
    /// A [`LibraryClient`], each with a manager of its own from this builder.
    Library(redquorum::Builder),
    /// A [`SetnxClient`] on the first URL.
    OldRecipe,
}

named!(Strategy, "strategy", "one of");

/// A lock that was granted, as its holder sees it.
#[derive(Debug)]
pub struct Acquired<H> {
    /// Identifies the acquisition in the history.
    pub value: String,
    /// The fencing token, if the design has one.
    pub fence: Option<u64>,
    /// Until when the holder believes it holds the lock.
    pub valid_until: Instant,
    /// What the design needs to release it.
    pub held: H,
}

/// One client of a lock design. Each client of a run has its own, as separate processes would.
pub trait LockClient: Send + 'static {
    /// What a granted lock keeps for its release.
    type Held: Send + Sync + 'static;

    /// Tries to take `resource`, with a short retry; `None` if it was not granted.
    ///
    /// # Cancel safety
    /// May be dropped at any point: whatever it set on the servers then expires with [`TTL`]
    /// (or, for the old recipe, is taken over once its timestamp has passed).
    fn acquire(
        &mut self,
        resource: &str,
    ) -> impl Future<Output = Option<Acquired<Self::Held>>> + Send;

    /// Gives the lock back; best effort, bounded by the design's timeouts.
    fn release(&mut self, held: Self::Held) -> impl Future<Output = ()> + Send;
}

/// A client of the strategies built on this library: its own manager, a short seeded retry.
#[derive(Debug)]
pub struct LibraryClient {
    manager: Redlock,
    retry: Retry,
}

impl LibraryClient {
    /// A client with its own manager; `seed` makes its retry delays reproducible.
    #[must_use]
    pub fn new(manager: Redlock, seed: u64) -> Self {
        Self {
            manager,
            retry: Retry::forever()
                .delay(RETRY_DELAY)
                .max_wait(ACQUIRE_FOR)
                .seed(seed),
        }
    }

    /// Connects to every node now, so that connection set-up does not happen inside the run.
    ///
    /// # Cancel safety
    /// Dropping it leaves connections half made; they are made again on first use.
    pub async fn connect(&self) {
        self.manager.connect().await;
    }
}

impl LockClient for LibraryClient {
    type Held = Lock;

    async fn acquire(&mut self, resource: &str) -> Option<Acquired<Lock>> {
        let lock = self
            .manager
            .acquire_with(resource, TTL, &self.retry)
            .await
            .ok()?;
        Some(Acquired {
            value: lock.value().to_owned(),
            fence: lock.fence(),
            valid_until: lock.deadline(),
            held: lock,
        })
    }

    async fn release(&mut self, held: Lock) {
        held.release().await;
    }
}

/// The recipe once documented with Redis's `SETNX` command, before `SET NX PX` existed:
///
/// 1. `SETNX resource <now + timeout + 1>` (Unix time in ms). `1`: acquired.
/// 2. Else `GET resource`; if its timestamp has not passed, somebody holds it.
/// 3. If it has passed, `GETSET resource <now + timeout + 1>`; acquired only if the *old* value
///    returned is still a passed timestamp (else another client took it over first).
/// 4. Release with `DEL resource`.
///
/// The holder believes itself valid until its own timestamp. Its flaws are the point: timestamps
/// are wall-clock time, and a holder that paused past its timestamp deletes the next holder's
/// lock when it releases with `DEL`.
#[derive(Debug)]
pub struct SetnxClient {
    client: redis::Client,
    conn: Option<MultiplexedConnection>,
    id: u32,
    rng: StdRng,
}

impl SetnxClient {
    /// A client of the server at `url`; `seed` makes its retry delays reproducible.
    ///
    /// # Errors
    /// If `url` is not a Redis URL.
    pub fn new(url: &str, id: u32, seed: u64) -> Result<Self, redis::RedisError> {
        Ok(Self {
            client: redis::Client::open(url)?,
            conn: None,
            id,
            rng: StdRng::seed_from_u64(seed),
        })
    }

    /// Runs one command within [`COMMAND_TIMEOUT`], connecting first if needed; any failure
    /// forgets the connection, so the next command makes a new one.
    async fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Option<T> {
        let attempt = async {
            if self.conn.is_none() {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(COMMAND_TIMEOUT))
                    .set_response_timeout(None);
                self.conn = Some(
                    self.client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                        .ok()?,
                );
            }
            let conn = self.conn.as_mut()?;
            cmd.query_async::<T>(conn).await.ok()
        };
        let reply = tokio::time::timeout(COMMAND_TIMEOUT, attempt)
            .await
            .ok()
            .flatten();
        if reply.is_none() {
            self.conn = None;
        }
        reply
    }

    /// One pass of steps 1–3: the timestamp it now holds, if it got the lock.
    async fn attempt(&mut self, resource: &str) -> Option<u64> {
        let timeout_ms = u64::try_from(TTL.as_millis()).unwrap_or(u64::MAX);
        let stamp = wall_ms() + timeout_ms + 1;
        let set: i64 = self
            .query(redis::cmd("SETNX").arg(resource).arg(stamp))
            .await?;
        if set == 1 {
            return Some(stamp);
        }
        let current: Option<String> = self.query(redis::cmd("GET").arg(resource)).await?;
        let expired = |value: Option<&str>| {
            // A missing key or a value that is not a timestamp counts as expired.
            value
                .and_then(|v| v.parse::<u64>().ok())
                .is_none_or(|at| at < wall_ms())
        };
        if !expired(current.as_deref()) {
            return None;
        }
        let stamp = wall_ms() + timeout_ms + 1;
        let old: Option<String> = self
            .query(redis::cmd("GETSET").arg(resource).arg(stamp))
            .await?;
        expired(old.as_deref()).then_some(stamp)
    }
}

impl LockClient for SetnxClient {
    type Held = String;

    async fn acquire(&mut self, resource: &str) -> Option<Acquired<String>> {
        let give_up = Instant::now() + ACQUIRE_FOR;
        // Bounded by the deadline; each pass sleeps at least half of RETRY_DELAY.
        loop {
            if let Some(stamp) = self.attempt(resource).await {
                let left = Duration::from_millis(stamp.saturating_sub(wall_ms()));
                return Some(Acquired {
                    value: format!("client {}: {stamp}", self.id),
                    fence: None,
                    valid_until: Instant::now() + left,
                    held: resource.to_owned(),
                });
            }
            let max = u64::try_from(RETRY_DELAY.as_micros()).unwrap_or(u64::MAX);
            let delay = Duration::from_micros(self.rng.random_range(max / 2..=max));
            if Instant::now() + delay >= give_up {
                return None;
            }
            tokio::time::sleep(delay).await;
        }
    }

    async fn release(&mut self, resource: String) {
        let _: Option<i64> = self.query(redis::cmd("DEL").arg(resource)).await;
    }
}

/// Wall-clock time in Unix milliseconds, as the old recipe uses.
fn wall_ms() -> u64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for strategy in Strategy::ALL {
            assert_eq!(strategy.name().parse::<Strategy>(), Ok(strategy));
        }
        let err = "zookeeper".parse::<Strategy>().unwrap_err();
        assert!(err.contains("redlock, redlock-no-quarantine"), "{err}");
    }

    #[test]
    fn only_quarantining_strategies_warm_up() {
        assert!(Strategy::Redlock.warm_up() > TTL);
        assert!(Strategy::SingleInstance.warm_up() > TTL);
        assert_eq!(Strategy::RedlockNoQuarantine.warm_up(), Duration::ZERO);
        assert_eq!(Strategy::SetnxGetset.warm_up(), Duration::ZERO);
        assert_eq!(Strategy::RedlockCluster.warm_up(), Duration::ZERO);
    }

    #[test]
    fn the_cluster_layout_takes_failover_and_no_proxy_fault() {
        for strategy in Strategy::ALL {
            let cluster = matches!(strategy.layout(5), Layout::Clusters(_));
            assert_eq!(strategy.supports(Fault::Failover), cluster, "{strategy}");
            for fault in [Fault::Delay, Fault::Drop, Fault::Blackhole, Fault::Replace] {
                assert_eq!(strategy.supports(fault), !cluster, "{strategy} {fault}");
            }
            assert!(
                strategy
                    .default_faults()
                    .iter()
                    .all(|f| strategy.supports(*f)),
                "{strategy}"
            );
        }
    }

    #[test]
    fn every_library_strategy_builds_a_manager() {
        let urls = vec!["redis://127.0.0.1:1".to_owned()];
        for strategy in Strategy::ALL {
            match strategy.design(&urls) {
                Design::Library(builder) => {
                    let manager = builder.build();
                    assert!(manager.is_ok(), "{strategy}: {manager:?}");
                }
                Design::OldRecipe => assert_eq!(strategy, Strategy::SetnxGetset),
            }
        }
    }
}
