//! Broker quirks: where a Kafka-protocol broker tidemark is tested against behaves unlike Apache
//! Kafka, what tidemark does about it, and the test that shows it.
//!
//! This is the one module that names a broker. Code elsewhere that exists because of a quirk
//! refers to its entry here ([`Quirk`]) and says what it does, not which broker made it
//! necessary. Most remedies are rules that are right on every broker (the log is the only truth,
//! fencing from the log); the one remedy that only makes sense for one broker's defect, clearing
//! a phantom group leader, lives here ([`phantom_leader`]).
//!
//! Each entry's `seen_on` lists the brokers (with versions) where the behaviour was seen, and
//! `shown_by` the tests that show it. The tests in `tests/kafka/broker_quirks.rs` probe the broker the
//! tests run against (`TIDEMARK_TEST_BROKER`) and check it against `seen_on`: a quirk listed for
//! that broker must show, one not listed must not. CI runs them on every broker in
//! [`TEST_BROKERS`], so the catalogue stays true both ways.

pub mod phantom_leader;

/// The Kafka-protocol brokers the tests run against, as `TIDEMARK_TEST_BROKER` names them.
pub const TEST_BROKERS: &[&str] = &["tansu", "noida"];

/// One way a broker differs from Apache Kafka that matters to tidemark.
#[derive(Debug, Clone, Copy)]
pub struct Quirk {
    /// A short name, as logs and documents cite it.
    pub name: &'static str,
    /// What the broker does.
    pub behaviour: &'static str,
    /// The brokers it was seen on, by their `TIDEMARK_TEST_BROKER` names (see [`TEST_BROKERS`]),
    /// with the version.
    pub seen_on: &'static [(&'static str, &'static str)],
    /// What tidemark does about it.
    pub remedy: &'static str,
    /// The tests that show it: `binary/module::test` for a test under `tests/` (run with
    /// `cargo test --test binary -- module::test`), `module::path::tests::test` for a unit test.
    pub shown_by: &'static [&'static str],
}

impl Quirk {
    /// Whether the broker `TIDEMARK_TEST_BROKER` calls `broker` has this quirk.
    pub fn seen_on(&self, broker: &str) -> bool {
        self.seen_on.iter().any(|(b, _)| *b == broker)
    }
}

/// Records of aborted transactions reach `read_committed` consumers.
pub const ABORTED_RECORDS_SERVED: Quirk = Quirk {
    name: "aborted records served",
    behaviour: "Fetch answers carry no aborted-transactions list, so a read_committed consumer \
                is handed every record of an aborted transaction that reached the broker as if \
                it had committed (100 aborted and 50 committed: a read_committed reader sees \
                150). An open transaction is held back (the last stable offset is right).",
    seen_on: &[("tansu", "0.6.0")],
    remedy: "tidemark never relies on read_committed for its own topics: changelog, offsets, \
             repartition, output (tail, sinks, audit) and claims are read as a raw log and \
             transactions are resolved from their COMMIT/ABORT markers (kafka::raw_log). Input \
             from transactional producers that abort is the one place that trusts the broker's \
             filtering; on such a broker their aborted records are processed.",
    shown_by: &["kafka/broker_quirks::read_committed_hides_aborted_records_or_not"],
};

/// Offsets sent with a transaction reach the group late, out of order, or not at all.
pub const GROUP_OFFSETS_LATE: Quirk = Quirk {
    name: "transactional group offsets late",
    behaviour: "Offsets sent with send_offsets_to_transaction become the group's committed \
                offsets only when every overlapping transaction is prepared, in no fixed order: \
                a member assigned a partition read a committed offset of 0 while tens of \
                thousands of records had committed past it.",
    seen_on: &[("tansu", "0.6.0")],
    remedy: "The committed input offset is read from the offset markers of committed \
             transactions in the log; the group's offset is only compared with it \
             (tidemark_group_offset_mismatches_total).",
    shown_by: &["changelog::tests::a_stale_group_offset_never_wins_over_the_log"],
};

