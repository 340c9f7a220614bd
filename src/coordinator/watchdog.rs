//! The group watchdog: a thread of the member's own that looks at the consumer group from outside
//! the member's consumer, every [`LOOK_EVERY`], and asks the loop to rejoin when some partition of
//! the topics the pipeline reads has had no owner for longer than the bound
//! ([`crate::kafka::group::WedgeWatch`]). The loop then logs it, counts it
//! (`tidemark_group_wedges_total`), turns `/readyz` false, commits its open transaction, leaves the
//! group and joins again as a new member.
//!
//! It only reads (the group description at each look, topic metadata once a minute). A look that
//! fails decides nothing, nor does a description that shows no owner at all while this member
//! holds partitions.
//!
//! A broker whose descriptions carry no assignment bytes
//! ([`crate::kafka::quirks::DESCRIPTIONS_WITHOUT_ASSIGNMENTS`]) cannot say who owns what, and one
//! that keeps a killed member listed with its partitions
//! ([`crate::kafka::quirks::DEAD_MEMBERS_NOT_EVICTED`]) describes them as owned while nobody
//! works on them. So whenever a description shows no partition without an owner, or cannot show
//! any (the watchdog says so once), the watchdog judges from the log
//! ([`crate::kafka::group::StallWatch`]): a partition counts as without an owner while the raw log
//! holds a data record at or after the group's committed offset and that offset does not move.
//! A member never acts on a stall of a partition it holds itself (it is that partition's
//! progress); a member that holds nothing acts on the others' after the bound, and one that holds
//! partitions after twice the bound ([`crate::kafka::group::BlindWatch`]): its rejoin rebalances
//! the whole group, so the members that hold nothing try first, but when the broker has given a
//! partition to a member that never took it up while every live member holds some, only they can
//! act. After each rejoin that did not bring progress the bound doubles (up to 16 times), so that
//! a partition that is slow rather than ownerless (a long restore) is not rebalanced again and
//! again.

use super::errors::Cause;
use crate::config::KafkaSpec;
use crate::kafka::group::{
    parse_assignment, unowned, BlindWatch, StallWatch, Standing, Verdict, WedgeWatch,
};
use crate::kafka::quirks::phantom_leader::{self, LeaderCheck};
use crate::kafka::raw_log::LogReader;
use crate::kafka::secure::Brokers;
use crate::metrics as m;
use metrics::gauge;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the watchdog looks at the group.
pub(super) const LOOK_EVERY: Duration = Duration::from_secs(2);

/// How often the partition counts of the topics are asked afresh (a topic may gain partitions);
/// between times the watchdog asks the broker for the group's description only.
const RECOUNT_EVERY: Duration = Duration::from_secs(60);

/// How many session timeouts a partition may stay without an owner before the group counts as
/// wedged: one for a dead member to be evicted, one for the rebalance that follows, one to spare.
const SESSION_TIMEOUTS: i64 = 3;

/// librdkafka's default `session.timeout.ms`.
const DEFAULT_SESSION_TIMEOUT_MS: i64 = 45_000;

/// The partitions (topic, partition) this member holds now, published by the core for the
/// watchdog.
pub(super) type Held = Arc<Mutex<BTreeSet<(String, i32)>>>;

