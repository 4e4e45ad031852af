//! The fake Codex upstream behind the simulated CPA's `api-call`: answers `wham/usage`
//! (and `api/codex/usage`) for the account whose token arrives, per its `UpstreamBehaviour`,
//! rolling passed windows forward like the real backend, and the banked reset-credit list and
//! consume endpoints with every outcome (docs/rules/cpa.md §10: delayed resets, lapsed credits,
//! an ambiguous 502 after the consume took effect). Builds payloads only; no sockets.
//! Rules: docs/rules/cpa.md §4.1–4.4 (request headers, payload shape, window slots, rate-limit headers).

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

use super::{CreditDesk, SimAccount, SimUsage, SimWindow, UpstreamBehaviour, WEEKLY_SECONDS};

/// What the upstream sees of the account whose credential arrived: its spec (usage rolled
/// forward in place), its token and whether its windows are frozen (`stale`). The simulated CPA
/// lends these fields of its auth-file record (`state::AccountRecord::upstream`).
pub(crate) struct UpstreamAccount<'a> {
    pub spec: &'a mut SimAccount,
    pub token: &'a str,
    pub stale: bool,
}

/// What the upstream said (before CPA wraps it in the `api-call` envelope).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    pub status: u16,
    /// Canonical header name -> values (Go `http.Header`).
    pub headers: BTreeMap<String, Vec<String>>,
    pub body: String,
}

/// Outcome of one outbound call made by `api-call`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    Answer(Answer),
    /// No answer at all (CPA: 502 `request failed`).
    TransportFailure,
    /// The upstream never answers within CPA's 60 s timeout.
    Hang,
}

/// The outbound request `api-call` makes, after `$TOKEN$` substitution.
pub(crate) struct Outbound<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub headers: &'a [(String, String)],
    /// The request body (`api-call`'s `data`), empty for a GET.
    pub body: &'a str,
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn answer(status: u16, content_type: &str, body: String, now: DateTime<Utc>) -> Reply {
    let mut headers = BTreeMap::new();
    headers.insert("Content-Type".to_string(), vec![content_type.to_string()]);
    headers.insert("Content-Length".to_string(), vec![body.len().to_string()]);
    headers.insert(
        "Date".to_string(),
        vec![now.format("%a, %d %b %Y %H:%M:%S GMT").to_string()],
    );
    headers.insert("Server".to_string(), vec!["cloudflare".to_string()]);
    Reply::Answer(Answer {
        status,
        headers,
        body,
    })
}

/// The upstream's answer for `request` made with `account`'s credential (`None` when the
/// `auth_index` matched nothing and `$TOKEN$` went out literally).
///
/// Order: network faults of the account (transport failure, hang), unknown path (404), method
/// (405), token (401 unless it is the account's), `ChatGPT-Account-Id` (403 JSON when present and
/// different), then the account's behaviour; a normal answer rolls passed windows forward unless
/// the account is marked stale.
pub(crate) fn respond(
    account: Option<UpstreamAccount<'_>>,
    request: &Outbound<'_>,
    now: DateTime<Utc>,
) -> Reply {
    if let Some(record) = &account {
        match record.spec.behaviour {
            UpstreamBehaviour::TransportFailure => return Reply::TransportFailure,
            UpstreamBehaviour::Hang => return Reply::Hang,
            _ => {}
        }
    }
    let path = request.path.trim_end_matches('/');
    let credits = credit_route(path);
    if credits.is_none() && !(path.ends_with("/wham/usage") || path.ends_with("/api/codex/usage")) {
        return answer(
            404,
            "application/json",
            r#"{"detail":"Not Found"}"#.to_string(),
            now,
        );
    }
    let wanted = if credits == Some(CreditRoute::Consume) {
        "POST"
    } else {
        "GET"
    };
    if request.method != wanted {
        return answer(
            405,
            "application/json",
            r#"{"detail":"Method Not Allowed"}"#.to_string(),
            now,
        );
    }
    let token = header(request.headers, "authorization").and_then(|v| {
        let v = v.trim();
        v.get(..7)
            .filter(|p| p.eq_ignore_ascii_case("bearer "))
            .map(|_| v[7..].trim())
    });
    let record = match account {
        Some(record) if token == Some(record.token) => record,
        _ => {
            let body = json!({"error": {
                "message": "Could not parse your authentication token. Please try signing in again.",
                "type": "invalid_request_error",
                "param": null,
                "code": "invalid_jwt",
            }});
            return answer(401, "application/json", body.to_string(), now);
        }
    };
    if let Some(sent) = header(request.headers, "chatgpt-account-id")
        && record.spec.chatgpt_account_id.as_deref() != Some(sent.trim())
    {
        let body = json!({"detail": "You do not have access to this workspace. Make sure the ChatGPT-Account-Id header is correct."});
        return answer(403, "application/json", body.to_string(), now);
    }
    if let Some(route) = credits {
        return credit_answer(route, record.spec, request.body, now);
    }
    match &record.spec.behaviour {
        UpstreamBehaviour::Status {
            status,
            content_type,
            body,
        } => answer(*status, content_type, body.clone(), now),
        UpstreamBehaviour::Garbage(body) => answer(200, "application/json", body.clone(), now),
        _ => {
            if !record.stale {
                roll_forward(&mut record.spec.usage, now);
            }
            let usage = &mut record.spec.usage;
            // A delayed reset (docs/rules/cpa.md §10): the windows of before, for a few probes.
            let shown = match usage.credit_desk.pending_stale.take() {
                Some((left, before)) if left > 0 => {
                    let mut before = *before;
                    before.reset_credits = usage.reset_credits.clone();
                    if left > 1 {
                        usage.credit_desk.pending_stale =
                            Some((left - 1, Box::new(before.clone())));
                    }
                    before
                }
                _ => usage.clone(),
            };
            answer(
                200,
                "application/json",
                usage_body(&record.spec.plan, &shown, now),
                now,
            )
        }
    }
}