/// Group descriptions carry no member assignments.
pub const DESCRIPTIONS_WITHOUT_ASSIGNMENTS: Quirk = Quirk {
    name: "descriptions without assignments",
    behaviour: "DescribeGroups lists a stable group without its members, or with empty \
                assignment bytes, so no client can read who owns which partition.",
    seen_on: &[("tansu", "0.6.0")],
    remedy: "The group watchdog judges ownership from the log instead: a partition whose \
             committed offset stays put while data waits after it counts as without an owner \
             (kafka::group::StallWatch, BlindWatch).",
    shown_by: &[
        "kafka/broker_quirks::a_stable_groups_description_carries_assignments_or_not",
        "kafka/membership::a_member_holding_partitions_rejoins_when_another_sits_on_a_partition_for_twice_the_bound",
    ],
};

/// A static member's heartbeat evicts the group leader without clearing it.
pub const STATIC_PHANTOM_LEADER: Quirk = Quirk {
    name: "static phantom leader",
    behaviour: "When a static member's heartbeat evicts the leader of a formed group, the leader \
                is not cleared: the next join forms the group under a leader that is gone, and \
                every SyncGroup answers REBALANCE_IN_PROGRESS for ever.",
    seen_on: &[("tansu", "0.6.0")],
    remedy: "Static membership is off by default; on a wedge judged from the log, the watchdog \
             clears the phantom (phantom_leader::clear) before it rejoins.",
    shown_by: &[
        "kafka/wedged_group::a_phantom_leader_wedges_the_group_until_the_watchdog_clears_it",
    ],
};

/// A LeaveGroup naming an instance id alone removes nothing.
pub const LEAVE_BY_INSTANCE_ID_IGNORED: Quirk = Quirk {
    name: "leave by instance id ignored",
    behaviour: "A LeaveGroup (version 3) that names a static member by its instance id alone \
                removes nothing: members are removed by member id only, so a stopped static \
                member stays registered until its session lapses.",
    seen_on: &[("tansu", "0.6.0")],
    remedy: "None beyond waiting: a static member that rejoins as a dynamic one after a wedge \
             sends the removal anyway (kafka::group::remove_static_members), which a broker \
             that follows KIP-345 honours.",
    shown_by: &["kafka/broker_quirks::a_static_member_is_removed_by_its_instance_id_or_not"],
};

/// Transactional offset commits of a stale generation are accepted.
pub const NO_GENERATION_FENCING: Quirk = Quirk {
    name: "no generation fencing",
    behaviour: "TxnOffsetCommit checks the producer epoch only, not the group generation \
                (KIP-447), so a member that lost its partitions and has not noticed can still \
                commit offsets for them.",
    seen_on: &[("tansu", "0.6.0"), ("noida", "0.2.3")],
    remedy: "Fencing from the log: members claim their partitions in the claims topic before \
             restoring, and read the claims before each commit (coordinator::claims).",
    shown_by: &[
        "kafka/broker_quirks::a_stale_generation_commits_offsets_or_not",
        "kafka/claims::a_member_whose_partition_is_claimed_by_another_aborts_rejoins_and_loses_nothing",
    ],
};

/// The high watermark after a non-transactional batch is its base offset + 1.
pub const HIGH_WATERMARK_AFTER_BATCH: Quirk = Quirk {
    name: "high watermark after a batch",
    behaviour: "After a non-transactional batch of N records, the partition's high watermark \
                (ListOffsets latest, and in fetch answers) is the batch's base offset + 1, not \
                its last offset + 1, until a later write. After a committed transaction it is \
                right (the marker is a batch of one).",
    seen_on: &[("tansu", "0.6.0")],
    remedy: "Whether a partition is caught up is read from its raw log (kafka::raw_log::LogReader::peek), \
             never from a high watermark alone; restores are not sized by one.",
    shown_by: &["kafka/broker_quirks::the_high_watermark_after_a_batch_is_its_end_or_not"],
};

