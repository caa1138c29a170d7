//! Stopping processes the way users and service managers do, and checking
//! that a stream running through them was not cut off.

use std::process::Command;
use std::time::Duration;

use crate::fleet_support::{wait_until, Proc};

/// Sends SIGTERM to `proc`.
pub fn terminate(proc: &Proc) {
    let pid = proc.id().to_string();
    let sent = Command::new("sh")
        .args(["-c", &format!("kill -TERM {pid}")])
        .status()
        .expect("running kill");
    assert!(sent.success(), "kill -TERM {pid} failed");
}

/// Fails unless `proc` exits with status 0 within `timeout`.
pub fn assert_exits_cleanly(proc: &mut Proc, timeout: Duration, what: &str) {
    let exited = wait_until(|| proc.try_wait().is_some(), timeout);
    assert!(
        exited,
        "{what} still runs {timeout:?} later:\n{}",
        proc.log()
    );
    let status = proc.try_wait();
    assert!(
        status.is_some_and(|s| s.success()),
        "{what} should exit cleanly, got {status:?}:\n{}",
        proc.log()
    );
}

/// Reads what is left of an SSE response, appending it to `text`.
pub async fn read_rest(response: &mut reqwest::Response, text: &mut String) {
    while let Some(chunk) = response.chunk().await.expect("reading the stream") {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
}

/// Fails unless the SSE `text` of a chat stream ran to its end: a finish
/// reason and `[DONE]`, and no error event.
pub fn assert_stream_complete(text: &str) {
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    assert!(
        !text.contains("\"error\""),
        "the generation was cut off: {text}"
    );
    assert!(
        text.contains("\"finish_reason\":\"length\"")
            || text.contains("\"finish_reason\":\"stop\""),
        "{text}"
    );
}

/// A greedy streamed chat request for a long story of `max_tokens`.
pub fn story_stream(max_tokens: u32) -> serde_json::Value {
    serde_json::json!({
        "model": crate::support::MODEL,
        "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": true,
    })
}
