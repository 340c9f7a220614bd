//! What a principal may do on a cluster, as the brokers report it (KIP-430): the operations
//! `Metadata` and `DescribeGroups` say are authorized on each topic and on a group, compared with
//! what tidemark needs there. The broker reports only what its authorizer allows; a broker
//! without one reports nothing, which is said as such rather than taken as a yes.

use crate::group::coordinator;
use crate::raw_log::{connect, RawLogError};
use crate::secure::Brokers;
use kafka_protocol::messages::describe_groups_request::DescribeGroupsRequest;
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::{
    ApiKey, DescribeGroupsResponse, GroupId, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

/// A Kafka ACL operation (its code is its bit in an authorized-operations field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    /// READ.
    Read = 3,
    /// WRITE.
    Write = 4,
    /// CREATE.
    Create = 5,
    /// DELETE.
    Delete = 6,
    /// DESCRIBE.
    Describe = 8,
}

impl Operation {
    /// The operation's name as Kafka's ACL tools write it.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Read => "READ",
            Operation::Write => "WRITE",
            Operation::Create => "CREATE",
            Operation::Delete => "DELETE",
            Operation::Describe => "DESCRIBE",
        }
    }
}

/// What the broker reports of one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every operation needed is authorized.
    Allowed,
    /// These operations are needed and not authorized.
    Missing(Vec<Operation>),
    /// The resource does not exist (a topic tidemark creates at its first start needs CREATE,
    /// which only the broker's answer to a creation tells).
    Absent,
    /// The principal may not even describe it.
    Denied,
    /// The broker does not report authorized operations (no authorizer, or an old broker).
    NotReported,
}

/// Kafka's "not requested / not supported" value of an authorized-operations field.
const NOT_REPORTED: i32 = i32::MIN;
/// Kafka's TOPIC_AUTHORIZATION_FAILED and GROUP_AUTHORIZATION_FAILED.
const TOPIC_DENIED: i16 = 29;
const GROUP_DENIED: i16 = 30;
/// Kafka's UNKNOWN_TOPIC_OR_PARTITION.
const UNKNOWN_TOPIC: i16 = 3;
/// The `Metadata` version that can ask for authorized operations (and is not flexible).
const METADATA_VERSION: i16 = 8;
/// The `DescribeGroups` version that can ask for them.
const DESCRIBE_GROUPS_VERSION: i16 = 3;

/// The verdict on a resource whose authorized-operations field is `authorized`, for `needed`.
pub fn judge(authorized: i32, needed: &[Operation]) -> Verdict {
    if authorized == NOT_REPORTED {
        return Verdict::NotReported;
    }
    let missing: Vec<Operation> = needed
        .iter()
        .copied()
        .filter(|op| authorized & (1 << *op as i32) == 0)
        .collect();
    if missing.is_empty() {
        Verdict::Allowed
    } else {
        Verdict::Missing(missing)
    }
}

/// The verdict on each of `topics` (name, operations needed), in order.
pub fn topics(
    brokers: &Brokers,
    topics: &[(String, Vec<Operation>)],
) -> Result<Vec<Verdict>, RawLogError> {
    let mut client = connect(brokers)?;
    let meta: MetadataResponse = client.request(
        ApiKey::Metadata,
        METADATA_VERSION,
        &MetadataRequest::default()
            .with_topics(Some(
                topics
                    .iter()
                    .map(|(t, _)| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                    })
                    .collect(),
            ))
            .with_allow_auto_topic_creation(false)
            .with_include_topic_authorized_operations(true),
    )?;
    Ok(topics
        .iter()
        .map(|(name, needed)| {
            match meta
                .topics
                .iter()
                .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(name.as_str()))
            {
                None => Verdict::Absent,
                Some(t) if t.error_code == UNKNOWN_TOPIC => Verdict::Absent,
                Some(t) if t.error_code == TOPIC_DENIED => Verdict::Denied,
                Some(t) => judge(t.topic_authorized_operations, needed),
            }
        })
        .collect())
}

/// The verdict on consumer group `group`, for `needed`.
pub fn group(brokers: &Brokers, group: &str, needed: &[Operation]) -> Result<Verdict, RawLogError> {
    let mut client = match coordinator(brokers, group) {
        Err(RawLogError::Broker { code, .. }) if code == GROUP_DENIED => {
            return Ok(Verdict::Denied)
        }
        other => other?,
    };
    let described: DescribeGroupsResponse = client.request(
        ApiKey::DescribeGroups,
        DESCRIBE_GROUPS_VERSION,
        &DescribeGroupsRequest::default()
            .with_groups(vec![GroupId(StrBytes::from_string(group.to_string()))])
            .with_include_authorized_operations(true),
    )?;
    Ok(match described.groups.first() {
        None => Verdict::NotReported,
        Some(g) if g.error_code == GROUP_DENIED => Verdict::Denied,
        Some(g) => judge(g.authorized_operations, needed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use Operation::*;

    #[test]
    fn authorized_operations_are_read_as_bits_and_not_reported_is_not_a_yes() {
        let bits = |ops: &[Operation]| ops.iter().fold(0i32, |a, op| a | 1 << *op as i32);
        assert_eq!(
            judge(bits(&[Read, Describe]), &[Read, Describe]),
            Verdict::Allowed
        );
        assert_eq!(
            judge(bits(&[Describe]), &[Describe, Read, Write]),
            Verdict::Missing(vec![Read, Write])
        );
        assert_eq!(judge(i32::MIN, &[Read]), Verdict::NotReported);
        assert_eq!(judge(0, &[]), Verdict::Allowed);
    }
}