/// A fetch is answered before the broker has read its log.
pub const FETCH_ANSWERED_BEFORE_READ: Quirk = Quirk {
    name: "fetch answered before its read",
    behaviour: "A fetch whose read of the log takes longer than the fetch may wait is answered \
                with no records (with max_wait_ms 0, not even the high watermark), even when \
                data lies at the fetch offset; reads of a backlog under load take longest.",
    seen_on: &[("tansu", "0.6.0")],
    remedy: "Raw-log fetches wait at least 1 ms, and 50 ms while a partition is behind; an \
             answer that brings nothing while the high watermark lies further on is asked \
             again; a peek's \"no data\" counts only when earned: an answer that shows nothing \
             up to the high watermark is \"don't know\" (kafka::raw_log).",
    shown_by: &["kafka/broker_quirks::a_fetch_that_may_not_wait_returns_data_or_not"],
};

/// A waiting fetch is not answered when data arrives.
pub const FETCH_HELD_PAST_DATA: Quirk = Quirk {
    name: "fetch held past its data",
    behaviour: "A fetch that may wait is not answered when data arrives, but later: with data \
                written 0.3 s into a 3 s wait, the answer came after 1.5 s; a fetch that finds \
                nothing new is held for its whole wait (50 ms of each restore's last read).",
    seen_on: &[("tansu", "0.6.0")],
    remedy: "The consumer's fetch.wait.max.ms is a fifth of the commit interval (5-500 ms), so \
             the hold adds little to a record's latency; restores of one assignment run 8 at a \
             time, since each ends with a fetch that finds nothing new and is held.",
    shown_by: &["kafka/broker_quirks::a_waiting_fetch_waits_and_returns_when_data_arrives_or_not"],
};

/// A fetch that may wait is answered at once.
pub const FETCH_NOT_HELD: Quirk = Quirk {
    name: "fetch not held",
    behaviour: "A fetch that finds nothing is answered at once, whatever its max_wait_ms: a \
                client that fetches again on an empty answer fetches in a tight loop.",
    seen_on: &[("noida", "0.2.3")],
    remedy: "None in tidemark: it costs CPU, not correctness or progress. librdkafka's \
             consumer has no backoff for an empty answer, so an idle member's fetcher thread \
             fetches in a loop: an idle member over 4 partitions used 61% of a core for 20 s \
             and the broker 42%. Pausing the input partitions between polls stops it, but \
             librdkafka 2.12 then never finishes destroying the consumer after a resume (reported \
             upstream: https://github.com/confluentinc/librdkafka/issues/4362), so a member \
             could not stop. tidemark's own raw-log readers pace \
             themselves (the second stage reads the repartition topic every 5 ms while it \
             finds nothing).",
    shown_by: &["kafka/broker_quirks::a_waiting_fetch_waits_and_returns_when_data_arrives_or_not"],
};

/// A re-initialised producer's epoch is bumped before its old transaction's markers land.
pub const EPOCH_BUMP_BEFORE_MARKERS: Quirk = Quirk {
    name: "epoch bumped before the markers",
    behaviour: "When a transactional id is initialised again, the new producer's epoch is bumped \
                as soon as the old transaction is prepared, and that transaction's markers are \
                written partition by partition afterwards: records of the new epoch can precede \
                the old epoch's COMMIT in a partition.",
    seen_on: &[("tansu", "0.6.0")],
    remedy: "Transactions are resolved per producer id and epoch; a newer epoch's record never \
             settles an older epoch's open records, only its own marker (or the transaction \
             timeout) does (kafka::raw_log).",
    shown_by: &["kafka::raw_log::resolve::tests::a_re_initialised_producers_old_transaction_waits_for_its_own_marker"],
};

/// A group keeps the protocol it had after every member left.
pub const GROUP_KEEPS_ITS_PROTOCOL: Quirk = Quirk {
    name: "group keeps its protocol",
    behaviour: "A group whose members all left keeps the protocol they used: a group that once \
                ran cooperative-sticky refuses a join with range (INCONSISTENT_GROUP_PROTOCOL) \
                for as long as the broker runs. Apache Kafka lets an empty group take any \
                protocol.",
    seen_on: &[("tansu", "0.6.0")],
    remedy: "A member that gave up the cooperative protocol and whose eager joins are refused \
             for longer than the rebalance timeout plus a session goes back to the cooperative \
             protocol for the rest of its life (coordinator::membership).",
    shown_by: &[
        "kafka/broker_quirks::an_empty_group_takes_another_protocol_or_not",
        "kafka/claims::under_the_cooperative_protocol_a_superseded_member_moves_the_group_to_the_eager_one",
    ],
};

