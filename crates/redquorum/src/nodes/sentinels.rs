//! One file because invariant 1 spans its URL and reading, 3 its reading and a sentinel's answer.
//!
//! A Redlock node that is a primary with replicas behind Redis Sentinel: the topology most Redis
//! users run. Each request goes to the primary the sentinels name; a vote counts once the
//! replicas have it; a failover neither gives a lock twice nor, in the common case, costs the
//! restart quarantine's minute without locks.
//!
//! A Sentinel node is named by
//! `redis+sentinel://[user:password@]host:port[,host:port…]/SERVICE[/DB][?sentinel_username=…&sentinel_password=…]`
//! (`rediss+sentinel://` for TLS to every server): the sentinels' addresses (port 26379 when
//! none is given) and the service they monitor. The credentials before `@` are the data
//! servers' (Redis's `masterauth` side); the sentinels' own, when they need any, are the query's.
//!
//! Every server the sentinels ever named primary is a [`Server`] of its own (health check,
//! restart quarantine, marker read back), built as a replicated primary
//! ([`Replicated`]): its votes wait for its replicas and read back which are online, and a
//! server newly named primary is judged by what the client saw of the service
//! ([`succession`](crate::protocol::succession)). That is where the safety argument lives; this
//! module only finds the primary.
//!
//! # Invariants
//! 1. **Only a majority of the configured sentinels names a primary.** The sentinels are asked
//!    at once, each within the connect timeout; a server counts as the primary only if more
//!    than half of *all* the sentinels in the URL (not of those that answered) name it. A
//!    sentinel listed twice is refused (found by review: one sentinel listed three times was a
//!    majority on its own); two names of one sentinel are not caught. Sentinels
//!    that disagree (a failover half seen), or that cannot be reached, cost the node its vote:
//!    the request fails and nothing is sent.
//! 2. **The node follows Sentinel's view.** The sentinels are asked again when the view is older
//!    than [`VIEW_REFRESH`], and on the next request after one failed in a way a failover
//!    explains (the connection refused or broke, `READONLY`, a timeout), at most every
//!    [`VIEW_READ_INTERVAL`]: a failover is followed within about the sentinels' own time to
//!    complete it. A server the sentinels no longer name keeps its [`Server`] (and its memory
//!    of what it showed), in case it is named again (a failback). Whatever the view, a reply
//!    counts only from a server that says it is a primary and passes `succession`'s judgement:
//!    a stale view costs a round, never safety.
//! 3. **The replicas the sentinels could promote count.** Every reading records each replica
//!    they list (address, `run_id`) and whether one of the agreeing sentinels could promote it
//!    now (any of them may lead the next failover): not flagged down by it (`s_down`, `o_down`;
//!    a sentinel's own link to it, `disconnected`, breaks for a moment in every failover, so it
//!    does not count), and its link to the primary down for no longer than ten
//!    `down-after-milliseconds` (Sentinel's own limit for a candidate). Votes wait for every
//!    such replica (`succession` invariant 1); one that is neither a candidate nor online at
//!    the primary is recorded as away (`succession` invariant 2). A replica whose replication
//!    merely broke is still a candidate: found by `redlock chaos --strategy redlock-sentinel
//!    --faults failover`, when a replica cut off from its primary for 4 s was left out of the
//!    count as soon as the sentinels saw its link down, the primary counted votes without it,
//!    and the sentinels promoted it without them. Nor is a replica the sentinels list as
//!    `disconnected`: found by the same fault (seed 307), when the sentinels that still named the
//!    old primary, their links to the replica just closed by its promotion, listed it so, and a
//!    client that read them then counted a vote on the old primary without a `WAIT`.
//! 4. **Reading the view never blocks a round past its deadline, and never storms the
//!    sentinels.** It runs as a task of its own, shared by every request that needs it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use futures_util::future::join_all;
use redis::Value;

use crate::base::error::{ConfigError, redact_url};
use crate::base::sync::lock;
use crate::nodes::census::Reach;
use crate::nodes::connect::connect_once;
use crate::nodes::fields::{fields, text};
use crate::nodes::node_error::NodeError;
use crate::nodes::receipts;
use crate::nodes::replicated::Replicated;
use crate::nodes::run_ids::RunIds;
use crate::nodes::server::{Server, ServerSettings, scrub};
use crate::nodes::shared_reading::{self, SharedReading};
use crate::nodes::subscriber::{Subscriber, Watch};
use crate::nodes::urls;
use crate::protocol::aliases::Claimant;
use crate::protocol::coverage::Counting;
use crate::protocol::quarantine::Quarantine;
use crate::protocol::succession::Lineage;

