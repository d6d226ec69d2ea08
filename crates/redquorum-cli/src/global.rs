//! The options every subcommand understands (`--servers`, `--password-file`, `--node-timeout`,
//! `--max-ttl`, `--no-quarantine`, `--no-fencing`, `--no-notify`, `--fair`, `--lock-delay`,
//! `--tls-ca`, `-v`), and the one place they configure a manager.
//!
//! # Passwords
//! A password inside `--servers` (`redis://:secret@host`) is on the command line, where `ps`
//! shows it. `--password-file` and `$REDLOCK_PASSWORD` keep it off: the password is put into
//! every server URL that has none of its own ([`with_password`]), percent-encoded, just before
//! the list goes to the library. It is never stored in [`Global`] (whose `Debug` would show it),
//! and no message names it: errors about the file name the path, and the library masks URLs.

use std::path::PathBuf;
use std::time::Duration;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

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

/// The environment variable that holds the servers' password, when `--password-file` is not
/// given. Read where the manager is made, not by clap: so it is not kept in [`Global`], and no
/// `--help` can show it.
pub const PASSWORD_ENV: &str = "REDLOCK_PASSWORD";

/// Options every subcommand understands.
#[derive(Debug, clap::Args)]
pub struct Global {
    /// Redis nodes, comma-separated: redis:// or rediss://HOST:PORT masters, redis+cluster://SEED,… clusters, redis+sentinel://SENTINEL,…/SERVICE primaries behind Sentinel, redis+replicated://HOST:PORT?replicas=R primaries behind a fixed address
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

    /// Read the servers' password from this file (a trailing newline is ignored) and use it for
    /// every server URL without a password of its own; without this option, $REDLOCK_PASSWORD
    /// (unless empty) is that password. Either keeps it off the command line, where ps shows it
    #[arg(long, global = true, value_name = "PATH")]
    pub password_file: Option<PathBuf>,

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

    /// Trust servers seen for the first time without a marker at once when each shows, by its
    /// uptime and counters, that it has been a clean master for longer than --max-ttl, instead
    /// of waiting that long once. Only where no server's clock can step forward after it starts
    /// (Redis's uptime is a wall-clock difference)
    #[arg(long, global = true, env = "REDLOCK_TRUST_FIRST_SIGHT")]
    pub trust_first_sight: bool,

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
    pub tls_ca: Option<PathBuf>,
}

impl Global {
    /// A manager over the configured servers; nothing is sent yet.
    ///
    /// # Errors
    /// A usage failure for an empty list, a duplicate or an unparsable URL (shown without its
    /// password), a password file that cannot be used, or a zero node timeout.
    pub fn manager(&self) -> Result<Redlock, Failure> {
        self.manager_for(&self.servers)
    }

    /// A manager over `servers` (a comma-separated list, as `--servers` takes it), with the
    /// password of `--password-file` or `$REDLOCK_PASSWORD` and every other global option.
    ///
    /// # Errors
    /// As [`manager`](Self::manager).
    pub fn manager_for(&self, servers: &str) -> Result<Redlock, Failure> {
        let servers = match self.password()? {
            Some(password) => with_password(servers, &password),
            None => servers.to_owned(),
        };
        self.configure(Redlock::builder_from_list(&servers))
    }

