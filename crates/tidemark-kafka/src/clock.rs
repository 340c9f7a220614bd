//! The wall clock: processing time for the Kafka runtime, restore deadlines and the load
//! generator. The windowing core never reads it; its callers pass time in.

/// The wall clock in epoch milliseconds (0 if the system clock is before 1970).
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
