//! Why engine hosts ended, counted for the node's metrics page
//! (`superfluid_engine_host_exits_total{model,reason}`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use superfluid_link::sync::lock;

/// Why an engine host ended while its node still wanted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ExitReason {
    /// Killed by a signal: an abort in llama.cpp (`SIGABRT`), a crash
    /// (`SIGSEGV`), the kernel's out-of-memory killer or someone's `SIGKILL`.
    Signal,
    /// Exited with a failing status.
    Failed,
    /// Exited with status 0 although nobody asked it to.
    Exited,
    /// Sent a frame that is too long, does not decode or makes no sense.
    BadFrame,
    /// Made no progress on its generations for longer than the watchdog allows.
    Stalled,
    /// Could not load its model (or said nothing before its deadline).
    LoadFailed,
}

impl ExitReason {
    /// Every reason, in label order.
    pub const ALL: [ExitReason; 6] = [
        Self::Signal,
        Self::Failed,
        Self::Exited,
        Self::BadFrame,
        Self::Stalled,
        Self::LoadFailed,
    ];

    /// The `reason` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Signal => "signal",
            Self::Failed => "failed",
            Self::Exited => "exited",
            Self::BadFrame => "bad_frame",
            Self::Stalled => "stalled",
            Self::LoadFailed => "load_failed",
        }
    }
}

static EXITS: Mutex<BTreeMap<(String, ExitReason), u64>> = Mutex::new(BTreeMap::new());

/// Counts one exit of `model`'s host.
pub fn record(model: &str, reason: ExitReason) {
    *lock(&EXITS).entry((model.to_owned(), reason)).or_default() += 1;
}

/// Every (model, reason, count) counted in this process so far.
pub fn counts() -> Vec<(String, ExitReason, u64)> {
    lock(&EXITS)
        .iter()
        .map(|((model, reason), n)| (model.clone(), *reason, *n))
        .collect()
}

/// Exits of `model`'s hosts for `reason` so far.
pub fn count(model: &str, reason: ExitReason) -> u64 {
    lock(&EXITS)
        .get(&(model.to_owned(), reason))
        .copied()
        .unwrap_or(0)
}