    /// The password for server URLs without one of their own: the content of `--password-file`
    /// (without its trailing newlines), else `$REDLOCK_PASSWORD` (empty counts as unset).
    fn password(&self) -> Result<Option<String>, Failure> {
        if let Some(path) = &self.password_file {
            // The errors name the path and the OS's reason, never what the file holds.
            let cannot =
                |why: String| Failure::usage(format!("--password-file {}: {why}", path.display()));
            let text = std::fs::read_to_string(path)
                .map_err(|e| cannot(format!("cannot read it: {e}")))?;
            let password = text.trim_end_matches(['\n', '\r']);
            if password.is_empty() {
                return Err(cannot(
                    "it is empty: it should hold the password".to_owned(),
                ));
            }
            return Ok(Some(password.to_owned()));
        }
        match std::env::var(PASSWORD_ENV) {
            Ok(password) if password.is_empty() => Ok(None),
            Ok(password) => Ok(Some(password)),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(Failure::usage(format!(
                "${PASSWORD_ENV} is not valid UTF-8 (a Redis password must be)"
            ))),
        }
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
            .trust_first_sight(self.trust_first_sight)
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
        self.check_ttl_alone(ttl)?;
        if let Some(delay) = self.lock_delay
            && ttl.saturating_add(delay) > self.max_ttl
        {
            return Err(Failure::usage(format!(
                "--ttl {} plus --lock-delay {} is longer than --max-ttl {}: a lock's keys live \
                 that long, and a restarted node must be quarantined for longer; shorten one, or \
                 raise --max-ttl (or REDLOCK_MAX_TTL) on every client of these servers",
                duration::format(ttl),
                duration::format(delay),
                duration::format(self.max_ttl)
            )));
        }
        Ok(())
    }

