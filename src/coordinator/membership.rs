//! The member's place in its consumer group: the consumer, created with the rebalance context
//! that restores and commits on its behalf and subscribed to the pipeline's topics, and the way it
//! joins again when the group watchdog finds the group wedged (see [`super::watchdog`]).

use super::errors::RunError;
use super::rebalance::{self, RebalanceContext, Rejoin, Why};
use super::scaling::Idle;
use super::watchdog::Watchdog;
use super::Core;
use crate::config::KafkaSpec;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;
use std::sync::{Arc, Mutex};

/// A member of the group: its consumer and what joining again needs.
pub(super) struct Membership {
    /// The consumer, subscribed to the pipeline's topics.
    pub(super) consumer: BaseConsumer<RebalanceContext>,
    /// The consumer context's record of the loop's waiting (for the scaling signal).
    pub(super) idle: Arc<Idle>,
    core: Arc<Mutex<Core>>,
    k: KafkaSpec,
    input_partitions: usize,
    settings: ClientConfig,
    topics: Vec<String>,
}

impl Membership {
    /// Creates the consumer with `settings` and subscribes it to `topics`.
    pub(super) fn join(
        core: Arc<Mutex<Core>>,
        k: &KafkaSpec,
        input_partitions: usize,
        settings: ClientConfig,
        topics: Vec<String>,
    ) -> Result<Membership, RunError> {
        let (consumer, idle) = subscribed(&core, k, input_partitions, &settings, &topics)?;
        Ok(Membership {
            consumer,
            idle,
            core,
            k: k.clone(),
            input_partitions,
            settings,
            topics,
        })
    }

    /// Rejoins when the group watchdog asks for it (the group is wedged), or when the core found
    /// partitions of this member's claimed by another member.
    pub(super) fn rejoin_if_asked(&mut self, watchdog: Option<&Watchdog>) -> Result<(), RunError> {
        if let Some(w) = watchdog.filter(|w| w.take_rejoin()) {
            self.rejoin(Why::Wedged {
                bound_ms: w.bound_ms,
            })?;
        }
        let superseded = std::mem::take(&mut self.core.lock().expect("lock").superseded);
        if superseded {
            self.rejoin(Why::Superseded)?;
        }
        Ok(())
    }

    /// Leaves the group and joins it again ([`rebalance::rejoin`]); a static member comes back
    /// as a dynamic one, with a new consumer without `group.instance.id` (the old one, which
    /// left and holds nothing, is closed).
    fn rejoin(&mut self, why: Why) -> Result<(), RunError> {
        let names: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        match rebalance::rejoin(&self.core, &self.consumer, &names, why)? {
            Rejoin::Subscribed => Ok(()),
            Rejoin::AsDynamicMember => {
                self.settings.remove("group.instance.id");
                let (consumer, idle) = subscribed(
                    &self.core,
                    &self.k,
                    self.input_partitions,
                    &self.settings,
                    &self.topics,
                )?;
                self.consumer = consumer;
                self.idle = idle;
                Ok(())
            }
        }
    }

    /// Ends the run with `result`: after a clean stop, commits the open transaction and logs
    /// what the member did; then leaves the group at once, so the partitions move to other
    /// members without waiting for the session to time out (revocation runs the commit cycle,
    /// which fails harmlessly after a fatal error).
    pub(super) fn leave(self, mut result: Result<(), RunError>) -> Result<(), RunError> {
        if result.is_ok() {
            tracing::info!("shutting down: committing the open transaction");
            let mut c = self.core.lock().expect("lock");
            c.dirty = true;
            result = c.commit(&self.consumer);
            let counters = c.counters;
            drop(c);
            tracing::info!(
                committed = counters.committed,
                aborted = counters.aborted,
                panes = counters.panes,
                dead_letters = counters.dead_letters,
                "stopped"
            );
        }
        self.consumer.unsubscribe();
        result
    }
}

/// A consumer created with `settings` and a rebalance context over `core`, subscribed to
/// `topics`.
fn subscribed(
    core: &Arc<Mutex<Core>>,
    k: &KafkaSpec,
    input_partitions: usize,
    settings: &ClientConfig,
    topics: &[String],
) -> Result<(BaseConsumer<RebalanceContext>, Arc<Idle>), RunError> {
    let context = RebalanceContext::new(core.clone(), k, input_partitions);
    let idle = context.idle.clone();
    let consumer: BaseConsumer<RebalanceContext> = settings
        .create_with_context(context)
        .map_err(|e| RunError::Startup(format!("creating the consumer: {e}")))?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&names)
        .map_err(|e| RunError::Startup(format!("subscribing: {e}")))?;
    Ok((consumer, idle))
}
