//! The sink's group watchdog: judges from the log whether the sink's consumer group gives every
//! partition it reads an owner that makes progress, for a broker whose group coordinator keeps a
//! killed member listed with its partitions
//! ([`crate::kafka::quirks::DEAD_MEMBERS_NOT_EVICTED`]): such a group describes every partition
//! as owned while nobody reads some of them, and no rebalance ever comes.
//!
//! A sink's positions live in its database, not in the group's offsets, so a look asks the sink
//! for the offsets it stored and the raw log whether a record of a committed (or still open)
//! transaction lies at or after each ([`LogReader::peek`]). A partition whose stored offset has not moved
//! since the previous look while such a record waits is stalled ([`StallWatch`]); one stalled
//! for longer than the bound, which this member does not read itself, wedges the group
//! ([`BlindWatch`]: a member that reads nothing acts after the bound, one that reads partitions
//! after twice the bound). The first wedge rejoins the group as a new member; another wedge in a
//! row moves the sink's group to membership from the log. Every member's own stall is its own
//! progress and never a cause to act.
//!
//! Looks are made inline by the sink's loop, every [`LOOK_EVERY`]; a look that fails (the
//! database or the broker away) decides nothing.

use super::{Offsets, TopicPartition};
use crate::kafka::group::{BlindWatch, StallWatch, Standing, Verdict};
use crate::kafka::raw_log::LogReader;
use crate::kafka::secure::Brokers;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How often the watchdog looks.
pub(super) const LOOK_EVERY: Duration = Duration::from_secs(5);

/// How many session timeouts a partition may stay stalled before the group counts as wedged,
/// as for a pipeline's group: one for a dead member to be evicted, one for the rebalance that
/// follows, one to spare.
const SESSION_TIMEOUTS: u32 = 3;

/// How many wedges in a row move the sink's group to membership from the log.
const MOVE_AFTER_WEDGES: u32 = 2;

/// What the sink's member does after a look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Act {
    /// Nothing: every partition makes progress, or the bound has not passed.
    Wait,
    /// Leave the group and join it again as a new member.
    Rejoin,
    /// Move the sink's group to membership from the log.
    Move,
}

/// The sink's group watchdog (see the module's documentation).
pub(super) struct Watch {
    /// Connected on the first look, and again after a look fails.
    reader: LogReader,
    stall: StallWatch,
    blind: BlindWatch,
    /// The bound (ms) a partition may stay stalled.
    pub(super) bound_ms: i64,
    looked: Instant,
    started: Instant,
    /// Wedges since a look last found nothing stalled.
    wedges: u32,
}

impl Watch {
    /// A watchdog over the brokers `brokers` whose bound is a few of `session`.
    pub(super) fn new(brokers: &Brokers, session: Duration) -> Watch {
        let bound_ms = (session * SESSION_TIMEOUTS).as_millis() as i64;
        Watch {
            reader: LogReader::lazy(brokers),
            stall: StallWatch::default(),
            blind: BlindWatch::new(bound_ms),
            bound_ms,
            looked: Instant::now(),
            started: Instant::now(),
            wedges: 0,
        }
    }

    /// Whether a look is due.
    pub(super) fn due(&self) -> bool {
        self.looked.elapsed() >= LOOK_EVERY
    }

    /// Takes a look: `parts` are every partition the group shares, `stored` the offsets the sink
    /// stored (`None` when they could not be read), `held` the partitions this member reads.
    pub(super) fn look(
        &mut self,
        parts: &[TopicPartition],
        stored: Option<&Offsets>,
        held: &BTreeSet<TopicPartition>,
    ) -> Act {
        self.looked = Instant::now();
        let Some(stored) = stored else {
            return Act::Wait;
        };
        let standings = match self.standings(parts, stored) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!("the sink's group watchdog: {e}");
                return Act::Wait;
            }
        };
        let stalled = self.stall.observe(&standings);
        let now = self.started.elapsed().as_millis() as i64;
        let (verdict, others) = self.blind.observe(now, &stalled, held);
        judge(verdict, &others, &mut self.wedges, self.bound_ms)
    }

    /// Where every partition stands: its stored offset and whether data waits at or after it.
    fn standings(
        &mut self,
        parts: &[TopicPartition],
        stored: &Offsets,
    ) -> Result<BTreeMap<TopicPartition, Standing>, String> {
        let mut by_topic: BTreeMap<&str, Vec<(i32, i64)>> = BTreeMap::new();
        for tp in parts {
            let from = stored.get(tp).copied().unwrap_or(0);
            by_topic.entry(&tp.0).or_default().push((tp.1, from));
        }
        let mut out = BTreeMap::new();
        for (topic, wanted) in by_topic {
            let data = self
                .reader
                .peek(topic, &wanted)
                .map_err(|e| format!("looking at {topic}: {e}"))?;
            for (p, from) in wanted {
                // A partition the answer left out decides nothing: it counts as without data.
                let standing = Standing {
                    committed: Some(from),
                    data_after: data.get(&p).copied().unwrap_or(false),
                };
                out.insert((topic.to_string(), p), standing);
            }
        }
        Ok(out)
    }
}

/// What a verdict asks of the member, counting wedges in a row in `wedges`.
fn judge(verdict: Verdict, others: &[TopicPartition], wedges: &mut u32, bound_ms: i64) -> Act {
    match verdict {
        Verdict::Owned => {
            *wedges = 0;
            Act::Wait
        }
        Verdict::Waiting(_) => Act::Wait,
        Verdict::Wedged => {
            *wedges += 1;
            tracing::warn!(
                stalled = ?others,
                bound_ms,
                wedges = *wedges,
                "partitions of the sink that this member does not read made no progress, with \
                 records waiting, for longer than the bound"
            );
            if *wedges >= MOVE_AFTER_WEDGES {
                Act::Move
            } else {
                Act::Rejoin
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: i32) -> TopicPartition {
        ("out".to_string(), n)
    }

    #[test]
    fn a_first_wedge_rejoins_and_a_second_in_a_row_moves() {
        let mut wedges = 0;
        assert_eq!(judge(Verdict::Waiting(5), &[], &mut wedges, 10), Act::Wait);
        assert_eq!(
            judge(Verdict::Wedged, &[p(0)], &mut wedges, 10),
            Act::Rejoin
        );
        assert_eq!(judge(Verdict::Waiting(5), &[], &mut wedges, 10), Act::Wait);
        assert_eq!(judge(Verdict::Wedged, &[p(0)], &mut wedges, 10), Act::Move);
    }

    #[test]
    fn progress_between_wedges_starts_the_count_again() {
        let mut wedges = 0;
        assert_eq!(
            judge(Verdict::Wedged, &[p(1)], &mut wedges, 10),
            Act::Rejoin
        );
        assert_eq!(judge(Verdict::Owned, &[], &mut wedges, 10), Act::Wait);
        assert_eq!(
            judge(Verdict::Wedged, &[p(1)], &mut wedges, 10),
            Act::Rejoin
        );
    }
}
