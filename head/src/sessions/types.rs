//! The values the session store takes and gives.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A session's id: unique for the life of the database, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(pub i64);

/// An event's id: unique across all sessions, never reused, increasing in
/// the order events were committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EventId(pub i64);

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What an event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The session was created: its system prompt, tools, params and model.
    Created,
    /// A message from the user (or any role the client names).
    Message,
    /// The prompt a generation was given, as the node saw it.
    GenerationPrompt,
    /// What a generation produced.
    Generated,
    /// A generation that failed: it names the first event of its turn, and
    /// a replay of the history leaves that turn out.
    GenerationFailed,
    /// The model called a tool.
    ToolUse,
    /// A tool's result, as the client sent it back.
    ToolResult,
    /// The session was forked from its parent at an event.
    Forked,
}

impl EventKind {
    /// The name stored in the database and shown in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Created => "created",
            EventKind::Message => "message",
            EventKind::GenerationPrompt => "generation_prompt",
            EventKind::Generated => "generated",
            EventKind::GenerationFailed => "generation_failed",
            EventKind::ToolUse => "tool_use",
            EventKind::ToolResult => "tool_result",
            EventKind::Forked => "forked",
        }
    }

    /// The kind a stored name stands for.
    pub fn parse(name: &str) -> Option<EventKind> {
        [
            EventKind::Created,
            EventKind::Message,
            EventKind::GenerationPrompt,
            EventKind::Generated,
            EventKind::GenerationFailed,
            EventKind::ToolUse,
            EventKind::ToolResult,
            EventKind::Forked,
        ]
        .into_iter()
        .find(|kind| kind.as_str() == name)
    }
}

/// One committed event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Its id.
    pub id: EventId,
    /// The session that owns it (an ancestor, for inherited history).
    pub session: SessionId,
    /// Its place in the history, from 1.
    pub seq: i64,
    /// What it records.
    pub kind: EventKind,
    /// Its content, as JSON.
    pub body: Value,
    /// When it was committed, in milliseconds since the Unix epoch.
    pub created_ms: i64,
}

/// A session's metadata.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// A title for people.
    pub title: Option<String>,
    /// Free-form tags.
    pub tags: Vec<String>,
    /// Hidden from default listings by clients that honour it.
    pub archived: bool,
}

/// A change to a session's metadata: `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct MetaPatch {
    /// A new title; `Some(None)` clears it.
    pub title: Option<Option<String>>,
    /// New tags, replacing the old ones.
    pub tags: Option<Vec<String>>,
    /// Archived or not.
    pub archived: Option<bool>,
}

/// What the store knows of a session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionInfo {
    /// Its id.
    pub id: SessionId,
    /// The session it was forked from.
    pub parent: Option<SessionId>,
    /// The parent's event it was forked at: its history shares the parent's
    /// up to and including this event.
    pub at: Option<EventId>,
    /// When it was created, in milliseconds since the Unix epoch.
    pub created_ms: i64,
    /// Title, tags, archived.
    pub meta: Meta,
    /// Bumped by every change of metadata, trim or purge decision; the
    /// version a caller names must match it (optimistic concurrency).
    pub version: i64,
    /// The `seq` of its last event: how long its history is.
    pub last_seq: i64,
}
