//! Terminal tables of a round for `inspect` and `demo` (comfy-table): account, plan, long
//! window (named by its real kind: weekly or monthly), five-hour %, the threshold that applied
//! with its source, decision, reason, runs out (the exhaustion forecast), next real probe.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};

use crate::core::forecast::Projection;
use crate::core::policy::kind_name;
use crate::core::report::{DecisionRecord, InspectionRunResult};
use crate::jobs::forecast::RunsOut;

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.0}%"))
}

/// `weekly 40%` / `monthly 96%`: the long window's used percent under its real kind.
fn long_window(d: &DecisionRecord) -> String {
    match (d.used_window, d.used_percent) {
        (Some(kind), Some(_)) => format!("{} {}", kind_name(kind), pct(d.used_percent)),
        _ => pct(d.used_percent),
    }
}

fn when(at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    match at {
        None => "next round".into(),
        Some(t) if t <= now => "due".into(),
        Some(t) => {
            let m = (t - now).num_minutes();
            if m < 1 {
                return "in <1m".into();
            }
            if m >= 60 {
                format!("in {}h{:02}m", m / 60, m % 60)
            } else {
                format!("in {m}m")
            }
        }
    }
}

/// The "runs out" cell: `weekly in 14h00m`, `5-hour exhausted`, `after reset` (the deciding
/// windows reset first), `-` (no burn rate yet, or no forecast).
fn runs_out_cell(r: Option<&RunsOut>, now: DateTime<Utc>) -> String {
    let Some(r) = r else { return "-".into() };
    let window = r.window.map(kind_name).unwrap_or("window");
    match r.projection {
        Projection::AlreadyExhausted => format!("{window} exhausted"),
        Projection::At { at } => format!("{window} {}", when(Some(at), now)),
        Projection::NotBeforeReset => "after reset".into(),
        Projection::Unknown => "-".into(),
    }
}

/// Renders a round as a table plus a one-line summary; `now` for relative times; no forecast
/// (the "runs out" column shows `-`).
pub fn render_round(r: &InspectionRunResult, now: DateTime<Utc>) -> String {
    render_round_with(r, now, &HashMap::new())
}

/// [`render_round`] with each account's forecast (`jobs::forecast::runs_out`, by name) in the
/// "runs out" column.
pub fn render_round_with(
    r: &InspectionRunResult,
    now: DateTime<Utc>,
    runs_out: &HashMap<String, RunsOut>,
) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(160);
    t.set_header(vec![
        "account",
        "plan",
        "long window",
        "5-hour",
        "threshold",
        "decision",
        "reason",
        "runs out",
        "next real probe",
    ]);
    for d in &r.decisions {
        let decision = match (&d.disable_reason, d.action) {
            (Some(reason), crate::core::inspect::Action::Keep) if d.action.as_str() == "keep" => {
                format!("keep ({})", reason.as_str())
            }
            (_, a) => a.as_str().to_string(),
        };
        let mut reason: String = d.reason.chars().take(90).collect();
        if reason.len() < d.reason.len() {
            reason.push('…');
        }
        if d.from_cache {
            reason = format!("[cache] {reason}");
        }
        t.add_row(vec![
            d.display_account.clone(),
            d.plan_type.clone().unwrap_or_else(|| "?".into()),
            long_window(d),
            pct(d.five_hour_used_percent),
            d.threshold
                .as_ref()
                .map_or_else(|| "-".into(), |a| a.describe()),
            decision,
            reason,
            runs_out_cell(runs_out.get(&d.account_name), now),
            when(d.next_real_refresh_at, now),
        ]);
    }
    let failed: Vec<String> = r
        .action_outcomes
        .iter()
        .filter(|o| !o.success)
        .map(|o| {
            format!(
                "{} {}: {}",
                o.action.as_str(),
                o.account_name,
                o.error.clone().unwrap_or_default()
            )
        })
        .collect();
    let mut out = format!(
        "round {} ({}) on site {}: {} accounts, {} probed, {} reused, {} failed | disable {} enable {} delete {} keep {}{}\n{t}\n",
        &r.run_id[..8.min(r.run_id.len())],
        r.source,
        r.site_id,
        r.total_accounts,
        r.probed_count,
        r.reused_count,
        r.failed_count,
        r.disable_count,
        r.enable_count,
        r.delete_count,
        r.keep_count,
        // `ERROR`, `FAILED` or `PARTIAL` with the cause (a completed round has no error).
        r.error
            .as_ref()
            .map(|e| format!(" | {}: {e}", r.status.as_str().to_uppercase()))
            .unwrap_or_default(),
    );
    for f in failed {
        out.push_str(&format!("action failed: {f}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::quota::WindowKind;
    use crate::core::report::RunStatus;
    use chrono::TimeZone;

    fn round(status: RunStatus, error: Option<&str>) -> InspectionRunResult {
        let at = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        InspectionRunResult {
            run_id: "0123456789".into(),
            site_id: "default".into(),
            source: "manual".into(),
            dry_run: false,
            decisions: vec![],
            action_outcomes: vec![],
            priority_routing_outcomes: vec![],
            total_accounts: 6,
            probed_count: 6,
            reused_count: 0,
            failed_count: 4,
            delete_count: 0,
            disable_count: 0,
            enable_count: 0,
            keep_count: 6,
            started_at: at,
            finished_at: Some(at),
            status,
            error: error.map(String::from),
        }
    }

    #[test]
    fn the_summary_names_a_partial_or_failed_round_with_its_cause() {
        let at = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        let out = render_round(&round(RunStatus::Failed, Some("CPA did not answer")), at);
        assert!(out.contains("| FAILED: CPA did not answer"), "{out}");
        let out = render_round(&round(RunStatus::Partial, Some("CPA did not answer")), at);
        assert!(out.contains("| PARTIAL: CPA did not answer"), "{out}");
        let out = render_round(&round(RunStatus::Completed, None), at);
        assert!(!out.contains("| COMPLETED"), "{out}");
    }

    #[test]
    fn the_runs_out_column_names_the_deciding_window_and_when() {
        let now = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        let cell = |projection, window| runs_out_cell(Some(&RunsOut { projection, window }), now);
        let at = now + chrono::Duration::minutes(14 * 60 + 5);
        assert_eq!(
            cell(Projection::At { at }, Some(WindowKind::Weekly)),
            "weekly in 14h05m"
        );
        assert_eq!(
            cell(Projection::AlreadyExhausted, Some(WindowKind::FiveHour)),
            "5-hour exhausted"
        );
        assert_eq!(
            cell(Projection::At { at }, Some(WindowKind::Monthly)),
            "monthly in 14h05m"
        );
        assert_eq!(cell(Projection::NotBeforeReset, None), "after reset");
        assert_eq!(cell(Projection::Unknown, None), "-");
        assert_eq!(runs_out_cell(None, now), "-");
        let out = render_round(&round(RunStatus::Completed, None), now);
        assert!(out.contains("runs out"), "{out}");
    }
}
