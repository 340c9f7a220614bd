//! The test broker's phantom leader, made on purpose and cleared by the group watchdog's remedy
//! (`kafka::quirks::phantom_leader::clear`).
//!
//! Tansu 0.6 keeps a formed group's leader after a heartbeat evicts it. When a member then joins,
//! the group forms again under that leader, who is gone: every SyncGroup answers
//! REBALANCE_IN_PROGRESS and no member is ever assigned anything. This is how the chaos runs with
//! static members wedged: a static member's heartbeat evicts the leader without the step that
//! clears a formed group's leader (a dynamic member's heartbeat takes that step). The test drives
//! three members by hand with raw protocol requests, so each step is the broker's answer and not
//! a client library's retry: it forms a group under A, lets A's heartbeats stop until static B's
//! heartbeat evicts it, lets C join, and checks the wedge (syncs refused, the leader named A). Then the remedy runs, and the test checks that a member
//! leads again and can hand out assignments.

use crate::common;

use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
    SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use std::time::{Duration, Instant};
use tidemark::kafka::quirks::phantom_leader::{clear as clear_phantom_leader, LeaderCheck};
use tidemark::kafka::raw_log::RawClient;

const GROUP: &str = "phantom";
const SESSION: Duration = Duration::from_secs(6);
/// The consumer protocol's subscription to nothing, and likewise its assignment of nothing (the
/// test broker takes an empty assignment for none and holds the sync).
const SUBSCRIPTION: [u8; 10] = [0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];
const REBALANCE_IN_PROGRESS: i16 = 27;

struct Member {
    client: RawClient,
    id: String,
    /// The static member's instance id.
    instance: Option<String>,
    generation: i32,
}

fn gid() -> GroupId {
    GroupId(StrBytes::from_static_str(GROUP))
}

impl Member {
    /// A new member, static with `instance`, else dynamic (whose first join hands out its id).
    fn new(addr: &str, instance: Option<&str>) -> Member {
        let mut client = RawClient::connect(addr).unwrap();
        client.set_read_timeout(Duration::from_secs(60)).unwrap();
        let mut m = Member {
            client,
            id: String::new(),
            instance: instance.map(str::to_string),
            generation: -1,
        };
        let first = m.join();
        let expected = if instance.is_some() { 0 } else { 79 };
        assert_eq!(first.error_code, expected, "{first:?}");
        m.id = first.member_id.to_string();
        m
    }

    fn instance(&self) -> Option<StrBytes> {
        self.instance.clone().map(StrBytes::from_string)
    }

    fn join(&mut self) -> JoinGroupResponse {
        let resp: JoinGroupResponse = self
            .client
            .request(
                ApiKey::JoinGroup,
                5,
                &JoinGroupRequest::default()
                    .with_group_id(gid())
                    .with_session_timeout_ms(SESSION.as_millis() as i32)
                    .with_rebalance_timeout_ms(SESSION.as_millis() as i32)
                    .with_member_id(StrBytes::from_string(self.id.clone()))
                    .with_group_instance_id(self.instance())
                    .with_protocol_type(StrBytes::from_static_str("consumer"))
                    .with_protocols(vec![JoinGroupRequestProtocol::default()
                        .with_name(StrBytes::from_static_str("range"))
                        .with_metadata(bytes::Bytes::from_static(&SUBSCRIPTION))]),
            )
            .unwrap();
        if resp.error_code == 0 {
            self.generation = resp.generation_id;
        }
        resp
    }

    /// Syncs; as the leader, hands every one of `members` an assignment of no partitions.
    fn sync(&mut self, members: &[String]) -> SyncGroupResponse {
        self.client
            .request(
                ApiKey::SyncGroup,
                3,
                &SyncGroupRequest::default()
                    .with_group_id(gid())
                    .with_generation_id(self.generation)
                    .with_member_id(StrBytes::from_string(self.id.clone()))
                    .with_group_instance_id(self.instance())
                    .with_assignments(
                        members
                            .iter()
                            .map(|m| {
                                SyncGroupRequestAssignment::default()
                                    .with_member_id(StrBytes::from_string(m.clone()))
                                    .with_assignment(bytes::Bytes::from_static(&SUBSCRIPTION))
                            })
                            .collect(),
                    ),
            )
            .unwrap()
    }