/// The URL schemes that name a Sentinel node, and the scheme of its servers.
const SCHEMES: [(&str, &str); 2] = [
    ("redis+sentinel://", "redis"),
    ("rediss+sentinel://", "rediss"),
];

/// Sentinel's own port, for an address given without one.
const SENTINEL_PORT: u16 = 26379;

/// How old the sentinels' view may get before a request asks them again (invariant 2): a
/// failover that sends no error our way (the old primary still answers) is seen within this.
const VIEW_REFRESH: Duration = Duration::from_secs(1);

/// The shortest time between two readings of the view, however many requests fail
/// (invariant 4).
const VIEW_READ_INTERVAL: Duration = Duration::from_millis(100);

/// Whether `url` names a Sentinel node.
pub(crate) fn is_sentinel_url(url: &str) -> bool {
    urls::scheme_of(url.trim_start(), &SCHEMES).is_some()
}

/// A Sentinel URL, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SentinelUrl {
    /// The scheme of every server, data and sentinel: `redis` or `rediss`.
    scheme: &'static str,
    /// The data servers' `user:password@`, or empty.
    userinfo: String,
    /// The sentinels' `user:password@`, or empty.
    sentinel_userinfo: String,
    /// `host:port` of each sentinel.
    sentinels: Vec<String>,
    service: String,
    /// The data servers' database, `/DB`, or empty.
    db: String,
}

impl SentinelUrl {
    fn parse(url: &str) -> Result<Self, String> {
        let url = url.trim();
        let (prefix, scheme) = urls::scheme_of(url, &SCHEMES)
            .ok_or("a Sentinel URL starts with redis+sentinel:// or rediss+sentinel://")?;
        let rest = &url[prefix.len()..];
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hosts) = urls::userinfo_and_hosts(authority);
        let sentinels = urls::addresses(hosts, SENTINEL_PORT);
        if sentinels.is_empty() {
            return Err(
                "no sentinel address (redis+sentinel://host:port[,host:port…]/SERVICE)".to_owned(),
            );
        }
        for (i, address) in sentinels.iter().enumerate() {
            let port = address.rsplit_once(':').map_or("", |(_, port)| port);
            if !port.parse::<u16>().is_ok_and(|p| p > 0) {
                return Err(format!(
                    "sentinel address {address:?}: the port must be a number from 1 to 65535"
                ));
            }
            // Invariant 1: each sentinel counts once toward the majority.
            if sentinels[..i].contains(address) {
                return Err(format!(
                    "sentinel {address} is listed twice: each sentinel counts once toward the \
                     majority that names the primary"
                ));
            }
        }
        let (service, db) = path.split_once('/').unwrap_or((path, ""));
        if service.is_empty() {
            return Err(
                "no service name: the sentinels monitor it, as in redis+sentinel://host:26379/mymaster"
                    .to_owned(),
            );
        }
        if !db.is_empty() && db.parse::<u16>().is_err() {
            return Err(format!("{db:?} is not a database number"));
        }
        let (mut user, mut password) = (None, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("sentinel_username", value)) => user = Some(value),
                Some(("sentinel_password", value)) => password = Some(value),
                _ => {
                    let key = pair.split_once('=').map_or(pair, |(k, _)| k);
                    return Err(format!(
                        "unknown parameter {key:?} (a Sentinel URL takes sentinel_username and \
                         sentinel_password)"
                    ));
                }
            }
        }
        let sentinel_userinfo = match (user, password) {
            (None, None) => String::new(),
            (user, password) => format!("{}:{}@", user.unwrap_or(""), password.unwrap_or("")),
        };
        Ok(Self {
            scheme,
            userinfo,
            sentinel_userinfo,
            sentinels,
            service: service.to_owned(),
            db: if db.is_empty() {
                String::new()
            } else {
                format!("/{db}")
            },
        })
    }

    /// The URL of the data server at `address` (`host:port`), with the data servers'
    /// credentials and database.
    fn server_url(&self, address: &str) -> String {
        format!("{}://{}{address}{}", self.scheme, self.userinfo, self.db)
    }

    /// The URL of the sentinel at `address`.
    fn sentinel_url(&self, address: &str) -> String {
        format!("{}://{}{address}", self.scheme, self.sentinel_userinfo)
    }
}

