//! What a round is asked to do: its kind ([`RoundKind`], why it runs and whether it acts)
//! and its options. Shared by the round, alerting and the callers that start rounds, so none
//! of them needs the round module to name a round.

use std::collections::HashSet;

pub use crate::core::round::RoundKind;

/// Options of one round.
#[derive(Debug, Clone)]
pub struct RoundOptions {
    pub kind: RoundKind,
    /// Probe every evaluated account for real.
    pub force: bool,
    /// The operator's dry run (`inspect --dry-run`, `dryRun=true`): read CPA and decide, write
    /// nothing — no action, no stored state, no log entry, no runtime counter; the run record
    /// (marked `dryRun`) is all it keeps (docs/patrol.md "What a round does", dry runs). Kinds
    /// that never act (`acts()` false) are not dry runs: they store what they probed.
    pub dry_run: bool,
    /// Restrict the round to these accounts (reset checks, freshness, single refresh).
    pub only: Option<HashSet<String>>,
}

impl RoundOptions {
    /// A round of `kind` over the whole site.
    pub fn new(kind: RoundKind) -> Self {
        Self {
            kind,
            force: false,
            dry_run: false,
            only: None,
        }
    }
}