    /// [`check_ttl`](Self::check_ttl) without this run's `--lock-delay`: for an extension by
    /// value, whose keys get the holder's delay, carried in the value (the library checks that
    /// one: its engine invariant 9).
    pub fn check_ttl_alone(&self, ttl: Duration) -> Result<(), Failure> {
        if ttl > self.max_ttl {
            return Err(Failure::usage(format!(
                "--ttl {} is longer than --max-ttl {}: raise --max-ttl (or REDLOCK_MAX_TTL) on \
                 every client of these servers, as it is also how long a restarted node is \
                 quarantined",
                duration::format(ttl),
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

    /// What a hint's `redlock` command needs to reach these servers under these rules.
    fn reach(&self) -> crate::waiting::Reach<'_> {
        let default_max_ttl = duration::parse(DEFAULT_MAX_TTL).ok();
        crate::waiting::Reach {
            servers: &self.servers,
            password_file: self.password_file.as_deref(),
            max_ttl: (Some(self.max_ttl) != default_max_ttl).then_some(self.max_ttl),
            tls_ca: self.tls_ca.as_deref(),
        }
    }

    /// A failed acquisition's one-line error ([`exit::not_acquired`]), with the command that
    /// ends the wait where the library names a remedy for the quarantine that blocked it.
    pub fn not_acquired(&self, error: redquorum::Error) -> Failure {
        let hint = crate::waiting::failure_hint(&error, self.reach());
        let failure = exit::not_acquired(error);
        match hint {
            Some(hint) => failure.with(&hint),
            None => failure,
        }
    }

    /// [`connected`](Self::connected), for acquiring; returns the manager and the retry policy
    /// to acquire with.
    ///
    /// When fewer than a quorum of servers can be reached, the policy becomes a single attempt:
    /// waiting for a lock that cannot be granted would only hang, so the attempt fails at once
    /// with every node's reply (exit 69, "servers unreachable"), while a TTL that cannot work is
    /// still reported as such (the library checks it before sending anything). Servers that go
    /// away later, while waiting for a busy lock, are waited for like the lock itself. So are
    /// quarantined servers: they answer, and their quarantine ends by itself within `--max-ttl`.
    ///
    /// For an acquisition that `waits` (more than one attempt), the
    /// [`Notice`](crate::waiting::Notice) says on stderr why it waits if quarantined nodes hold
    /// it up, and in a terminal what it waits for once that takes a while (`awaited`); keep it
    /// until the acquisition ends. A single attempt says why in its error.
    pub async fn for_acquiring(
        &self,
        retry: Retry,
        waits: bool,
        awaited: crate::waiting::Awaited,
    ) -> Result<(Redlock, Retry, Option<crate::waiting::Notice>), Failure> {
        let (manager, up, replies) = self.connect_all().await?;
        let notice = waits.then(|| crate::waiting::watch(&manager, awaited, self.reach()));
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

/// `servers` (a comma-separated list) with `password` in every URL that has no password of its
/// own: `redis://host` becomes `redis://:PASSWORD@host`, `redis://alice@host`
/// `redis://alice:PASSWORD@host` (the user is kept), `redis+unix:///path.sock`
/// `redis+unix:///path.sock?pass=PASSWORD`, and the same for `rediss://` and Redis Cluster URLs.
/// The password is percent-encoded, so `@`, `:`, `/` or `%` in it cannot end the userinfo or
/// change the URL. Entries without a scheme (a cluster's further seeds, or a mistake the library
/// reports) are left as they are.
fn with_password(servers: &str, password: &str) -> String {
    servers
        .split(',')
        .map(|entry| {
            let url = entry.trim();
            if url.contains("://") {
                url_with_password(url, password)
            } else {
                entry.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// One URL with `password`, unless it carries a (non-empty) password of its own. The `url`
/// crate (redis-rs parses server URLs with it too) does the encoding; a URL it cannot parse is
/// left as given, for the library to refuse with its own message.
fn url_with_password(given: &str, password: &str) -> String {
    let Ok(mut url) = url::Url::parse(given) else {
        return given.to_owned();
    };
    // `unix://`, `redis+unix://`, `valkey+unix://`: no host, so the password is the `pass`
    // query parameter (as redis-rs reads it).
    if url.scheme() == "unix" || url.scheme().ends_with("+unix") {
        if url.query_pairs().any(|(k, v)| k == "pass" && !v.is_empty()) {
            return given.to_owned();
        }
        let kept: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(k, _)| k != "pass")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        url.query_pairs_mut()
            .clear()
            .extend_pairs(kept)
            .append_pair("pass", password);
        return url.into();
    }
    // `set_password` keeps `%XX` as it finds it (the input may be encoded already), so a `%`
    // in the password must be encoded first, with everything but the unreserved characters.
    let encoded = utf8_percent_encode(password, NOT_UNRESERVED).to_string();
    if url.password().is_some_and(|own| !own.is_empty())
        || url.set_password(Some(&encoded)).is_err()
    {
        return given.to_owned();
    }
    url.into()
}

/// Every byte but a URL's unreserved characters (letters, digits, `-._~`).
const NOT_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_goes_into_every_url_without_one_of_its_own() {
        let pw = "p@ss:w/rd";
        let enc = "p%40ss%3Aw%2Frd";
        for (given, expected) in [
            ("redis://h:1", format!("redis://:{enc}@h:1")),
            ("rediss://h:1/2", format!("rediss://:{enc}@h:1/2")),
            ("redis://alice@h:1", format!("redis://alice:{enc}@h:1")),
            ("redis://alice:@h:1", format!("redis://alice:{enc}@h:1")),
            ("redis://alice:own@h:1", "redis://alice:own@h:1".to_owned()),
            ("redis://:own@[::1]:1", "redis://:own@[::1]:1".to_owned()),
            (
                "redis://[::1]:1?protocol=resp3",
                format!("redis://:{enc}@[::1]:1?protocol=resp3"),
            ),
            (
                "redis+unix:///r.sock",
                format!("redis+unix:///r.sock?pass={enc}"),
            ),
            (
                "redis+unix:///r.sock?db=1",
                format!("redis+unix:///r.sock?db=1&pass={enc}"),
            ),
            (
                "redis+unix:///r.sock?pass=own",
                "redis+unix:///r.sock?pass=own".to_owned(),
            ),
        ] {
            assert_eq!(url_with_password(given, pw), expected, "{given}");
        }
        // A cluster's seeds share its one userinfo; entries without a scheme stay as they are.
        assert_eq!(
            with_password("redis+cluster://a:1, b:2,redis://c:3", pw),
            format!("redis+cluster://:{enc}@a:1, b:2,redis://:{enc}@c:3")
        );
    }

    #[test]
    fn a_password_cannot_spill_into_the_host_whatever_it_holds() {
        for pw in ["@:/?#%+ ,", "é", "a@b.example:1/x"] {
            let built = url_with_password("redis://h:1/2", pw);
            let url = url::Url::parse(&built).unwrap();
            assert_eq!(
                (url.host_str(), url.port(), url.path()),
                (Some("h"), Some(1), "/2"),
                "{built}"
            );
            assert!(!built.contains(pw), "{built}");
        }
    }
}
