//! Who owns what in a consumer group, read from the group's own description, and the rule that
//! calls a group wedged.
//!
//! A group can stop assigning partitions without failing anyone: static members killed and
//! restarted in quick succession have joined a generation that never assigned a partition again
//! ([`super::quirks::STATIC_PHANTOM_LEADER`]), and ran for minutes with no output and no error. A member therefore looks,
//! from outside its own consumer, at what the group's members own (their assignments, in the
//! consumer protocol's encoding, from the group description) against the partitions of the topics
//! the pipeline reads, and calls the group wedged when some partition has had no owner for longer
//! than [`WedgeWatch`]'s bound.

use super::raw_log::{connect, RawClient, RawLogError};
use super::secure::Brokers;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::{
    ApiKey, FindCoordinatorRequest, FindCoordinatorResponse, GroupId, LeaveGroupRequest,
    LeaveGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use std::collections::{BTreeMap, BTreeSet};

/// Why a member's assignment does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("consumer protocol assignment: {0}")]
pub struct AssignmentError(String);

/// A big-endian reader over the consumer protocol's bytes.
///
/// `kafka-protocol` has the message (`ConsumerProtocolAssignment`), but its decoder reserves the
/// declared length of an array before reading it (`Vec::with_capacity(n)` in 0.18): a corrupt or
/// hostile length in a group description (`0x7f000000` topics) would abort the process on
/// allocation. This reader bounds every length by the bytes left, so such an assignment is an
/// error (`assignments_decode_in_every_version` shows it).
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], AssignmentError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or_else(|| AssignmentError("truncated".into()))?;
        self.0 = rest;
        Ok(*head)
    }
    fn i16(&mut self) -> Result<i16, AssignmentError> {
        Ok(i16::from_be_bytes(self.take()?))
    }
    fn i32(&mut self) -> Result<i32, AssignmentError> {
        Ok(i32::from_be_bytes(self.take()?))
    }
    fn string(&mut self) -> Result<String, AssignmentError> {
        let n = self.i16()?;
        let n = usize::try_from(n).map_err(|_| AssignmentError("a null topic name".into()))?;
        if self.0.len() < n {
            return Err(AssignmentError("truncated".into()));
        }
        let (s, rest) = self.0.split_at(n);
        self.0 = rest;
        String::from_utf8(s.to_vec()).map_err(|_| AssignmentError("a topic name not UTF-8".into()))
    }
    /// An array's length (-1, null, reads as empty).
    fn count(&mut self) -> Result<usize, AssignmentError> {
        let n = self.i32()?;
        if n < -1 || n as i64 > self.0.len() as i64 {
            return Err(AssignmentError(format!("an array of {n} elements")));
        }
        Ok(n.max(0) as usize)
    }
}

/// Decodes a member's assignment as the consumer protocol encodes it (KIP-429's
/// `ConsumerProtocolAssignment`, every version: version, then topics with their partitions; the
/// user data and anything after are not needed). Empty bytes are an empty assignment.
pub fn parse_assignment(bytes: &[u8]) -> Result<Vec<(String, Vec<i32>)>, AssignmentError> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let mut r = Reader(bytes);
    let version = r.i16()?;
    if version < 0 {
        return Err(AssignmentError(format!("version {version}")));
    }
    let topics = r.count()?;
    let mut out = Vec::with_capacity(topics);
    for _ in 0..topics {
        let topic = r.string()?;
        let n = r.count()?;
        let mut partitions = Vec::with_capacity(n);
        for _ in 0..n {
            partitions.push(r.i32()?);
        }
        out.push((topic, partitions));
    }
    Ok(out)
}

/// The partitions of `topics` (name → partition count) that no assignment holds, sorted.
pub fn unowned(
    topics: &BTreeMap<String, i32>,
    assignments: &[Vec<(String, Vec<i32>)>],
) -> Vec<(String, i32)> {
    let owned: BTreeSet<(&str, i32)> = assignments
        .iter()
        .flatten()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (t.as_str(), *p)))
        .collect();
    topics
        .iter()
        .flat_map(|(t, n)| (0..*n).map(move |p| (t, p)))
        .filter(|(t, p)| !owned.contains(&(t.as_str(), *p)))
        .map(|(t, p)| (t.clone(), p))
        .collect()
}

/// What one look at the group says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every partition has an owner.
    Owned,
    /// Some partition has had no owner for this long (ms), within the bound.
    Waiting(i64),
    /// Some partition has had no owner for longer than the bound: the group is wedged.
    Wedged,
}

