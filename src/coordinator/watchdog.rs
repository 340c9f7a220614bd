//! The group watchdog: a thread of the member's own that looks at the consumer group from outside
//! the member's consumer, every [`LOOK_EVERY`], and asks the loop to rejoin when some partition of
//! the topics the pipeline reads has had no owner for longer than the bound
//! ([`crate::kafka::group::WedgeWatch`]). The loop then logs it, counts it
//! (`tidemark_group_wedges_total`), turns `/readyz` false, commits its open transaction, leaves the
//! group and joins again as a new member.
//!
//! It only reads (the group description at each look, topic metadata once a minute). A look that
//! fails decides nothing, nor does a description without assignment bytes (a broker that does not
//! report assignments: the test broker, Tansu, is one, so there the watchdog is blind and says so
//! once) or one that shows no owner at all while this member holds partitions.

use crate::config::KafkaSpec;
use crate::kafka::group::{parse_assignment, unowned, Verdict, WedgeWatch};
use crate::metrics as m;
use metrics::gauge;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
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

/// The running watchdog; stops when dropped.
pub(super) struct Watchdog {
    rejoin: Arc<AtomicBool>,
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
    /// Starts watching `k`'s group over `topics`. `owned_here` is how many partitions this
    /// member holds now. A watchdog that cannot start is logged, and the member runs without.
    pub(super) fn start(
        k: &KafkaSpec,
        topics: Vec<String>,
        owned_here: Arc<AtomicUsize>,
    ) -> Result<Watchdog, String> {
        Self::try_start(k, topics, owned_here)
            .inspect_err(|e| tracing::warn!("{e}: running without the group watchdog"))
    }

    fn try_start(
        k: &KafkaSpec,
        topics: Vec<String>,
        owned_here: Arc<AtomicUsize>,
    ) -> Result<Watchdog, String> {
        let session = k
            .properties
            .get("session.timeout.ms")
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(DEFAULT_SESSION_TIMEOUT_MS);
        let bound_ms = SESSION_TIMEOUTS * session;
        let client: BaseConsumer = crate::source::base_config(k)
            .create()
            .map_err(|e| format!("creating the group watchdog's client: {e}"))?;
        let rejoin = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let group = k.application_id.clone();
        let (r, s) = (rejoin.clone(), stop.clone());
        std::thread::Builder::new()
            .name("tidemark-watchdog".into())
            .spawn(move || watch(client, group, topics, owned_here, bound_ms, r, s))
            .map_err(|e| format!("starting the group watchdog: {e}"))?;
        Ok(Watchdog {
            rejoin,
            stop,
            bound_ms,
        })
    }

    /// Whether the watchdog asks for a rejoin (asked once per wedge).
    pub(super) fn take_rejoin(&self) -> bool {
        self.rejoin.swap(false, Ordering::AcqRel)
    }
}

/// The watchdog thread's loop.
fn watch(
    client: BaseConsumer,
    group: String,
    topics: Vec<String>,
    owned_here: Arc<AtomicUsize>,
    bound_ms: i64,
    rejoin: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) {
    let mut w = WedgeWatch::new(bound_ms);
    let mut said_blind = false;
    let mut counts: Option<(std::time::Instant, BTreeMap<String, i32>)> = None;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(LOOK_EVERY);
        if counts
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() >= RECOUNT_EVERY)
        {
            counts = partition_counts(&client, &topics).map(|c| (std::time::Instant::now(), c));
        }
        let Some((_, counts)) = &counts else {
            continue;
        };
        let Some(unowned) = look(&client, &group, counts, &owned_here, &mut said_blind) else {
            continue;
        };
        gauge!(m::UNOWNED_PARTITIONS).set(unowned.len() as f64);
        if w.observe(crate::clock::wall_ms(), &unowned) == Verdict::Wedged {
            rejoin.store(true, Ordering::Release);
            w.reset();
        }
    }
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

/// One look: the partitions of the topics in `counts` that no member of `group` owns, or `None`
/// when the look cannot tell.
fn look(
    client: &BaseConsumer,
    group: &str,
    counts: &BTreeMap<String, i32>,
    owned_here: &AtomicUsize,
    said_blind: &mut bool,
) -> Option<Vec<(String, i32)>> {
    let list = client.fetch_group_list(Some(group), ASK_TIMEOUT).ok()?;
    let mut blind = || {
        if !*said_blind {
            tracing::info!(
                "the broker's group description carries no members or no assignments: the group \
                 watchdog cannot judge ownership on this broker"
            );
            *said_blind = true;
        }
        None
    };
    let members: Vec<_> = list
        .groups()
        .iter()
        .filter(|g| g.name() == group)
        .flat_map(|g| g.members())
        .collect();
    // This member belongs to the group: a description without members says nothing.
    if members.is_empty() {
        return blind();
    }
    let mut assignments = Vec::new();
    for member in members {
        // A consumer-protocol assignment, even of nothing, has a version and a topic count: no
        // bytes at all mean the broker does not report assignments (Tansu never does).
        let Some(bytes) = member.assignment().filter(|b| !b.is_empty()) else {
            return blind();
        };
        match parse_assignment(bytes) {
            Ok(a) => assignments.push(a),
            Err(e) => {
                tracing::debug!("group watchdog: member {}: {e}", member.id());
                return None;
            }
        }
    }
    let owned_anywhere = assignments.iter().flatten().any(|(_, ps)| !ps.is_empty());
    if !owned_anywhere && owned_here.load(Ordering::Acquire) > 0 {
        // This member holds partitions, yet no assignment shows any: the description is stale.
        return None;
    }
    Some(unowned(counts, &assignments))
}
