//! Alerting rules (docs/rules/alerts.md §1–§2), one concern a file, lowest first:
//! - [`event`]: the event kinds, their families and severities;
//! - [`pool`]: the pool view of a site from plain account data, and its forecast as read here;
//! - [`details`]: what a message says beyond its kind;
//! - [`family`]: the state machine of one (site, family) — flap guard, minimum interval,
//!   reminders;
//! - [`transitions`]: the pure transition function turning one observation into events;
//! - [`delivery`]: the queued record, channels, delivery status and the retry back-off.
//!
//! No I/O, no clock, no randomness: `now` and ids come from callers. Every name is re-exported
//! here (`crate::alerting::X`); the files import each other by their own paths, never
//! through this one.

pub mod delivery;
pub mod details;
pub mod event;
pub mod family;
pub mod pool;
pub mod transitions;

pub use delivery::{
    AlertRecord, ChannelKind, DELIVERY_EXPIRY_HOURS, DeliveryStatus, next_attempt_at, retry_delay,
};
pub use details::AlertDetails;
pub use event::{EventKind, Family, Severity};
pub use family::{AlertPolicy, FamilyState, SiteAlertState};
pub use pool::{AccountLine, AccountView, ForecastView, MAX_TABLE_ROWS, PoolView, pool_view};
pub use transitions::{
    Evaluation, NewEvent, Observation, POOL_LOW_CLEAR_MARGIN_MINUTES, PoolLowRule, Reachability,
    evaluate, pool_low_holds,
};