/// The running watchdog; stops when dropped.
pub(super) struct Watchdog {
    /// The wedges in a row when a rejoin is asked for; 0 when none is.
    rejoin: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    /// How long (ms) a partition may stay without an owner.
    pub(super) bound_ms: i64,
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Watchdog {
    /// Starts watching `k`'s group over `topics`. `owned_here` is the partitions this member
    /// holds now. A watchdog that cannot start is logged, and the member runs without.
    pub(super) fn start(
        k: &KafkaSpec,
        topics: Vec<String>,
        owned_here: Held,
    ) -> Result<Watchdog, Cause> {
        if k.log_membership {
            // No consumer group to watch: the roster judges who is live (`super::roster`).
            return Err(Cause::found("membership from the log"));
        }
        Self::try_start(k, topics, owned_here)
            .inspect_err(|e| tracing::warn!("{e}: running without the group watchdog"))
    }

    fn try_start(k: &KafkaSpec, topics: Vec<String>, owned_here: Held) -> Result<Watchdog, Cause> {
        let session = k
            .properties
            .get("session.timeout.ms")
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(DEFAULT_SESSION_TIMEOUT_MS);
        let bound_ms = SESSION_TIMEOUTS * session;
        // The group id lets the client read the group's committed offsets (it never joins: it does
        // not subscribe).
        let client: BaseConsumer = crate::clients::base_config(k)
            .set("group.id", &k.application_id)
            .create()
            .map_err(|e| Cause::kafka("creating the group watchdog's client", e))?;
        let rejoin = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let group = k.application_id.clone();
        let brokers = k.brokers.clone();
        let (r, s) = (rejoin.clone(), stop.clone());
        std::thread::Builder::new()
            .name("tidemark-watchdog".into())
            .spawn(move || {
                let watched = Watched {
                    client,
                    group,
                    brokers,
                    topics,
                    owned_here,
                    session_ms: session,
                };
                watch(watched, bound_ms, r, s)
            })
            .map_err(|e| Cause::part("starting the group watchdog", e))?;
        Ok(Watchdog {
            rejoin,
            stop,
            bound_ms,
        })
    }

    /// Whether the watchdog asks for a rejoin (asked once per wedge), and if so after how many
    /// wedges in a row: the count goes back to zero when a look finds every partition owned, so
    /// a count above one means the rejoins so far did not heal the group.
    pub(super) fn take_rejoin(&self) -> Option<u32> {
        Some(self.rejoin.swap(0, Ordering::AcqRel)).filter(|n| *n > 0)
    }
}

/// What the watchdog thread looks at.
struct Watched {
    client: BaseConsumer,
    group: String,
    brokers: Brokers,
    topics: Vec<String>,
    owned_here: Held,
    /// The members' session timeout.
    session_ms: i64,
}

/// The watchdog thread's loop.
fn watch(w: Watched, bound_ms: i64, rejoin: Arc<AtomicU32>, stop: Arc<AtomicBool>) {
    let mut wedge = WedgeWatch::new(bound_ms);
    let mut blind_wedge = BlindWatch::new(bound_ms);
    let mut stalls = StallWatch::default();
    let mut reader = LogReader::lazy(&w.brokers);
    let mut said_blind = false;
    let mut wedges_in_a_row = 0u32;
    let mut counts: Option<(std::time::Instant, BTreeMap<String, i32>)> = None;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(LOOK_EVERY);
        if counts
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() >= RECOUNT_EVERY)
        {
            counts = partition_counts(&w.client, &w.topics).map(|c| (std::time::Instant::now(), c));
        }
        let Some((_, counts)) = &counts else {
            continue;
        };
        let held = w.owned_here.lock().expect("lock").clone();
        let described = match look(&w.client, &w.group, counts, !held.is_empty()) {
            Look::Unowned(unowned) => Some(unowned),
            Look::Unknown => continue,
            Look::Blind => {
                if !said_blind {
                    tracing::info!(
                        "the broker's group description carries no members or no assignments: \
                         the group watchdog judges from the log (partitions whose committed \
                         offset stays put while records wait after it)"
                    );
                    said_blind = true;
                }
                None
            }
        };
        let (verdict, blind) = match described {
            Some(unowned) if !unowned.is_empty() => {
                gauge!(m::UNOWNED_PARTITIONS).set(unowned.len() as f64);
                // The watch doubles its bound after each wedge until a look finds every owner.
                (wedge.observe(crate::clock::wall_ms(), &unowned), false)
            }
            // Every partition has an owner in the description, or the description does not
            // say: judge from the log. A broker that keeps a killed member listed with its
            // partitions (`crate::kafka::quirks::DEAD_MEMBERS_NOT_EVICTED`) describes them as
            // owned while nothing moves them.
            described => {
                if described.is_some() {
                    wedge.observe(crate::clock::wall_ms(), &[]);
                }
                let Some(standings) = standings(&w, counts, &mut reader) else {
                    continue;
                };
                let stalled = stalls.observe(&standings);
                let (verdict, others) =
                    blind_wedge.observe(crate::clock::wall_ms(), &stalled, &held);
                gauge!(m::UNOWNED_PARTITIONS).set(others.len() as f64);
                if verdict == Verdict::Wedged {
                    tracing::warn!(
                        stalled = ?others,
                        held = held.len(),
                        "partitions this member does not hold made no progress, with records \
                         waiting, for longer than the bound"
                    );
                }
                (verdict, described.is_none())
            }
        };
        match verdict {
            Verdict::Owned => wedges_in_a_row = 0,
            Verdict::Waiting(_) => {}
            Verdict::Wedged => {
                if blind {
                    clear_phantom_leader(&w);
                }
                wedges_in_a_row += 1;
                rejoin.store(wedges_in_a_row, Ordering::Release);
            }
        }
    }
}