/// The cooperative protocol's follow-up rebalance does not complete.
pub const COOPERATIVE_FOLLOW_UP_INCOMPLETE: Quirk = Quirk {
    name: "cooperative follow-up incomplete",
    behaviour: "Under cooperative-sticky, after a member revokes partitions for a newcomer and \
                joins again, the follow-up rebalance waits out the rebalance timeout and then \
                hands the same partitions to both members, or a join hangs; seen in 2 of 5 runs \
                of two members.",
    seen_on: &[("noida", "0.2.3")],
    remedy: "The default assignor is range (eager). A member using cooperative-sticky notices a \
             rebalance that waits on the broker past its bound, or a partition it holds claimed \
             by another member, and moves the whole group to the eager protocol through the \
             claims topic (kafka::assignor).",
    shown_by: &[
        "kafka/membership::members_join_leave_and_die_without_loss_or_duplicates_with_cooperative_sticky",
        "kafka/claims::under_the_cooperative_protocol_a_superseded_member_moves_the_group_to_the_eager_one",
    ],
};

/// Acknowledged writes are lost when the broker is killed.
pub const ACKED_WRITES_LOST_ON_KILL: Quirk = Quirk {
    name: "acknowledged writes lost on kill",
    behaviour: "The broker acknowledges produced records and committed transactions before they \
                are on disk, and writes its whole log to disk about once a second: a SIGKILL \
                loses what was acknowledged since (all 5,100 records, killed right after their \
                acknowledgement), and the broker comes back at that earlier point, input, \
                output and group offsets alike. A SIGTERM writes everything first.",
    seen_on: &[("noida", "0.2.3")],
    remedy: "None possible in a client: no protocol answer says a write is durable. tidemark \
             follows the rollback where it can see it (local state whose changelog position \
             lies past the log's end is rebuilt from the log, changelog; its raw-log \
             readers reconnect), but the lost input is gone. The exactly-once test bounces \
             that broker with SIGTERM; the SIGKILL test judges no pane twice, no gap, and the \
             windows after the kill.",
    shown_by: &[
        "kafka/broker_stopped::whether_the_broker_keeps_what_it_acknowledged_across_a_sigkill",
        "kafka/broker_stopped::a_pipeline_whose_broker_is_killed_commits_no_pane_twice_and_goes_on",
    ],
};

/// A member that dies is never evicted from its group.
pub const DEAD_MEMBERS_NOT_EVICTED: Quirk = Quirk {
    name: "dead members not evicted",
    behaviour: "A member that stops heartbeating without leaving (killed) keeps its place and its \
                partitions for as long as no other member joins: the session timeout is not \
                enforced. A join then waits out the rebalance timeout, after which members have \
                been handed overlapping assignments, and rebalances followed one another every \
                few seconds: three members under 24 kills produced nothing for minutes, and \
                plain librdkafka consumers showed the same.",
    seen_on: &[("noida", "0.2.3")],
    remedy: "Membership from the log (kafka::members): members heartbeat into the claims \
             topic and share the partitions by a rule every member computes, without the \
             broker's group. A group under the broker's membership moves there by itself when \
             the watchdog finds it wedged twice in a row (coordinator::membership); \
             kafka.membership = \"log\" starts there. The watchdog judges partitions that the \
             description lists as owned from the log (a committed offset that stays put while \
             records wait), since the dead member stays listed as their owner. Until the move, \
             the claims fence the overlapping assignments (nothing is committed twice). The \
             PostgreSQL sink follows the setting and its pipeline's move, with its own members \
             topic (sink::share), and its own watchdog (sink::watch) judges its group \
             from the offsets it stored and the raw log: it rejoins, then moves the sink's \
             group to membership from the log by itself.",
    shown_by: &[
        "kafka/broker_quirks::a_member_that_dies_is_evicted_after_its_session_or_not",
        "kafka/membership::members_sharing_partitions_through_the_log_join_leave_and_die_without_loss_or_duplicates",
        "kafka/membership::a_group_that_stays_wedged_moves_to_membership_from_the_log_and_finishes_the_input",
        "kafka/membership::members_join_leave_and_die_without_loss_or_duplicates_with_range",
        "kafka/postgres_sink::a_sink_whose_own_group_wedges_makes_progress",
    ],
};