/// What the sentinels said at one reading.
#[derive(Debug)]
struct View {
    primary: Arc<Server>,
    read_at: Instant,
}

/// A replica as one sentinel lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    address: String,
    run_id: String,
    /// Whether the sentinels could promote it now (invariant 3): not flagged down, and its link
    /// to the primary down for no longer than Sentinel's own limit for a candidate. A replica
    /// whose link is down but which the sentinels could still promote is up: votes must wait
    /// for it, since a failover may pick it.
    up: bool,
}

/// How many `down-after-milliseconds` a replica's link may be down and Sentinel still promote
/// it (`sentinelSelectSlave` in Redis's `sentinel.c`: ten times, plus the time the primary has
/// been down, which a replica's link-down time grows with too, so the excess never shrinks).
const CANDIDATE_LINK_DOWN_PERIODS: u64 = 10;

/// One sentinel's answer: the primary's address and its replicas.
type Answer = Result<(String, Vec<Listed>), String>;

/// A Sentinel node.
pub(crate) struct Sentinels {
    inner: Arc<Inner>,
}

struct Inner {
    label: String,
    url: SentinelUrl,
    settings: ServerSettings,
    tls_roots: Option<Vec<u8>>,
    wait_ms: u64,
    sentinels: Vec<redis::Client>,
    view: ArcSwapOption<View>,
    /// Every server the sentinels named primary, by address (invariant 2).
    servers: Mutex<HashMap<String, Arc<Server>>>,
    lineage: Arc<Mutex<Lineage>>,
    reading: Mutex<Option<SharedReading<View>>>,
    /// When the last reading began (invariant 4).
    last_read: Mutex<Option<Instant>>,
    /// Set when a reply said the primary may have moved: the next request asks again.
    stale: AtomicBool,
    /// The chaos run's replaced rule ([`Sentinels::trusting`]).
    trusting: AtomicBool,
    /// The chaos run's other replaced rule ([`Sentinels::counting`]): votes counted by number.
    by_number: AtomicBool,
    run_ids: OnceLock<Arc<RunIds>>,
    /// How many follow-up readings are left ([`Inner::follow_up`]).
    follow_ups: AtomicU32,
}

/// The most readings in a row that wait for a replica's receipt ([`Inner::follow_up`]), one
/// every [`FOLLOW_UP_AFTER`]: the sentinels read every replica's `INFO` every ten seconds at the
/// least.
const FOLLOW_UPS: u32 = 15;
const FOLLOW_UP_AFTER: Duration = Duration::from_secs(1);

impl std::fmt::Debug for Sentinels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sentinels")
            .field("label", &self.inner.label)
            .finish_non_exhaustive()
    }
}