/// Calls a group wedged when some partition has had no owner, in every look, for longer than a
/// bound. A rebalance leaves partitions without an owner for a moment, and under a run of restarts
/// one rebalance follows another; but each partition finds an owner between them. A dead member's
/// stay in the group ends after one session timeout, so the bound is a few session timeouts (the
/// coordinator takes three).
///
/// A wedge starts the watch again with twice the bound (up to [`MAX_BACKOFF`] times the first),
/// so that the next call waits longer when the rejoin it brought did not help (a partition that
/// is slow rather than ownerless, a long restore, is not rebalanced again and again); a look with
/// every partition owned brings the first bound back.
#[derive(Debug, Clone)]
pub struct WedgeWatch {
    first_ms: i64,
    bound_ms: i64,
    /// Since when (ms) each partition has been without an owner in every look.
    since: BTreeMap<(String, i32), i64>,
}

/// The longest bound of a [`WedgeWatch`], as a multiple of its first.
pub const MAX_BACKOFF: i64 = 16;

impl WedgeWatch {
    /// A watch that calls the group wedged after `bound_ms` without an owner.
    pub fn new(bound_ms: i64) -> WedgeWatch {
        WedgeWatch {
            first_ms: bound_ms,
            bound_ms,
            since: BTreeMap::new(),
        }
    }

    /// Takes a look at `now` (ms) that found the partitions `unowned` without an owner.
    pub fn observe(&mut self, now: i64, unowned: &[(String, i32)]) -> Verdict {
        let now_unowned: BTreeSet<&(String, i32)> = unowned.iter().collect();
        self.since.retain(|p, _| now_unowned.contains(p));
        for p in unowned {
            self.since.entry(p.clone()).or_insert(now);
        }
        let Some(oldest) = self.since.values().min() else {
            self.bound_ms = self.first_ms;
            return Verdict::Owned;
        };
        let waited = now - oldest;
        if waited > self.bound_ms {
            // What was seen before the rejoin this brings no longer counts.
            self.since.clear();
            self.bound_ms = (self.bound_ms * 2).min(self.first_ms * MAX_BACKOFF);
            Verdict::Wedged
        } else {
            Verdict::Waiting(waited)
        }
    }
}

/// Where one partition stands at one look, for a broker whose group descriptions say nothing of
/// ownership: the group's committed offset (a hint the commit cycle writes into each
/// transaction; `None` before the first commit) and whether the raw log holds a data record at or
/// after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    /// The group's committed offset.
    pub committed: Option<i64>,
    /// Whether a data record lies at or after it.
    pub data_after: bool,
}

/// Finds stalled partitions when ownership cannot be read
/// ([`super::quirks::DESCRIPTIONS_WITHOUT_ASSIGNMENTS`]): a partition is stalled at a look when the log holds work for it (a data record at
/// or after its committed offset) and its committed offset has not moved since the previous look.
/// A partition that stays stalled for longer than [`WedgeWatch`]'s bound has had no owner making
/// progress on it for that long, whoever the broker thinks owns it.
#[derive(Debug, Clone, Default)]
pub struct StallWatch {
    last: BTreeMap<(String, i32), Option<i64>>,
}

impl StallWatch {
    /// Takes a look that found `standings`; returns the partitions stalled at this look, sorted.
    /// A partition seen for the first time is not stalled yet (nothing to compare with).
    pub fn observe(&mut self, standings: &BTreeMap<(String, i32), Standing>) -> Vec<(String, i32)> {
        let stalled = standings
            .iter()
            .filter(|(p, s)| s.data_after && self.last.get(*p) == Some(&s.committed))
            .map(|(p, _)| p.clone())
            .collect();
        self.last = standings
            .iter()
            .map(|(p, s)| (p.clone(), s.committed))
            .collect();
        stalled
    }
}

/// How many times [`WedgeWatch`]'s bound a member that holds partitions waits before it acts on a
/// stall of partitions it does not hold ([`BlindWatch`]).
pub const HOLDER_FACTOR: i64 = 2;

