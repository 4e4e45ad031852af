//! Subject, plain-text and HTML bodies of an alert, rendered by minijinja from the templates in
//! `templates/` (embedded at build time; `templates/README.md` lists their variables). Times are
//! shown in the configured zone, as absolute times and as "in 3 h 12 min". Only what an
//! [`AlertRecord`] holds reaches a template, so no secret can.

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;
use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

use crate::core::alerting::{AccountLine, AlertRecord};
use crate::core::digest::Digest;
use crate::core::when::{ago, local, span, until};

/// The three parts of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// One line.
    pub subject: String,
    pub text: String,
    pub html: String,
}

/// A template failed (a bug in a template: the unit tests render every event).
#[derive(Debug, thiserror::Error)]
#[error("alert template {template} failed: {message}")]
pub struct RenderError {
    template: &'static str,
    message: String,
}

const SUBJECT: &str = "alert_subject.txt.j2";
const TEXT: &str = "alert_body.txt.j2";
const HTML: &str = "alert_body.html.j2";

/// The template environment (templates compiled once).
pub struct Renderer {
    env: Environment<'static>,
}

impl std::fmt::Debug for Renderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Renderer")
    }
}

impl Default for Renderer {
    fn default() -> Self {
        Self::new()
    }
}

impl Renderer {
    /// The embedded templates; undefined variables are errors. `.html` templates escape HTML.
    pub fn new() -> Self {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        for (name, source) in [
            (
                "alert_macros.j2",
                include_str!("../../templates/alert_macros.j2"),
            ),
            (
                SUBJECT,
                include_str!("../../templates/alert_subject.txt.j2"),
            ),
            (TEXT, include_str!("../../templates/alert_body.txt.j2")),
            (HTML, include_str!("../../templates/alert_body.html.j2")),
        ] {
            env.add_template(name, source)
                .unwrap_or_else(|e| panic!("embedded template {name} does not parse: {e}"));
        }
        Self { env }
    }

    /// Renders `alert` for a reader in `tz`; "in …" is counted from `now` (the delivery time).
    pub fn render(
        &self,
        alert: &AlertRecord,
        tz: Tz,
        now: DateTime<Utc>,
    ) -> Result<Rendered, RenderError> {
        let ctx = minijinja::Value::from(minijinja::value::Serde(context(alert, tz, now)));
        let render = |template: &'static str| {
            self.env
                .get_template(template)
                .and_then(|t| t.render(ctx.clone()))
                .map_err(|e| RenderError {
                    template,
                    message: format!("{e:#}"),
                })
        };
        let subject = render(SUBJECT)?
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let mut text = render(TEXT)?;
        let mut html = render(HTML)?;
        for body in [&mut text, &mut html] {
            if !body.ends_with('\n') {
                body.push('\n');
            }
        }
        Ok(Rendered {
            subject,
            text,
            html,
        })
    }
}

/// An instant for a reader: absolute in the zone, and relative to now.
#[derive(Debug, Serialize)]
struct When {
    at: String,
    #[serde(rename = "in")]
    until: String,
    ago: String,
}

#[derive(Debug, Serialize)]
struct Row {
    name: String,
    plan: String,
    state: &'static str,
    weekly: String,
    /// The real kind of `weekly`'s window: `weekly` or `monthly`.
    window: &'static str,
    five_hour: String,
    reset: String,
    reset_in: Option<String>,
}

/// Every variable the templates see (templates/README.md).
#[derive(Debug, Serialize)]
struct Context {
    event: &'static str,
    event_id: String,
    level: &'static str,
    reminder: bool,
    site_id: String,
    site_name: String,
    at: String,
    timezone: String,
    earliest_reset: Option<When>,
    total_accounts: Option<usize>,
    usable_accounts: Option<usize>,
    accounts: Vec<Row>,
    omitted_accounts: usize,
    invalid_accounts: Vec<String>,
    min_active: Option<u32>,
    last_contact: Option<When>,
    failing_since: Option<When>,
    cause: Option<String>,
    raised: Option<When>,
    projected_dry: Option<When>,
    forecast_reset: Option<When>,
    /// "3 h 12 min": how long before `forecast_reset` the site runs dry (both known, dry first).
    dry_lead: Option<String>,
    /// "12.5 % per hour", summed burn of the accounts in use.
    burn: Option<String>,
    early_warning: Option<String>,
    low_capacity_accounts: Option<u32>,
    digest: Option<DigestView>,
}

