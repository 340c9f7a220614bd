//! A rogue group member for the wedge tests: it joins a consumer group through the Kafka protocol
//! itself (JoinGroup, SyncGroup, Heartbeat), and when it leads a generation it assigns no
//! partition to anyone, or (`keeping`) takes some partitions itself and never consumes them. A
//! group it leads owns nothing, or leaves those partitions without progress, and stays so with no
//! member failing: the shapes of the stalls the test broker brought under static membership, made
//! on purpose.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, LeaveGroupResponse, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tidemark::kafka::raw_log::RawClient;

const MEMBER_ID_REQUIRED: i16 = 79;
/// The assignor the rogue joins with: the members' default, so the group has a protocol in common.
const PROTOCOL: &str = "range";

fn subscription(topics: &[String]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(topics.len() as i32);
    for t in topics {
        b.put_i16(t.len() as i16);
        b.extend_from_slice(t.as_bytes());
    }
    b.put_i32(-1);
    b.freeze()
}

/// The consumer protocol's assignment (version 0) of `partitions` of `topic`; of nothing when
/// `partitions` is empty.
fn assignment(topic: &str, partitions: &[i32]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    if partitions.is_empty() {
        b.put_i32(0);
    } else {
        b.put_i32(1);
        b.put_i16(topic.len() as i16);
        b.extend_from_slice(topic.as_bytes());
        b.put_i32(partitions.len() as i32);
        for p in partitions {
            b.put_i32(*p);
        }
    }
    b.put_i32(-1);
    b.freeze()
}

/// What a leading rogue hands out.
#[derive(Clone)]
struct Plan {
    /// The first topic's partition count.
    partitions: i32,
    /// The partitions of the first topic the rogue takes itself; empty: nobody gets anything.
    keep: Vec<i32>,
}

impl Plan {
    /// The assignment of each of `members` (the rogue is `me`).
    fn assign(&self, topic: &str, members: &[String], me: &str) -> Vec<(String, Bytes)> {
        let others: Vec<&String> = members.iter().filter(|m| *m != me).collect();
        members
            .iter()
            .map(|m| {
                let mine: Vec<i32> = if self.keep.is_empty() {
                    Vec::new()
                } else if m == me {
                    self.keep.clone()
                } else {
                    let i = others.iter().position(|o| *o == m).unwrap_or(0);
                    (0..self.partitions)
                        .filter(|p| !self.keep.contains(p))
                        .enumerate()
                        .filter(|(n, _)| n % others.len().max(1) == i)
                        .map(|(_, p)| p)
                        .collect()
                };
                (m.clone(), assignment(topic, &mine))
            })
            .collect()
    }
}

/// A running rogue member.
pub struct Rogue {
    stop: Arc<AtomicBool>,
    /// Set with `stop` by [`Rogue::die`]: the rogue goes silent without leaving.
    die: Arc<AtomicBool>,
    /// Generations the rogue led and assigned nothing in.
    pub led: Arc<AtomicUsize>,
    handle: Option<JoinHandle<()>>,
}

impl Rogue {
    /// Joins `group` on `broker` (the group's coordinator: the test broker is a single node),
    /// subscribed to `topics`, and keeps its membership alive, assigning nothing when it leads.
    pub fn start(broker: &str, group: &str, topics: &[&str]) -> Rogue {
        Self::run(
            broker,
            group,
            topics,
            Plan {
                partitions: 0,
                keep: Vec::new(),
            },
        )
    }

    /// As [`Rogue::start`], but when it leads it takes `keep` of the first topic's `partitions`
    /// itself (and never consumes them) and shares the rest among the other members.
    pub fn keeping(
        broker: &str,
        group: &str,
        topics: &[&str],
        partitions: i32,
        keep: &[i32],
    ) -> Rogue {
        Self::run(
            broker,
            group,
            topics,
            Plan {
                partitions,
                keep: keep.to_vec(),
            },
        )
    }

