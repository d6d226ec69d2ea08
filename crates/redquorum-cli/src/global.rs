//! The options every subcommand understands (`--servers`, `--node-timeout`, `--max-ttl`,
//! `--no-quarantine`, `--no-fencing`, `--no-notify`, `--fair`, `--lock-delay`, `--tls-ca`, `-v`), and
//! the one place
//! they configure a manager.

use std::time::Duration;

use redquorum::defaults::FENCE_RETENTION;
use redquorum::{Builder, NodeReply, Redlock, Reply, Retry};

use crate::duration;
use crate::exit::{self, Failure};

/// The server list used when neither `--servers` nor `REDLOCK_SERVERS` says otherwise.
pub const DEFAULT_SERVERS: &str = "redis://127.0.0.1:6379";

/// `--max-ttl` when neither it nor `REDLOCK_MAX_TTL` is given: the library's default
/// ([`redquorum::defaults::MAX_TTL`]; a test checks they agree), written out so `--help`
/// can show it.
pub const DEFAULT_MAX_TTL: &str = "60s";

/// Options every subcommand understands.
#[derive(Debug, clap::Args)]
pub struct Global {
    /// Redis masters, comma-separated
    // hide_env_values: $REDLOCK_SERVERS may carry a password, and --help must not show it.
    #[arg(
        long,
        global = true,
        env = "REDLOCK_SERVERS",
        hide_env_values = true,
        default_value = DEFAULT_SERVERS,
        value_name = "URL[,URL...]"
    )]
    pub servers: String,

    /// How long each server has to answer one request [default: 100ms]
    #[arg(
        long,
        global = true,
        env = "REDLOCK_NODE_TIMEOUT",
        value_name = "DUR",
        value_parser = duration::parse
    )]
    pub node_timeout: Option<Duration>,

    /// The longest TTL any client of these servers uses, and how long a restarted node is
    /// quarantined; use the same value on every client
    #[arg(
        long,
        global = true,
        env = "REDLOCK_MAX_TTL",
        hide_env_values = true,
        value_name = "DUR",
        value_parser = duration::parse,
        default_value = DEFAULT_MAX_TTL
    )]
    pub max_ttl: Duration,

    /// Count the votes of recently restarted nodes too (plain Redlock). Unsafe if a node can
    /// restart without its data: a lock can then be granted twice
    #[arg(long, global = true)]
    pub no_quarantine: bool,

    /// Hand out no fencing tokens (one round trip less per acquisition)
    #[arg(long, global = true)]
    pub no_fencing: bool,

    /// Show the library's work on stderr: -v each acquire, extend and release as a span with
    /// its rounds (per-node replies and timing), -vv also each attempt. REDLOCK_LOG, when set,
    /// takes precedence
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Wait for a busy lock by polling alone, instead of also being woken when it is freed
    #[arg(long, global = true)]
    pub no_notify: bool,

    /// Serve waiters for a busy lock in arrival order (a queue per resource on each node; a
    /// script instead of a plain SET per attempt)
    #[arg(long, global = true)]
    pub fair: bool,

    /// Keep a lock its holder did not release (crash, lost network, pause) unavailable this much
    /// longer than its validity; a release still frees it at once. The TTL plus this may not
    /// exceed --max-ttl [default: 0s, off]
    #[arg(
        long,
        global = true,
        env = "REDLOCK_LOCK_DELAY",
        value_name = "DUR",
        value_parser = duration::parse
    )]
    pub lock_delay: Option<Duration>,

    /// Certificate authorities (PEM file) that rediss:// servers' certificates must chain to,
    /// instead of the system's roots
    #[arg(long, global = true, env = "REDLOCK_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
}

impl Global {
    /// A manager over the configured servers; nothing is sent yet.
    ///
    /// # Errors
    /// A usage failure for an empty list, a duplicate or an unparsable URL (shown without its
    /// password) or a zero node timeout.
    pub fn manager(&self) -> Result<Redlock, Failure> {
        self.configure(Redlock::builder_from_list(&self.servers))
    }

    /// Applies every global option to `builder` and builds the manager: the one place the CLI
    /// configures one, whether for `--servers` or for the demo's own nodes.
    ///
    /// # Errors
    /// A usage failure for a setting the library refuses (a zero node timeout or `--max-ttl`, a
    /// bad server list).
    pub fn configure(&self, builder: Builder) -> Result<Redlock, Failure> {
        let mut builder = builder
            .max_ttl(self.max_ttl)
            .quarantine(!self.no_quarantine)
            .fencing(!self.no_fencing)
            .notify(!self.no_notify)
            .fair(self.fair)
            .lock_delay(self.lock_delay.unwrap_or_default())
            // The library wants fencing counters kept for at least twice max_ttl. The CLI has no
            // option for that, so a long --max-ttl lengthens the retention instead of failing on
            // a setting nobody can change.
            .fence_retention(FENCE_RETENTION.max(self.max_ttl.saturating_mul(2)));
        if let Some(timeout) = self.node_timeout {
            builder = builder.node_timeout(timeout);
        }
        if let Some(path) = &self.tls_ca {
            let pem = std::fs::read(path).map_err(|e| {
                Failure::usage(format!("--tls-ca {}: cannot read it: {e}", path.display()))
            })?;
            builder = builder.tls_root_certificates(pem);
        }
        builder.build().map_err(exit::from_error)
    }

