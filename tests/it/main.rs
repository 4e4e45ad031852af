//! The one integration-test binary: the real app on port 0, a temp SQLite file, a manual clock
//! and the simulated CPA on 127.0.0.1 (plus an SMTP server and a webhook receiver for alerts, and
//! Debian's headless Chromium for the status page in `browser`).

mod alerts;
mod api;
mod architecture;
mod browser;
mod codex;
mod cpa_v8;
mod cpa_writes;
mod deploy;
mod dry_run;
mod early_warning;
mod forecast;
mod helpers;
mod keyguard;
mod passive;
mod patrol;
mod policy;
mod pool;
mod real_runs;
mod references;
mod reset_credits;
mod router;
mod router_admin;
mod router_clients;
mod routing;
mod shutdown;
mod smtp;
mod status_page;
mod webhook;