/// Calls a group wedged from the log alone, for a broker that cannot say who owns what: from the
/// partitions a [`StallWatch`] finds stalled and the partitions this member holds.
///
/// - A stalled partition this member holds is never its cause to act: this member is that
///   partition's progress (a long restore is slow, not ownerless), and rejoining would not help it.
/// - A member that holds nothing acts on the others after the bound.
/// - A member that holds partitions acts on the others after [`HOLDER_FACTOR`] times the bound:
///   a rejoin of a member that holds partitions rebalances the whole group, so it waits for the
///   members that hold nothing to try first; but when every live member holds partitions (a
///   broker has given a partition to a member that never took it up) only they can act.
#[derive(Debug, Clone)]
pub struct BlindWatch {
    idle: WedgeWatch,
    holding: WedgeWatch,
}

impl BlindWatch {
    /// A watch whose members that hold nothing act after `bound_ms`.
    pub fn new(bound_ms: i64) -> BlindWatch {
        BlindWatch {
            idle: WedgeWatch::new(bound_ms),
            holding: WedgeWatch::new(bound_ms * HOLDER_FACTOR),
        }
    }

    /// Takes a look at `now` (ms) that found `stalled` while this member held `held`; returns
    /// the verdict and the stalled partitions this member does not hold.
    pub fn observe(
        &mut self,
        now: i64,
        stalled: &[(String, i32)],
        held: &BTreeSet<(String, i32)>,
    ) -> (Verdict, Vec<(String, i32)>) {
        let others: Vec<(String, i32)> = stalled
            .iter()
            .filter(|p| !held.contains(*p))
            .cloned()
            .collect();
        let (acting, resting) = if held.is_empty() {
            (&mut self.idle, &mut self.holding)
        } else {
            (&mut self.holding, &mut self.idle)
        };
        resting.observe(now, &[]);
        (acting.observe(now, &others), others)
    }
}

/// A client of `group`'s coordinator.
pub(crate) fn coordinator(brokers: &Brokers, group: &str) -> Result<RawClient, RawLogError> {
    let mut client = connect(brokers)?;
    let found: FindCoordinatorResponse = client.request(
        ApiKey::FindCoordinator,
        2,
        &FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(group.to_string()))
            .with_key_type(0),
    )?;
    if found.error_code != 0 {
        return Err(RawLogError::Broker {
            code: found.error_code,
            what: format!("finding the coordinator of group {group}"),
        });
    }
    RawClient::open(
        &format!("{}:{}", found.host.as_str(), found.port),
        brokers.security(),
    )
}

