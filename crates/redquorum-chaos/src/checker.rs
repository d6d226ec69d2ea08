//! One file because its eight invariants are passes over one sorted list; most lines are tests.
//!
//! The pure checker: from a recorded [`History`] alone, decide per resource whether mutual
//! exclusion held (or, for a semaphore, whether no more than its permits were held at once),
//! whether fencing tokens only went up, whether a lock left unreleased stayed out of reach for
//! the lock-delay, how many stale writes fencing refused, and how long the lock sat unused while
//! a majority of nodes was up.
//!
//! It knows nothing about Redis or about how the history was produced; it is plain synchronous
//! code, tested on hand-made histories. It runs in O(n log n + k) for n sections and k reported
//! overlaps: sort by entry, then sweep (the semaphore count adds the holders open at each entry,
//! at most a handful).
//!
//! # Invariants
//!
//! 1. A holder is judged only on what it *believed*: its believed-valid interval is the
//!    half-open `[enter_us, min(exit_us, valid_until_us))`. A client that kept working past its
//!    own deadline knew it was no longer valid; what it did then is fencing's business (counted as
//!    a stale write), not a mutual-exclusion violation.
//! 2. Two sections overlap only if they come from different acquisitions (different `value`) and
//!    their believed-valid intervals share a positive length. Touching intervals (one ends exactly
//!    when the other starts) do not overlap; an empty interval overlaps nothing.
//! 3. Fencing tokens must strictly increase in order of entry: a section whose token is ≤ the
//!    largest token of any earlier section is a violation, unless that token came from the same
//!    acquisition. Sections without a token are skipped. Sections entering at the same
//!    microsecond are ordered by token, since their true order is unknown; two of them with equal
//!    tokens still violate.
//! 4. Stale writes refused by fencing are counted, not violations: fencing did its job.
//! 5. Liveness is reported, never a violation: the longest stretch during which no section was
//!    believed valid *and* a majority (`nodes / 2 + 1`) of nodes was up. Only stretches between
//!    two holders count, not before the first or after the last.
//! 6. **Semaphores.** In a history with `permits = k`, a resource may have up to `k` holders at
//!    once, so invariant 2 no longer applies to the resource as a whole. Instead: a section whose
//!    entry finds `k` or more *other* acquisitions believed valid on the same resource is a
//!    violation ([`Excess`]), "believed valid" as in invariant 1. Each permit is a lock of its
//!    own, so invariants 2 and 3 apply per `(resource, permit)`: two holders of one permit must
//!    not overlap, and a permit's tokens must go up (tokens of different permits are unrelated:
//!    the library's counter is per permit key). Sections without a permit (a design that keeps
//!    a count per node) are judged by the count alone. The most holders ever believed valid at
//!    once is reported too, so a semaphore that never let two in shows as one.
//! 7. **Lock-delay.** With a delay `d`, a section that ended without a release while its holder
//!    was valid (it crashed and abandoned the lock, or it sent its release only after its
//!    deadline, having slept past it) keeps its lock from everybody else until
//!    `valid_until_us + d`: a release sent after the deadline frees nothing (the library's
//!    engine invariant 6), whoever sends it. A lock handed to another process that extended it
//!    by value and abandoned it too ([`Section::extended_by_value`]) is such a section, its
//!    `valid_until_us` the extension's deadline: the extension keeps the holder's delay
//!    whoever sends it (engine invariant 9). Another acquisition of the same lock (the
//!    resource, or for a semaphore the same permit) entering in `[believed_until, that end)` is a
//!    violation ([`DelayViolation`]); entering earlier is invariant 2's (or 6's) business. The
//!    delay is the history's own unless the caller names another ([`check_with`]): judging a run
//!    without lock-delay against a delay is how the rule is shown to catch something. With
//!    `d = 0` it still says something: a crashed holder's lock is not handed out before its
//!    deadline. Readers share (invariant 8): a reader entering after an abandoned reader is no
//!    violation; a writer after a reader, or anyone after a writer, is.
//! 8. **Read-write locks.** Sections marked `shared` are readers: two readers may overlap, a
//!    reader and a writer or two writers may not (invariant 2 otherwise). Tokens follow the
//!    library's read-write rule instead of invariant 3, in order of entry: a writer's token is
//!    larger than every earlier section's (reader or writer, other acquisitions), and a reader's
//!    is at least every earlier writer's; readers may share a token. An election is a lock whose
//!    token is the term: invariants 2 and 3 as they stand say one leader at a time and each term
//!    larger than the last, never one term twice.
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::history::{History, NodeUp, Section, WriteOutcome};

/// The checker's verdict on a whole history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// One verdict per resource, sorted by resource name.
    pub resources: Vec<ResourceVerdict>,
    /// The number of violations over all resources: overlaps, token violations, holders beyond
    /// the permits, and lock-delay violations.
    pub violations: usize,
    /// The holders a resource allows at once, for a semaphore history (invariant 6); `None`: a
    /// lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// The lock-delay the history was judged against, in µs (invariant 7).
    #[serde(default)]
    pub lock_delay_us: u64,
}

impl Verdict {
    /// Whether the history shows no violation at all.
    #[must_use]
    pub fn is_safe(&self) -> bool {
        self.violations == 0
    }
}

/// The verdict on one resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceVerdict {
    /// The resource.
    pub resource: String,
    /// How many critical sections it had.
    pub sections: usize,
    /// Pairs of acquisitions that both believed they held it at once (invariant 2).
    pub overlaps: Vec<Overlap>,
    /// Writes that fencing refused as stale (invariant 4; not a violation).
    pub stale_writes_rejected: usize,
    /// Sections whose fencing token did not go up (invariant 3).
    pub token_violations: Vec<TokenViolation>,
    /// The longest stretch with no holder while a majority of nodes was up (invariant 5), if any.
    pub longest_gap: Option<Gap>,
    /// The most acquisitions believed valid at the same instant (invariant 6).
    #[serde(default)]
    pub most_holders: usize,
    /// Entries that made more holders than the permits allow (invariant 6; semaphores only).
    #[serde(default)]
    pub excess: Vec<Excess>,
    /// Sections that ended without a release while valid: crashed, or released past their
    /// deadline (invariant 7; counted, not violations).
    #[serde(default)]
    pub unreleased: usize,
    /// Acquisitions within the lock-delay of a lock left unreleased (invariant 7).
    #[serde(default)]
    pub delay_violations: Vec<DelayViolation>,
}

