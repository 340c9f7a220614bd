//! The windowing core: pure and deterministic, with no Kafka types.
//!
//! * [`time`] — milliseconds, durations, alignment.
//! * [`assigner`] — windows, window kinds, slice grids.
//! * [`watermark`] — the bounded out-of-orderness watermark with idleness.
//! * [`trigger`] — trigger settings and pane timings.
//! * [`aggregate`] — the aggregation operations behind one trait, and the mergeable accumulator
//!   a window keeps.
//! * [`spec`] — what the core runs ([`spec::EngineSpec`]) and what it consumes ([`spec::Event`]);
//!   the config layer converts a pipeline file into these.
//! * [`keystate`] — the typed state of one grouping key: its windows, slices and cursor, and what
//!   changed since the last flush;
//! * [`entry`] — the saved format of that state: entry keys and values, key state to entries and
//!   back;
//! * [`changes`] — the changes of one flush (the store's batch and the changelog);
//! * [`keys`] — order-preserving byte encodings of the grouping key and times in entry keys;
//! * [`backend`] — the seam to storage ([`backend::StateBackend`]): what the cache asks of the
//!   store its partitions live in;
//! * [`rules`] — the timers a key's state needs, and the arithmetic of sliced sliding windows;
//! * [`timers`] — the event-time and processing-time timer indexes;
//! * [`cache`] — a partition's typed write-back cache of key states over the state store, with
//!   its timers; flushing it yields the changelog of the flush;
//! * [`engine`] — the engine that ties them together and fires panes;
//! * [`fold`] — partials: the events of one key and one set of windows folded together before
//!   the repartition hop, which the engine merges whole.
//!
//! The modules form layers: `engine` calls `cache`, `rules`, `timers` and `keystate`; `cache`
//! calls `entry`, `rules` and `timers`; none of them calls back up.

pub mod aggregate;
pub mod assigner;
pub mod backend;
pub mod cache;
pub mod changes;
pub mod engine;
pub mod entry;
pub mod fold;
pub mod having;
pub mod keys;
pub mod keystate;
pub mod rules;
pub mod spec;
pub mod time;
pub mod timers;
pub mod trigger;
pub mod watermark;