/// Removes static members from `group` by their instance ids, as Kafka's admin
/// `removeMembersFromConsumerGroup` does (KIP-345: a LeaveGroup, version 3, naming instance ids, to
/// the group's coordinator). A static member does not leave when it stops; this is how its
/// registration goes before it expires. Fails on a broker without LeaveGroup version 3. A broker
/// that removes a leaving member by member id only ([`super::quirks::LEAVE_BY_INSTANCE_ID_IGNORED`])
/// answers UNKNOWN_MEMBER_ID here and removes nothing: the registration lasts until its session
/// lapses. Returns how many members the broker says it removed.
pub fn remove_static_members(
    brokers: impl Into<Brokers>,
    group: &str,
    instance_ids: &[&str],
) -> Result<usize, RawLogError> {
    let resp: LeaveGroupResponse = coordinator(&brokers.into(), group)?.request(
        ApiKey::LeaveGroup,
        3,
        &LeaveGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_members(
                instance_ids
                    .iter()
                    .map(|id| {
                        MemberIdentity::default()
                            .with_member_id(StrBytes::from_static_str(""))
                            .with_group_instance_id(Some(StrBytes::from_string(id.to_string())))
                    })
                    .collect(),
            ),
    )?;
    let code = if resp.error_code != 0 {
        resp.error_code
    } else {
        // UNKNOWN_MEMBER_ID (25) for one that is gone already is what was wanted.
        resp.members
            .iter()
            .map(|m| m.error_code)
            .find(|c| *c != 0 && *c != 25)
            .unwrap_or(0)
    };
    if code != 0 {
        return Err(RawLogError::Broker {
            code,
            what: format!("removing static members {instance_ids:?} from group {group}"),
        });
    }
    Ok(resp.members.iter().filter(|m| m.error_code == 0).count())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The consumer protocol's encoding of an assignment, as a broker hands it over.
    fn encode(version: i16, topics: &[(&str, &[i32])], user_data: Option<&[u8]>) -> Vec<u8> {
        let mut out = version.to_be_bytes().to_vec();
        out.extend_from_slice(&(topics.len() as i32).to_be_bytes());
        for (t, ps) in topics {
            out.extend_from_slice(&(t.len() as i16).to_be_bytes());
            out.extend_from_slice(t.as_bytes());
            out.extend_from_slice(&(ps.len() as i32).to_be_bytes());
            for p in *ps {
                out.extend_from_slice(&p.to_be_bytes());
            }
        }
        match user_data {
            Some(d) => {
                out.extend_from_slice(&(d.len() as i32).to_be_bytes());
                out.extend_from_slice(d);
            }
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        }
        out
    }

    fn standing(committed: Option<i64>, data_after: bool) -> Standing {
        Standing {
            committed,
            data_after,
        }
    }

    #[test]
    fn a_partition_is_stalled_when_its_offset_stays_put_while_the_log_holds_work() {
        let p = |n| ("web".to_string(), n);
        let mut w = StallWatch::default();
        let look = |a: Standing, b: Standing| BTreeMap::from([(p(0), a), (p(1), b)]);
        // First look: nothing to compare with.
        assert!(w
            .observe(&look(standing(Some(5), true), standing(None, true)))
            .is_empty());
        // Partition 0 moved; partition 1 has work and never committed.
        assert_eq!(
            w.observe(&look(standing(Some(9), true), standing(None, true))),
            vec![p(1)]
        );
        // Partition 0 stays put with work after it; partition 1 stays put but is caught up.
        assert_eq!(
            w.observe(&look(standing(Some(9), true), standing(None, false))),
            vec![p(0)]
        );
        // Both move or are caught up: nothing stalled.
        assert!(w
            .observe(&look(standing(Some(12), true), standing(Some(3), false)))
            .is_empty());
    }

    #[test]
    fn stalled_looks_for_longer_than_the_bound_call_the_group_wedged() {
        let p = |n| ("web".to_string(), n);
        let mut stall = StallWatch::default();
        let mut wedge = WedgeWatch::new(10_000);
        let stuck = BTreeMap::from([(p(0), standing(Some(4), true))]);
        let mut verdicts = Vec::new();
        for t in 0..8 {
            let stalled = stall.observe(&stuck);
            verdicts.push(wedge.observe(t * 2_000, &stalled));
        }
        assert_eq!(
            verdicts[0],
            Verdict::Owned,
            "the first look compares nothing"
        );
        assert_eq!(verdicts[1], Verdict::Waiting(0));
        assert_eq!(verdicts[6], Verdict::Waiting(10_000));
        assert_eq!(verdicts[7], Verdict::Wedged);
        // Progress at any look starts the wait again.
        let moved = BTreeMap::from([(p(0), standing(Some(5), true))]);
        assert_eq!(
            wedge.observe(16_000, &stall.observe(&moved)),
            Verdict::Owned
        );
    }

    #[test]
    fn a_member_holding_partitions_acts_on_others_stalls_later_and_never_on_its_own() {
        let p = |n| ("web".to_string(), n);
        let stalled = vec![p(0), p(1)];
        let verdicts = |held: BTreeSet<(String, i32)>| {
            let mut w = BlindWatch::new(10_000);
            (0..=12)
                .map(|t| w.observe(t * 2_000, &stalled, &held))
                .collect::<Vec<_>>()
        };
        // Holding nothing: both partitions count, wedged after the bound.
        let idle = verdicts(BTreeSet::new());
        assert_eq!(idle[0], (Verdict::Waiting(0), stalled.clone()));
        assert_eq!(idle[5].0, Verdict::Waiting(10_000));
        assert_eq!(idle[6].0, Verdict::Wedged);
        // Holding partition 0: only partition 1 counts, wedged after twice the bound.
        let holding = verdicts(BTreeSet::from([p(0)]));
        assert_eq!(holding[0], (Verdict::Waiting(0), vec![p(1)]));
        assert_eq!(holding[10].0, Verdict::Waiting(20_000));
        assert_eq!(holding[11].0, Verdict::Wedged);
        // Holding both: its own stalls are never a cause.
        let own = verdicts(BTreeSet::from([p(0), p(1)]));
        assert!(own.iter().all(|v| *v == (Verdict::Owned, vec![])));
        // Taking partitions up starts the wait again under the longer bound.
        let mut w = BlindWatch::new(10_000);
        assert_eq!(
            w.observe(0, &[p(1)], &BTreeSet::new()).0,
            Verdict::Waiting(0)
        );
        assert_eq!(
            w.observe(8_000, &[p(1)], &BTreeSet::from([p(0)])).0,
            Verdict::Waiting(0)
        );
        assert_eq!(
            w.observe(28_000, &[p(1)], &BTreeSet::from([p(0)])).0,
            Verdict::Waiting(20_000)
        );
        assert_eq!(
            w.observe(30_000, &[p(1)], &BTreeSet::from([p(0)])).0,
            Verdict::Wedged
        );
    }

    #[test]
    fn assignments_decode_in_every_version() {
        for version in [0, 1, 3] {
            let bytes = encode(version, &[("web", &[0, 2]), ("app", &[])], Some(b"x"));
            assert_eq!(
                parse_assignment(&bytes).unwrap(),
                vec![("web".to_string(), vec![0, 2]), ("app".to_string(), vec![])]
            );
        }
        assert_eq!(parse_assignment(&[]).unwrap(), vec![]);
        let bytes = encode(0, &[("web", &[0, 2])], None);
        assert!(parse_assignment(&bytes[..bytes.len() - 7]).is_err(), "cut");
        assert!(
            parse_assignment(&[0xff, 0xff, 0, 0, 0, 0]).is_err(),
            "version -1"
        );
        assert!(
            parse_assignment(&[0, 0, 0x7f, 0, 0, 0]).is_err(),
            "more topics than bytes"
        );
    }

    #[test]
    fn unowned_partitions_are_those_no_member_holds() {
        let topics = BTreeMap::from([("web".to_string(), 3), ("app".to_string(), 2)]);
        let a = vec![("web".to_string(), vec![0, 2])];
        let b = vec![("app".to_string(), vec![1]), ("other".to_string(), vec![0])];
        assert_eq!(
            unowned(&topics, &[a.clone(), b.clone()]),
            vec![("app".to_string(), 0), ("web".to_string(), 1)]
        );
        assert_eq!(unowned(&topics, &[]).len(), 5, "no member: nothing owned");
        let all = vec![
            ("web".to_string(), vec![0, 1, 2]),
            ("app".to_string(), vec![0, 1]),
        ];
        assert!(unowned(&topics, &[all]).is_empty());
    }

    #[test]
    fn a_group_is_wedged_only_when_one_partition_stays_without_an_owner() {
        let p = |n: i32| ("web".to_string(), n);
        let mut w = WedgeWatch::new(1_000);
        assert_eq!(w.observe(0, &[]), Verdict::Owned);
        assert_eq!(w.observe(100, &[p(0), p(1)]), Verdict::Waiting(0));
        assert_eq!(w.observe(1_100, &[p(0), p(1)]), Verdict::Waiting(1_000));
        // One look with every partition owned starts the count again.
        assert_eq!(w.observe(1_150, &[]), Verdict::Owned);
        assert_eq!(w.observe(1_200, &[p(0)]), Verdict::Waiting(0));
        // Partitions that take turns without an owner (rebalance after rebalance) are not a
        // wedge: each found an owner in between.
        assert_eq!(w.observe(1_900, &[p(1)]), Verdict::Waiting(0));
        assert_eq!(w.observe(2_600, &[p(0)]), Verdict::Waiting(0));
        assert_eq!(w.observe(3_300, &[p(0), p(1)]), Verdict::Waiting(700));
        assert_eq!(w.observe(3_600, &[p(0)]), Verdict::Waiting(1_000));
        assert_eq!(w.observe(3_700, &[p(0)]), Verdict::Wedged);
        assert_eq!(w.observe(3_800, &[p(0)]), Verdict::Waiting(0));
    }

    #[test]
    fn each_wedge_without_progress_doubles_the_bound_until_a_look_finds_every_owner() {
        let p = |n: i32| ("web".to_string(), n);
        let mut w = WedgeWatch::new(1_000);
        let mut wedged_at = Vec::new();
        for t in (0..40_000).step_by(100) {
            if w.observe(t, &[p(0)]) == Verdict::Wedged {
                wedged_at.push(t);
            }
        }
        // Bounds of 1, 2, 4, 8, 16, then 16 s again (the most): each wedge is called one look
        // after the bound has passed, and the next count starts at the look after it.
        assert_eq!(wedged_at, vec![1_100, 3_300, 7_500, 15_700, 31_900]);
        // Every partition owned at one look: the first bound again.
        assert_eq!(w.observe(40_000, &[]), Verdict::Owned);
        assert_eq!(w.observe(40_100, &[p(0)]), Verdict::Waiting(0));
        assert_eq!(w.observe(41_200, &[p(0)]), Verdict::Wedged);
    }
}
