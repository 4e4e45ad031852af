//! The simulated CPA in a child process for the benchmarks that measure the daemon's own
//! memory and time (`round`, `status_page`): the bench binary runs itself again with
//! `QP_BENCH_ROLE=sim`, so the simulated CPA's memory and CPU are not counted.

use std::sync::Arc;

use anyhow::Context;
use quota_patrol::clock::{Clock, SystemClock};
use quota_patrol_sim::{SimConfig, SimCpa, generated_accounts};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

/// Whether this process is the child (`QP_BENCH_ROLE=sim`).
pub fn is_child() -> bool {
    std::env::var("QP_BENCH_ROLE").as_deref() == Ok("sim")
}

/// Whether the newer CPA features are on (`QP_BENCH_FEATURES=on`): the listing carries passive
/// quota (half the accounts have served traffic, so their entries carry signals;
/// docs/rules/cpa.md §9) and the site observes banked reset credits (docs/reset-credits.md).
/// Off (the default), the simulated CPA is a v7.2.140 without the `quota` field.
pub fn features_on() -> bool {
    std::env::var("QP_BENCH_FEATURES").is_ok_and(|v| v == "on")
}

/// Child role: serve the simulated CPA with `n` generated accounts, print its URL and key on
/// one line (the parent's readiness signal), run until stdin closes.
pub async fn serve(n: usize) -> anyhow::Result<()> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let accounts = generated_accounts(n, clock.now());
    let serving: Vec<String> = accounts.iter().step_by(2).map(|a| a.name.clone()).collect();
    let config = SimConfig {
        accounts,
        ban_after_failures: None,
        passive_quota: features_on(),
        ..Default::default()
    };
    let sim = SimCpa::start(config, clock)?;
    sim.set_record_requests(false);
    if features_on() {
        for name in &serving {
            sim.observe_passive(name);
        }
    }
    println!(
        "{} {}",
        sim.base_url(),
        sim.management_key().unwrap_or_default()
    );
    let mut sink = Vec::new();
    tokio::io::stdin().read_to_end(&mut sink).await?;
    Ok(())
}

/// The parent's handle: base URL and management key, read from the child's first line.
/// Dropping it kills the child.
pub struct SimProcess {
    _child: tokio::process::Child,
    pub base_url: String,
    pub key: String,
}

impl SimProcess {
    /// Starts the child (this binary with `QP_BENCH_ROLE=sim`) and waits for its line.
    pub async fn start() -> anyhow::Result<Self> {
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .env("QP_BENCH_ROLE", "sim")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().context("no child stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).await?;
        let mut parts = line.split_whitespace();
        let base_url = parts.next().context("the sim printed no URL")?.to_string();
        let key = parts.next().unwrap_or_default().to_string();
        Ok(Self {
            _child: child,
            base_url,
            key,
        })
    }
}

impl SimProcess {
    /// Creates the site `site_id` against this simulated CPA with the benchmarks' fast
    /// settings: probeWorkers and actionWorkers 32, no batch delay, no retry.
    pub async fn create_site(
        &self,
        patrol: &quota_patrol::jobs::Patrol,
        site_id: &str,
    ) -> anyhow::Result<()> {
        let settings = quota_patrol::core::settings::SettingsPatch {
            probe_workers: Some(32),
            action_workers: Some(32),
            probe_batch_delay_min_ms: Some(0),
            probe_batch_delay_max_ms: Some(0),
            retry_count: Some(0),
            reset_credits_mode: features_on().then(|| "observe".to_string()),
            ..Default::default()
        };
        let input = quota_patrol::jobs::sites::SiteInput {
            site_id: Some(site_id.into()),
            site_name: Some(site_id.into()),
            cpa_base_url: Some(self.base_url.clone()),
            management_key: Some(self.key.clone()),
            usage_url: Some(format!("{}/backend-api/wham/usage", self.base_url)),
            settings,
            ..Default::default()
        };
        quota_patrol::jobs::sites::create_site(patrol, input).await?;
        Ok(())
    }
}
