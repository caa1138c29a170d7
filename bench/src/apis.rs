//! The client APIs a contender can be driven through: each one's request
//! for the bench's prompt and how its stream reports text and tokens.

use serde_json::{json, Value};

/// Which API of a server a contender's requests go through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// OpenAI's `/v1/completions`: the raw prompt, no chat template.
    Completions,
    /// OpenAI's `/v1/chat/completions`: the prompt as one user message.
    OpenAiChat,
    /// Ollama's `/api/chat`, streamed as NDJSON.
    OllamaChat,
    /// Anthropic's `/v1/messages`, streamed as server-sent events.
    AnthropicMessages,
}

/// How a streamed answer is framed.
pub enum Framing {
    /// Server-sent events with a `data:` line each.
    Sse,
    /// One JSON object per line.
    Ndjson,
}

/// What one streamed chunk says.
#[derive(Debug, Default, PartialEq)]
pub struct Piece<'a> {
    /// Generated text, when the chunk carries some.
    pub text: Option<&'a str>,
    /// The server's count of generated tokens, when the chunk has it.
    pub tokens: Option<u32>,
}

impl Api {
    /// The path, and the body of a greedy streamed request for `prompt`.
    pub fn request(self, model: &str, prompt: &str, max_tokens: u32) -> (&'static str, Value) {
        let user = json!([{"role": "user", "content": prompt}]);
        match self {
            Api::Completions => (
                "/v1/completions",
                json!({
                    "model": model, "prompt": prompt, "max_tokens": max_tokens,
                    "temperature": 0, "stream": true,
                    "stream_options": {"include_usage": true},
                }),
            ),
            Api::OpenAiChat => (
                "/v1/chat/completions",
                json!({
                    "model": model, "messages": user, "max_tokens": max_tokens,
                    "temperature": 0, "stream": true,
                    "stream_options": {"include_usage": true},
                }),
            ),
            Api::OllamaChat => (
                "/api/chat",
                json!({
                    "model": model, "messages": user, "stream": true,
                    "options": {"temperature": 0, "num_predict": max_tokens},
                }),
            ),
            Api::AnthropicMessages => (
                "/v1/messages",
                json!({
                    "model": model, "messages": user, "max_tokens": max_tokens,
                    "temperature": 0, "stream": true,
                }),
            ),
        }
    }

    pub fn framing(self) -> Framing {
        match self {
            Api::OllamaChat => Framing::Ndjson,
            _ => Framing::Sse,
        }
    }

    /// What `chunk`, one event or line of this API's stream, says.
    pub fn read(self, chunk: &Value) -> Piece<'_> {
        let count = |v: &Value| v.as_u64().map(|n| n as u32);
        match self {
            Api::Completions => Piece {
                text: chunk["choices"][0]["text"].as_str(),
                tokens: count(&chunk["usage"]["completion_tokens"]),
            },
            Api::OpenAiChat => Piece {
                text: chunk["choices"][0]["delta"]["content"].as_str(),
                tokens: count(&chunk["usage"]["completion_tokens"]),
            },
            Api::OllamaChat => Piece {
                text: chunk["message"]["content"].as_str(),
                tokens: count(&chunk["eval_count"]),
            },
            Api::AnthropicMessages => match chunk["type"].as_str() {
                Some("content_block_delta") => Piece {
                    text: chunk["delta"]["text"].as_str(),
                    tokens: None,
                },
                Some("message_delta") => Piece {
                    text: None,
                    tokens: count(&chunk["usage"]["output_tokens"]),
                },
                _ => Piece::default(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_api_reads_its_own_text_and_token_count() {
        let cases = [
            (
                Api::Completions,
                json!({"choices": [{"text": "a"}]}),
                Some("a"),
                None,
            ),
            (
                Api::Completions,
                json!({"choices": [], "usage": {"completion_tokens": 7}}),
                None,
                Some(7),
            ),
            (
                Api::OpenAiChat,
                json!({"choices": [{"delta": {"content": "b"}}]}),
                Some("b"),
                None,
            ),
            (
                Api::OllamaChat,
                json!({"message": {"content": "c"}, "done": false}),
                Some("c"),
                None,
            ),
            (
                Api::OllamaChat,
                json!({"message": {"content": ""}, "done": true, "eval_count": 9}),
                Some(""),
                Some(9),
            ),
            (
                Api::AnthropicMessages,
                json!({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "d"}}),
                Some("d"),
                None,
            ),
            (
                Api::AnthropicMessages,
                json!({"type": "message_delta", "usage": {"output_tokens": 5}}),
                None,
                Some(5),
            ),
            (
                Api::AnthropicMessages,
                json!({"type": "message_start", "message": {"content": []}}),
                None,
                None,
            ),
        ];
        for (api, chunk, text, tokens) in cases {
            assert_eq!(api.read(&chunk), Piece { text, tokens }, "{api:?} {chunk}");
        }
    }

    #[test]
    fn every_request_is_greedy_streamed_and_bounded() {
        for api in [
            Api::Completions,
            Api::OpenAiChat,
            Api::OllamaChat,
            Api::AnthropicMessages,
        ] {
            let (_, body) = api.request("m", "hi", 16);
            assert_eq!(body["stream"], json!(true), "{api:?}");
            let max = body
                .get("max_tokens")
                .unwrap_or(&body["options"]["num_predict"]);
            assert_eq!(max, &json!(16), "{api:?}");
            let temperature = body
                .get("temperature")
                .unwrap_or(&body["options"]["temperature"]);
            assert_eq!(temperature, &json!(0), "{api:?}");
        }
    }
}
