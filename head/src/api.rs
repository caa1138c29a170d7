//! OpenAI-compatible HTTP API.
