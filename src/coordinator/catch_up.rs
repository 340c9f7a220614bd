//! Whether input partitions have been read to their end, judged from their raw logs.
//!
//! An input partition may count as idle (and stop holding the watermark back) only when it is
//! caught up: a look at its raw log from the member's very position found no data record after
//! it (`raw_log::LogReader::peek`), not a high watermark some brokers misreport. The looks are kept here,
//! with the connection they are made on; the coordinator says which partitions are quiet enough
//! to need one.

use super::parts::{Part, Source};
use super::settings::{Settings, Topology};
use crate::kafka::raw_log::LogReader;
use crate::kafka::secure::Brokers;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// How often a quiet input partition's raw log is looked at to tell whether it is caught up.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// How long a look that found a partition caught up counts.
const VALID_FOR: Duration = Duration::from_secs(1);

/// One look at a partition's raw log.
#[derive(Debug, Clone, Copy)]
struct Look {
    /// Whether no data record lay after `position`.
    caught_up: bool,
    /// The position looked from.
    position: i64,
    /// When.
    at: Instant,
}

/// The last look at each input partition, and the connection the looks are made on.
#[derive(Debug)]
pub(super) struct CatchUp {
    reader: LogReader,
    looks: HashMap<(String, i32), Look>,
}

impl CatchUp {
    /// No look yet; the connection to `brokers` is opened at the first look.
    pub(super) fn new(brokers: &Brokers) -> CatchUp {
        CatchUp {
            reader: LogReader::lazy(brokers),
            looks: HashMap::new(),
        }
    }

    /// Whether partition `p` of `topic`, at `position`, needs a look: it was never looked at,
    /// was looked at from another position, or not for [`LOOK_EVERY`].
    fn due(&self, topic: &str, p: i32, position: i64) -> bool {
        self.looks
            .get(&(topic.to_string(), p))
            .is_none_or(|l| l.position != position || l.at.elapsed() >= LOOK_EVERY)
    }

    /// Whether partition `p` of `topic`, at `position`, has been read to its end: a look from
    /// that very position, less than a second ago, found no data record after it (unknown: no).
    pub(super) fn is_caught_up(&self, topic: &str, p: i32, position: i64) -> bool {
        self.looks
            .get(&(topic.to_string(), p))
            .is_some_and(|l| l.caught_up && l.position == position && l.at.elapsed() < VALID_FOR)
    }

    /// Looks at the raw log of every input partition that would be idle if it were caught up
    /// (silent for the idle timeout) and whose look is due ([`CatchUp::due`]): does a data
    /// record lie after its position? Only then can it count as idle.
    pub(super) fn refresh(
        &mut self,
        s: &Settings,
        parts: &BTreeMap<i32, Part>,
        sources: &BTreeMap<(u16, i32), Source>,
        now: i64,
    ) {
        let mut wanted: BTreeMap<String, Vec<(i32, i64)>> = BTreeMap::new();
        if s.topology == Topology::Direct {
            let topic = &s.k.input_topics[0];
            for (&p, part) in parts {
                let quiet = part
                    .step
                    .fronts()
                    .iter()
                    .any(|(_, f)| f.report(now, true).idle_at.is_some());
                let position = part.position();
                if quiet && self.due(topic, p, position) {
                    wanted.entry(topic.clone()).or_default().push((p, position));
                }
            }
        }
        for (&(t, p), src) in sources {
            let topic = s.input_topic(t);
            let position = src.position();
            if src.front.report(now, true).idle_at.is_some() && self.due(topic, p, position) {
                wanted
                    .entry(topic.to_string())
                    .or_default()
                    .push((p, position));
            }
        }
        self.look(wanted);
    }

    /// Looks at the raw log of each `(partition, position)` of each topic in `wanted`. A look
    /// that fails is logged and leaves what was known; the connection is opened again next time.
    fn look(&mut self, wanted: BTreeMap<String, Vec<(i32, i64)>>) {
        if wanted.is_empty() {
            return;
        }
        for (topic, parts) in wanted {
            match self.reader.peek(&topic, &parts) {
                Ok(found) => {
                    for (p, position) in parts {
                        // No answer for a partition: data may lie there.
                        let data = found.get(&p).copied().unwrap_or(true);
                        record(&mut self.looks, &topic, p, position, !data);
                    }
                }
                Err(e) => {
                    tracing::warn!("looking at the raw log of {topic}: {e}");
                    return;
                }
            }
        }
    }
}

/// Keeps a look's finding in `looks`.
fn record(
    looks: &mut HashMap<(String, i32), Look>,
    topic: &str,
    p: i32,
    position: i64,
    caught_up: bool,
) {
    let look = Look {
        caught_up,
        position,
        at: Instant::now(),
    };
    looks.insert((topic.to_string(), p), look);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_counts_only_from_its_own_position_and_until_it_is_stale() {
        let mut c = CatchUp::new(&Brokers::plaintext("127.0.0.1:9"));
        assert!(c.due("in", 0, 10), "never looked at");
        assert!(!c.is_caught_up("in", 0, 10), "unknown is not caught up");
        record(&mut c.looks, "in", 0, 10, true);
        assert!(!c.due("in", 0, 10), "just looked at");
        assert!(c.is_caught_up("in", 0, 10));
        assert!(c.due("in", 0, 11), "the position moved");
        assert!(!c.is_caught_up("in", 0, 11), "a look from another position");
        assert!(!c.is_caught_up("in", 1, 10), "another partition");
        record(&mut c.looks, "in", 0, 11, false);
        assert!(!c.is_caught_up("in", 0, 11), "data waits");
        let stale = Instant::now()
            .checked_sub(VALID_FOR)
            .expect("a clock past boot");
        c.looks.get_mut(&("in".to_string(), 0)).unwrap().at = stale;
        c.looks.get_mut(&("in".to_string(), 0)).unwrap().caught_up = true;
        assert!(c.due("in", 0, 11), "stale");
        assert!(!c.is_caught_up("in", 0, 11), "stale");
    }
}
