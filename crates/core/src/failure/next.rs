//! What to do after a failed attempt: retry on the same account, move on, or return to the
//! client (docs/rules/router.md §3 "In-route retries").

use chrono::Duration;

use super::verdict::{FailureClass, Verdict};
use crate::retry::{Backoff, JITTER_SPREAD};

/// In-route retries (docs/rules/router.md §3): 500 ms doubling to 10 s; the ±10 % jitter of the
/// spec is taken downwards only ([`JITTER_SPREAD`], as every backoff of the crate) so the 10 s
/// cap holds.
pub const IN_ROUTE_RETRY: Backoff =
    Backoff::new(Duration::milliseconds(500), Duration::seconds(10)).with_spread(JITTER_SPREAD);

/// Default number of in-route retries on one account (docs/rules/router.md §3 `maxRetries`).
pub const DEFAULT_MAX_RETRIES: u32 = 2;

/// What to do after a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Retry on the same account after this pause.
    RetrySameAfter(std::time::Duration),
    /// Fail over to the next ranked account (then the next leg).
    NextAccount,
    /// Give the upstream's answer back to the client (a request error).
    ReturnToClient,
}

/// What to do after a failed attempt (docs/rules/router.md §3 "In-route retries"): `retries_done` on this
/// account so far, `jitter` in 0..=1 from the injected random source.
/// Transient ⇒ retry on the same account while `retries_done < max_retries`, after the
/// `Retry-After` when it is below the 10 s cap (else move on at once), or after
/// [`IN_ROUTE_RETRY`]`.delay(retries_done + 1, jitter)`; retries spent ⇒ next account.
/// Quota, rate_limit, session_dead ⇒ next account at once. Request error ⇒ back to the client.
pub fn next_step(verdict: &Verdict, retries_done: u32, max_retries: u32, jitter: f64) -> Next {
    match verdict.class {
        FailureClass::RequestError => Next::ReturnToClient,
        FailureClass::Quota | FailureClass::RateLimit | FailureClass::SessionDead => {
            Next::NextAccount
        }
        FailureClass::Transient => {
            if retries_done >= max_retries {
                return Next::NextAccount;
            }
            let pause = match verdict.retry_after {
                Some(wait) if wait < IN_ROUTE_RETRY.cap => wait,
                Some(_) => return Next::NextAccount,
                None => IN_ROUTE_RETRY.delay(retries_done + 1, jitter),
            };
            Next::RetrySameAfter(pause.to_std().unwrap_or_default())
        }
    }
}

#[cfg(test)]
#[path = "next_tests.rs"]
mod tests;
