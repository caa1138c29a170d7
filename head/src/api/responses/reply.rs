//! The response object as OpenAI's Responses API shapes it, built from what
//! a turn holds: live while it generates, or read back from the session.

use serde_json::{json, Value};

use super::super::generate::Usage;
use super::super::output::FinishReason;
use super::super::tools::parse::split_answer;
use super::tools::{call_item, Tools};

/// Where a response stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Generating now.
    InProgress,
    /// The model ended its answer.
    Completed,
    /// Cut by `max_output_tokens` (or the context's end).
    Incomplete,
    /// The generation failed; nothing was answered.
    Failed,
}

impl Status {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
            Status::Incomplete => "incomplete",
            Status::Failed => "failed",
        }
    }

    /// How a generation that ended for `finish` stands.
    pub fn of(finish: FinishReason) -> Status {
        match finish {
            FinishReason::Length => Status::Incomplete,
            FinishReason::Stop | FinishReason::ToolCalls => Status::Completed,
        }
    }
}

/// The request settings a response echoes, as stored with its turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Echo {
    /// The model that answered.
    pub model: String,
    /// `instructions`.
    pub instructions: Option<String>,
    /// `max_output_tokens`.
    pub max_output_tokens: Option<i64>,
    /// `temperature`.
    pub temperature: Option<f64>,
    /// `top_p`.
    pub top_p: Option<f64>,
    /// `previous_response_id`.
    pub previous_response_id: Option<String>,
    /// `store`.
    pub store: bool,
    /// `tools`, `tool_choice` and `parallel_tool_calls`.
    pub tools: Tools,
}

impl Echo {
    /// As kept in the turn's `generation_prompt` event.
    pub fn to_value(&self) -> Value {
        json!({
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "previous_response_id": self.previous_response_id,
            "store": self.store,
            "tools": self.tools.given,
        })
    }

    /// Read back from a `generation_prompt` event's body.
    pub fn from_prompt_event(body: &Value) -> Echo {
        let response = &body["response"];
        Echo {
            model: body["model"].as_str().unwrap_or_default().to_owned(),
            instructions: response["instructions"].as_str().map(str::to_owned),
            max_output_tokens: response["max_output_tokens"].as_i64(),
            temperature: response["temperature"].as_f64(),
            top_p: response["top_p"].as_f64(),
            previous_response_id: response["previous_response_id"].as_str().map(str::to_owned),
            store: response["store"].as_bool().unwrap_or(true),
            tools: Tools::from_given(&response["tools"]),
        }
    }
}

/// One response, whole or as far as it got.
#[derive(Debug, Clone)]
pub struct ResponseView {
    /// `resp_...`.
    pub id: String,
    /// The id of its output message.
    pub message_id: String,
    /// When it was created, in seconds since the Unix epoch.
    pub created_at: i64,
    /// Where it stands.
    pub status: Status,
    /// The request's settings.
    pub echo: Echo,
    /// The answer's text, once there is one.
    pub text: Option<String>,
    /// Token counts, once known.
    pub usage: Option<Usage>,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

impl ResponseView {
    /// The output message item, with the text so far.
    pub fn message(&self, status: Status) -> Value {
        self.message_with(self.text.as_deref(), status)
    }

    /// The output message item with `text`.
    pub fn message_with(&self, text: Option<&str>, status: Status) -> Value {
        let content = match text {
            Some(text) => vec![output_text(text)],
            None => Vec::new(),
        };
        json!({
            "id": self.message_id,
            "type": "message",
            "status": status.as_str(),
            "role": "assistant",
            "content": content,
        })
    }

    /// The output items of a finished answer: its message (unless the
    /// answer is only calls), then a `function_call` item per call.
    pub fn output(&self) -> Vec<Value> {
        let Some(text) = &self.text else {
            return Vec::new();
        };
        let (content, calls) = split_answer(text, self.echo.tools.set.as_ref());
        let mut output = Vec::with_capacity(calls.len() + 1);
        if !content.is_empty() || calls.is_empty() {
            output.push(self.message_with(Some(&content), self.status));
        }
        for (i, call) in calls.iter().enumerate() {
            output.push(call_item(&self.id, i, call, "completed"));
        }
        output
    }

    /// The `response` object.
    pub fn body(&self) -> Value {
        let output = self.output();
        let given = &self.echo.tools.given;
        let incomplete =
            (self.status == Status::Incomplete).then(|| json!({"reason": "max_output_tokens"}));
        let error = self
            .error
            .as_ref()
            .map(|message| json!({"code": "server_error", "message": message}));
        let usage = self.usage.map(|u| {
            json!({
                "input_tokens": u.prompt_tokens,
                "input_tokens_details": {"cached_tokens": u.cached_tokens},
                "output_tokens": u.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": u.prompt_tokens + u.completion_tokens,
            })
        });
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": self.status.as_str(),
            "error": error,
            "incomplete_details": incomplete,
            "instructions": self.echo.instructions,
            "max_output_tokens": self.echo.max_output_tokens,
            "model": self.echo.model,
            "output": output,
            "parallel_tool_calls": given["parallel_tool_calls"].as_bool().unwrap_or(true),
            "previous_response_id": self.echo.previous_response_id,
            "reasoning": {"effort": null, "summary": null},
            "store": self.echo.store,
            "temperature": self.echo.temperature,
            "text": {"format": {"type": "text"}},
            "tool_choice": given.get("tool_choice").cloned().unwrap_or_else(|| json!("auto")),
            "tools": given.get("tools").cloned().unwrap_or_else(|| json!([])),
            "top_p": self.echo.top_p,
            "truncation": "disabled",
            "usage": usage,
            "user": null,
            "metadata": {},
        })
    }
}

/// An `output_text` content part.
pub fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}