/// `daily_digest`: the digest with its times formatted.
#[derive(Debug, Serialize)]
struct DigestView {
    date: String,
    total: usize,
    usable: usize,
    exhausted: usize,
    invalid: usize,
    disabled: usize,
    enabled: usize,
    deleted: usize,
    failed: usize,
    changes: Vec<ChangeRow>,
    omitted_changes: usize,
    /// `reset credits (redeem): 3 banked on 2 accounts, 1 usable now, soonest expiry …; 1
    /// redeemed in the last 24 h` (`None`: mode `off`).
    reset_credits: Option<String>,
}

#[derive(Debug, Serialize)]
struct ChangeRow {
    at: String,
    account: String,
    action: &'static str,
    success: bool,
    reason: Option<String>,
}

fn digest_view(d: &Digest, tz: Tz) -> DigestView {
    DigestView {
        date: d.local_date.format("%Y-%m-%d").to_string(),
        total: d.total_accounts,
        usable: d.usable_accounts,
        exhausted: d.exhausted_accounts,
        invalid: d.invalid_accounts,
        disabled: d.actions.disabled,
        enabled: d.actions.enabled,
        deleted: d.actions.deleted,
        failed: d.actions.failed,
        changes: d
            .changes
            .iter()
            .map(|c| ChangeRow {
                at: local(c.at, tz),
                account: c.account.clone(),
                action: c.action.as_str(),
                success: c.success,
                reason: c.reason.clone(),
            })
            .collect(),
        omitted_changes: d.omitted_changes,
        reset_credits: d.reset_credits.as_ref().map(|c| {
            let expiry = c
                .soonest_expires_at
                .map(|at| format!(", soonest expiry {}", local(at, tz)))
                .unwrap_or_default();
            format!(
                "{} banked on {} accounts, {} usable now{expiry}; {} redeemed in the last {} h (mode {})",
                c.available,
                c.accounts_known,
                c.applicable,
                c.redeemed,
                crate::core::digest::DIGEST_SPAN_HOURS,
                c.mode
            )
        }),
    }
}

fn context(a: &AlertRecord, tz: Tz, now: DateTime<Utc>) -> Context {
    let when = |t: DateTime<Utc>| When {
        at: local(t, tz),
        until: until(now, t),
        ago: ago(t, now),
    };
    let d = &a.details;
    Context {
        event: a.kind.as_str(),
        event_id: a.id.clone(),
        level: a.level().as_str(),
        reminder: a.reminder,
        site_id: a.site_id.clone(),
        site_name: a.site_name.clone(),
        at: local(a.at, tz),
        timezone: tz.name().to_string(),
        earliest_reset: d.earliest_reset_at.map(when),
        total_accounts: d.total_accounts,
        usable_accounts: d.usable_accounts,
        accounts: d.accounts.iter().map(|l| row(l, tz, now)).collect(),
        omitted_accounts: d.omitted_accounts,
        invalid_accounts: d.invalid_accounts.clone(),
        min_active: d.min_active,
        last_contact: d.last_contact_at.map(when),
        failing_since: d.failing_since.map(when),
        cause: d.cause.clone(),
        raised: d.raised_at.map(when),
        projected_dry: d.projected_dry_at.map(when),
        forecast_reset: d.forecast_reset_at.map(when),
        dry_lead: match (d.projected_dry_at, d.forecast_reset_at) {
            (Some(dry), Some(reset)) if dry < reset => Some(span(reset - dry)),
            _ => None,
        },
        burn: d.burn_per_hour.map(|b| format!("{b:.1} % per hour")),
        early_warning: d.early_warning_minutes.map(|m| span(Duration::minutes(m))),
        low_capacity_accounts: d.low_capacity_accounts,
        digest: d.digest.as_ref().map(|g| digest_view(g, tz)),
    }
}

