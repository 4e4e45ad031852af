//! Ready-made account pools for the simulated CPA: the hand-written demo pool (one account per
//! situation a newcomer should see the patrol handle) and a deterministic generated pool for
//! benchmarks. Pure data builders; `now` comes in as an argument.
//! Shapes follow docs/rules/cpa.md §2 (file names, ids) and §4.2–4.3 (windows per plan).

use chrono::{DateTime, Duration, Utc};
use sha2::{Digest, Sha256};

use super::{SimAccount, SimUsage, SimWindow, UpstreamBehaviour};

/// A stable UUID-like `chatgpt_account_id` for an e-mail (the shape CPA shows in `id_token`).
pub(crate) fn account_id_for(email: &str) -> String {
    let h = hex::encode(Sha256::digest(
        format!("chatgpt-account:{email}").as_bytes(),
    ));
    format!(
        "{}-{}-4{}-8{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

fn json_status(status: u16, body: &str) -> UpstreamBehaviour {
    UpstreamBehaviour::Status {
        status,
        content_type: "application/json".to_string(),
        body: body.to_string(),
    }
}

/// The Codex backend's answer for a revoked or expired token (docs/rules/cpa.md §4.2 "401").
pub const TOKEN_INVALIDATED: &str = r#"{"error":{"message":"Your authentication token has been invalidated. Please try signing in again.","type":"invalid_request_error","param":null,"code":"token_invalidated"}}"#;

/// The answer for a deactivated workspace (docs/rules/cpa.md §4.2 "402").
pub const DEACTIVATED_WORKSPACE: &str = r#"{"detail":{"code":"deactivated_workspace"}}"#;

/// A Cloudflare challenge page (docs/rules/cpa.md §4.1: unusual clients get an HTML 403).
pub const CLOUDFLARE_CHALLENGE: &str = "<!DOCTYPE html><html lang=\"en-US\"><head><title>Just a moment...</title>\
<meta http-equiv=\"Content-Type\" content=\"text/html; charset=UTF-8\"></head><body><div class=\"main-wrapper\" role=\"main\">\
<div class=\"main-content\"><h1 class=\"zone-name-title h1\">chatgpt.com</h1><h2 class=\"h2\">Verify you are human by \
completing the action below.</h2></div></div><script>window._cf_chl_opt={cType:'managed'};</script></body></html>";

/// The demo pool: 14 accounts, one per situation the patrol must handle (docs/rules/patrol.md §3, §5):
/// healthy free (weekly / 30-day window), healthy plus and pro, one near the 95 % threshold, one
/// exhausted whose weekly window resets about four minutes after `now`, a plus account with a
/// full five-hour window but a healthy week, a revoked token (401), a Cloudflare HTML 403, a
/// timeout, an account without `auth_index`, one disabled by a person, a deactivated workspace
/// (402) and a `go` account.
pub fn demo_accounts(now: DateTime<Utc>) -> Vec<SimAccount> {
    let m = Duration::minutes;
    let h = Duration::hours;
    let d = Duration::days;
    let mut accounts = vec![
        SimAccount {
            success: 42,
            ..SimAccount::codex(
                "alice.free@example.com",
                "free",
                SimUsage::weekly_only(12.0, now + d(5) + h(3)),
            )
        },
        SimAccount {
            success: 17,
            ..SimAccount::codex(
                "bob.monthly@example.com",
                "free",
                SimUsage::monthly_only(41.0, now + d(18) + h(7)),
            )
        },
        SimAccount {
            success: 318,
            failed: 4,
            note: Some("team A".to_string()),
            ..SimAccount::codex(
                "carol@example.com",
                "plus",
                SimUsage::paid(22.0, now + h(3) + m(12), 37.0, now + d(4) + h(2)),
            )
        },
        SimAccount {
            success: 1204,
            failed: 9,
            ..SimAccount::codex(
                "dave.pro@example.com",
                "pro",
                SimUsage {
                    credits_balance: Some(25.5),
                    reset_credits: Some(vec![crate::SimResetCredit::granted(
                        "RateLimitResetCredit_demo1",
                        now - d(3),
                    )]),
                    ..SimUsage::paid(8.0, now + h(4) + m(31), 15.0, now + d(6) + h(1))
                },
            )
        },
        SimAccount {
            success: 877,
            failed: 2,
            ..SimAccount::codex(
                "erin.busy@example.com",
                "plus",
                SimUsage::paid(40.0, now + h(1) + m(50), 93.0, now + d(2) + h(5)),
            )
        },
        SimAccount {
            success: 1530,
            failed: 11,
            ..SimAccount::codex(
                "frank.spent@example.com",
                "plus",
                SimUsage::paid(0.0, now + h(5), 100.0, now + m(4)),
            )
        },
        SimAccount {
            success: 610,
            failed: 3,
            ..SimAccount::codex(
                "grace.burst@example.com",
                "plus",
                SimUsage::paid(100.0, now + m(47), 58.0, now + d(3) + h(9)),
            )
        },
        SimAccount {
            success: 96,
            failed: 27,
            behaviour: json_status(401, TOKEN_INVALIDATED),
            ..SimAccount::codex(
                "heidi.revoked@example.com",
                "plus",
                SimUsage::paid(0.0, now + h(5), 20.0, now + d(5)),
            )
        },
        SimAccount {
            success: 150,
            behaviour: UpstreamBehaviour::Status {
                status: 403,
                content_type: "text/html; charset=UTF-8".to_string(),
                body: CLOUDFLARE_CHALLENGE.to_string(),
            },
            ..SimAccount::codex(
                "ivan.edge@example.com",
                "plus",
                SimUsage::paid(30.0, now + h(2), 45.0, now + d(2)),
            )
        },
        SimAccount {
            success: 233,
            behaviour: UpstreamBehaviour::Hang,
            ..SimAccount::codex(
                "judy.slow@example.com",
                "pro",
                SimUsage::paid(12.0, now + h(3), 25.0, now + d(4)),
            )
        },
        SimAccount {
            success: 8,
            has_auth_index: false,
            ..SimAccount::codex(
                "ken.noindex@example.com",
                "free",
                SimUsage::weekly_only(5.0, now + d(6)),
            )
        },
        SimAccount {
            success: 402,
            disabled: true,
            note: Some("kept for the weekend".to_string()),
            ..SimAccount::codex(
                "laura.manual@example.com",
                "plus",
                SimUsage::paid(3.0, now + h(4), 10.0, now + d(6) + h(12)),
            )
        },
        SimAccount {
            success: 55,
            failed: 6,
            behaviour: json_status(402, DEACTIVATED_WORKSPACE),
            ..SimAccount::codex(
                "mallory.team@example.com",
                "team",
                SimUsage::paid(0.0, now + h(5), 0.0, now + d(7)),
            )
        },
        SimAccount {
            success: 71,
            ..SimAccount::codex(
                "niaj.go@example.com",
                "go",
                SimUsage::weekly_only(64.0, now + d(1) + h(20)),
            )
        },
    ];
    // Team logins carry the account hash in the file name (docs/rules/cpa.md §2).
    if let Some(team) = accounts.iter_mut().find(|a| a.plan == "team") {
        let hash = &team.chatgpt_account_id.clone().unwrap_or_default()[..8];
        team.name = format!("codex-{hash}-{}-team.json", team.email);
    }
    accounts
}

/// `n` deterministic, normal accounts for benchmarks: 40 % free (weekly only), 40 % plus,
/// 20 % pro, with usage and reset times spread pseudo-randomly (same output for the same `n`
/// and `now`). Names `codex-user00042@example.com-plus.json`.
pub fn generated_accounts(n: usize, now: DateTime<Utc>) -> Vec<SimAccount> {
    (0..n)
        .map(|i| {
            let digest = Sha256::digest(format!("generated-account:{i}").as_bytes());
            let byte = |k: usize| i64::from(digest[k]);
            let plan = match i % 5 {
                0 | 1 => "free",
                2 | 3 => "plus",
                _ => "pro",
            };
            let email = format!("user{i:05}@example.com");
            let weekly = SimWindow::weekly(
                (byte(0) * 100 / 255) as f64 * 0.9,
                now + Duration::minutes(10 + byte(1) * 39 + byte(2) % 39),
            );
            let usage = if plan == "free" {
                SimUsage {
                    weekly: Some(weekly),
                    ..SimUsage::default()
                }
            } else {
                SimUsage {
                    five_hour: Some(SimWindow::five_hour(
                        (byte(3) * 100 / 255) as f64 * 0.8,
                        now + Duration::minutes(5 + byte(4) % 295),
                    )),
                    weekly: Some(weekly),
                    monthly: None,
                    credits_balance: (plan == "pro").then_some(0.0),
                    reset_credits: None,
                    credit_desk: crate::CreditDesk::default(),
                }
            };
            SimAccount {
                success: (byte(5) * 13) as u64,
                failed: (byte(6) % 4) as u64,
                ..SimAccount::codex(&email, plan, usage)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0)
            .single()
            .expect("valid time")
    }

    #[test]
    fn demo_pool_covers_every_situation_with_unique_names() {
        let accounts = demo_accounts(now());
        assert!(accounts.len() >= 12);
        let mut names: Vec<_> = accounts.iter().map(|a| a.name.clone()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), accounts.len());
        assert!(accounts.iter().any(|a| !a.has_auth_index));
        assert!(accounts.iter().any(|a| a.disabled));
        assert!(
            accounts
                .iter()
                .any(|a| a.behaviour == UpstreamBehaviour::Hang)
        );
        let exhausted = accounts
            .iter()
            .find(|a| a.name.contains("frank"))
            .expect("exhausted account");
        let weekly = exhausted.usage.weekly.as_ref().expect("weekly window");
        assert_eq!(weekly.used_percent, 100.0);
        assert_eq!(weekly.reset_at - now(), Duration::minutes(4));
    }

    #[test]
    fn generated_pool_is_deterministic_and_mixes_plans() {
        let a = generated_accounts(50, now());
        assert_eq!(a, generated_accounts(50, now()));
        assert!(
            a.iter()
                .any(|x| x.plan == "free" && x.usage.five_hour.is_none())
        );
        assert!(
            a.iter()
                .any(|x| x.plan == "plus" && x.usage.five_hour.is_some())
        );
        assert!(a.iter().any(|x| x.plan == "pro"));
    }

    #[test]
    fn account_ids_look_like_uuids() {
        let id = account_id_for("user1@example.com");
        let parts: Vec<_> = id.split('-').map(str::len).collect();
        assert_eq!(parts, vec![8, 4, 4, 4, 12]);
    }
}
