//! [`Transcript`]: the whole text of a generation, handed to a hook when it
//! ends, for callers that keep what was said (sessions).

use super::super::output::{FinishReason, Step};
use super::Usage;

/// How a generation ended, for a [`TranscriptHook`]: its text and finish
/// reason, or `None` when it failed or its client went away first.
pub type Ending = Option<(String, FinishReason)>;

/// Told a generation's text once it ends.
pub type TranscriptHook = Box<dyn FnOnce(Ending, Usage) + Send + Sync>;

/// The text so far and the hook to hand it to.
pub(super) struct Transcript {
    text: String,
    hook: TranscriptHook,
}

impl Transcript {
    pub(super) fn new(hook: TranscriptHook) -> Transcript {
        Transcript {
            text: String::new(),
            hook,
        }
    }

    /// Keeps a step's text; at the end (or a failure) hands everything to
    /// the hook and says so, and the transcript is spent.
    pub(super) fn observe(&mut self, step: &Result<Step, impl Sized>) -> bool {
        match step {
            Ok(Step::Text(text)) => {
                self.text.push_str(text);
                false
            }
            Ok(Step::Done(_)) | Err(_) => true,
        }
    }

    /// Hands the text to the hook: `finish` is `None` when the generation
    /// did not end well.
    pub(super) fn end(self, finish: Option<FinishReason>, usage: Usage) {
        (self.hook)(finish.map(|f| (self.text, f)), usage);
    }
}