/// Rolls every window whose `reset_at` is not after `now` forward like the upstream does when
/// asked: `used_percent` 0 and `reset_at` advanced by whole window lengths past `now`.
pub fn roll_forward(usage: &mut SimUsage, now: DateTime<Utc>) {
    for window in [&mut usage.five_hour, &mut usage.weekly, &mut usage.monthly]
        .into_iter()
        .flatten()
    {
        if window.reset_at <= now {
            let len = window.window_seconds.max(1);
            let periods = (now - window.reset_at).num_seconds() / len + 1;
            window.reset_at += Duration::seconds(periods.saturating_mul(len));
            window.used_percent = 0.0;
        }
    }
}

/// Primary and secondary slot of the main rate limit: five-hour first when present (paid plans),
/// else the 30-day window with the weekly one moved to secondary, else the weekly window alone
/// in primary (free accounts). docs/rules/cpa.md §4.3.
fn slots(usage: &SimUsage) -> (Option<&SimWindow>, Option<&SimWindow>) {
    if usage.five_hour.is_some() {
        (
            usage.five_hour.as_ref(),
            usage.weekly.as_ref().or(usage.monthly.as_ref()),
        )
    } else if usage.monthly.is_some() {
        (usage.monthly.as_ref(), usage.weekly.as_ref())
    } else {
        (usage.weekly.as_ref(), None)
    }
}

/// A number as the Codex backend sends it: integers without a fraction.
fn number(value: f64) -> Value {
    if value.is_finite() && value.fract() == 0.0 && value.abs() < 1e15 {
        json!(value as i64)
    } else {
        json!(value)
    }
}

fn window_json(window: Option<&SimWindow>, now: DateTime<Utc>) -> Value {
    match window {
        None => Value::Null,
        Some(w) => json!({
            "used_percent": number(w.used_percent),
            "limit_window_seconds": w.window_seconds,
            "reset_after_seconds": (w.reset_at - now).num_seconds().max(0),
            "reset_at": w.reset_at.timestamp(),
        }),
    }
}

fn balance_text(balance: f64) -> String {
    if balance.fract() == 0.0 && balance.abs() < 1e15 {
        format!("{}", balance as i64)
    } else {
        format!("{balance}")
    }
}

/// The reset-credit endpoints (docs/rules/cpa.md §10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CreditRoute {
    List,
    Consume,
}

fn credit_route(path: &str) -> Option<CreditRoute> {
    if path.ends_with("/wham/rate-limit-reset-credits") {
        Some(CreditRoute::List)
    } else if path.ends_with("/wham/rate-limit-reset-credits/consume") {
        Some(CreditRoute::Consume)
    } else {
        None
    }
}