    /// Refuses a TTL longer than `--max-ttl` before anything is sent. The library refuses it
    /// too, but in its own terms (`max_ttl`); this says which flag to change, and where.
    pub fn check_ttl(&self, ttl: Duration) -> Result<(), Failure> {
        if ttl > self.max_ttl {
            return Err(Failure::usage(format!(
                "--ttl {} is longer than --max-ttl {}: raise --max-ttl (or REDLOCK_MAX_TTL) on \
                 every client of these servers, as it is also how long a restarted node is \
                 quarantined",
                duration::format(ttl),
                duration::format(self.max_ttl)
            )));
        }
        if let Some(delay) = self.lock_delay
            && ttl.saturating_add(delay) > self.max_ttl
        {
            return Err(Failure::usage(format!(
                "--ttl {} plus --lock-delay {} is longer than --max-ttl {}: a lock's keys live                  that long, and a restarted node must be quarantined for longer; shorten one, or                  raise --max-ttl (or REDLOCK_MAX_TTL) on every client of these servers",
                duration::format(ttl),
                duration::format(delay),
                duration::format(self.max_ttl)
            )));
        }
        Ok(())
    }

    /// The node timeout in effect.
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
            .unwrap_or(redquorum::defaults::NODE_TIMEOUT)
    }

    /// Waits for the requests of a won round that are still in flight.
    ///
    /// `acquire` and `extend` return as soon as a quorum agreed; the library sends the requests
    /// to the other nodes on in the background, each bounded by the node timeout, so a late
    /// `OK` still becomes part of the lock. A process that exits at once would drop them, and
    /// the lock would sit on a bare quorum: one node lost and nobody can tell it is held. So
    /// before exiting, wait for them ([`Redlock::settle`]), but never more than half of
    /// `validity`, the lock's time left: a lock that is still valid on a quorum is worth more
    /// than one on every node.
    pub async fn let_stragglers_land(&self, manager: &Redlock, validity: Duration) {
        let _ = tokio::time::timeout(validity / 2, manager.settle()).await;
    }

    /// [`manager`](Self::manager), connected: every connection is made (each bounded by the
    /// connect timeout, 1 s, plus the node timeout) before the first lock request, so that
    /// connection set-up does not eat into a lock's validity. Unreachable servers are not an
    /// error here; the request that follows reports them.
    pub async fn connected(&self) -> Result<Redlock, Failure> {
        Ok(self.connect_all().await?.0)
    }

    #[cfg(feature = "tools")]
    /// [`connected`](Self::connected), but fails (exit 69) unless a quorum of servers answered
    /// and can vote (are not quarantined).
    pub async fn reachable(&self) -> Result<Redlock, Failure> {
        let (manager, up, replies) = self.connect_all().await?;
        let (n, quorum) = (replies.len(), manager.quorum());
        if up < quorum {
            return Err(Failure::new(
                exit::UNAVAILABLE,
                format!(
                    "servers unavailable: {up} of {n} answered, {quorum} needed ({})",
                    exit::others(&replies)
                ),
            ));
        }
        let voters = replies.iter().filter(|r| r.reply.is_granted()).count();
        let quarantine = exit::Quarantine::of(&replies);
        if let Some(quarantine) = quarantine.filter(|_| voters < quorum) {
            return Err(Failure::new(
                exit::UNAVAILABLE,
                format!(
                    "servers unavailable: {voters} of {n} nodes can vote, {quorum} needed; \
                     {quarantine}"
                ),
            ));
        }
        Ok(manager)
    }

    /// [`connected`](Self::connected), for acquiring; returns the manager and the retry policy
    /// to acquire with.
    ///
    /// When fewer than a quorum of servers can be reached, the policy becomes a single attempt:
    /// waiting for a lock that cannot be granted would only hang, so the attempt fails at once
    /// with every node's reply (exit 75, "servers unreachable"), while a TTL that cannot work is
    /// still reported as such (the library checks it before sending anything). Servers that go
    /// away later, while waiting for a busy lock, are waited for like the lock itself. So are
    /// quarantined servers: they answer, and their quarantine ends by itself within `--max-ttl`.
    ///
    /// For an acquisition that `waits` (more than one attempt), the
    /// [`Notice`](crate::waiting::Notice) says on stderr why it waits if quarantined nodes hold
    /// it up; keep it until the acquisition ends. A single attempt says why in its error.
    pub async fn for_acquiring(
        &self,
        retry: Retry,
        waits: bool,
    ) -> Result<(Redlock, Retry, Option<crate::waiting::Notice>), Failure> {
        let (manager, up, replies) = self.connect_all().await?;
        let notice = waits.then(|| crate::waiting::watch(&manager, &self.servers));
        if up < manager.quorum() {
            tracing::debug!(up, "too few servers reachable; one attempt only");
            return Ok((manager, Retry::once(), notice));
        }
        if let Some(quarantine) = exit::Quarantine::of(&replies) {
            tracing::debug!(%quarantine, "acquiring with quarantined nodes");
        }
        Ok((manager, retry, notice))
    }

    /// The manager, each node's reply to connecting, and how many are ready (quarantined ones
    /// included: they answer, they just do not vote yet).
    async fn connect_all(&self) -> Result<(Redlock, usize, Vec<NodeReply>), Failure> {
        let manager = self.manager()?;
        let replies = manager.connect().await;
        for reply in &replies {
            tracing::debug!(node = %reply.node, reply = %reply.reply, "connect");
        }
        let up = replies
            .iter()
            .filter(|r| matches!(r.reply, Reply::Granted | Reply::Quarantined(_)))
            .count();
        Ok((manager, up, replies))
    }
}
