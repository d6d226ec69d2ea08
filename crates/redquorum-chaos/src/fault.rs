//! What a fault is, by name: the kinds `redlock chaos --faults` takes, apart from the plan and
//! the injector ([`faults`](crate::faults)) so that the strategies, which say which kinds apply
//! to their layout, need not import the injector that runs them.

use crate::named::named;

/// A kind of fault, as named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// `SIGKILL`, then a restart with the node's data.
    Kill,
    /// `SIGKILL`, then a restart without the node's data.
    Restart,
    /// `SIGSTOP`, then `SIGCONT`.
    Pause,
    /// Added latency on the node's proxy.
    Delay,
    /// The node's proxy closes every open connection.
    Drop,
    /// A client sleeps past its validity inside its critical section.
    ClientPause,
    /// A majority restarts without its data, one node after the other.
    RestartBurst,
    /// `FLUSHALL` on a majority.
    Flush,
    /// A majority of proxies switch to different, empty, long-running servers.
    Replace,
    /// As `Replace`, each spare marked by hand with the same word.
    ReplaceMarked,
    /// A proxy stops forwarding on its open connections.
    Blackhole,
    /// A majority of Redis Clusters promote a replica that missed more than a TTL of writes.
    Failover,
    /// A majority of Redis Clusters promote a replica that missed the last writes, then fail
    /// back to the old master once it resynchronised from it.
    Failback,
    /// A client crashes in its critical section, leaving its lock unreleased.
    ClientCrash,
    /// Each client group is cut off from a minority of the nodes, a different one per group.
    Partition,
    /// A client hands its lock to another process, which extends it by value from a manager
    /// without a lock-delay; then both abandon it unreleased.
    ClientHandoff,
}

impl Fault {
    /// Every kind.
    pub const ALL: [Fault; 16] = [
        Fault::Kill,
        Fault::Restart,
        Fault::Pause,
        Fault::Delay,
        Fault::Drop,
        Fault::ClientPause,
        Fault::RestartBurst,
        Fault::Flush,
        Fault::Replace,
        Fault::ReplaceMarked,
        Fault::Blackhole,
        Fault::Failover,
        Fault::Failback,
        Fault::ClientCrash,
        Fault::Partition,
        Fault::ClientHandoff,
    ];

    /// The kinds enabled when none are named, on the layouts with proxies: all but `drop` and
    /// `failover` (for the cluster layout, see `Strategy::default_faults`).
    pub const DEFAULT: [Fault; 9] = [
        Fault::Kill,
        Fault::Pause,
        Fault::Restart,
        Fault::Delay,
        Fault::ClientPause,
        Fault::RestartBurst,
        Fault::Flush,
        Fault::Replace,
        Fault::Blackhole,
    ];

    /// The name on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Restart => "restart",
            Fault::Pause => "pause",
            Fault::Delay => "delay",
            Fault::Drop => "drop",
            Fault::ClientPause => "client-pause",
            Fault::RestartBurst => "restart-burst",
            Fault::Flush => "flush",
            Fault::Replace => "replace",
            Fault::ReplaceMarked => "replace-marked",
            Fault::Blackhole => "blackhole",
            Fault::Failover => "failover",
            Fault::Failback => "failback",
            Fault::ClientCrash => "client-crash",
            Fault::Partition => "partition",
            Fault::ClientHandoff => "client-handoff",
        }
    }

    /// Whether it hits a client rather than nodes.
    pub(crate) fn hits_a_client(self) -> bool {
        matches!(
            self,
            Fault::ClientPause | Fault::ClientCrash | Fault::ClientHandoff
        )
    }

    /// Parses a comma-separated list (`kill,pause`), ignoring blanks and repeats; `none` or an
    /// empty list enables no fault.
    ///
    /// # Errors
    /// A one-line message naming the unknown kind and the known ones.
    pub fn parse_list(list: &str) -> Result<Vec<Fault>, String> {
        let mut faults = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name == "none" {
                continue;
            }
            let fault = name.parse()?;
            if !faults.contains(&fault) {
                faults.push(fault);
            }
        }
        Ok(faults)
    }

    /// Whether it leaves its node impaired for a while (invariant 2).
    pub(crate) fn impairs(self) -> bool {
        matches!(
            self,
            Fault::Kill | Fault::Restart | Fault::Pause | Fault::Delay | Fault::Blackhole
        )
    }

    /// Whether it hits a majority at once (the module docs).
    pub(crate) fn hits_a_majority(self) -> bool {
        matches!(
            self,
            Fault::RestartBurst
                | Fault::Flush
                | Fault::Replace
                | Fault::ReplaceMarked
                | Fault::Failover
                | Fault::Failback
        )
    }

    /// Whether it may start only while no node is impaired.
    pub(crate) fn needs_every_node(self) -> bool {
        self.hits_a_majority() || self == Fault::Partition
    }
}

named!(Fault, "fault", "a comma-separated list of");