/// `GET …/rate-limit-reset-credits` and `POST …/consume` for `spec` at `now`: the list of its
/// credits (lapsed ones say `expired`), and a consume with every outcome of docs/rules/cpa.md §10
/// (`reset`, `already_redeemed` for a known `redeem_request_id`, `nothing_to_reset`, `no_credit`,
/// 400 without a request id), the desk's knobs first.
fn credit_answer(
    route: CreditRoute,
    spec: &mut SimAccount,
    body: &str,
    now: DateTime<Utc>,
) -> Reply {
    let usage = &mut spec.usage;
    let credits = usage.reset_credits.clone().unwrap_or_default();
    if route == CreditRoute::List {
        usage.credit_desk.list_calls += 1;
        let items: Vec<Value> = credits
            .iter()
            .map(|c| {
                let status = if c.redeemed_at.is_some() {
                    "redeemed"
                } else if c.expires_at <= now {
                    "expired"
                } else {
                    "available"
                };
                json!({"id": c.id, "reset_type": "codex_rate_limits", "status": status,
                    "granted_at": c.granted_at.to_rfc3339(), "expires_at": c.expires_at.to_rfc3339(),
                    "redeemed_at": c.redeemed_at.map(|t| t.to_rfc3339()), "title": "Rate limit reset"})
            })
            .collect();
        let available = credits.iter().filter(|c| c.available(now)).count();
        let body = json!({"available_count": available, "credits": items});
        return answer(200, "application/json", body.to_string(), now);
    }
    usage.credit_desk.consume_calls += 1;
    if let Some((status, body)) = usage.credit_desk.consume_status.clone() {
        return answer(status, "application/json", body, now);
    }
    let request: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let Some(key) = request["redeem_request_id"].as_str().map(str::to_string) else {
        let body = json!({"detail": "redeem_request_id is required"});
        return answer(400, "application/json", body.to_string(), now);
    };
    let wanted = request["credit_id"].as_str().map(str::to_string);
    let done = |code: &str, credit: Option<&super::SimResetCredit>, windows: u32| {
        let credit = credit.map_or(Value::Null, |c| {
            json!({"id": c.id, "reset_type": "codex_rate_limits", "status": "redeemed",
                "redeemed_at": c.redeemed_at.map(|t| t.to_rfc3339())})
        });
        json!({"code": code, "credit": credit, "windows_reset": windows}).to_string()
    };
    if let Some((_, id)) = usage
        .credit_desk
        .redeemed_requests
        .iter()
        .find(|(k, _)| *k == key)
    {
        let credit = credits.iter().find(|c| &c.id == id);
        return answer(
            200,
            "application/json",
            done("already_redeemed", credit, 0),
            now,
        );
    }
    let pick = credits
        .iter()
        .filter(|c| c.available(now))
        .filter(|c| wanted.as_deref().is_none_or(|w| w == c.id))
        .min_by_key(|c| c.expires_at)
        .or_else(|| {
            credits
                .iter()
                .filter(|c| c.available(now))
                .min_by_key(|c| c.expires_at)
        })
        .map(|c| c.id.clone());
    let Some(id) = pick else {
        return answer(200, "application/json", done("no_credit", None, 0), now);
    };
    if !(usage.is_exhausted() && usage.resettable()) {
        return answer(
            200,
            "application/json",
            done("nothing_to_reset", None, 0),
            now,
        );
    }
    // Spend it: both windows back to 0 from now, the credit redeemed, the key recorded.
    let before = usage.clone();
    for w in [&mut usage.five_hour, &mut usage.weekly, &mut usage.monthly]
        .into_iter()
        .flatten()
    {
        w.used_percent = 0.0;
        w.reset_at = now + Duration::seconds(w.window_seconds);
    }
    if let Some(list) = usage.reset_credits.as_mut()
        && let Some(c) = list.iter_mut().find(|c| c.id == id)
    {
        c.redeemed_at = Some(now);
    }
    usage.credit_desk.redeemed_requests.push((key, id.clone()));
    if usage.credit_desk.delayed_reset_probes > 0 {
        let mut shown = before;
        shown.credit_desk = CreditDesk::default();
        usage.credit_desk.pending_stale =
            Some((usage.credit_desk.delayed_reset_probes, Box::new(shown)));
    }
    if usage.credit_desk.ambiguous_after_effect > 0 {
        usage.credit_desk.ambiguous_after_effect -= 1;
        return Reply::TransportFailure;
    }
    let credit = usage
        .reset_credits
        .as_ref()
        .and_then(|l| l.iter().find(|c| c.id == id))
        .cloned();
    answer(
        200,
        "application/json",
        done("reset", credit.as_ref(), 1),
        now,
    )
}

