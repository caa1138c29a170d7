//! Stop strings: text is cut at the first stop string, which is not emitted.

/// What [`StopMatcher::push`] lets through.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StopOutput {
    /// Text safe to send to the client now.
    pub text: String,
    /// A stop string matched: `text` ends just before it and generation
    /// should end with finish reason "stop".
    pub stopped: bool,
}

/// Watches generated text for stop strings.
///
/// Text that might be the start of a stop string is held back until it is
/// known not to be one, so a stop string split across tokens is still
/// caught and never reaches the client.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    stopped: bool,
    /// The index in `stops` of the stop string that matched.
    matched: Option<usize>,
}

impl StopMatcher {
    /// A matcher for these stop strings (empty strings are ignored).
    pub fn new(stops: impl IntoIterator<Item = String>) -> Self {
        Self {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
            stopped: false,
            matched: None,
        }
    }

    /// Adds generated text; returns what may be emitted.
    pub fn push(&mut self, text: &str) -> StopOutput {
        if self.stopped {
            return StopOutput {
                text: String::new(),
                stopped: true,
            };
        }
        self.held.push_str(text);
        if let Some((at, which)) = self.first_match() {
            self.held.truncate(at);
            self.stopped = true;
            self.matched = Some(which);
            return StopOutput {
                text: std::mem::take(&mut self.held),
                stopped: true,
            };
        }
        let keep = self.partial_suffix_len();
        let split = self.held.len() - keep;
        let rest = self.held.split_off(split);
        StopOutput {
            text: std::mem::replace(&mut self.held, rest),
            stopped: false,
        }
    }

    /// Ends the stream without a match: returns the text held back.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Whether a stop string has matched.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// The stop string that matched, if one has.
    pub fn matched(&self) -> Option<&str> {
        self.matched
            .and_then(|i| self.stops.get(i))
            .map(String::as_str)
    }

    /// The byte offset of the stop string in the held text that is
    /// complete first (of two complete at the same place, the longer).
    ///
    /// Ordering by where a match ends, not where it begins, makes the cut
    /// the same however the text was split: a stop string inside a longer
    /// one is caught as soon as it is complete, before the longer one could
    /// be, whether the rest arrives in the same piece or a later one.
    /// With it, the index of that stop string.
    fn first_match(&self) -> Option<(usize, usize)> {
        self.stops
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.held.find(s.as_str()).map(|at| (at + s.len(), at, i)))
            .min()
            .map(|(_, at, i)| (at, i))
    }

    /// The length of the longest end of the held text that is the start of
    /// some stop string (always on a character boundary).
    fn partial_suffix_len(&self) -> usize {
        let mut best = 0;
        for (at, _) in self.held.char_indices() {
            let tail = &self.held[at..];
            if self.stops.iter().any(|s| s.starts_with(tail)) {
                best = tail.len();
                break;
            }
        }
        best
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()));
        let mut out = String::new();
        for p in pieces {
            let o = m.push(p);
            out.push_str(&o.text);
            if o.stopped {
                return (out, true);
            }
        }
        out.push_str(&m.finish());
        (out, false)
    }

    #[test]
    fn holds_back_partial_matches() {
        let mut m = StopMatcher::new(["END".to_string()]);
        assert_eq!(m.push("hello E").text, "hello ");
        assert_eq!(m.push("N").text, "");
        assert_eq!(m.push("x").text, "ENx");
        assert!(!m.stopped());
    }

    #[test]
    fn cuts_at_the_first_match() {
        assert_eq!(
            run(&["\n\n", "User:"], &["a b User: c\n\n"]),
            ("a b ".into(), true)
        );
        assert_eq!(run(&["stop"], &["no match"]), ("no match".into(), false));
    }

    #[test]
    fn catches_a_stop_string_split_across_tokens() {
        assert_eq!(
            run(&["<|end|>"], &["hi <", "|e", "nd", "|> more"]),
            ("hi ".into(), true)
        );
        assert_eq!(run(&["日本"], &["x日", "本y"]), ("x".into(), true));
    }

    #[test]
    fn flushes_held_text_at_the_end() {
        assert_eq!(run(&["abc"], &["xab"]), ("xab".into(), false));
    }
}
