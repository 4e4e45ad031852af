//! Tests of the cooldowns of a lane's observations.

use chrono::{DateTime, Duration, Utc};

use super::*;
use crate::failure::testkit::*;
use proptest::prelude::*;

// --- observations -------------------------------------------------------------------------

fn observe(
    obs: &mut Observations,
    state: &mut EngineState,
    index: usize,
    v: Verdict,
) -> Option<DateTime<Utc>> {
    obs.observe(index, &v, now(), 0.0, state)
}

#[test]
fn each_class_cools_down_for_its_table_duration() {
    let mut obs = Observations::new(5);
    let mut state = EngineState::default();
    let quota = Verdict {
        reset_at: Some(now() + Duration::hours(3)),
        ..Verdict::of(FailureClass::Quota)
    };
    assert_eq!(
        observe(&mut obs, &mut state, 0, quota),
        Some(now() + Duration::hours(3))
    );
    assert_eq!(
        observe(&mut obs, &mut state, 1, Verdict::of(FailureClass::Quota)),
        Some(now() + Duration::minutes(10)),
        "quota without a known reset"
    );
    assert_eq!(
        observe(
            &mut obs,
            &mut state,
            2,
            Verdict::of(FailureClass::SessionDead)
        ),
        Some(now() + Duration::minutes(30))
    );
    assert_eq!(
        observe(
            &mut obs,
            &mut state,
            3,
            Verdict::of(FailureClass::Transient)
        ),
        Some(now() + Duration::seconds(30))
    );
    assert_eq!(
        observe(
            &mut obs,
            &mut state,
            4,
            Verdict::of(FailureClass::RequestError)
        ),
        None
    );
    for (i, end) in [
        (0, Some(now() + Duration::hours(3))),
        (1, Some(now() + Duration::minutes(10))),
        (2, Some(now() + Duration::minutes(30))),
        (3, Some(now() + Duration::seconds(30))),
        (4, None),
    ] {
        assert_eq!(
            state.cooldowns.until(i, now()),
            end,
            "engine cooldown of {i}"
        );
    }
    assert_eq!(obs.kind(0, now()), Some(CooldownKind::Quota));
    assert_eq!(obs.kind(2, now()), Some(CooldownKind::SessionDead));
    assert_eq!(obs.kind(4, now()), None);
    assert_eq!(obs.kind(3, now() + Duration::seconds(30)), None, "ended");
}

#[test]
fn rate_limits_back_off_by_level_and_a_success_resets_it() {
    let mut obs = Observations::new(1);
    let mut state = EngineState::default();
    let plain = Verdict::of(FailureClass::RateLimit);
    let waits: Vec<i64> = (0..10)
        .map(|_| (observe(&mut obs, &mut state, 0, plain).unwrap() - now()).num_seconds())
        .collect();
    assert_eq!(waits, vec![2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
    obs.success(0);
    let mut fresh = Observations::new(1);
    let mut fresh_state = EngineState::default();
    assert_eq!(
        observe(&mut obs, &mut EngineState::default(), 0, plain),
        observe(&mut fresh, &mut fresh_state, 0, plain),
        "after a success the backoff starts again at 2 s"
    );
    let given = verdict(FailureClass::RateLimit, Some(Duration::seconds(42)));
    let mut obs = Observations::new(1);
    assert_eq!(
        observe(&mut obs, &mut state, 0, given),
        Some(now() + Duration::seconds(42)),
        "Retry-After wins over the backoff"
    );
}

#[test]
fn a_shorter_later_cooldown_never_shortens_a_running_one() {
    let mut obs = Observations::new(1);
    let mut state = EngineState::default();
    let quota = Verdict {
        reset_at: Some(now() + Duration::hours(5)),
        ..Verdict::of(FailureClass::Quota)
    };
    observe(&mut obs, &mut state, 0, quota);
    let short = verdict(FailureClass::RateLimit, Some(Duration::seconds(2)));
    assert_eq!(
        observe(&mut obs, &mut state, 0, short),
        Some(now() + Duration::seconds(2)),
        "the rate limit's own end is returned"
    );
    assert_eq!(
        state.cooldowns.until(0, now()),
        Some(now() + Duration::hours(5))
    );
    assert_eq!(obs.kind(0, now()), Some(CooldownKind::Quota));
    obs.cool(
        0,
        CooldownKind::PoolThrottle,
        now() + Duration::seconds(5),
        &mut state,
    );
    assert_eq!(
        state.cooldowns.until(0, now()),
        Some(now() + Duration::hours(5))
    );
    obs.clear_quota(0, &mut state);
    assert_eq!(
        state.cooldowns.until(0, now()),
        Some(now() + Duration::seconds(5)),
        "a patrol snapshot clears the quota; the throttle stays"
    );
    assert_eq!(obs.kind(0, now()), Some(CooldownKind::PoolThrottle));
    assert_eq!(
        obs.kind(0, now() + Duration::seconds(3)),
        Some(CooldownKind::PoolThrottle)
    );
}

#[test]
fn clearing_the_only_quota_clears_the_engine_cooldown() {
    let mut obs = Observations::new(2);
    let mut state = EngineState::default();
    observe(&mut obs, &mut state, 1, Verdict::of(FailureClass::Quota));
    obs.clear_quota(1, &mut state);
    assert_eq!(state.cooldowns.until(1, now()), None);
    assert!(state.cooldowns.is_empty());
    assert_eq!(obs.kind(1, now()), None);
    obs.clear_quota(7, &mut state); // unknown index: nothing happens
}

proptest! {
    #[test]
    fn the_effective_end_is_the_latest_of_every_cooldown_seen(
        steps in proptest::collection::vec((0usize..5, 0i64..100_000), 1..20),
    ) {
        let mut obs = Observations::new(1);
        let mut state = EngineState::default();
        let mut latest = now();
        for (k, secs) in steps {
            let until = now() + Duration::seconds(secs);
            obs.cool(0, CooldownKind::ALL[k], until, &mut state);
            latest = latest.max(until);
            prop_assert_eq!(state.cooldowns.until(0, now()), (latest > now()).then_some(latest));
        }
    }
}