    fn heartbeat(&mut self) -> i16 {
        let resp: HeartbeatResponse = self
            .client
            .request(
                ApiKey::Heartbeat,
                3,
                &HeartbeatRequest::default()
                    .with_group_id(gid())
                    .with_generation_id(self.generation)
                    .with_member_id(StrBytes::from_string(self.id.clone()))
                    .with_group_instance_id(self.instance()),
            )
            .unwrap();
        resp.error_code
    }
}

/// The ids of the members a leader's join answer lists.
fn listed(resp: &JoinGroupResponse) -> Vec<String> {
    resp.members
        .iter()
        .map(|m| m.member_id.to_string())
        .collect()
}

#[test]
fn a_phantom_leader_wedges_the_group_until_the_watchdog_clears_it() {
    let broker = common::Broker::start();

    // A forms the group alone and leads it.
    let mut a = Member::new(&broker.addr, None);
    let joined = a.join();
    assert_eq!(
        (joined.error_code, joined.leader.as_str()),
        (0, a.id.as_str())
    );
    let synced = a.sync(&listed(&joined));
    assert_eq!(synced.error_code, 0, "{joined:?}\n{synced:?}");

    // B, a static member, joins; A, still leading, forms the group of two again.
    let mut b = Member::new(&broker.addr, Some("b"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let led = a.join();
        let followed = b.join();
        assert_eq!(followed.leader.as_str(), a.id.as_str());
        if led.error_code == 0
            && listed(&led).len() == 2
            && a.sync(&listed(&led)).error_code == 0
            && b.sync(&[]).error_code == 0
        {
            break;
        }
        assert!(Instant::now() < deadline, "A and B never formed a group");
    }

    // A falls silent. B's heartbeats go on until one of them evicts A. B is static, and a static
    // member's heartbeat evicts without the step that clears a formed group's leader.
    let deadline = Instant::now() + SESSION * 3;
    while b.heartbeat() == 0 {
        assert!(Instant::now() < deadline, "A was never evicted");
        std::thread::sleep(Duration::from_millis(500));
    }

    // C joins: the group forms again under A, who is gone. Nobody can be assigned anything.
    let mut c = Member::new(&broker.addr, None);
    for m in [&mut b, &mut c] {
        let joined = m.join();
        assert_eq!(joined.leader.as_str(), a.id.as_str(), "the phantom leads");
        assert_eq!(m.sync(&[]).error_code, REBALANCE_IN_PROGRESS);
    }

    // The remedy names the phantom and clears it.
    assert_eq!(
        clear_phantom_leader(&broker.addr.as_str().into(), GROUP, SESSION).unwrap(),
        LeaderCheck::Cleared(a.id.clone())
    );

    // The next member to join leads, and its sync hands out assignments again.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let joined = b.join();
        if joined.error_code == 0 && joined.leader.as_str() == b.id {
            let members = listed(&joined);
            assert!(!members.contains(&a.id), "{members:?}");
            assert_eq!(b.sync(&members).error_code, 0, "the new leader's sync");
            break;
        }
        assert_ne!(
            joined.leader.as_str(),
            a.id.as_str(),
            "the phantom still leads"
        );
        assert!(
            Instant::now() < deadline,
            "no member led within 60 s: {joined:?}"
        );
        // Another member leads: let it form the group, then try again.
        let other = c.join();
        if other.error_code == 0 && other.leader.as_str() == c.id {
            assert_eq!(
                c.sync(&listed(&other)).error_code,
                0,
                "the new leader's sync"
            );
            break;
        }
    }

    // A healthy group is left alone.
    assert_eq!(
        clear_phantom_leader(&broker.addr.as_str().into(), GROUP, SESSION).unwrap(),
        LeaderCheck::Member
    );
}
