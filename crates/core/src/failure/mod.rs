//! What the router learns from a failed upstream attempt (docs/rules/router.md §3, §4 last bullet):
//! the classification of an outcome before the first byte went to the client (quota,
//! rate_limit, session_dead, transient, request error; account- or model-scoped), the parsing of
//! its reset hints (`resets_at` / `resets_in_seconds`, `x-codex-*` headers, `Retry-After`), the
//! kind of a streaming frame, what to do next (retry on the same account, move on, return to the
//! client), the cooldowns it puts on a lane's candidates, the IP-level throttle detector and the
//! answer when every account of every leg is excluded.
//!
//! Pure: no I/O, no clock reads (`now` is an argument), no randomness (the jitter is an argument),
//! no HTTP crate (headers come through [`Headers`]). It must not decide which account serves a
//! request (that is `core::selection` + `core::affinity`) nor send anything: the adapter
//! (the daemon's `router` module) acts on its verdicts.
//!
//! One file per concern, each below the ones it uses: [`Headers`] (headers.rs) and the
//! [`Verdict`] types (verdict.rs) at the bottom; the reset / Retry-After hints (hints.rs) and
//! streaming frame kinds (frame.rs) above them; [`classify`] (classify.rs) on those; then what
//! acts on a verdict: the next step (next.rs), the cooldowns (cooldowns.rs), the throttle
//! detector (throttle.rs) and the all-excluded answer (no_account.rs).

mod classify;
mod cooldowns;
mod frame;
mod headers;
mod hints;
mod next;
mod no_account;
#[cfg(test)]
mod testkit;
mod throttle;
mod verdict;

pub use classify::{Outcome, classify, classify_error_json};
pub use cooldowns::{
    CooldownKind, Observations, QUOTA_UNKNOWN_RESET, RATE_LIMIT_BACKOFF, SESSION_DEAD_COOLDOWN,
    TRANSIENT_COOLDOWN,
};
pub use frame::{FrameKind, frame_kind};
pub use headers::{HeaderList, Headers, NoHeaders};
pub use hints::{codex_scope, parse_reset, parse_retry_after};
pub use next::{DEFAULT_MAX_RETRIES, IN_ROUTE_RETRY, Next, next_step};
pub use no_account::{ExcludedEnd, NoAccount, no_account};
pub use throttle::{THROTTLE_DEFAULT, THROTTLE_MAX, THROTTLE_WINDOW, ThrottleDetector};
pub use verdict::{FailureClass, Scope, Verdict, reset_ceiling};
