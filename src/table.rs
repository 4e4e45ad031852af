//! Terminal tables of a round for `inspect` and `demo` (comfy-table): account, plan, long
//! window (named by its real kind: weekly or monthly), five-hour %, the threshold that applied
//! with its source, decision, reason (`[cache]` when the last probe's snapshot was reused,
//! `[passive]` when fresh passive evidence spared the probe, docs/rules/patrol.md §4.7), runs
//! out (the exhaustion forecast), next real probe, and the banked reset credits
//! (docs/reset-credits.md; the column and the site line only when the site's `resetCreditsMode`
//! is not `off`), and a line for the credit the round redeemed (or, in a dry run, would redeem).
//!
//! Width ([`Output`], docs/operations.md "First start"): on a terminal the table fits its width —
//! reasons and the other cells wrap at spaces and never split mid-word, e-mails are kept whole;
//! a terminal too narrow for every column leaves out the least useful ones (reset credits, runs
//! out, threshold, next real probe, plan, 5-hour, long window, in that order; a line says which)
//! and only below
//! that cuts e-mails with an ellipsis. Piped, every row is one line and nothing is cut.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use comfy_table::{
    ColumnConstraint, ContentArrangement, Table, Width,
    presets::{NOTHING, UTF8_FULL_CONDENSED},
};

use crate::core::forecast::Projection;
use crate::core::policy::kind_name;
use crate::core::report::{DecisionRecord, InspectionRunResult};
use crate::jobs::forecast::RunsOut;
use crate::jobs::reset_credits::RoundCredits;

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

/// Where a round's table goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// A terminal `width` columns wide: every line fits it.
    Terminal { width: u16 },
    /// A pipe or a file: every row on one line, every cell whole.
    Piped,
}

impl Output {
    /// Standard output as it is: a terminal of the width it reports (comfy-table's detection:
    /// stdout is a terminal and answers its size), else [`Output::Piped`].
    pub fn stdout() -> Self {
        match Table::new().width() {
            Some(width) => Output::Terminal { width },
            None => Output::Piped,
        }
    }
}

/// The table's columns, in order, each with its rank in the order a narrow terminal leaves
/// columns out (0 first); `None` = always shown (account, decision, reason).
const COLUMNS: [(&str, Option<u8>); 10] = [
    ("account", None),
    ("plan", Some(4)),
    ("long window", Some(6)),
    ("5-hour", Some(5)),
    ("threshold", Some(2)),
    ("decision", None),
    ("reason", None),
    ("runs out", Some(1)),
    ("next real probe", Some(3)),
    ("reset credits", Some(0)),
];
const ACCOUNT: usize = 0;
const REASON: usize = 6;
const CREDITS: usize = 9;

/// Content width the reason column keeps at least on a terminal (its text wraps at spaces).
pub const MIN_REASON_WIDTH: usize = 24;

/// Renders a round as a table plus a one-line summary for standard output
/// ([`Output::stdout`]); `now` for relative times; no forecast (the "runs out" column shows `-`).
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
    render_round_to(r, now, runs_out, Output::stdout())
}

/// [`render_round_with`] plus the banked reset credits (`jobs::reset_credits::round_credits`):
/// a column per account and a line for the site when its mode is not `off`.
pub fn render_round_with_credits(
    r: &InspectionRunResult,
    now: DateTime<Utc>,
    runs_out: &HashMap<String, RunsOut>,
    credits: &RoundCredits,
) -> String {
    render_round_credits_to(r, now, runs_out, credits, Output::stdout())
}

/// How the table fits a terminal: which columns it shows, each one's least content width (a
/// cell never splits mid-word above it), and the account column's width.
#[derive(Debug, Clone, PartialEq)]
struct Fit {
    shown: [bool; 10],
    least: [usize; 10],
    /// The longest account when every e-mail fits whole, else what is left for them.
    account: usize,
}