fn row(l: &AccountLine, tz: Tz, now: DateTime<Utc>) -> Row {
    let pct = |p: Option<f64>| p.map_or_else(|| "-".to_string(), |p| format!("{p:.0} %"));
    Row {
        name: l.display_name.clone(),
        plan: l.plan.clone().unwrap_or_else(|| "?".into()),
        state: if l.usable {
            "usable"
        } else if l.exhausted {
            "exhausted"
        } else if l.disabled {
            "disabled"
        } else {
            "unknown"
        },
        weekly: pct(l.weekly_used_percent),
        window: crate::core::policy::kind_name(
            l.long_window
                .unwrap_or(crate::core::quota::WindowKind::Weekly),
        ),
        five_hour: pct(l.five_hour_used_percent),
        reset: l.reset_at.map_or_else(|| "-".into(), |t| local(t, tz)),
        reset_in: l.reset_at.map(|t| until(now, t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::alerting::{AlertDetails, EventKind};
    use chrono::TimeZone;
    use std::path::PathBuf;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
    }

    fn line(
        name: &str,
        plan: &str,
        weekly: f64,
        five: Option<f64>,
        reset: Duration,
    ) -> AccountLine {
        AccountLine {
            name: format!("codex-{name}-{plan}.json"),
            display_name: name.into(),
            plan: Some(plan.into()),
            disabled: true,
            usable: false,
            exhausted: true,
            weekly_used_percent: Some(weekly),
            long_window: None,
            five_hour_used_percent: five,
            reset_at: Some(t0() + reset),
        }
    }

    /// The fixed inputs of the golden files: two exhausted accounts of site "Main CPA".
    fn fixed(kind: EventKind) -> AlertRecord {
        let accounts = vec![
            line(
                "alice@example.com",
                "plus",
                97.0,
                Some(40.0),
                Duration::minutes(192),
            ),
            line("bob@example.com", "free", 100.0, None, Duration::days(2)),
        ];
        let mut details = AlertDetails {
            total_accounts: Some(2),
            usable_accounts: Some(0),
            earliest_reset_at: Some(t0() + Duration::minutes(192)),
            accounts,
            ..Default::default()
        };
        if kind == EventKind::Recovered {
            details.usable_accounts = Some(1);
            details.accounts[0].usable = true;
            details.accounts[0].exhausted = false;
            details.accounts[0].disabled = false;
            details.accounts[0].weekly_used_percent = Some(3.0);
            details.accounts[0].five_hour_used_percent = Some(0.0);
            details.accounts[0].reset_at = Some(t0() + Duration::days(7));
            details.earliest_reset_at = Some(t0() + Duration::days(2));
            details.raised_at = Some(t0() - Duration::minutes(200));
        }
        AlertRecord {
            id: "7f1c2d3e-0000-4000-8000-000000000001".into(),
            site_id: "main".into(),
            site_name: "Main CPA".into(),
            kind,
            at: t0(),
            reminder: false,
            details,
        }
    }

    fn golden(name: &str, actual: &str) {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/emails")
            .join(name);
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, actual).unwrap();
            return;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run with UPDATE_GOLDEN=1 to write it)",
                path.display()
            )
        });
        assert_eq!(
            actual,
            expected,
            "{} differs (UPDATE_GOLDEN=1 rewrites it after a deliberate change)",
            path.display()
        );
    }

    fn check_golden(kind: EventKind, scenario: &str) {
        let r = Renderer::new()
            .render(&fixed(kind), chrono_tz::Europe::Berlin, t0())
            .unwrap();
        golden(
            &format!("{scenario}__subject.txt"),
            &format!("{}\n", r.subject),
        );
        golden(&format!("{scenario}__body.txt"), &r.text);
        golden(&format!("{scenario}__body.html"), &r.html);
    }

    #[test]
    fn all_exhausted_matches_its_golden_files() {
        check_golden(EventKind::AllExhausted, "all-exhausted");
    }

    #[test]
    fn recovered_matches_its_golden_files() {
        check_golden(EventKind::Recovered, "recovered");
    }

    /// `pool_low` of "Main CPA": one of two accounts usable, dry in 3 h 12 min at 12.5 % per hour,
    /// 2 d before its earliest reset.
    fn pool_low() -> AlertRecord {
        let mut a = fixed(EventKind::PoolLow);
        a.details.usable_accounts = Some(1);
        a.details.accounts[0].usable = true;
        a.details.accounts[0].exhausted = false;
        a.details.accounts[0].disabled = false;
        a.details.accounts[0].weekly_used_percent = Some(60.0);
        a.details.earliest_reset_at = Some(t0() + Duration::days(2));
        a.details.projected_dry_at = Some(t0() + Duration::minutes(192));
        a.details.forecast_reset_at = Some(t0() + Duration::days(2));
        a.details.burn_per_hour = Some(12.5);
        a.details.early_warning_minutes = Some(120);
        a.details.low_capacity_accounts = Some(2);
        a
    }

    fn daily_digest() -> AlertRecord {
        use crate::core::digest::{ActionCounts, Digest, StateChange};
        use crate::core::inspect::Action;
        let mut a = pool_low();
        a.kind = EventKind::DailyDigest;
        a.details.early_warning_minutes = None;
        a.details.low_capacity_accounts = None;
        a.details.digest = Some(Digest {
            local_date: chrono::NaiveDate::from_ymd_opt(2026, 5, 21).unwrap(),
            since: t0() - Duration::hours(24),
            total_accounts: 2,
            usable_accounts: 1,
            exhausted_accounts: 1,
            invalid_accounts: 0,
            changes: vec![
                StateChange {
                    at: t0() - Duration::hours(5),
                    account: "bob@example.com".into(),
                    action: Action::Disable,
                    success: true,
                    reason: Some("weekly 100% >= threshold 95%".into()),
                },
                StateChange {
                    at: t0() - Duration::hours(1),
                    account: "alice@example.com".into(),
                    action: Action::Enable,
                    success: false,
                    reason: None,
                },
            ],
            omitted_changes: 0,
            actions: ActionCounts {
                disabled: 1,
                enabled: 0,
                deleted: 0,
                failed: 1,
            },
            reset_credits: Some(crate::core::digest::DigestCredits {
                mode: "redeem".into(),
                available: 3,
                applicable: 1,
                accounts_known: 2,
                soonest_expires_at: Some(t0() + Duration::days(9)),
                redeemed: 1,
            }),
        });
        a
    }

    fn check_golden_record(a: &AlertRecord, scenario: &str) {
        let r = Renderer::new()
            .render(a, chrono_tz::Europe::Berlin, t0())
            .unwrap();
        golden(
            &format!("{scenario}__subject.txt"),
            &format!("{}\n", r.subject),
        );
        golden(&format!("{scenario}__body.txt"), &r.text);
        golden(&format!("{scenario}__body.html"), &r.html);
    }

    #[test]
    fn pool_low_matches_its_golden_files_and_tells_the_projected_dry_time() {
        let a = pool_low();
        check_golden_record(&a, "pool-low");
        let r = Renderer::new()
            .render(&a, chrono_tz::Europe::Berlin, t0())
            .unwrap();
        assert_eq!(
            r.subject,
            "[quota-patrol] WARNING: Main CPA is running low (runs dry in 3 h 12 min)"
        );
        assert!(
            r.text.contains(
                "runs out at 2026-05-21 08:12 CEST (in 3 h 12 min), 1 d 20 h before the earliest reset at 2026-05-23 05:00 CEST (in 2 d)"
            ),
            "{}",
            r.text
        );
        for body in [&r.text, &r.html] {
            assert!(
                body.contains("2026-05-21 08:12 CEST (in 3 h 12 min) at 12.5 % per hour"),
                "{body}"
            );
        }
    }

    #[test]
    fn daily_digest_matches_its_golden_files() {
        let a = daily_digest();
        check_golden_record(&a, "daily-digest");
        let r = Renderer::new().render(&a, chrono_tz::UTC, t0()).unwrap();
        assert_eq!(
            r.subject,
            "[quota-patrol] INFO: Daily digest of Main CPA for 2026-05-21"
        );
        assert!(
            r.text
                .contains("Of 2 account(s), 1 usable, 1 exhausted, 0 invalid."),
            "{}",
            r.text
        );
        assert!(
            r.text.contains(
                "- 2026-05-20 22:00 UTC bob@example.com: disable (weekly 100% >= threshold 95%)"
            ),
            "{}",
            r.text
        );
        assert!(
            r.text
                .contains("- 2026-05-21 02:00 UTC alice@example.com: enable (failed)"),
            "{}",
            r.text
        );
    }

    #[test]
    fn a_reset_credit_message_names_the_account_and_the_credit() {
        // docs/reset-credits.md: one message per redemption.
        let mut a = fixed(EventKind::ResetCreditRedeemed);
        a.details.cause =
            Some("account bob@example.com (reset), credit RateLimitResetCredit_1".into());
        let r = Renderer::new().render(&a, chrono_tz::UTC, t0()).unwrap();
        assert_eq!(
            r.subject,
            "[quota-patrol] INFO: A reset credit was redeemed in Main CPA"
        );
        assert!(
            r.text.contains("redeemed one banked rate-limit reset credit: account bob@example.com (reset), credit RateLimitResetCredit_1."),
            "{}",
            r.text
        );
        assert!(r.html.contains("RateLimitResetCredit_1"), "{}", r.html);
    }

    #[test]
    fn an_exhaustion_message_shows_the_projected_dry_time_when_the_forecast_has_one() {
        let mut a = fixed(EventKind::BelowMinActive);
        a.details.projected_dry_at = Some(t0() + Duration::minutes(45));
        a.details.burn_per_hour = Some(30.0);
        let r = Renderer::new().render(&a, chrono_tz::UTC, t0()).unwrap();
        assert!(
            r.text
                .contains("Projected dry: 2026-05-21 03:45 UTC (in 45 min) at 30.0 % per hour"),
            "{}",
            r.text
        );
        let none = Renderer::new()
            .render(&fixed(EventKind::AllExhausted), chrono_tz::UTC, t0())
            .unwrap();
        assert!(!none.text.contains("Projected dry"), "no forecast, no line");
    }

    #[test]
    fn a_monthly_window_is_named_monthly_in_both_bodies() {
        let mut a = fixed(EventKind::AllExhausted);
        a.details.accounts[1].long_window = Some(crate::core::quota::WindowKind::Monthly);
        a.details.accounts[1].weekly_used_percent = Some(96.0);
        let r = Renderer::new().render(&a, chrono_tz::UTC, t0()).unwrap();
        assert!(r.text.contains("monthly 96 %"), "{}", r.text);
        assert!(r.html.contains("96 % (monthly)"), "{}", r.html);
        assert!(r.text.contains("weekly 97 %"), "{}", r.text);
    }

    #[test]
    fn every_event_renders_in_every_part() {
        let renderer = Renderer::new();
        for kind in EventKind::ALL {
            for reminder in [false, true] {
                let mut a = fixed(kind);
                a.reminder = reminder;
                a.details.invalid_accounts = vec!["heidi@example.com".into()];
                a.details.min_active = Some(2);
                a.details.last_contact_at = Some(t0() - Duration::minutes(20));
                a.details.failing_since = Some(t0() - Duration::minutes(17));
                let r = renderer.render(&a, chrono_tz::UTC, t0()).unwrap();
                assert!(
                    !r.subject.is_empty() && !r.subject.contains('\n'),
                    "{kind:?}"
                );
                assert!(
                    r.text.contains("Main CPA") || kind == EventKind::Test,
                    "{kind:?}"
                );
                assert!(r.html.starts_with("<!DOCTYPE html>"), "{kind:?}");
                assert!(r.subject.starts_with("[quota-patrol]"));
                assert_eq!(r.subject.contains("Reminder"), reminder, "{}", r.subject);
            }
        }
        // Nothing optional: an event without pool details still renders.
        let bare = AlertRecord {
            details: AlertDetails::default(),
            ..fixed(EventKind::SiteUnreachable)
        };
        let r = renderer.render(&bare, chrono_tz::UTC, t0()).unwrap();
        assert!(r.text.contains("never answered"), "{}", r.text);
    }

    #[test]
    fn times_are_shown_in_the_configured_zone_with_the_time_left() {
        let r = Renderer::new()
            .render(
                &fixed(EventKind::AllExhausted),
                "America/New_York".parse().unwrap(),
                t0(),
            )
            .unwrap();
        // 03:00 UTC + 3 h 12 min = 06:12 UTC = 02:12 EDT.
        assert!(
            r.text
                .contains("Earliest reset: 2026-05-21 02:12 EDT (in 3 h 12 min)"),
            "{}",
            r.text
        );
        assert!(r.subject.contains("in 3 h 12 min"), "{}", r.subject);
        assert!(r.text.contains("Times are in America/New_York."));
    }

    #[test]
    fn html_escapes_what_came_from_outside() {
        let mut a = fixed(EventKind::AllExhausted);
        a.site_name = "<b>Pool & Co</b>".into();
        a.details.accounts[0].display_name = "<script>x</script>@example.com".into();
        let r = Renderer::new().render(&a, chrono_tz::UTC, t0()).unwrap();
        assert!(!r.html.contains("<script>"), "{}", r.html);
        assert!(!r.html.contains("<b>Pool"), "{}", r.html);
        assert!(
            r.html.contains("&lt;b&gt;Pool &amp; Co&lt;&#x2f;b&gt;")
                || r.html.contains("&lt;b&gt;Pool &amp; Co&lt;/b&gt;"),
            "{}",
            r.html
        );
        assert!(
            r.text.contains("<b>Pool & Co</b>"),
            "plain text is not escaped"
        );
    }
}
