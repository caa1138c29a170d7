//! A download's progress on the node's terminal: a bar with bytes, rate
//! and time left when stderr is a terminal, log lines every tenth of the
//! file when it is not (a service's journal, a test's captured output).

use std::io::IsTerminal as _;

use indicatif::{ProgressBar, ProgressStyle};

/// Shows how far one model's download has come.
#[derive(Debug)]
pub struct Progress {
    model: String,
    total: u64,
    bar: Option<ProgressBar>,
    /// The last tenth logged, when there is no bar.
    logged_tenth: u64,
}

impl Progress {
    /// A display of `model`'s download of `total` bytes, resumed at `start`.
    pub fn new(model: &str, total: u64, start: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total);
            let style = ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            bar.set_message(format!("fetching {model}"));
            bar.set_position(start);
            bar.reset_eta();
            bar
        });
        Self {
            model: model.to_owned(),
            total,
            bar,
            logged_tenth: tenth(start, total),
        }
    }

    /// `done` bytes are held.
    pub fn set(&mut self, done: u64) {
        match &self.bar {
            Some(bar) => bar.set_position(done),
            None => {
                let now = tenth(done, self.total);
                if now > self.logged_tenth {
                    self.logged_tenth = now;
                    tracing::info!(model = %self.model, done, total = self.total, "fetching {}: {}%", self.model, now * 10);
                }
            }
        }
    }

    /// The download ended, well or not.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

fn tenth(done: u64, total: u64) -> u64 {
    if total == 0 {
        return 10;
    }
    (u128::from(done.min(total)) * 10 / u128::from(total)) as u64
}
