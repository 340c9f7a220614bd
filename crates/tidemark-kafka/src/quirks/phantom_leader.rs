//! The remedy for [`super::STATIC_PHANTOM_LEADER`]: find a group leader that is no member, and
//! make the broker drop it, with raw requests to the group's coordinator.

use crate::group::coordinator;
use crate::raw_log::{RawClient, RawLogError};
use crate::secure::Brokers;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::{
    ApiKey, DescribeGroupsRequest, DescribeGroupsResponse, GroupId, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse,
};
use kafka_protocol::protocol::StrBytes;

/// What [`clear`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderCheck {
    /// The group has no leader, or its leader is one of its members: nothing to clear.
    Member,
    /// The group's leader was not one of its members; tidemark joined under its id so the broker
    /// would drop it.
    Cleared(String),
}

/// Whether `leader`, as a JoinGroup answer names it, is a phantom: not one of the group's
/// `members` (as its description lists them) and not the probe that asked.
pub fn is_phantom(leader: &str, members: &[String], probe: &str) -> bool {
    !leader.is_empty() && leader != probe && !members.iter().any(|m| m == leader)
}

/// The consumer protocol's subscription to nothing (version 0, no topics, no user data): what a
/// probe joins with.
const EMPTY_SUBSCRIPTION: [u8; 10] = [0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];

/// Clears a phantom leader from `group`: a leader that is no longer a member, which a broker can
/// keep after evicting it ([`super::STATIC_PHANTOM_LEADER`]). Every member then joins a
/// generation whose leader never hands out assignments, and every SyncGroup answers
/// REBALANCE_IN_PROGRESS for ever. Kafka itself elects a new leader instead.
///
/// 1. Describe the group (its members and protocol).
/// 2. Join as a dynamic probe (twice: the first answer hands out a member id) and read the leader
///    the answer names.
/// 3. If that leader is a phantom ([`is_phantom`]), join under its id: the broker lists it as a
///    member again, with a last contact of now.
/// 4. Wait out the session timeout, then leave as the probe. The broker looks for missed
///    heartbeats first: it evicts the phantom again, this time while the group is forming, where
///    evicting the leader clears it, so the next member to join leads.
///
/// Only for a group that is already wedged: on a healthy group the probe's joins would start a
/// rebalance.
pub fn clear(
    brokers: &Brokers,
    group: &str,
    session_timeout: std::time::Duration,
) -> Result<LeaderCheck, RawLogError> {
    let mut c = coordinator(brokers, group)?;
    // A join can be held for the whole rebalance.
    c.set_read_timeout(session_timeout * 2 + std::time::Duration::from_secs(30))?;
    let gid = || GroupId(StrBytes::from_string(group.to_string()));
    // 1.
    let described: DescribeGroupsResponse = c.request(
        ApiKey::DescribeGroups,
        1,
        &DescribeGroupsRequest::default().with_groups(vec![gid()]),
    )?;
    let Some(g) = described.groups.first() else {
        return Ok(LeaderCheck::Member);
    };
    let members: Vec<String> = g.members.iter().map(|m| m.member_id.to_string()).collect();
    // The group's protocol first when it names one; a forming group takes a join only in it.
    let mut protocols: Vec<String> = vec![g.protocol_data.to_string()];
    for p in ["cooperative-sticky", "range", "roundrobin"] {
        if !protocols.iter().any(|q| q == p) {
            protocols.push(p.to_string());
        }
    }
    protocols.retain(|p| !p.is_empty());
    let join = |c: &mut RawClient, member: &str| -> Result<JoinGroupResponse, RawLogError> {
        c.request(
            ApiKey::JoinGroup,
            5,
            &JoinGroupRequest::default()
                .with_group_id(gid())
                .with_session_timeout_ms(session_timeout.as_millis() as i32)
                .with_rebalance_timeout_ms(session_timeout.as_millis() as i32)
                .with_member_id(StrBytes::from_string(member.to_string()))
                .with_protocol_type(StrBytes::from_static_str("consumer"))
                .with_protocols(
                    protocols
                        .iter()
                        .map(|p| {
                            JoinGroupRequestProtocol::default()
                                .with_name(StrBytes::from_string(p.clone()))
                                .with_metadata(bytes::Bytes::from_static(&EMPTY_SUBSCRIPTION))
                        })
                        .collect(),
                ),
        )
    };
    // 2.
    let first = join(&mut c, "")?;
    let probe = first.member_id.to_string();
    if probe.is_empty() {
        return Ok(LeaderCheck::Member);
    }
    let answer = join(&mut c, &probe)?;
    let leader = answer.leader.to_string();
    let verdict = if answer.error_code == 0 && is_phantom(&leader, &members, &probe) {
        // 3.
        join(&mut c, &leader)?;
        // 4.
        std::thread::sleep(session_timeout + std::time::Duration::from_millis(500));
        LeaderCheck::Cleared(leader)
    } else {
        LeaderCheck::Member
    };
    let _: LeaveGroupResponse = c.request(
        ApiKey::LeaveGroup,
        3,
        &LeaveGroupRequest::default()
            .with_group_id(gid())
            .with_members(vec![MemberIdentity::default()
                .with_member_id(StrBytes::from_string(probe))
                .with_group_instance_id(None)]),
    )?;
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_is_a_phantom_only_when_no_member_and_not_the_probe() {
        let members = vec!["m1-a".to_string(), "m2-b".to_string()];
        assert!(is_phantom("m3-gone", &members, "probe"));
        assert!(!is_phantom("m1-a", &members, "probe"));
        assert!(
            !is_phantom("probe", &members, "probe"),
            "the probe leads: no phantom"
        );
        assert!(!is_phantom("", &members, "probe"), "no leader yet");
        assert!(is_phantom("m1-a", &[], "probe"));
    }
}