impl Sentinels {
    /// Parses a `redis+sentinel://` URL (without connecting). Votes wait up to half of
    /// `node_timeout` for the replicas.
    pub(crate) fn new(
        url: &str,
        settings: ServerSettings,
        tls_roots: Option<&[u8]>,
        node_timeout: Duration,
    ) -> Result<Self, ConfigError> {
        let invalid = |reason: String| ConfigError::InvalidUrl {
            url: redact_url(url),
            reason: scrub(&reason, url),
        };
        let parsed = SentinelUrl::parse(url).map_err(invalid)?;
        // The data servers' URL must be valid on its own (credentials, database).
        Server::new(&parsed.server_url("127.0.0.1:6379"), settings, tls_roots)?;
        let sentinels = parsed
            .sentinels
            .iter()
            .map(|address| {
                let url = parsed.sentinel_url(address);
                urls::client(&url, parsed.scheme, tls_roots)
                    .map_err(|e| invalid(format!("sentinel {address}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let db = parsed.db.clone();
        Ok(Self {
            inner: Arc::new(Inner {
                label: format!(
                    "sentinel({})/{}{db}",
                    parsed.sentinels.join(","),
                    parsed.service
                ),
                url: parsed,
                settings,
                tls_roots: tls_roots.map(<[u8]>::to_vec),
                wait_ms: u64::try_from(node_timeout.as_millis() / 2)
                    .unwrap_or(u64::MAX)
                    .max(1),
                sentinels,
                view: ArcSwapOption::empty(),
                servers: Mutex::new(HashMap::new()),
                lineage: Arc::new(Mutex::new(Lineage::default())),
                reading: Mutex::new(None),
                last_read: Mutex::new(None),
                stale: AtomicBool::new(false),
                trusting: AtomicBool::new(false),
                by_number: AtomicBool::new(false),
                run_ids: OnceLock::new(),
                follow_ups: AtomicU32::new(FOLLOW_UPS),
            }),
        })
    }

    /// With `trusting`, the replaced rule of the chaos run: every server the sentinels name is
    /// trusted as a plain server would be (no `WAIT`, no `succession` judgement).
    pub(crate) fn trusting(self, trusting: bool) -> Self {
        self.inner.trusting.store(trusting, Ordering::Release);
        self
    }

    /// How the votes of every server named primary count their replicas' acknowledgements
    /// (`coverage`): by number is the replaced rule of the chaos run.
    pub(crate) fn counting(self, counting: Counting) -> Self {
        let by_number = counting == Counting::ByNumber;
        self.inner.by_number.store(by_number, Ordering::Release);
        self
    }

    /// `sentinel(host:port,…)/SERVICE`: without credentials.
    pub(crate) fn label(&self) -> &str {
        &self.inner.label
    }

    /// What makes two Sentinel nodes the same: their sentinels and service.
    pub(crate) fn identity(&self) -> String {
        let mut sentinels = self.inner.url.sentinels.clone();
        sentinels.sort();
        format!(
            "sentinel:{}/{}{}",
            sentinels.join(","),
            self.inner.url.service,
            self.inner.url.db
        )
    }

    /// Shares the manager's record of its servers' `run_id`s, in which each primary claims its
    /// own (`aliases` invariant 1). Only the first record shared is kept.
    pub(crate) fn share_run_ids(&self, run_ids: &Arc<RunIds>) {
        let _ = self.inner.run_ids.set(Arc::clone(run_ids));
    }

    /// A subscriber on the primary the sentinels name when a waiter starts its task: it follows
    /// the view (its connection to a deposed primary breaks, and the next task connects to the
    /// new one). Only a hint (the subscriber's invariants): a stale view costs a waiter its poll
    /// delay, never a vote.
    pub(crate) fn subscriber(&self, watch: Watch) -> Subscriber {
        let inner = Arc::clone(&self.inner);
        let current = move || {
            inner
                .view
                .load()
                .as_ref()
                .map(|view| view.primary.client().clone())
        };
        Subscriber::following(
            Arc::new(current),
            self.inner.settings.connect_timeout,
            watch,
        )
    }

    /// The servers the sentinels ever named primary.
    pub(crate) fn servers(&self) -> Vec<Arc<Server>> {
        lock(&self.inner.servers).values().cloned().collect()
    }

    /// The primary as the last view named it, without asking.
    pub(crate) fn primary_now(&self) -> Option<Arc<Server>> {
        self.inner
            .view
            .load()
            .as_ref()
            .map(|view| Arc::clone(&view.primary))
    }

    /// The primary the sentinels name, asking them first when we have no view, when a reply
    /// said it may have moved (but not more often than every [`VIEW_READ_INTERVAL`]), or when
    /// the view is older than [`VIEW_REFRESH`]: a vote never goes by an older view
    /// (invariants 2, 4). A view three quarters that old is read again in the background, so
    /// that a busy node rarely waits for it.
    pub(crate) async fn primary(&self) -> Result<Arc<Server>, NodeError> {
        let inner = &self.inner;
        if let Some(view) = inner.view.load_full() {
            let age = view.read_at.elapsed();
            let recent = lock(&inner.last_read).is_some_and(|at| at.elapsed() < VIEW_READ_INTERVAL);
            if age < VIEW_REFRESH && (recent || !inner.stale.load(Ordering::Acquire)) {
                if age > VIEW_REFRESH * 3 / 4 {
                    drop(self.read_view());
                }
                return Ok(Arc::clone(&view.primary));
            }
        }
        Ok(Arc::clone(&self.read_view().await?.primary))
    }

    /// After `request`'s error on `failed`: the primary the sentinels name now, if it is
    /// another one (a failover since the view was read), for one more try within the same
    /// deadline (invariant 2).
    pub(crate) async fn moved_from(
        &self,
        failed: &Arc<Server>,
        error: &NodeError,
    ) -> Option<Arc<Server>> {
        self.saw(error);
        if !self.inner.stale.load(Ordering::Acquire) {
            return None;
        }
        let now = self.primary().await.ok()?;
        (!Arc::ptr_eq(&now, failed)).then_some(now)
    }

    /// Whether a request's error says the primary may have moved: the next request asks the
    /// sentinels again first (invariant 2).
    pub(crate) fn saw(&self, error: &NodeError) {
        let moved = match error {
            NodeError::Server(why) => {
                // Every reply that is "not a vote" for want of replicas (`coverage`) says so.
                why.starts_with("READONLY")
                    || why.starts_with("LOADING")
                    || why.contains("not a vote")
            }
            NodeError::Unreachable(_) | NodeError::Timeout => true,
            NodeError::WrongType(_) | NodeError::LeftToDelay => false,
        };
        if moved {
            self.inner.stale.store(true, Ordering::Release);
        }
    }

    /// The longest quarantine among the servers the sentinels named primary.
    pub(crate) fn longest_quarantine(&self) -> Option<Quarantine> {
        self.primary_now()?.quarantine()
    }

    /// The reading under way, or a new one started in the background (invariant 4).
    fn read_view(&self) -> SharedReading<View> {
        let mut reading = lock(&self.inner.reading);
        reading
            .get_or_insert_with(|| {
                *lock(&self.inner.last_read) = Some(Instant::now());
                let inner = Arc::clone(&self.inner);
                let read = async move {
                    let result = inner.read().await;
                    *lock(&inner.reading) = None;
                    if let Ok(view) = &result {
                        inner.follow_up(&view.primary);
                    }
                    result
                };
                shared_reading::spawn(read, "asking the sentinels")
            })
            .clone()
    }
}

impl Inner {
    /// Reads the view again in a second, in the background, while a replica the node's votes
    /// wait for has no receipt yet (`succession` invariant 5): the sentinels list a replica's
    /// run only once they read its `INFO` (a replica they found late, one restarted), and a
    /// client that holds a lock with a long TTL uses the node, and so reads the view, only every
    /// third of it. At most [`FOLLOW_UPS`] reads in a row.
    fn follow_up(self: &Arc<Self>, primary: &Arc<Server>) {
        let Some(replicated) = primary
            .replication()
            .filter(|_| self.settings.trust.enabled)
        else {
            return;
        };
        let pending = {
            let lineage = lock(&self.lineage);
            lineage.runs_unknown() || replicated.receipts_missing(&lineage.runs_listed())
        };
        if !pending {
            self.follow_ups.store(FOLLOW_UPS, Ordering::Release);
            return;
        }
        let left = self.follow_ups.load(Ordering::Acquire);
        if left == 0 {
            return;
        }
        self.follow_ups.store(left - 1, Ordering::Release);
        let inner = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(FOLLOW_UP_AFTER).await;
            let _ = Sentinels { inner }.read_view().await;
        });
    }

    /// Asks every sentinel at once and keeps the primary a majority of them name (invariant 1),
    /// recording the replicas they list (invariant 3).
    async fn read(&self) -> Result<Arc<View>, NodeError> {
        let timeout = self.settings.connect_timeout;
        let service = self.url.service.as_str();
        let answers: Vec<Answer> = join_all(self.sentinels.iter().map(|client| async move {
            tokio::time::timeout(timeout, ask(client, service, timeout))
                .await
                .unwrap_or_else(|_| Err("no answer within the connect timeout".to_owned()))
        }))
        .await;
        let now = Instant::now();
        let needed = self.sentinels.len() / 2 + 1;
        let mut named: HashMap<&str, Vec<&[Listed]>> = HashMap::new();
        for (address, replicas) in answers.iter().flatten() {
            named.entry(address).or_default().push(replicas);
        }
        let Some((address, listings)) = named
            .into_iter()
            .find(|(_, listings)| listings.len() >= needed)
        else {
            let said: Vec<String> = self
                .url
                .sentinels
                .iter()
                .zip(&answers)
                .map(|(sentinel, answer)| match answer {
                    Ok((address, _)) => format!("{sentinel} names {address}"),
                    Err(why) => format!("{sentinel}: {why}"),
                })
                .collect();
            return Err(NodeError::Unreachable(format!(
                "no primary for {service:?} named by {needed} of the {} sentinels ({})",
                self.sentinels.len(),
                said.join("; ")
            )));
        };
        // Invariant 3: a candidate if any agreeing sentinel could promote it (that one may lead
        // the next failover).
        let mut replicas: HashMap<&str, (&str, bool)> = HashMap::new();
        for listed in listings.iter().flat_map(|l| l.iter()) {
            let entry = replicas
                .entry(&listed.address)
                .or_insert((&listed.run_id, false));
            if !listed.run_id.is_empty() {
                entry.0 = &listed.run_id;
            }
            entry.1 |= listed.up;
        }
        {
            let mut lineage = lock(&self.lineage);
            for (replica, (run_id, up)) in &replicas {
                lineage.listed(replica, run_id, *up, now);
            }
        }
        let primary = self.server_at(address)?;
        if let Some(replicated) = primary.replication() {
            // Succession invariant 1.
            let candidates = replicas
                .iter()
                .filter(|(_, (_, up))| *up)
                .map(|(address, _)| (*address).to_owned())
                .collect();
            replicated.candidates(candidates);
        }
        self.write_receipts(&primary);
        let view = Arc::new(View {
            primary,
            read_at: now,
        });
        self.view.store(Some(Arc::clone(&view)));
        self.stale.store(false, Ordering::Release);
        Ok(view)
    }

    /// Writes on `primary`, in the background, the receipts due for the replica runs the
    /// sentinels list (`succession` invariant 5).
    fn write_receipts(&self, primary: &Arc<Server>) {
        let runs = lock(&self.lineage).runs_listed();
        receipts::write(primary, runs, self.settings);
    }

    /// The server at `address`, made on first sight (invariant 2).
    fn server_at(&self, address: &str) -> Result<Arc<Server>, NodeError> {
        let mut servers = lock(&self.servers);
        if let Some(server) = servers.get(address) {
            return Ok(Arc::clone(server));
        }
        let url = self.url.clone();
        let tls_roots = self.tls_roots.clone();
        let reach: Reach = Arc::new(move |address: &str| {
            urls::client(&url.server_url(address), url.scheme, tls_roots.as_deref()).ok()
        });
        let mut replicated = Replicated::new(
            address.to_owned(),
            Arc::clone(&self.lineage),
            0,
            false,
            self.wait_ms,
            reach,
        );
        if self.by_number.load(Ordering::Acquire) {
            replicated.counting = Counting::ByNumber;
        }
        let replicated = Arc::new(replicated);
        let url = self.url.server_url(address);
        let tls_roots = self.tls_roots.as_deref();
        let server = if self.trusting.load(Ordering::Acquire) {
            Server::new(&url, self.settings, tls_roots)
        } else {
            Server::replicated(&url, self.settings, tls_roots, replicated)
        };
        let mut server =
            server.map_err(|e| NodeError::Server(format!("the primary at {address}: {e}")))?;
        if let Some(run_ids) = self.run_ids.get() {
            server.set_run_ids(Arc::clone(run_ids), Claimant::master(address, &self.label));
        }
        let server = Arc::new(server);
        servers.insert(address.to_owned(), Arc::clone(&server));
        Ok(server)
    }
}

/// One sentinel's answer: `SENTINEL GET-MASTER-ADDR-BY-NAME` and `SENTINEL REPLICAS`, in one
/// round trip on a connection of its own.
async fn ask(client: &redis::Client, service: &str, timeout: Duration) -> Answer {
    let mut conn = connect_once(client, timeout)
        .await
        .map_err(|e| e.to_string())?;
    // `SENTINEL DEBUG` (Redis 7.0 and later) gives the ping period a candidate's replies are
    // measured in; an older sentinel refuses it, and has the fixed period.
    let (primary, replicas, debug): (Value, Value, Value) = redis::pipe()
        .cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(service)
        .cmd("SENTINEL")
        .arg("REPLICAS")
        .arg(service)
        .cmd("SENTINEL")
        .arg("DEBUG")
        .ignore_errors()
        .query_async(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    // A refusal (`NOAUTH`, `NOPERM`) is the answer.
    if let Value::ServerError(e) = &primary {
        return Err(e.to_string());
    }
    let ping_period_ms = ping_period(&debug);
    let address = match &primary {
        Value::Array(parts) => match parts.as_slice() {
            [host, port] => Some(format!("{}:{}", text(host), text(port))),
            _ => None,
        },
        _ => None,
    }
    .ok_or_else(|| format!("does not monitor {service:?}"))?;
    let replicas = match replicas {
        Value::Array(replicas) => replicas,
        Value::ServerError(e) => return Err(e.to_string()),
        _ => return Err("SENTINEL REPLICAS gave no list".to_owned()),
    };
    let listed = replicas
        .iter()
        .filter_map(|reply| listed(reply, ping_period_ms))
        .collect();
    Ok((address, listed))
}

/// Sentinel's ping period unless set otherwise (`SENTINEL DEBUG ping-period`).
const DEFAULT_PING_PERIOD_MS: u64 = 1000;

/// How many ping periods a replica may go without a valid reply to a sentinel and still be
/// promoted by it (`sentinelSelectSlave`: five).
const CANDIDATE_SILENT_PERIODS: u64 = 5;

/// The ping period in `SENTINEL DEBUG`'s reply, or the default when it has none (an error: a
/// sentinel older than 7.0).
fn ping_period(debug: &Value) -> u64 {
    fields(debug)
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("ping-period"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(DEFAULT_PING_PERIOD_MS)
}

/// A replica in `SENTINEL REPLICAS`'s reply, from a sentinel whose ping period is
/// `ping_period_ms` (invariant 3).
fn listed(reply: &Value, ping_period_ms: u64) -> Option<Listed> {
    let pairs = fields(reply);
    let field = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let flags = field("flags").unwrap_or_default();
    // Not `disconnected`: that is the sentinel's own link, which a failover breaks for a moment
    // (the sentinels close every client of the server they promote), and the replica is a
    // candidate again as soon as it is back.
    let flagged = flags
        .split(',')
        .any(|flag| matches!(flag, "s_down" | "o_down"));
    let number = |name: &str| field(name).and_then(|n| n.parse::<u64>().ok());
    // Unreadable numbers count as a candidate: waiting for one more replica is the safe side.
    let beyond_candidacy = match (
        number("master-link-down-time"),
        number("down-after-milliseconds"),
    ) {
        (Some(down), Some(after)) => down > after.saturating_mul(CANDIDATE_LINK_DOWN_PERIODS),
        _ => false,
    };
    // `sentinelSelectSlave`'s other refusals, each of which this sentinel applies now:
    // - no valid reply to its pings for five ping periods (a replica that died, long before
    //   `down-after-milliseconds` flags it when that is Sentinel's default 30 s);
    // - its `INFO` never read since the sentinel listed it, which the empty `runid` shows (the
    //   old primary, listed as a replica of the new one after a failover, until it answers);
    // - `replica-priority 0`, never promoted.
    // A replica back from any of them is a candidate again at the next reading (within a second
    // while the node is used), as one whose `s_down` cleared; until then votes may count without
    // it, and it is recorded as away (`succession` invariant 2), as for `s_down`.
    let silent = number("last-ok-ping-reply")
        .is_some_and(|ms| ms > ping_period_ms.saturating_mul(CANDIDATE_SILENT_PERIODS));
    let run_id = field("runid").unwrap_or_default();
    let never_promoted = number("slave-priority") == Some(0);
    Some(Listed {
        address: format!("{}:{}", field("ip")?, field("port")?),
        run_id: run_id.to_owned(),
        up: !flagged && !beyond_candidacy && !silent && !run_id.is_empty() && !never_promoted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::fields::flat;

    #[test]
    fn a_sentinel_url_names_the_sentinels_the_service_and_both_credentials() {
        let url = SentinelUrl::parse(
            "redis+sentinel://app:secret@s1:26380,s2,s3:26381/mymaster/2?sentinel_password=sp",
        )
        .expect("valid");
        assert_eq!(url.sentinels, vec!["s1:26380", "s2:26379", "s3:26381"]);
        assert_eq!(url.service, "mymaster");
        assert_eq!(
            url.server_url("10.0.0.1:6379"),
            "redis://app:secret@10.0.0.1:6379/2"
        );
        assert_eq!(url.sentinel_url("s1:26380"), "redis://:sp@s1:26380");
        let tls = SentinelUrl::parse("rediss+sentinel://s1/m").expect("valid");
        assert_eq!(tls.server_url("h:1"), "rediss://h:1");
        assert_eq!(tls.sentinel_url("s1:26379"), "rediss://s1:26379");
    }

    #[test]
    fn a_sentinel_url_without_a_service_or_with_unknown_parameters_is_refused() {
        for (url, says) in [
            ("redis+sentinel://s1:26379", "no service name"),
            ("redis+sentinel://s1:26379/", "no service name"),
            ("redis+sentinel:///m", "no sentinel address"),
            ("redis+sentinel://s1/m/x", "not a database number"),
            ("redis+sentinel://s1/m?password=x", "unknown parameter"),
            ("redis+sentinel://s1:xyz/m", "port must be a number"),
            ("redis+sentinel://s1:99999/m", "port must be a number"),
            ("redis+sentinel://s1:1,s2,s1:1/m", "listed twice"),
        ] {
            let why = SentinelUrl::parse(url).expect_err(url);
            assert!(why.contains(says), "{url}: {why}");
        }
    }

    #[test]
    fn a_replica_counts_while_the_sentinels_could_promote_it() {
        let reply = |flags: &str, link_down_ms: &str| {
            flat(&[
                ("ip", "127.0.0.1"),
                ("port", "7001"),
                ("runid", "abc"),
                ("flags", flags),
                ("master-link-down-time", link_down_ms),
                ("down-after-milliseconds", "1000"),
            ])
        };
        let listed = |reply: &Value| listed(reply, DEFAULT_PING_PERIOD_MS);
        let up = listed(&reply("slave", "0")).expect("listed");
        assert_eq!(up.address, "127.0.0.1:7001");
        assert_eq!(up.run_id, "abc");
        assert!(up.up);
        // Its link down for a while: Sentinel could still promote it, so votes wait for it.
        assert!(listed(&reply("slave", "9000")).expect("listed").up);
        // A sentinel's link to it down for a moment: still a candidate.
        assert!(
            listed(&reply("slave,disconnected", "0"))
                .expect("listed")
                .up
        );
        for (flags, link_down_ms) in [
            ("s_down,slave", "0"),
            ("o_down,slave", "0"),
            ("slave", "10001"),
        ] {
            let listed = listed(&reply(flags, link_down_ms)).expect("listed");
            assert!(!listed.up, "{flags} {link_down_ms}");
        }
    }

    /// A `SENTINEL REPLICAS` entry with `fields` changed from a healthy replica's.
    fn entry(changed: &[(&str, &str)]) -> Value {
        let mut pairs = vec![
            ("ip", "127.0.0.1"),
            ("port", "7001"),
            ("runid", "abc"),
            ("flags", "slave"),
            ("last-ok-ping-reply", "300"),
            ("master-link-down-time", "0"),
            ("slave-priority", "100"),
            ("down-after-milliseconds", "30000"),
        ];
        for (name, value) in changed {
            match pairs.iter_mut().find(|(k, _)| k == name) {
                Some(pair) => pair.1 = value,
                None => pairs.push((name, value)),
            }
        }
        flat(&pairs)
    }

    #[test]
    fn a_replica_sentinel_would_not_promote_now_is_no_candidate_whatever_down_after_says() {
        let up = |changed: &[(&str, &str)], ping_ms: u64| {
            listed(&entry(changed), ping_ms).expect("listed").up
        };
        assert!(up(&[], DEFAULT_PING_PERIOD_MS));
        // Silent for five ping periods: refused, long before a 30 s down-after flags it.
        assert!(up(
            &[("last-ok-ping-reply", "5000")],
            DEFAULT_PING_PERIOD_MS
        ));
        assert!(!up(
            &[("last-ok-ping-reply", "5001")],
            DEFAULT_PING_PERIOD_MS
        ));
        // ... in the sentinel's own ping period.
        assert!(up(&[("last-ok-ping-reply", "9000")], 2000));
        // Never read since listed (the old primary after a failover): no run id yet.
        assert!(!up(&[("runid", "")], DEFAULT_PING_PERIOD_MS));
        // Never promoted.
        assert!(!up(&[("slave-priority", "0")], DEFAULT_PING_PERIOD_MS));
        // Unreadable numbers keep it a candidate: waiting for it is the safe side.
        assert!(up(
            &[("last-ok-ping-reply", "?"), ("slave-priority", "?")],
            DEFAULT_PING_PERIOD_MS
        ));
    }

    #[test]
    fn sentinel_debug_s_ping_period_is_read_in_either_protocol() {
        let flat = Value::Array(vec![
            Value::BulkString(b"INFO-PERIOD".to_vec()),
            Value::BulkString(b"10000".to_vec()),
            Value::BulkString(b"PING-PERIOD".to_vec()),
            Value::BulkString(b"2000".to_vec()),
        ]);
        let map = Value::Map(vec![(
            Value::BulkString(b"PING-PERIOD".to_vec()),
            Value::Int(3000),
        )]);
        assert_eq!(ping_period(&flat), 2000);
        assert_eq!(ping_period(&map), 3000);
        // An older sentinel's refusal is not a list.
        assert_eq!(ping_period(&Value::Nil), DEFAULT_PING_PERIOD_MS);
    }
}