/// A fetch answer skips an append that becomes visible later.
pub const APPENDS_VISIBLE_OUT_OF_ORDER: Quirk = Quirk {
    name: "appends visible out of order",
    behaviour: "Under concurrent transactional appends to one partition, a fetch answer can begin \
                past the fetch offset: a later append is visible while an earlier one is still \
                being written, and the earlier records appear at their offsets afterwards. A \
                reader that moves on from the answer loses them. Seen in the hop's chaos runs \
                (docs/reliability.md); a client-only probe did not make it happen.",
    seen_on: &[("tansu", "0.6.0")],
    remedy: "The repartition reader stays at a hole in an answer and fetches again for up to \
             2 s, logging the hole and whether it filled (kafka::raw_log::follow); the hop's \
             chaos summary counts both.",
    shown_by: &[
        "kafka::raw_log::follow::tests::reads_wait_at_a_hole_until_it_fills",
        "kafka/chaos_hop::the_two_stage_pipeline_under_repeated_kill_9_commits_everything_exactly_once",
    ],
};

/// ListOffsets for the earliest offset can answer past records still in the log.
pub const EARLIEST_OFFSET_PAST_RECORDS: Quirk = Quirk {
    name: "earliest offset past records",
    behaviour: "ListOffsets for the earliest offset answers the base offset of the record batch \
                the broker stored first, not the lowest offset in the log. When transactional \
                producers append to a new partition at once, the batch at offset 0 can be \
                stored after the one at offset 1, and the earliest offset is then 1 while \
                offset 0 can still be fetched (ten transactional producers writing one record \
                each to a fresh partition: about 1 round in 15). A reader that starts where the \
                broker says the log begins skips the first records. Seen in a hop chaos run, \
                whose judge missed the one pane at offset 0 of an output partition.",
    seen_on: &[("tansu", "0.6.0")],
    remedy: "tidemark never asks where a log begins with ListOffsets: the raw-log reader fetches \
             at offset 0 and takes the log start offset only from an out-of-range answer \
             (kafka::raw_log, used by audit, the tests' judges and replay's --to-earliest), and \
             an input partition on which nothing has committed is assigned at offset 0, where \
             the consumer's auto.offset.reset (earliest) applies only if offset 0 is gone.",
    shown_by: &["kafka/broker_quirks::the_earliest_offset_is_the_lowest_in_the_log_or_not"],
};

/// Every quirk above.
pub const ALL: &[Quirk] = &[
    ABORTED_RECORDS_SERVED,
    GROUP_OFFSETS_LATE,
    DESCRIPTIONS_WITHOUT_ASSIGNMENTS,
    STATIC_PHANTOM_LEADER,
    LEAVE_BY_INSTANCE_ID_IGNORED,
    NO_GENERATION_FENCING,
    HIGH_WATERMARK_AFTER_BATCH,
    FETCH_ANSWERED_BEFORE_READ,
    FETCH_HELD_PAST_DATA,
    FETCH_NOT_HELD,
    EPOCH_BUMP_BEFORE_MARKERS,
    GROUP_KEEPS_ITS_PROTOCOL,
    COOPERATIVE_FOLLOW_UP_INCOMPLETE,
    ACKED_WRITES_LOST_ON_KILL,
    DEAD_MEMBERS_NOT_EVICTED,
    APPENDS_VISIBLE_OUT_OF_ORDER,
    EARLIEST_OFFSET_PAST_RECORDS,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_quirk_names_a_test_broker_and_a_test() {
        for q in ALL {
            assert!(!q.seen_on.is_empty(), "{}: seen on no broker", q.name);
            for (b, version) in q.seen_on {
                assert!(TEST_BROKERS.contains(b), "{}: unknown broker {b}", q.name);
                assert!(!version.is_empty());
            }
            assert!(!q.shown_by.is_empty(), "{}: shown by no test", q.name);
        }
        let mut names: Vec<&str> = ALL.iter().map(|q| q.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ALL.len(), "names are unique");
    }
}