/// Width of `text`'s longest word (split at spaces), in characters.
fn longest_word(text: &str) -> usize {
    text.split(' ')
        .map(|w| w.chars().count())
        .max()
        .unwrap_or(0)
}

/// The fit of `rows` (cells in [`COLUMNS`] order) on a terminal `width` columns wide. Each
/// column needs its longest word (header included; the account column its longest cell
/// whole, the reason column [`MIN_REASON_WIDTH`]); while they do not fit, columns are left out
/// by rank; if account, decision and reason still do not fit, the accounts get what is left
/// (cut with an ellipsis, at least 1 character). Borders and padding of `UTF8_FULL_CONDENSED`:
/// one bar per column plus one, one space each side of every cell. Fits any terminal wide
/// enough for that one character beside the decision and reason columns (about 45 columns).
fn fit(width: u16, rows: &[Vec<String>], with_credits: bool) -> Fit {
    let mut least = [0; 10];
    for (i, (header, _)) in COLUMNS.iter().enumerate() {
        let cells = rows.iter().map(|r| {
            if i == ACCOUNT {
                r[i].chars().count()
            } else {
                longest_word(&r[i])
            }
        });
        least[i] = cells.chain([longest_word(header)]).max().unwrap_or(0);
    }
    least[REASON] = MIN_REASON_WIDTH;
    let mut shown = [true; 10];
    shown[CREDITS] = with_credits;
    let needed = |shown: &[bool; 10]| {
        let n = shown.iter().filter(|s| **s).count();
        let content: usize = (0..10).filter(|i| shown[*i]).map(|i| least[i]).sum();
        3 * n + 1 + content
    };
    let mut ranks: Vec<(u8, usize)> = COLUMNS
        .iter()
        .enumerate()
        .filter_map(|(i, (_, rank))| rank.map(|r| (r, i)))
        .collect();
    ranks.sort_unstable();
    for (_, i) in ranks {
        if needed(&shown) <= usize::from(width) {
            break;
        }
        shown[i] = false;
    }
    let over = needed(&shown).saturating_sub(usize::from(width));
    let account = least[ACCOUNT].saturating_sub(over).max(1);
    Fit {
        shown,
        least,
        account,
    }
}