/// On a wedge seen from the log (a broker that reports no assignments), clears a phantom leader
/// before the rejoin ([`phantom_leader::clear`]): a rejoin alone cannot heal a group whose leader
/// the broker kept after evicting it ([`crate::kafka::quirks::STATIC_PHANTOM_LEADER`]).
fn clear_phantom_leader(w: &Watched) {
    let session = std::time::Duration::from_millis(w.session_ms.max(1) as u64);
    match phantom_leader::clear(&w.brokers, &w.group, session) {
        Ok(LeaderCheck::Cleared(leader)) => tracing::warn!(
            group = %w.group,
            leader = %leader,
            "the group's leader is not one of its members (the broker kept it after evicting \
             it): joined under its id and let the broker evict it again, so the next member to \
             join leads"
        ),
        Ok(LeaderCheck::Member) => {}
        Err(e) => {
            tracing::warn!(group = %w.group, error = %e, "checking the group's leader failed")
        }
    }
}

/// Where each partition of the topics in `counts` stands: the group's committed offset and
/// whether the raw log holds a data record at or after it; `None` when the broker does not
/// answer.
fn standings(
    w: &Watched,
    counts: &BTreeMap<String, i32>,
    log: &mut LogReader,
) -> Option<BTreeMap<(String, i32), Standing>> {
    let mut tpl = TopicPartitionList::new();
    for (t, n) in counts {
        for p in 0..*n {
            tpl.add_partition(t, p);
        }
    }
    let committed = w.client.committed_offsets(tpl, ASK_TIMEOUT).ok()?;
    let mut out = BTreeMap::new();
    for (t, n) in counts {
        let at: Vec<(i32, Option<i64>)> = (0..*n)
            .map(|p| {
                let offset = committed
                    .find_partition(t, p)
                    .and_then(|e| match e.offset() {
                        Offset::Offset(o) => Some(o),
                        _ => None,
                    });
                (p, offset)
            })
            .collect();
        let wanted: Vec<(i32, i64)> = at.iter().map(|&(p, o)| (p, o.unwrap_or(0))).collect();
        let data = match log.peek(t, &wanted) {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!("group watchdog: reading {t}: {e}");
                return None;
            }
        };
        for (p, committed) in at {
            let data_after = *data.get(&p)?;
            out.insert(
                (t.clone(), p),
                Standing {
                    committed,
                    data_after,
                },
            );
        }
    }
    Some(out)
}

/// How long one question to the broker may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// The partition count of each of `topics`, from the cluster's metadata, or `None` when the
/// broker does not answer.
fn partition_counts(client: &BaseConsumer, topics: &[String]) -> Option<BTreeMap<String, i32>> {
    let mut counts = BTreeMap::new();
    for t in topics {
        let meta = client.fetch_metadata(Some(t), ASK_TIMEOUT).ok()?;
        let n = meta.topics().first()?.partitions().len() as i32;
        counts.insert(t.clone(), n);
    }
    Some(counts)
}

/// What one look at the group's description says.
enum Look {
    /// The partitions of the watched topics that no member owns.
    Unowned(Vec<(String, i32)>),
    /// The description carries no members or no assignments: the broker does not say.
    Blind,
    /// The look failed, or what it found cannot be trusted.
    Unknown,
}

/// One look at the group's description.
fn look(
    client: &BaseConsumer,
    group: &str,
    counts: &BTreeMap<String, i32>,
    holds_some: bool,
) -> Look {
    let Ok(list) = client.fetch_group_list(Some(group), ASK_TIMEOUT) else {
        return Look::Unknown;
    };
    let members: Vec<_> = list
        .groups()
        .iter()
        .filter(|g| g.name() == group)
        .flat_map(|g| g.members())
        .collect();
    // This member belongs to the group: a description without members says nothing.
    if members.is_empty() {
        return Look::Blind;
    }
    let mut assignments = Vec::new();
    for member in members {
        // A consumer-protocol assignment, even of nothing, has a version and a topic count: no
        // bytes at all mean the broker does not report assignments.
        let Some(bytes) = member.assignment().filter(|b| !b.is_empty()) else {
            return Look::Blind;
        };
        match parse_assignment(bytes) {
            Ok(a) => assignments.push(a),
            Err(e) => {
                tracing::debug!("group watchdog: member {}: {e}", member.id());
                return Look::Unknown;
            }
        }
    }
    let owned_anywhere = assignments.iter().flatten().any(|(_, ps)| !ps.is_empty());
    if !owned_anywhere && holds_some {
        // This member holds partitions, yet no assignment shows any: the description is stale.
        return Look::Unknown;
    }
    Look::Unowned(unowned(counts, &assignments))
}