impl ResourceVerdict {
    /// The number of violations on this resource.
    #[must_use]
    pub fn violations(&self) -> usize {
        self.overlaps.len()
            + self.token_violations.len()
            + self.excess.len()
            + self.delay_violations.len()
    }
}

/// A section that entered while as many other acquisitions as there are permits (or more)
/// believed themselves valid on the same resource (invariant 6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Excess {
    /// The section whose entry went over the permits.
    pub entering: Section,
    /// The other acquisitions' sections believed valid at that instant, in order of entry.
    pub holders: Vec<Section>,
    /// Start of the stretch on which all of them were believed valid: the entry.
    pub from_us: u64,
    /// End (exclusive) of that stretch: the first of them to stop believing; after `from_us`.
    pub to_us: u64,
}

/// An acquisition of a lock within the lock-delay of a section that left it unreleased
/// (invariant 7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelayViolation {
    /// The section that ended without a release while valid.
    pub unreleased: Section,
    /// The section of another acquisition that entered too early.
    pub next: Section,
    /// Until when `unreleased`'s lock was to stay out of reach: its deadline plus the delay (a
    /// release after the deadline frees nothing).
    pub protected_until_us: u64,
}

/// Two sections of different acquisitions whose believed-valid intervals intersect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overlap {
    /// The section that entered first (or, entering together, the one with the lower token).
    pub first: Section,
    /// The section that entered second.
    pub second: Section,
    /// Start of the shared interval.
    pub from_us: u64,
    /// End (exclusive) of the shared interval; always greater than `from_us`.
    pub to_us: u64,
}

/// A section whose fencing token was not greater than that of a section entered earlier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenViolation {
    /// The earlier section holding the largest token seen so far.
    pub earlier: Section,
    /// The later section, whose token is less than or equal to `earlier`'s.
    pub later: Section,
}

/// A half-open stretch of time `[from_us, to_us)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    /// Start of the stretch.
    pub from_us: u64,
    /// End (exclusive) of the stretch.
    pub to_us: u64,
}

impl Gap {
    /// The length of the stretch in microseconds.
    #[must_use]
    pub fn len_us(&self) -> u64 {
        self.to_us - self.from_us
    }
}

/// Checks a history against its own lock-delay ([`History::lock_delay_us`]); see the module's
/// invariants for the rules.
#[must_use]
pub fn check(history: &History) -> Verdict {
    check_with(history, history.lock_delay_us)
}

/// Checks a history as [`check`] does, but against the lock-delay `lock_delay_us` whatever the
/// clients were configured with (invariant 7): a run without lock-delay judged against one shows
/// what the delay would have excluded.
#[must_use]
pub fn check_with(history: &History, lock_delay_us: u64) -> Verdict {
    let rules = Rules {
        permits: history.permits,
        lock_delay_us,
    };
    let majority = majority_up(history.nodes, &history.node_up);
    let mut by_resource: BTreeMap<&str, Vec<&Section>> = BTreeMap::new();
    for section in &history.sections {
        by_resource
            .entry(&section.resource)
            .or_default()
            .push(section);
    }
    let resources: Vec<ResourceVerdict> = by_resource
        .into_iter()
        .map(|(resource, sections)| check_resource(resource, sections, &majority, rules))
        .collect();
    let violations = resources.iter().map(ResourceVerdict::violations).sum();
    Verdict {
        resources,
        violations,
        permits: rules.permits,
        lock_delay_us,
    }
}

/// What a history is judged against.
#[derive(Debug, Clone, Copy)]
struct Rules {
    permits: Option<u32>,
    lock_delay_us: u64,
}

fn check_resource(
    resource: &str,
    mut sections: Vec<&Section>,
    majority: &[Gap],
    rules: Rules,
) -> ResourceVerdict {
    // Ties on entry go to the lower token first (invariant 3); tokenless sections sort first
    // among ties, which is harmless since they take no part in the token check.
    sections.sort_by_key(|s| (s.enter_us, s.fence));
    let gaps = holder_gaps(&sections);
    // The locks of this resource: the resource itself, or for a semaphore each permit
    // (invariant 6). Sorting is kept within each.
    let locks: Vec<Vec<&Section>> = match rules.permits {
        None => vec![sections.clone()],
        Some(_) => {
            let mut per_permit: BTreeMap<u32, Vec<&Section>> = BTreeMap::new();
            for &section in &sections {
                if let Some(permit) = section.permit {
                    per_permit.entry(permit).or_default().push(section);
                }
            }
            per_permit.into_values().collect()
        }
    };
    let (most_holders, excess) = holders_at_once(&sections, rules.permits);
    ResourceVerdict {
        resource: resource.to_owned(),
        sections: sections.len(),
        overlaps: locks.iter().flat_map(|lock| overlaps(lock)).collect(),
        stale_writes_rejected: sections
            .iter()
            .filter(|s| s.write == WriteOutcome::RejectedStale)
            .count(),
        token_violations: locks
            .iter()
            .flat_map(|lock| {
                if lock.iter().any(|s| s.shared) {
                    read_write_token_violations(lock)
                } else {
                    token_violations(lock)
                }
            })
            .collect(),
        longest_gap: longest_common(&gaps, majority),
        most_holders,
        excess,
        unreleased: sections.iter().filter(|s| s.ended_unreleased()).count(),
        delay_violations: locks
            .iter()
            .flat_map(|lock| delay_violations(lock, rules.lock_delay_us))
            .collect(),
    }
}

/// Invariant 6 over `sections` sorted by entry: the most distinct acquisitions believed valid at
/// once, and, given `permits`, every entry that found that many others already believed valid.
fn holders_at_once(sections: &[&Section], permits: Option<u32>) -> (usize, Vec<Excess>) {
    let allowed = permits.map(|k| usize::try_from(k).unwrap_or(usize::MAX));
    let mut most = 0;
    let mut found = Vec::new();
    sweep(sections, |entering, end, open| {
        // One section per other acquisition: the one believed valid the longest.
        let mut others: BTreeMap<&str, (u64, usize)> = BTreeMap::new();
        for &(other_end, j) in open {
            let value = sections[j].value.as_str();
            if value != entering.value {
                let longest = others.entry(value).or_insert((other_end, j));
                *longest = (*longest).max((other_end, j));
            }
        }
        most = most.max(others.len() + 1);
        if allowed.is_some_and(|k| others.len() >= k) {
            let mut holders: Vec<usize> = others.values().map(|&(_, j)| j).collect();
            holders.sort_unstable();
            let first_end = others.values().map(|&(e, _)| e).fold(end, u64::min);
            found.push(Excess {
                entering: entering.clone(),
                holders: holders.into_iter().map(|j| sections[j].clone()).collect(),
                from_us: entering.enter_us,
                to_us: first_end,
            });
        }
    });
    (most, found)
}