/// The Codex usage payload (`GET wham/usage`, docs/rules/cpa.md §4.2) for `plan` and `usage` at `now`:
/// `plan_type`, `rate_limit` (slots per §4.3; `limit_reached` when a window is at 100 %),
/// `code_review_rate_limit`, `credits` (balance as a string), `rate_limit_reached_type`.
pub fn usage_body(plan: &str, usage: &SimUsage, now: DateTime<Utc>) -> String {
    let (primary, secondary) = slots(usage);
    let reached = usage.is_exhausted();
    let review_reset = usage
        .weekly
        .as_ref()
        .map_or(now + Duration::seconds(WEEKLY_SECONDS), |w| w.reset_at);
    let review = SimWindow {
        used_percent: 0.0,
        reset_at: review_reset,
        window_seconds: WEEKLY_SECONDS,
    };
    let credits = match usage.credits_balance {
        Some(balance) => {
            json!({"has_credits": balance > 0.0, "unlimited": false, "balance": balance_text(balance)})
        }
        None => json!({"has_credits": false, "unlimited": false, "balance": "0"}),
    };
    let mut body = json!({
        "plan_type": plan,
        "rate_limit": {
            "allowed": !reached,
            "limit_reached": reached,
            "primary_window": window_json(primary, now),
            "secondary_window": window_json(secondary, now),
        },
        "code_review_rate_limit": {
            "allowed": true,
            "limit_reached": false,
            "primary_window": window_json(Some(&review), now),
            "secondary_window": null,
        },
        "credits": credits,
        "rate_limit_reached_type": if reached { json!({"kind": "rate_limit_reached"}) } else { Value::Null },
    });
    if let Some((available, applicable)) = usage.reset_credit_counts(now) {
        body["rate_limit_reset_credits"] =
            json!({"available_count": available, "applicable_available_count": applicable});
    }
    body.to_string()
}

/// The `x-codex-*` rate-limit headers of a proxied Codex response (docs/rules/cpa.md §4.4), as CPA
/// copies them into usage-queue records (`response_headers`, canonical names, array values).
pub(crate) fn codex_rate_limit_headers(
    usage: &SimUsage,
    now: DateTime<Utc>,
) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let (primary, secondary) = slots(usage);
    for (slot, window) in [("Primary", primary), ("Secondary", secondary)] {
        if let Some(w) = window {
            out.insert(
                format!("X-Codex-{slot}-Used-Percent"),
                vec![number(w.used_percent).to_string()],
            );
            out.insert(
                format!("X-Codex-{slot}-Window-Minutes"),
                vec![(w.window_seconds / 60).to_string()],
            );
            out.insert(
                format!("X-Codex-{slot}-Reset-At"),
                vec![w.reset_at.timestamp().to_string()],
            );
            out.insert(
                format!("X-Codex-{slot}-Reset-After-Seconds"),
                vec![(w.reset_at - now).num_seconds().max(0).to_string()],
            );
        }
    }
    let balance = usage.credits_balance.unwrap_or(0.0);
    out.insert(
        "X-Codex-Credits-Has-Credits".to_string(),
        vec![(balance > 0.0).to_string()],
    );
    out.insert(
        "X-Codex-Credits-Unlimited".to_string(),
        vec!["false".to_string()],
    );
    out.insert(
        "X-Codex-Credits-Balance".to_string(),
        vec![balance_text(balance)],
    );
    out
}