    fn run(broker: &str, group: &str, topics: &[&str], plan: Plan) -> Rogue {
        let mut conn = RawClient::connect(broker).unwrap();
        conn.set_read_timeout(Duration::from_secs(60)).unwrap();
        let group = group.to_string();
        let topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let die = Arc::new(AtomicBool::new(false));
        let led = Arc::new(AtomicUsize::new(0));
        let (s, l, d) = (stop.clone(), led.clone(), die.clone());
        let handle = std::thread::spawn(move || {
            let gid = || GroupId(StrBytes::from_string(group.clone()));
            let mut member_id = String::new();
            'join: while !s.load(Ordering::Relaxed) {
                let req = JoinGroupRequest::default()
                    .with_group_id(gid())
                    .with_session_timeout_ms(10_000)
                    .with_rebalance_timeout_ms(10_000)
                    .with_member_id(StrBytes::from_string(member_id.clone()))
                    .with_protocol_type(StrBytes::from_static_str("consumer"))
                    .with_protocols(vec![JoinGroupRequestProtocol::default()
                        .with_name(StrBytes::from_static_str(PROTOCOL))
                        .with_metadata(subscription(&topics))]);
                let resp: JoinGroupResponse = conn.request(ApiKey::JoinGroup, 5, &req).unwrap();
                eprintln!(
                    "rogue: join error {} generation {} leader {} me {} members {}",
                    resp.error_code,
                    resp.generation_id,
                    resp.leader.as_str(),
                    resp.member_id.as_str(),
                    resp.members.len()
                );
                member_id = resp.member_id.to_string();
                if resp.error_code == MEMBER_ID_REQUIRED {
                    continue;
                }
                if resp.error_code != 0 {
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
                let leader = resp.leader.as_str() == member_id;
                let assignments = if leader {
                    let members: Vec<String> = resp
                        .members
                        .iter()
                        .map(|m| m.member_id.to_string())
                        .collect();
                    plan.assign(&topics[0], &members, &member_id)
                        .into_iter()
                        .map(|(m, a)| {
                            SyncGroupRequestAssignment::default()
                                .with_member_id(StrBytes::from_string(m))
                                .with_assignment(a)
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                let req = SyncGroupRequest::default()
                    .with_group_id(gid())
                    .with_generation_id(resp.generation_id)
                    .with_member_id(StrBytes::from_string(member_id.clone()))
                    .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
                    .with_protocol_name(Some(StrBytes::from_static_str(PROTOCOL)))
                    .with_assignments(assignments);
                let sync: SyncGroupResponse = conn.request(ApiKey::SyncGroup, 3, &req).unwrap();
                if sync.error_code != 0 {
                    continue;
                }
                if leader {
                    l.fetch_add(1, Ordering::SeqCst);
                }
                while !s.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(500));
                    let req = HeartbeatRequest::default()
                        .with_group_id(gid())
                        .with_generation_id(resp.generation_id)
                        .with_member_id(StrBytes::from_string(member_id.clone()));
                    let hb: HeartbeatResponse = conn.request(ApiKey::Heartbeat, 3, &req).unwrap();
                    if hb.error_code != 0 {
                        // A rebalance (or a generation that moved on): join again.
                        continue 'join;
                    }
                }
            }
            if d.load(Ordering::Relaxed) {
                return;
            }
            let req = LeaveGroupRequest::default()
                .with_group_id(gid())
                .with_members(vec![
                    MemberIdentity::default().with_member_id(StrBytes::from_string(member_id))
                ]);
            let left: LeaveGroupResponse = conn.request(ApiKey::LeaveGroup, 3, &req).unwrap();
            eprintln!(
                "rogue: left with error {} {:?}",
                left.error_code,
                left.members
                    .iter()
                    .map(|m| m.error_code)
                    .collect::<Vec<_>>()
            );
        });
        Rogue {
            stop,
            die,
            led,
            handle: Some(handle),
        }
    }

    /// Goes silent without leaving, as a member killed with SIGKILL does: no more heartbeats.
    pub fn die(mut self) {
        self.die.store(true, Ordering::Relaxed);
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
    }

    /// Leaves the group (LeaveGroup) and stops.
    pub fn leave(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
    }
}