/// The sweep of invariants 2 and 6 over `sections` sorted by entry: `visit` sees each section
/// with a believed-valid interval as it enters, with the end of that interval and the intervals
/// still open at its entry, as `(end, index into sections)` (those of earlier entries that end
/// after it enters).
fn sweep<'s>(
    sections: &[&'s Section],
    mut visit: impl FnMut(&'s Section, u64, &BTreeSet<(u64, usize)>),
) {
    // Open intervals keyed by (end, index), so the ones that have closed come off the front.
    let mut open: BTreeSet<(u64, usize)> = BTreeSet::new();
    for (i, &entering) in sections.iter().enumerate() {
        let end = entering.believed_until_us();
        if end <= entering.enter_us {
            continue;
        }
        // `end <= enter`: it closed before (or exactly when) this one opened.
        while open.first().is_some_and(|&(e, _)| e <= entering.enter_us) {
            open.pop_first();
        }
        visit(entering, end, &open);
        open.insert((end, i));
    }
}

/// Invariant 7 over the sections of one lock, sorted by entry.
fn delay_violations(sections: &[&Section], lock_delay_us: u64) -> Vec<DelayViolation> {
    let mut found = Vec::new();
    for unreleased in sections.iter().filter(|s| s.ended_unreleased()) {
        let from = unreleased.believed_until_us().max(unreleased.enter_us);
        let protected_until = unreleased.valid_until_us.saturating_add(lock_delay_us);
        if protected_until <= from {
            continue;
        }
        // The sections entering in [from, protected_until): sorted by entry, so one range.
        let first = sections.partition_point(|s| s.enter_us < from);
        for next in sections[first..]
            .iter()
            .take_while(|s| s.enter_us < protected_until)
            // Readers share (invariant 8).
            .filter(|s| s.value != unreleased.value && !(s.shared && unreleased.shared))
        {
            found.push(DelayViolation {
                unreleased: (*unreleased).clone(),
                next: (*next).clone(),
                protected_until_us: protected_until,
            });
        }
    }
    found
}

/// Invariant 2, by sweeping `sections` (sorted by entry) with the set of intervals still open.
fn overlaps(sections: &[&Section]) -> Vec<Overlap> {
    let mut found = Vec::new();
    sweep(sections, |second, end, open| {
        for &(first_end, j) in open {
            let first = sections[j];
            // Readers share (invariant 8).
            if first.value != second.value && !(first.shared && second.shared) {
                found.push(Overlap {
                    first: first.clone(),
                    second: second.clone(),
                    from_us: second.enter_us,
                    to_us: first_end.min(end),
                });
            }
        }
    });
    found
}

/// Invariant 3 over `sections` sorted by entry.
fn token_violations(sections: &[&Section]) -> Vec<TokenViolation> {
    // The first section with the largest token so far, and one of another acquisition that
    // repeated that token, if any: a repeat by `top`'s own acquisition still clashes with it.
    let mut top: Option<&Section> = None;
    let mut rival: Option<&Section> = None;
    token_clashes(sections, |section, fence| match top {
        Some(t) if t.fence > Some(fence) => Some(t),
        Some(t) if t.fence == Some(fence) && t.value != section.value => {
            rival = rival.or(Some(section));
            Some(t)
        }
        Some(t) if t.fence == Some(fence) => rival,
        _ => {
            (top, rival) = (Some(section), None);
            None
        }
    })
}

/// Invariant 8's token rule over the sections of a read-write lock, sorted by entry: a writer
/// above every earlier token, a reader at least every earlier writer's.
fn read_write_token_violations(sections: &[&Section]) -> Vec<TokenViolation> {
    // The earlier sections with the largest token of all, and of writers only.
    let mut top: Option<&Section> = None;
    let mut top_writer: Option<&Section> = None;
    token_clashes(sections, |section, fence| {
        let clash = if section.shared {
            top_writer.filter(|w| w.fence > Some(fence))
        } else {
            top.filter(|t| t.fence >= Some(fence) && t.value != section.value)
        };
        if top.is_none_or(|t| t.fence < Some(fence)) {
            top = Some(section);
        }
        if !section.shared && top_writer.is_none_or(|w| w.fence < Some(fence)) {
            top_writer = Some(section);
        }
        clash
    })
}

/// The token check of invariants 3 and 8 over `sections` sorted by entry: `clash` sees each
/// section that has a token, in order, with that token, and names the earlier section it
/// violates the rule against, if any.
fn token_clashes<'s>(
    sections: &[&'s Section],
    mut clash: impl FnMut(&'s Section, u64) -> Option<&'s Section>,
) -> Vec<TokenViolation> {
    sections
        .iter()
        .filter_map(|&section| {
            let earlier = clash(section, section.fence?)?;
            Some(TokenViolation {
                earlier: earlier.clone(),
                later: section.clone(),
            })
        })
        .collect()
}

/// The stretches between holders: gaps in the union of believed-valid intervals, from the
/// first holder's entry to the last one's end. `sections` is sorted by entry.
fn holder_gaps(sections: &[&Section]) -> Vec<Gap> {
    let mut covered_until: Option<u64> = None;
    let mut gaps = Vec::new();
    for section in sections {
        let end = section.believed_until_us();
        if end <= section.enter_us {
            continue; // never believed itself a holder
        }
        match covered_until {
            Some(until) if section.enter_us > until => {
                gaps.push(Gap {
                    from_us: until,
                    to_us: section.enter_us,
                });
                covered_until = Some(end);
            }
            Some(until) => covered_until = Some(until.max(end)),
            None => covered_until = Some(end),
        }
    }
    gaps
}

/// The sorted, disjoint, non-adjacent stretches during which at least `nodes / 2 + 1` distinct
/// nodes were up. Overlapping `node_up` intervals of one node count that node once.
pub(crate) fn majority_up(nodes: usize, node_up: &[NodeUp]) -> Vec<Gap> {
    let quorum = nodes / 2 + 1;
    let mut per_node: BTreeMap<usize, Vec<Gap>> = BTreeMap::new();
    for up in node_up.iter().filter(|u| u.to_us > u.from_us) {
        per_node.entry(up.node).or_default().push(Gap {
            from_us: up.from_us,
            to_us: up.to_us,
        });
    }
    // Each merged interval contributes +1 at its start and -1 at its end; at equal times both
    // apply before the count is read, as the intervals are half-open.
    let mut events: Vec<(u64, i64)> = Vec::new();
    for intervals in per_node.into_values() {
        for merged in merge(intervals) {
            events.push((merged.from_us, 1));
            events.push((merged.to_us, -1));
        }
    }
    events.sort_unstable();
    let mut result: Vec<Gap> = Vec::new();
    let mut count: i64 = 0;
    let mut started: Option<u64> = None;
    let mut i = 0;
    while i < events.len() {
        let at = events[i].0;
        while i < events.len() && events[i].0 == at {
            count += events[i].1;
            i += 1;
        }
        let has_quorum = usize::try_from(count).is_ok_and(|c| c >= quorum);
        match (started, has_quorum) {
            (None, true) => started = Some(at),
            (Some(from), false) => {
                result.push(Gap {
                    from_us: from,
                    to_us: at,
                });
                started = None;
            }
            _ => {}
        }
    }
    result
}

/// Merges overlapping or touching intervals into sorted, disjoint ones.
fn merge(mut intervals: Vec<Gap>) -> Vec<Gap> {
    intervals.sort_unstable_by_key(|g| g.from_us);
    let mut merged: Vec<Gap> = Vec::with_capacity(intervals.len());
    for gap in intervals {
        match merged.last_mut() {
            Some(last) if gap.from_us <= last.to_us => last.to_us = last.to_us.max(gap.to_us),
            _ => merged.push(gap),
        }
    }
    merged
}

/// The longest positive-length intersection between two lists of sorted, disjoint intervals.
fn longest_common(a: &[Gap], b: &[Gap]) -> Option<Gap> {
    let (mut i, mut j) = (0, 0);
    let mut best: Option<Gap> = None;
    while i < a.len() && j < b.len() {
        let from_us = a[i].from_us.max(b[j].from_us);
        let to_us = a[i].to_us.min(b[j].to_us);
        if to_us > from_us && best.is_none_or(|g| to_us - from_us > g.len_us()) {
            best = Some(Gap { from_us, to_us });
        }
        if a[i].to_us <= b[j].to_us {
            i += 1;
        } else {
            j += 1;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{FaultEvent, WriteOutcome};

    /// A section on `resource` whose lock value is `value`, entering at `enter`, leaving at
    /// `exit`, with its own deadline at `valid_until`.
    fn sec(resource: &str, value: &str, enter: u64, exit: u64, valid_until: u64) -> Section {
        Section {
            resource: resource.to_owned(),
            client: value.bytes().map(u32::from).sum(),
            value: value.to_owned(),
            fence: None,
            enter_us: enter,
            exit_us: exit,
            valid_until_us: valid_until,
            write: WriteOutcome::NotAttempted,
            permit: None,
            released_us: None,
            abandoned: false,
            extended_by_value: false,
            shared: false,
        }
    }

    fn fenced(value: &str, enter: u64, fence: u64) -> Section {
        Section {
            fence: Some(fence),
            ..sec("r", value, enter, enter + 10, enter + 10)
        }
    }

    /// Three nodes, all up for the whole run.
    fn history(sections: Vec<Section>) -> History {
        History {
            strategy: "test".to_owned(),
            seed: 1,
            nodes: 3,
            clients: 2,
            duration_us: 10_000,
            sections,
            faults: Vec::<FaultEvent>::new(),
            node_up: (0..3).map(|node| up(node, 0, 10_000)).collect(),
            permits: None,
            lock_delay_us: 0,
            late_joins: 0,
        }
    }

    /// A reader's section, else as [`fenced`].
    fn reading(value: &str, enter: u64, fence: u64) -> Section {
        Section {
            shared: true,
            ..fenced(value, enter, fence)
        }
    }

    #[test]
    fn readers_share_but_a_writer_overlaps_nobody() {
        let verdict = check(&history(vec![
            reading("r1", 0, 5),
            reading("r2", 3, 5),
            fenced("w", 20, 9),
        ]));
        let r = only(&verdict);
        assert!(r.overlaps.is_empty(), "readers together: {r:#?}");
        assert!(r.token_violations.is_empty(), "{r:#?}");

        let verdict = check(&history(vec![reading("r1", 0, 5), fenced("w", 3, 6)]));
        assert_eq!(only(&verdict).overlaps.len(), 1, "a writer inside a reader");
    }

    #[test]
    fn a_writer_goes_above_every_reader_and_a_reader_reaches_every_writer() {
        // A writer whose token equals an earlier reader's.
        let verdict = check(&history(vec![reading("r", 0, 7), fenced("w", 20, 7)]));
        assert_eq!(only(&verdict).token_violations.len(), 1);
        // A reader below an earlier writer.
        let verdict = check(&history(vec![fenced("w", 0, 7), reading("r", 20, 6)]));
        assert_eq!(only(&verdict).token_violations.len(), 1);
        // A reader at the writer's token, the next writer above it: fine.
        let verdict = check(&history(vec![
            fenced("w1", 0, 7),
            reading("r", 20, 7),
            fenced("w2", 40, 8),
        ]));
        assert!(only(&verdict).token_violations.is_empty());
    }

    fn only(verdict: &Verdict) -> &ResourceVerdict {
        assert_eq!(verdict.resources.len(), 1, "{verdict:#?}");
        &verdict.resources[0]
    }

    /// The verdict on `history`, which must be safe (shown if not).
    #[track_caller]
    fn safe(history: &History) -> Verdict {
        let verdict = check(history);
        assert!(verdict.is_safe(), "{verdict:#?}");
        verdict
    }

    fn gap(from_us: u64, to_us: u64) -> Gap {
        Gap { from_us, to_us }
    }

    fn up(node: usize, from_us: u64, to_us: u64) -> NodeUp {
        NodeUp {
            node,
            from_us,
            to_us,
        }
    }

    fn overlap_spans(verdict: &Verdict) -> Vec<(&str, &str, u64, u64)> {
        let r = only(verdict);
        r.overlaps
            .iter()
            .map(|o| {
                (
                    o.first.value.as_str(),
                    o.second.value.as_str(),
                    o.from_us,
                    o.to_us,
                )
            })
            .collect()
    }

    #[test]
    fn overlapping_holders_are_a_violation() {
        let a = sec("r", "a", 0, 100, 100);
        let b = sec("r", "b", 50, 150, 150);
        let verdict = check(&history(vec![b.clone(), a.clone()]));
        let r = only(&verdict);
        assert_eq!(
            r.overlaps,
            vec![Overlap {
                first: a,
                second: b,
                from_us: 50,
                to_us: 100
            }]
        );
        assert_eq!(r.sections, 2);
        assert_eq!(verdict.violations, 1);
        assert!(!verdict.is_safe());
    }

    #[test]
    fn disjoint_holders_are_safe() {
        let verdict = check(&history(vec![
            sec("r", "a", 0, 100, 100),
            sec("r", "b", 200, 300, 300),
        ]));
        assert!(only(&verdict).overlaps.is_empty());
        assert_eq!(verdict.violations, 0);
        assert!(verdict.is_safe());
    }

    #[test]
    fn touching_intervals_do_not_overlap() {
        safe(&history(vec![
            sec("r", "a", 0, 100, 100),
            sec("r", "b", 100, 200, 200),
        ]));
    }

    #[test]
    fn interval_ends_at_the_earlier_of_exit_and_deadline() {
        // `a` stays until 300 but its deadline is 100: after that it knew it was not valid.
        let a = sec("r", "a", 0, 300, 100);
        safe(&history(vec![a.clone(), sec("r", "b", 150, 250, 250)]));
        safe(&history(vec![a.clone(), sec("r", "b", 100, 250, 250)]));
        // Entering before `a`'s deadline overlaps only up to that deadline.
        let before_deadline = check(&history(vec![a, sec("r", "b", 90, 250, 250)]));
        assert_eq!(overlap_spans(&before_deadline), [("a", "b", 90, 100)]);
        // And the other way: `a` left at 50 although its deadline was later.
        safe(&history(vec![
            sec("r", "a", 0, 50, 500),
            sec("r", "b", 50, 90, 90),
        ]));
    }

    #[test]
    fn sections_of_one_acquisition_do_not_overlap_each_other() {
        safe(&history(vec![
            sec("r", "a", 0, 100, 100),
            sec("r", "a", 50, 150, 150),
        ]));
    }

    #[test]
    fn empty_believed_interval_overlaps_nothing() {
        // Entered already past its deadline, or left at once.
        let verdict = safe(&history(vec![
            sec("r", "a", 0, 100, 100),
            sec("r", "late", 20, 80, 10),
            sec("r", "instant", 50, 50, 500),
        ]));
        assert_eq!(only(&verdict).sections, 3);
    }

    #[test]
    fn every_pair_of_a_long_holder_is_listed() {
        let verdict = check(&history(vec![
            sec("r", "long", 0, 1000, 1000),
            sec("r", "x", 100, 200, 200),
            sec("r", "y", 200, 300, 300),
            sec("r", "z", 900, 1100, 1100),
        ]));
        assert_eq!(
            overlap_spans(&verdict),
            [
                ("long", "x", 100, 200),
                ("long", "y", 200, 300),
                ("long", "z", 900, 1000)
            ]
        );
        assert_eq!(verdict.violations, 3);
    }

    #[test]
    fn token_going_backwards_is_a_violation() {
        let verdict = check(&history(vec![
            fenced("a", 0, 5),
            fenced("b", 100, 7),
            fenced("c", 200, 6),
        ]));
        let r = only(&verdict);
        assert_eq!(
            r.token_violations,
            vec![TokenViolation {
                earlier: fenced("b", 100, 7),
                later: fenced("c", 200, 6)
            }]
        );
        assert!(r.overlaps.is_empty());
        assert_eq!(verdict.violations, 1);
    }

    #[test]
    fn token_is_compared_with_the_largest_so_far_not_the_previous() {
        // 9 after 7 is fine, 8 after 9 is not, and neither is 8 again (compared with 9, not 8).
        let verdict = check(&history(vec![
            fenced("a", 0, 7),
            fenced("b", 100, 9),
            fenced("c", 200, 8),
            fenced("d", 300, 8),
            fenced("e", 400, 10),
        ]));
        let pairs: Vec<(&str, &str)> = only(&verdict)
            .token_violations
            .iter()
            .map(|v| (v.earlier.value.as_str(), v.later.value.as_str()))
            .collect();
        assert_eq!(pairs, [("b", "c"), ("b", "d")]);
    }

    #[test]
    fn equal_tokens_are_a_violation() {
        let verdict = check(&history(vec![fenced("a", 0, 5), fenced("b", 100, 5)]));
        assert_eq!(only(&verdict).token_violations.len(), 1);
        assert_eq!(verdict.violations, 1);
    }

    #[test]
    fn equal_tokens_of_one_acquisition_are_not() {
        safe(&history(vec![fenced("a", 0, 5), fenced("a", 100, 5)]));
    }

    #[test]
    fn sections_without_a_token_are_skipped() {
        let unfenced = |value: &str, enter: u64| sec("r", value, enter, enter + 10, enter + 10);
        safe(&history(vec![
            unfenced("a", 0),
            fenced("b", 100, 3),
            unfenced("c", 200),
            fenced("d", 300, 4),
        ]));
        let falling = check(&history(vec![
            unfenced("a", 0),
            fenced("b", 100, 4),
            unfenced("c", 200),
            fenced("d", 300, 3),
        ]));
        assert_eq!(only(&falling).token_violations.len(), 1);
        safe(&history(vec![unfenced("a", 0), unfenced("b", 100)]));
    }

    #[test]
    fn simultaneous_entries_are_ordered_by_token() {
        // Listed high token first: the checker must not read "8 then 7" into a tie.
        let verdict = check(&history(vec![fenced("b", 100, 8), fenced("a", 100, 7)]));
        assert!(only(&verdict).token_violations.is_empty(), "{verdict:#?}");
        let equal = check(&history(vec![fenced("b", 100, 7), fenced("a", 100, 7)]));
        assert_eq!(only(&equal).token_violations.len(), 1);
    }

    #[test]
    fn stale_writes_rejected_are_counted_not_violations() {
        let with = |value: &str, enter: u64, write: WriteOutcome| Section {
            write,
            ..sec("r", value, enter, enter + 10, enter + 10)
        };
        let verdict = check(&history(vec![
            with("a", 0, WriteOutcome::Accepted),
            with("b", 100, WriteOutcome::RejectedStale),
            with("c", 200, WriteOutcome::Unfenced),
            with("d", 300, WriteOutcome::RejectedStale),
            with("e", 400, WriteOutcome::NotAttempted),
        ]));
        assert_eq!(only(&verdict).stale_writes_rejected, 2);
        assert!(verdict.is_safe());
    }

    fn gaps_history() -> History {
        // Holders on [0,100), [400,500) and [600,700): gaps [100,400) and [500,600).
        history(vec![
            sec("r", "a", 0, 100, 100),
            sec("r", "b", 400, 500, 500),
            sec("r", "c", 600, 700, 700),
        ])
    }

    #[test]
    fn longest_gap_with_majority_up() {
        let verdict = check(&gaps_history());
        assert_eq!(only(&verdict).longest_gap, Some(gap(100, 400)));
        assert!(verdict.is_safe(), "a gap is reported, not a violation");
    }

    #[test]
    fn gap_counts_only_while_a_majority_is_up() {
        // One node down of three: still a majority, same answer.
        let mut one_down = gaps_history();
        one_down.node_up[0] = up(0, 0, 50);
        assert_eq!(only(&check(&one_down)).longest_gap, Some(gap(100, 400)));

        // Two down on [150,350): the first gap shrinks to [100,150) and [350,400).
        let mut two_down = gaps_history();
        two_down.node_up = vec![
            up(0, 0, 150),
            up(0, 350, 10_000),
            up(1, 0, 150),
            up(1, 350, 10_000),
            up(2, 0, 10_000),
        ];
        assert_eq!(only(&check(&two_down)).longest_gap, Some(gap(500, 600)));

        let mut never_up = gaps_history();
        never_up.node_up.clear();
        assert_eq!(only(&check(&never_up)).longest_gap, None);
    }

    #[test]
    fn gap_is_measured_between_believed_intervals() {
        // `a` stays until 300 but was valid only until 100; `b`'s interval covers `c`'s.
        let verdict = check(&history(vec![
            sec("r", "a", 0, 300, 100),
            sec("r", "b", 150, 1000, 1000),
            sec("r", "c", 200, 300, 300),
            sec("r", "d", 1200, 1300, 1300),
        ]));
        assert_eq!(only(&verdict).longest_gap, Some(gap(1000, 1200)));
        let single = check(&history(vec![sec("r", "a", 100, 200, 200)]));
        assert_eq!(
            only(&single).longest_gap,
            None,
            "no gap before the first or after the last"
        );
    }

    #[test]
    fn majority_counts_each_node_once() {
        // Node 0 reported twice over [0,100): still one node, so no majority of three there.
        let majority = majority_up(3, &[up(0, 0, 100), up(0, 50, 100), up(1, 50, 200)]);
        assert_eq!(majority, [gap(50, 100)]);
        // Four nodes need three; handover at 100 keeps the majority without a break.
        let majority = majority_up(
            4,
            &[up(0, 0, 100), up(1, 0, 300), up(2, 0, 300), up(3, 100, 200)],
        );
        assert_eq!(majority, [gap(0, 200)]);
        assert_eq!(majority_up(1, &[up(0, 10, 20)]), [gap(10, 20)]);
        assert!(majority_up(0, &[]).is_empty());
    }

    #[test]
    fn resources_are_judged_independently() {
        let mut sections = vec![
            // "x": overlap between a and b, but the same times on "y" belong to other resources.
            sec("x", "a", 0, 100, 100),
            sec("x", "b", 50, 150, 150),
            sec("y", "c", 60, 70, 70),
            Section {
                fence: Some(9),
                ..sec("z", "d", 0, 10, 10)
            },
            Section {
                fence: Some(3),
                ..sec("z", "e", 100, 110, 110)
            },
        ];
        // Token 1 on "y" after token 9 on "z" is fine: tokens are per resource.
        sections.push(Section {
            fence: Some(1),
            ..sec("y", "f", 200, 210, 210)
        });
        let verdict = check(&history(sections));
        let summary: Vec<(&str, usize, usize, usize)> = verdict
            .resources
            .iter()
            .map(|r| {
                (
                    r.resource.as_str(),
                    r.sections,
                    r.overlaps.len(),
                    r.token_violations.len(),
                )
            })
            .collect();
        assert_eq!(summary, [("x", 2, 1, 0), ("y", 2, 0, 0), ("z", 2, 0, 1)]);
        assert_eq!(verdict.violations, 2);
    }

    #[test]
    fn empty_history_is_safe() {
        let verdict = check(&history(Vec::new()));
        assert!(verdict.resources.is_empty());
        assert!(verdict.is_safe());
    }

    /// Small deterministic generator, so the comparison below needs no dependency.
    struct Lcg(u64);
    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % n
        }

        /// Between one and twelve sections on "r", entering within 50 µs, each held up to 20 µs
        /// and valid up to 25 µs, of `values` acquisitions; `section` finishes each (drawing
        /// more if it likes).
        fn sections(
            &mut self,
            values: u64,
            mut section: impl FnMut(&mut Self, Section) -> Section,
        ) -> Vec<Section> {
            let n = self.below(12) + 1;
            (0..n)
                .map(|_| {
                    let enter = self.below(50);
                    let exit = enter + self.below(20);
                    let valid_until = enter + self.below(25);
                    let value = format!("v{}", self.below(values));
                    let drawn = sec("r", &value, enter, exit, valid_until);
                    section(self, drawn)
                })
                .collect()
        }
    }

    #[test]
    fn sweep_agrees_with_checking_every_pair() {
        for seed in 0..1000 {
            let mut rng = Lcg(seed);
            let sections = rng.sections(6, |rng, section| Section {
                fence: (rng.below(3) > 0).then(|| rng.below(8)),
                ..section
            });
            let verdict = check(&history(sections.clone()));

            let mut expected: Vec<(u64, u64, String, String)> = Vec::new();
            for (i, a) in sections.iter().enumerate() {
                for b in &sections[i + 1..] {
                    let from = a.enter_us.max(b.enter_us);
                    let to = a.believed_until_us().min(b.believed_until_us());
                    if a.value != b.value && to > from {
                        let mut pair = [a.value.clone(), b.value.clone()];
                        pair.sort();
                        let [x, y] = pair;
                        expected.push((from, to, x, y));
                    }
                }
            }
            let mut got: Vec<(u64, u64, String, String)> = only(&verdict)
                .overlaps
                .iter()
                .map(|o| {
                    let mut pair = [o.first.value.clone(), o.second.value.clone()];
                    pair.sort();
                    let [x, y] = pair;
                    (o.from_us, o.to_us, x, y)
                })
                .collect();
            expected.sort();
            got.sort();
            assert_eq!(got, expected, "seed {seed}: {sections:#?}");

            // Tokens, by the definition: a later-entered section whose token is at most an
            // earlier one's, other than an equal token of its own acquisition.
            let mut ordered = sections.clone();
            ordered.sort_by_key(|s| (s.enter_us, s.fence));
            let expected_tokens = ordered
                .iter()
                .enumerate()
                .filter(|&(i, s)| {
                    s.fence.is_some_and(|f| {
                        ordered[..i].iter().any(|e| {
                            e.fence
                                .is_some_and(|g| f < g || (f == g && e.value != s.value))
                        })
                    })
                })
                .count();
            assert_eq!(
                only(&verdict).token_violations.len(),
                expected_tokens,
                "seed {seed}: {ordered:#?}"
            );
        }
    }

    /// `sections` as a semaphore history with `permits` permits.
    fn semaphore(permits: u32, sections: Vec<Section>) -> History {
        History {
            permits: Some(permits),
            ..history(sections)
        }
    }

    fn on(permit: u32, section: Section) -> Section {
        Section {
            permit: Some(permit),
            ..section
        }
    }

    #[test]
    fn a_semaphore_allows_its_permits_and_no_more() {
        let a = sec("r", "a", 0, 100, 100);
        let b = sec("r", "b", 10, 100, 100);
        let c = sec("r", "c", 20, 50, 60);
        let two = check(&semaphore(2, vec![a.clone(), b.clone()]));
        assert!(two.is_safe(), "{two:#?}");
        assert_eq!(only(&two).most_holders, 2);
        assert!(only(&two).overlaps.is_empty(), "two holders of two permits");

        let three = check(&semaphore(2, vec![c.clone(), b.clone(), a.clone()]));
        let r = only(&three);
        assert_eq!(
            r.excess,
            vec![Excess {
                entering: c.clone(),
                holders: vec![a.clone(), b.clone()],
                from_us: 20,
                to_us: 50,
            }]
        );
        assert_eq!((r.most_holders, three.violations), (3, 1));
        assert_eq!(three.permits, Some(2));
        // The same sections as a lock: overlaps, and no count against permits.
        let lock = check(&history(vec![a, b, c]));
        assert!(only(&lock).excess.is_empty());
        assert_eq!(only(&lock).overlaps.len(), 3);
        assert_eq!(only(&lock).most_holders, 3);
    }

    #[test]
    fn only_holders_that_believed_themselves_valid_count_against_the_permits() {
        for sections in [
            // `a` stays until 300 but its deadline was 100; `d` entered past its own deadline.
            vec![
                sec("r", "a", 0, 300, 100),
                sec("r", "b", 150, 250, 250),
                sec("r", "c", 160, 250, 250),
                sec("r", "d", 170, 200, 120),
            ],
            // Two sections of one acquisition are one holder; touching intervals do not overlap.
            vec![
                sec("r", "a", 0, 100, 100),
                sec("r", "a", 10, 100, 100),
                sec("r", "b", 20, 100, 100),
                sec("r", "c", 100, 200, 200),
            ],
        ] {
            let verdict = safe(&semaphore(2, sections));
            assert_eq!(only(&verdict).most_holders, 2);
        }
    }

    #[test]
    fn each_permit_is_a_lock_of_its_own() {
        // Two holders of permit 0 at once: an overlap, though two holders are allowed.
        let verdict = check(&semaphore(
            2,
            vec![
                on(0, sec("r", "a", 0, 100, 100)),
                on(0, sec("r", "b", 50, 150, 150)),
            ],
        ));
        let r = only(&verdict);
        assert_eq!(overlap_spans(&verdict), [("a", "b", 50, 100)]);
        assert!(r.excess.is_empty());
        assert_eq!(verdict.violations, 1);
        let apart = check(&semaphore(
            2,
            vec![
                on(0, sec("r", "a", 0, 100, 100)),
                on(1, sec("r", "b", 50, 150, 150)),
            ],
        ));
        assert!(apart.is_safe(), "{apart:#?}");
    }

    #[test]
    fn tokens_go_up_per_permit() {
        let token = |permit, value: &str, enter, fence| on(permit, fenced(value, enter, fence));
        // Interleaved permits whose tokens are unrelated: fine per permit, not as one sequence.
        let sections = vec![
            token(0, "a", 0, 5),
            token(1, "b", 100, 3),
            token(0, "c", 200, 7),
            token(1, "d", 300, 4),
        ];
        let per_permit = check(&semaphore(2, sections.clone()));
        assert!(per_permit.is_safe(), "{per_permit:#?}");
        assert_eq!(only(&check(&history(sections))).token_violations.len(), 2);
        let backwards = check(&semaphore(
            2,
            vec![token(1, "b", 100, 3), token(1, "d", 300, 2)],
        ));
        assert_eq!(only(&backwards).token_violations.len(), 1);
    }

    /// A section whose holder crashed at `exit`, its deadline `valid_until`.
    fn crashed(value: &str, enter: u64, exit: u64, valid_until: u64) -> Section {
        Section {
            abandoned: true,
            ..sec("r", value, enter, exit, valid_until)
        }
    }

    fn with_delay(delay_us: u64, sections: Vec<Section>) -> History {
        History {
            lock_delay_us: delay_us,
            ..history(sections)
        }
    }

    #[test]
    fn a_crashed_holders_lock_stays_out_of_reach_for_the_delay() {
        // Crashed at 50, deadline 100, delay 200: nobody else before 300.
        let a = crashed("a", 0, 50, 100);
        let at = |enter| sec("r", "b", enter, enter + 10, enter + 10);
        let early = check(&with_delay(200, vec![a.clone(), at(250)]));
        let r = only(&early);
        assert_eq!(
            r.delay_violations,
            vec![DelayViolation {
                unreleased: a.clone(),
                next: at(250),
                protected_until_us: 300,
            }]
        );
        assert_eq!((r.unreleased, early.violations), (1, 1));
        assert_eq!(early.lock_delay_us, 200);
        assert!(check(&with_delay(200, vec![a.clone(), at(300)])).is_safe());
        // Before its deadline too: the crashed holder no longer believes, its lock still counts.
        assert_eq!(
            only(&check(&with_delay(200, vec![a.clone(), at(60)])))
                .delay_violations
                .len(),
            1
        );
        // Without a delay only the deadline is kept; `check_with` judges against another delay.
        let none = with_delay(0, vec![a.clone(), at(150)]);
        assert!(check(&none).is_safe());
        assert_eq!(check_with(&none, 200).violations, 1);
        assert_eq!(check_with(&none, 200).lock_delay_us, 200);
        assert_eq!(check(&with_delay(0, vec![a, at(60)])).violations, 1);
    }

    /// Readers share under a lock-delay too: another reader may enter after an abandoned
    /// reader's deadline; a writer may not, nor anyone after an abandoned writer. (Before, every
    /// reader after a crashed reader was a violation: `--read-write --lock-delay 1s --faults
    /// client-crash --seed 4` reported 18.)
    #[test]
    fn an_abandoned_readers_delay_keeps_writers_out_not_readers() {
        let reader = |value: &str, enter, exit, valid_until| Section {
            shared: true,
            ..sec("r", value, enter, exit, valid_until)
        };
        let crashed_reader = Section {
            abandoned: true,
            ..reader("a", 0, 50, 100)
        };
        let writer_at = |enter| sec("r", "w", enter, enter + 10, enter + 10);
        let next_reader = reader("b", 150, 160, 160);
        assert!(check(&with_delay(200, vec![crashed_reader.clone(), next_reader])).is_safe());
        let r = check(&with_delay(200, vec![crashed_reader, writer_at(150)]));
        assert_eq!(
            only(&r).delay_violations.len(),
            1,
            "a writer inside a reader's delay"
        );
        let crashed_writer = crashed("w0", 0, 50, 100);
        let r = check(&with_delay(
            200,
            vec![crashed_writer, reader("b", 150, 160, 160)],
        ));
        assert_eq!(
            only(&r).delay_violations.len(),
            1,
            "a reader inside a writer's delay"
        );
    }

    #[test]
    fn a_lock_extended_by_value_and_abandoned_stays_out_of_reach_from_the_extensions_deadline() {
        // Handed off at 50; the holder's deadline was 100, the extension's is 400 (recorded as
        // the section's); delay 200: nobody else before 600.
        let handed = Section {
            extended_by_value: true,
            ..crashed("a", 0, 50, 400)
        };
        let at = |enter| sec("r", "b", enter, enter + 10, enter + 10);
        let within = check(&with_delay(200, vec![handed.clone(), at(550)]));
        let r = only(&within);
        assert_eq!((r.unreleased, within.violations), (1, 1));
        assert_eq!(r.delay_violations[0].protected_until_us, 600);
        // Past the holder's own deadline plus the delay, still within the extension's.
        assert_eq!(
            check(&with_delay(200, vec![handed.clone(), at(300)])).violations,
            1
        );
        assert!(check(&with_delay(200, vec![handed.clone(), at(600)])).is_safe());
        // Without a delay, the extension's deadline alone.
        assert_eq!(
            check(&with_delay(0, vec![handed.clone(), at(399)])).violations,
            1
        );
        assert!(check(&with_delay(0, vec![handed, at(400)])).is_safe());
    }

    #[test]
    fn a_late_release_does_not_end_the_delay_and_a_timely_one_leaves_none() {
        let at = |enter| sec("r", "b", enter, enter + 10, enter + 10);
        // Slept past its deadline (100) and released at 400: protected until 300.
        let slept = Section {
            released_us: Some(400),
            ..sec("r", "a", 0, 400, 100)
        };
        assert_eq!(
            only(&check(&with_delay(200, vec![slept.clone(), at(250)])))
                .delay_violations
                .len(),
            1
        );
        assert!(check(&with_delay(200, vec![slept.clone(), at(300)])).is_safe());
        // Released at 200, after its deadline: still protected until 300 (a release after the
        // deadline frees nothing).
        let released_late = Section {
            released_us: Some(200),
            ..slept
        };
        assert_eq!(
            check(&with_delay(200, vec![released_late.clone(), at(250)])).violations,
            1
        );
        assert_eq!(
            check(&with_delay(200, vec![released_late, at(150)])).violations,
            1
        );
        // Released while valid: nothing to wait for, whatever the delay.
        let timely = Section {
            released_us: Some(50),
            ..sec("r", "a", 0, 50, 100)
        };
        let verdict = check(&with_delay(200, vec![timely, at(60)]));
        assert!(verdict.is_safe(), "{verdict:#?}");
        assert_eq!(only(&verdict).unreleased, 0);
        // Its own later sections do not count against it.
        let own = check(&with_delay(
            200,
            vec![crashed("a", 0, 50, 100), sec("r", "a", 60, 70, 100)],
        ));
        assert!(own.is_safe(), "{own:#?}");
    }

    #[test]
    fn the_delay_is_kept_per_permit() {
        let crashed_on_0 = on(0, crashed("a", 0, 50, 100));
        let next = |permit| on(permit, sec("r", "b", 150, 160, 160));
        let other = check(&History {
            lock_delay_us: 200,
            ..semaphore(2, vec![crashed_on_0.clone(), next(1)])
        });
        assert!(other.is_safe(), "{other:#?}");
        let same = check(&History {
            lock_delay_us: 200,
            ..semaphore(2, vec![crashed_on_0, next(0)])
        });
        assert_eq!(only(&same).delay_violations.len(), 1);
    }

    #[test]
    fn the_semaphore_sweep_agrees_with_counting_at_every_entry() {
        for seed in 0..1000 {
            let mut rng = Lcg(seed);
            let permits = u32::try_from(rng.below(3) + 1).expect("small");
            let sections = rng.sections(8, |_, section| section);
            let verdict = check(&semaphore(permits, sections.clone()));
            let mut ordered = sections.clone();
            ordered.sort_by_key(|s| s.enter_us);
            // By the definition: other acquisitions believed valid at an entry (entries at the
            // same instant count those listed before, as the sweep's stable order does).
            let believed = |s: &Section| s.believed_until_us() > s.enter_us;
            let mut expected = 0;
            let mut most = 0;
            for (i, s) in ordered.iter().enumerate().filter(|(_, s)| believed(s)) {
                let mut values: Vec<&str> = ordered[..i]
                    .iter()
                    .filter(|e| {
                        believed(e) && e.believed_until_us() > s.enter_us && e.value != s.value
                    })
                    .map(|e| e.value.as_str())
                    .collect();
                values.sort_unstable();
                values.dedup();
                most = most.max(values.len() + 1);
                if values.len() >= permits as usize {
                    expected += 1;
                }
            }
            let r = only(&verdict);
            assert_eq!(r.excess.len(), expected, "seed {seed}: {ordered:#?}");
            assert_eq!(r.most_holders, most, "seed {seed}: {ordered:#?}");
            for e in &r.excess {
                assert!(e.to_us > e.from_us, "seed {seed}: {e:#?}");
                assert!(e.holders.len() >= permits as usize);
            }
        }
    }

    #[test]
    fn a_hundred_thousand_sections() {
        let sections: Vec<Section> = (0..100_000u64)
            .map(|i| Section {
                fence: Some(i),
                ..sec("r", &format!("v{i}"), i * 10, i * 10 + 10, i * 10 + 10)
            })
            .collect();
        let verdict = check(&history(sections));
        assert!(verdict.is_safe());
        assert_eq!(only(&verdict).sections, 100_000);
    }
}
