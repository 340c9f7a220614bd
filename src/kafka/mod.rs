//! Kafka client pieces shared by the runtime, restore, `audit`, `tail` and the tests.

pub mod admin;
pub mod assignor;
pub mod group;
pub mod members;
pub mod quirks;
pub mod raw_log;
pub mod roster;