/// The Codex 429 body for an exhausted account (docs/rules/cpa.md §4.4).
pub(crate) fn usage_limit_error(
    plan: &str,
    resets_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> String {
    json!({"error": {
        "type": "usage_limit_reached",
        "message": "The usage limit has been reached",
        "plan_type": plan,
        "resets_at": resets_at.timestamp(),
        "resets_in_seconds": (resets_at - now).num_seconds().max(0),
    }})
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0)
            .single()
            .expect("valid time")
    }

    #[test]
    fn paid_payload_has_five_hour_primary_and_weekly_secondary() {
        let now = t0();
        let usage = SimUsage::paid(
            37.0,
            now + Duration::seconds(9120),
            64.5,
            now + Duration::days(3),
        );
        let body: Value = serde_json::from_str(&usage_body("plus", &usage, now)).expect("json");
        assert_eq!(body["plan_type"], "plus");
        assert_eq!(
            body["rate_limit"]["primary_window"]["limit_window_seconds"],
            18000
        );
        assert_eq!(body["rate_limit"]["primary_window"]["used_percent"], 37);
        assert_eq!(
            body["rate_limit"]["primary_window"]["reset_after_seconds"],
            9120
        );
        assert_eq!(
            body["rate_limit"]["secondary_window"]["limit_window_seconds"],
            604800
        );
        assert_eq!(body["rate_limit"]["secondary_window"]["used_percent"], 64.5);
        assert_eq!(body["rate_limit"]["allowed"], true);
        assert_eq!(body["credits"]["balance"], "0");
        assert!(body["rate_limit_reached_type"].is_null());
    }

    #[test]
    fn the_reset_credit_hint_counts_unlapsed_credits_and_is_absent_without_a_list() {
        let now = t0();
        let mut usage = SimUsage::paid(
            10.0,
            now + Duration::hours(2),
            100.0,
            now + Duration::days(3),
        );
        let body: Value = serde_json::from_str(&usage_body("plus", &usage, now)).expect("json");
        assert!(
            body.get("rate_limit_reset_credits").is_none(),
            "absent = unknown"
        );
        let mut lapsed =
            crate::SimResetCredit::granted("RateLimitResetCredit_old", now - Duration::days(31));
        lapsed.expires_at = now - Duration::days(1);
        usage.reset_credits = Some(vec![
            crate::SimResetCredit::granted("RateLimitResetCredit_a", now - Duration::days(2)),
            lapsed,
        ]);
        let body: Value = serde_json::from_str(&usage_body("plus", &usage, now)).expect("json");
        assert_eq!(body["rate_limit_reset_credits"]["available_count"], 1);
        assert_eq!(
            body["rate_limit_reset_credits"]["applicable_available_count"],
            1
        );
        usage.weekly.as_mut().unwrap().used_percent = 40.0;
        let body: Value = serde_json::from_str(&usage_body("plus", &usage, now)).expect("json");
        assert_eq!(
            body["rate_limit_reset_credits"]["applicable_available_count"], 0,
            "nothing limited: nothing applicable"
        );
    }

    /// One call to the credit endpoints of `spec` (token `tok`) at `now`.
    fn credit_call(
        spec: &mut SimAccount,
        method: &str,
        path: &str,
        body: &str,
        now: DateTime<Utc>,
    ) -> Reply {
        let headers = vec![("Authorization".to_string(), "Bearer tok".to_string())];
        let account = UpstreamAccount {
            spec,
            token: "tok",
            stale: false,
        };
        let request = Outbound {
            method,
            path,
            headers: &headers,
            body,
        };
        respond(Some(account), &request, now)
    }

    fn code(reply: &Reply) -> String {
        match reply {
            Reply::Answer(a) => serde_json::from_str::<Value>(&a.body).expect("json")["code"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            other => panic!("no answer: {other:?}"),
        }
    }

    const LIST: &str = "/backend-api/wham/rate-limit-reset-credits";
    const CONSUME: &str = "/backend-api/wham/rate-limit-reset-credits/consume";

    #[test]
    fn the_credit_endpoints_answer_every_outcome_and_spend_once_per_key() {
        // docs/rules/cpa.md §10.
        let now = t0();
        let mut lapsed =
            crate::SimResetCredit::granted("RateLimitResetCredit_old", now - Duration::days(40));
        lapsed.expires_at = now - Duration::days(10);
        let mut spec = SimAccount::codex(
            "a@example.com",
            "plus",
            SimUsage {
                reset_credits: Some(vec![
                    lapsed,
                    crate::SimResetCredit::granted(
                        "RateLimitResetCredit_a",
                        now - Duration::days(1),
                    ),
                ]),
                ..SimUsage::paid(
                    10.0,
                    now + Duration::hours(2),
                    40.0,
                    now + Duration::days(3),
                )
            },
        );
        // The list: the lapsed credit is listed but not counted.
        let Reply::Answer(list) = credit_call(&mut spec, "GET", LIST, "", now) else {
            panic!("no list");
        };
        let list: Value = serde_json::from_str(&list.body).unwrap();
        assert_eq!(list["available_count"], 1);
        assert_eq!(list["credits"][0]["status"], "expired");
        // Nothing limited: nothing to reset, the credit is kept.
        let key = r#"{"redeem_request_id":"k1"}"#;
        assert_eq!(
            code(&credit_call(&mut spec, "POST", CONSUME, key, now)),
            "nothing_to_reset"
        );
        spec.usage.weekly.as_mut().unwrap().used_percent = 100.0;
        assert_eq!(
            code(&credit_call(&mut spec, "POST", CONSUME, key, now)),
            "reset"
        );
        assert_eq!(spec.usage.weekly.as_ref().unwrap().used_percent, 0.0);
        // The same key again: already redeemed, nothing more spent.
        assert_eq!(
            code(&credit_call(&mut spec, "POST", CONSUME, key, now)),
            "already_redeemed"
        );
        spec.usage.weekly.as_mut().unwrap().used_percent = 100.0;
        // A new key with only the lapsed credit left: no credit.
        let key2 = r#"{"redeem_request_id":"k2"}"#;
        assert_eq!(
            code(&credit_call(&mut spec, "POST", CONSUME, key2, now)),
            "no_credit"
        );
        assert_eq!(spec.usage.credit_desk.spent(), 1);
        assert_eq!(spec.usage.credit_desk.consume_calls, 4);
    }

    #[test]
    fn an_ambiguous_consume_takes_effect_and_a_delayed_reset_shows_the_old_windows() {
        let now = t0();
        let mut spec = SimAccount::codex(
            "a@example.com",
            "plus",
            SimUsage {
                reset_credits: Some(vec![crate::SimResetCredit::granted(
                    "RateLimitResetCredit_a",
                    now,
                )]),
                ..SimUsage::paid(
                    10.0,
                    now + Duration::hours(2),
                    100.0,
                    now + Duration::days(3),
                )
            },
        );
        spec.usage.credit_desk.ambiguous_after_effect = 1;
        spec.usage.credit_desk.delayed_reset_probes = 2;
        let key = r#"{"redeem_request_id":"k1"}"#;
        assert_eq!(
            credit_call(&mut spec, "POST", CONSUME, key, now),
            Reply::TransportFailure
        );
        assert_eq!(spec.usage.credit_desk.spent(), 1, "it took effect");
        let weekly = |r: Reply| {
            match r {
            Reply::Answer(a) => serde_json::from_str::<Value>(&a.body).unwrap()["rate_limit"]
                ["secondary_window"]["used_percent"]
                .as_f64()
                .unwrap(),
            other => panic!("{other:?}"),
        }
        };
        let usage = "/backend-api/wham/usage";
        assert_eq!(weekly(credit_call(&mut spec, "GET", usage, "", now)), 100.0);
        assert_eq!(weekly(credit_call(&mut spec, "GET", usage, "", now)), 100.0);
        assert_eq!(weekly(credit_call(&mut spec, "GET", usage, "", now)), 0.0);
        assert_eq!(
            code(&credit_call(&mut spec, "POST", CONSUME, key, now)),
            "already_redeemed"
        );
    }

    #[test]
    fn free_payload_has_a_single_weekly_window_in_primary() {
        let now = t0();
        let usage = SimUsage::weekly_only(100.0, now + Duration::days(2));
        let body: Value = serde_json::from_str(&usage_body("free", &usage, now)).expect("json");
        assert_eq!(
            body["rate_limit"]["primary_window"]["limit_window_seconds"],
            604800
        );
        assert!(body["rate_limit"]["secondary_window"].is_null());
        assert_eq!(body["rate_limit"]["limit_reached"], true);
        assert_eq!(body["rate_limit"]["allowed"], false);
        assert_eq!(
            body["rate_limit_reached_type"]["kind"],
            "rate_limit_reached"
        );
    }

    #[test]
    fn roll_forward_resets_passed_windows_by_whole_periods() {
        let now = t0();
        let mut usage = SimUsage::paid(
            90.0,
            now - Duration::hours(6),
            50.0,
            now + Duration::days(1),
        );
        roll_forward(&mut usage, now);
        let five = usage.five_hour.expect("five-hour window");
        assert_eq!(five.used_percent, 0.0);
        assert_eq!(
            five.reset_at,
            now - Duration::hours(6) + Duration::hours(10)
        );
        assert_eq!(usage.weekly.map(|w| w.used_percent), Some(50.0));
    }
}
