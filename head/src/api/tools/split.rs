//! Splits a streamed answer into the text a client may see at once and the
//! calls that follow it: text is passed on as it comes, except what may be
//! the start of a call tag, and from the first call tag on everything is
//! held until the end, when [`parse`] reads the calls. Every API's tool
//! stream (OpenAI's, Ollama's, Anthropic's) goes through it.

use super::parse::{parse, ParsedCall};
use super::prompt::CALL_OPEN;
use super::spec::ToolSet;

/// Bytes of a call's arguments per streamed delta.
pub const ARGUMENT_PIECE: usize = 24;

/// The state of one streamed answer.
#[derive(Debug, Default)]
pub struct CallSplitter {
    held: String,
    in_call: bool,
}

/// How a streamed answer ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The rest of the answer was calls.
    Calls(Vec<ParsedCall>),
    /// The rest was text (possibly empty), to send as it is: no call tag,
    /// or one that does not read as a call of the tools offered.
    Text(String),
}

impl CallSplitter {
    /// Takes the next piece of the answer; returns the text that may be
    /// sent now (possibly empty).
    pub fn text(&mut self, piece: &str) -> String {
        self.held.push_str(piece);
        if self.in_call {
            return String::new();
        }
        let sendable = match self.held.find(CALL_OPEN) {
            Some(at) => {
                self.in_call = true;
                at
            }
            None => self.held.len() - partial_tag(&self.held),
        };
        self.held.drain(..sendable).collect()
    }

    /// The answer ended: the calls held back, or the text held back when
    /// they do not read as calls.
    pub fn finish(&mut self, tools: &ToolSet) -> Ending {
        let held = std::mem::take(&mut self.held);
        if !self.in_call {
            return Ending::Text(held);
        }
        match parse(&held, tools) {
            // Text before the first tag was sent already.
            Some(parsed) => Ending::Calls(parsed.calls),
            None => Ending::Text(held),
        }
    }
}

/// How many bytes at the end of `text` could be the start of a call tag.
pub fn partial_tag(text: &str) -> usize {
    (1..CALL_OPEN.len())
        .rev()
        .find(|&n| text.ends_with(&CALL_OPEN[..n]))
        .unwrap_or(0)
}

/// `text` in pieces of about `size` bytes, cut between characters.
pub fn pieces(text: &str, size: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + size).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        out.push(&text[start..end]);
        start = end;
    }
    out
}