/// `account` cut to `width` characters with an ellipsis when longer.
fn fit_account(account: &str, width: usize) -> String {
    if account.chars().count() <= width {
        return account.to_string();
    }
    let mut cut: String = account.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `text` wrapped at spaces to `width` on a terminal (comfy-table, one borderless cell), as is
/// when piped.
fn fit_text(text: &str, output: Output) -> String {
    let Output::Terminal { width } = output else {
        return text.to_string();
    };
    if text.chars().count() <= usize::from(width) {
        return text.to_string();
    }
    let mut t = Table::new();
    t.load_preset(NOTHING)
        .force_no_tty()
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(width)
        .add_row(vec![text]);
    if let Some(c) = t.column_mut(0) {
        c.set_padding((0, 0));
    }
    t.lines()
        .map(|l| l.trim_end().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The cells of one decision, in [`COLUMNS`] order.
fn row(
    d: &DecisionRecord,
    now: DateTime<Utc>,
    runs_out: &HashMap<String, RunsOut>,
    credits: &RoundCredits,
) -> Vec<String> {
    let decision = match (&d.disable_reason, d.action) {
        (Some(reason), crate::core::inspect::Action::Keep) => format!("keep ({})", reason.as_str()),
        (_, a) => a.as_str().to_string(),
    };
    let reason = if d.spared_by_passive {
        format!("[passive] {}", d.reason)
    } else if d.from_cache {
        format!("[cache] {}", d.reason)
    } else {
        d.reason.clone()
    };
    vec![
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
        credits
            .accounts
            .get(&d.account_name)
            .map_or_else(|| "-".into(), |c| c.short()),
    ]
}

/// The table of `rows` for `output`: on a terminal wrapping at its width as [`fit`] says
/// (columns left out, each at least its least width, accounts cut when they must be); piped,
/// no arrangement at all. Answers the names of the columns left out.
fn table(
    mut rows: Vec<Vec<String>>,
    output: Output,
    with_credits: bool,
) -> (Table, Vec<&'static str>) {
    let columns = if with_credits { COLUMNS.len() } else { CREDITS };
    let headers: Vec<&str> = COLUMNS.iter().take(columns).map(|c| c.0).collect();
    let mut t = Table::new();
    // The width is ours to give (`output`), not looked up again by comfy-table.
    t.load_preset(UTF8_FULL_CONDENSED).force_no_tty();
    let Output::Terminal { width } = output else {
        t.set_content_arrangement(ContentArrangement::Disabled)
            .set_header(headers);
        t.add_rows(rows.into_iter().map(|mut r| {
            r.truncate(columns);
            r
        }));
        return (t, vec![]);
    };
    let f = fit(width, &rows, with_credits);
    for r in &mut rows {
        r[ACCOUNT] = fit_account(&r[ACCOUNT], f.account);
    }
    t.set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(width)
        .set_header(headers);
    t.add_rows(rows.into_iter().map(|mut r| {
        r.truncate(columns);
        r
    }));
    let mut left_out = Vec::new();
    for (i, (name, _)) in COLUMNS.iter().enumerate() {
        if i == CREDITS && !with_credits {
            continue;
        }
        let least = if i == ACCOUNT { f.account } else { f.least[i] };
        let constraint = if f.shown[i] {
            // comfy-table's boundary counts the cell's padding (one space each side).
            let w = u16::try_from(least + 2).unwrap_or(u16::MAX);
            ColumnConstraint::LowerBoundary(Width::Fixed(w))
        } else {
            left_out.push(*name);
            ColumnConstraint::Hidden
        };
        if let Some(c) = t.column_mut(i) {
            c.set_constraint(constraint);
        }
    }
    (t, left_out)
}

/// [`render_round_with`] for `output`: on a terminal every line fits its width (from about 45
/// columns, [`fit`]), piped every row is one line with every cell whole (see the module docs).
pub fn render_round_to(
    r: &InspectionRunResult,
    now: DateTime<Utc>,
    runs_out: &HashMap<String, RunsOut>,
    output: Output,
) -> String {
    render_round_credits_to(r, now, runs_out, &RoundCredits::default(), output)
}

/// [`render_round_to`] with the banked reset credits: the column and the site line when
/// `credits.site` is set (the site's mode is not `off`).
pub fn render_round_credits_to(
    r: &InspectionRunResult,
    now: DateTime<Utc>,
    runs_out: &HashMap<String, RunsOut>,
    credits: &RoundCredits,
    output: Output,
) -> String {
    let rows = r
        .decisions
        .iter()
        .map(|d| row(d, now, runs_out, credits))
        .collect();
    let (t, left_out) = table(rows, output, credits.site.is_some());
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
    let summary = format!(
        "round {} ({}) on site {}: {} accounts, {} probed, {} reused, {} failed | disable {} enable {} delete {} keep {}{}",
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
    let mut out = format!("{}\n{t}\n", fit_text(&summary, output));
    if !left_out.is_empty() {
        let note = format!(
            "not shown at this width: {}; piped or --json output has every column",
            left_out.join(", ")
        );
        out.push_str(&fit_text(&note, output));
        out.push('\n');
    }
    if let Some(site) = &credits.site {
        out.push_str(&fit_text(&site.line(), output));
        out.push('\n');
    }
    if let Some(rc) = &r.reset_credit {
        let line = format!(
            "reset credit on {}: {}{}",
            rc.account_name,
            rc.outcome,
            rc.detail
                .as_deref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        );
        out.push_str(&fit_text(&line, output));
        out.push('\n');
    }
    for f in failed {
        out.push_str(&fit_text(&format!("action failed: {f}"), output));
        out.push('\n');
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
            reset_credit: None,
        }
    }

    const LONG_REASON: &str = "weekly 97% >= threshold 95% (account policy); the account stays disabled until its weekly window resets, then the reset re-check enables it again";

    fn decision(email: &str, reason: &str) -> DecisionRecord {
        DecisionRecord {
            account_name: format!("codex-{email}-plus.json"),
            display_account: email.into(),
            plan_type: Some("plus".into()),
            action: crate::core::inspect::Action::Disable,
            rule: 3,
            reason: reason.into(),
            disable_reason: None,
            status_code: Some(200),
            used_percent: Some(97.0),
            used_window: Some(WindowKind::Weekly),
            five_hour_used_percent: Some(40.0),
            threshold: None,
            is_quota_reached: true,
            from_cache: false,
            spared_by_passive: false,
            evaluated: true,
            error: None,
            next_real_refresh_at: None,
        }
    }

    /// A partial round with a long cause, long e-mails and a long reason.
    fn wide_round() -> InspectionRunResult {
        let mut r = round(
            RunStatus::Partial,
            Some(
                "CPA did not answer 2 of 6 probe(s) (first: connection refused); those accounts were not evaluated",
            ),
        );
        r.decisions = vec![
            decision("heidi.revoked@example.com", LONG_REASON),
            decision(
                "laura.manual@example.com",
                "quota usable (weekly 10%, 5-hour 3%)",
            ),
            decision("bob@example.com", LONG_REASON),
        ];
        r
    }

    const LONG_EMAIL: &str = "a.rather.long.address+pool-7@example-company.com";

    fn width_of(line: &str) -> usize {
        line.chars().count()
    }

    #[test]
    fn on_a_terminal_every_line_fits_its_width_and_no_cell_splits_mid_word() {
        let now = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        let r = wide_round();
        for width in [80u16, 100, 120, 160, 200] {
            let out = render_round_to(&r, now, &HashMap::new(), Output::Terminal { width });
            for line in out.lines() {
                assert!(
                    width_of(line) <= usize::from(width),
                    "{width}: {line:?}\n{out}"
                );
            }
            // Each e-mail whole on one line; every word of the reason whole (wrapped, not cut).
            for d in &r.decisions {
                assert!(
                    out.lines().any(|l| l.contains(&d.display_account)),
                    "{width}: {} split\n{out}",
                    d.display_account
                );
            }
            for word in LONG_REASON.split(' ') {
                assert!(out.contains(word), "{width}: {word:?} split\n{out}");
            }
            assert!(!out.contains('…'), "{width}: nothing cut\n{out}");
        }
        // Wide enough, every column; narrower, the least useful ones are left out, and said so.
        let wide = render_round_to(&r, now, &HashMap::new(), Output::Terminal { width: 160 });
        assert!(
            wide.contains("next real probe") && !wide.contains("not shown"),
            "{wide}"
        );
        let narrow = render_round_to(&r, now, &HashMap::new(), Output::Terminal { width: 80 });
        let note = narrow
            .lines()
            .find(|l| l.starts_with("not shown at this width: "));
        assert!(
            note.is_some_and(|l| l.contains("threshold, runs out")),
            "{narrow}"
        );
        // The long window stays longest (left out last).
        assert!(narrow.contains("┆ weekly 97% ┆"), "{narrow}");
    }

    #[test]
    fn a_terminal_too_narrow_for_an_e_mail_cuts_it_with_an_ellipsis_never_splits_it() {
        let now = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        let mut r = wide_round();
        r.decisions.push(decision(LONG_EMAIL, LONG_REASON));
        // 48 characters of e-mail beside decision and reason need 10 + 48 + 8 + 24 = 90.
        for width in [44u16, 60, 89] {
            let out = render_round_to(&r, now, &HashMap::new(), Output::Terminal { width });
            for line in out.lines() {
                assert!(
                    width_of(line) <= usize::from(width),
                    "{width}: {line:?}\n{out}"
                );
            }
            let cut = usize::from(width) - 10 - 8 - 24;
            let long = fit_account(LONG_EMAIL, cut);
            assert!(long.ends_with('…'), "{long}");
            assert!(
                out.lines().any(|l| l.contains(&long)),
                "{width}: {long}\n{out}"
            );
        }
        let out = render_round_to(&r, now, &HashMap::new(), Output::Terminal { width: 90 });
        assert!(out.lines().any(|l| l.contains(LONG_EMAIL)), "{out}");
        assert!(!out.contains('…'), "{out}");
    }

    #[test]
    fn reset_credits_show_as_a_column_and_a_site_line_only_when_the_mode_is_on() {
        use crate::core::settings::ResetCreditsMode;
        use crate::jobs::reset_credits::{AccountCreditsView, SiteCreditsView};
        let now = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        let r = wide_round();
        let off = render_round_to(&r, now, &HashMap::new(), Output::Piped);
        assert!(!off.contains("reset credits"), "{off}");
        let first = r.decisions[0].account_name.clone();
        let credits = RoundCredits {
            accounts: [(
                first,
                AccountCreditsView {
                    available: Some(2),
                    applicable: Some(1),
                    listed_at: None,
                    soonest_expires_at: None,
                },
            )]
            .into(),
            site: Some(SiteCreditsView {
                mode: ResetCreditsMode::Observe,
                available: 2,
                applicable: 1,
                accounts_known: 1,
                soonest_expires_at: Some(now + chrono::Duration::days(9)),
            }),
        };
        let mut r = r;
        r.reset_credit = Some(crate::core::reset_credits::RedeemReport {
            account_name: "a.json".into(),
            window_reset_at: now,
            credit_id: None,
            redeem_request_id: None,
            outcome: "would_redeem".into(),
            detail: None,
            retry: false,
            dry_run: true,
        });
        let on = render_round_credits_to(&r, now, &HashMap::new(), &credits, Output::Piped);
        assert!(on.contains("reset credit on a.json: would_redeem"), "{on}");
        assert!(on.contains("reset credits"), "{on}");
        assert!(on.contains("2 (1 now)"), "{on}");
        assert!(
            on.contains("reset credits (observe): 2 banked on 1 accounts, 1 usable now, soonest expiry 2026-05-30 03:00 UTC"),
            "{on}"
        );
        // On a narrow terminal the credits column is the first left out.
        let narrow = render_round_credits_to(
            &r,
            now,
            &HashMap::new(),
            &credits,
            Output::Terminal { width: 100 },
        );
        let note = narrow
            .lines()
            .find(|l| l.starts_with("not shown at this width"))
            .unwrap_or_default();
        assert!(note.contains("reset credits"), "{narrow}");
    }

    #[test]
    fn piped_every_row_is_one_line_with_every_cell_whole() {
        let now = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        let r = wide_round();
        let out = render_round_to(&r, now, &HashMap::new(), Output::Piped);
        // Summary, top border, header, header separator, three rows, bottom border.
        assert_eq!(out.lines().count(), 1 + 3 + r.decisions.len() + 1, "{out}");
        for d in &r.decisions {
            assert!(
                out.lines()
                    .any(|l| l.contains(&d.display_account) && l.contains(&d.reason)),
                "{} not on one line\n{out}",
                d.display_account
            );
        }
        assert!(
            out.lines()
                .next()
                .unwrap()
                .ends_with("those accounts were not evaluated")
        );
        assert!(!out.contains('…'), "{out}");
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
    fn the_reason_says_whether_the_snapshot_was_reused_or_the_probe_spared_by_passive_evidence() {
        let now = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        let mut d = decision("a@example.com", "within threshold");
        let cell = |d: &DecisionRecord| {
            row(d, now, &HashMap::new(), &RoundCredits::default())[REASON].clone()
        };
        assert_eq!(cell(&d), "within threshold");
        d.from_cache = true;
        assert_eq!(cell(&d), "[cache] within threshold");
        d.spared_by_passive = true;
        assert_eq!(cell(&d), "[passive] within threshold");
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
