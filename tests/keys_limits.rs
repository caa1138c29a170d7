//! Per-key limits against a running head: requests and tokens per minute
//! refused with OpenAI's 429 until they refill, and OpenAI's
//! `x-ratelimit-*` headers on every answer to a limited key.

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::RequestBuilder;
use serde_json::{json, Value};

use crate::fleet_support::{serial, token, Head, Node, TempDir};
use crate::keys::create;
use crate::support::{chat, MODEL};

/// At most this many requests are sent to exhaust a limit; far more than
/// any limit below lets through, however slowly the machine answers.
const TRIES: usize = 300;

const TRIOS: [&str; 6] = [
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
];

struct Answer {
    status: u16,
    headers: HeaderMap,
    body: Value,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn number(&self, name: &str) -> u64 {
        self.header(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no numeric {name} header: {:?}", self.headers))
    }
}

async fn send(request: RequestBuilder) -> Answer {
    let response = request
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .expect("sending a request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.expect("reading the body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Answer {
        status,
        headers,
        body,
    }
}

/// A head with one node that has joined it.
async fn fleet(tag: &str) -> (Head, Node, TempDir, TempDir) {
    let head_dir = TempDir::new(tag);
    let head = Head::start(head_dir.path(), &[]).expect("starting superfluid head");
    let node_dir = TempDir::new(&format!("{tag}-node"));
    let join = token(&head, &[]).expect("minting a token");
    let mut node = Node::join(&join, node_dir.path(), "limited", &[]).expect("starting a node");
    node.wait_up(&head, Duration::from_secs(60))
        .expect("the node joins");
    (head, node, head_dir, node_dir)
}

/// Sends `request()` until one is refused; the answers that passed and the
/// refusal.
async fn until_refused(mut request: impl FnMut() -> RequestBuilder) -> (Vec<Answer>, Answer) {
    let mut passed = Vec::new();
    for _ in 0..TRIES {
        let answer = send(request()).await;
        if answer.status != 200 {
            return (passed, answer);
        }
        passed.push(answer);
    }
    panic!("{TRIES} requests passed a limit that should have refused some");
}

/// Checks OpenAI's 429 for `kind` (`requests` or `tokens`); the seconds
/// its `Retry-After` says to wait.
fn assert_rate_limited(refused: &Answer, kind: &str, limit: &str) -> u64 {
    assert_eq!(refused.status, 429, "{}", refused.body);
    let error = &refused.body["error"];
    assert_eq!(error["type"], kind, "{}", refused.body);
    assert_eq!(error["code"], "rate_limit_exceeded", "{}", refused.body);
    assert!(error["param"].is_null(), "{}", refused.body);
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("{kind} per minute")) && message.contains(limit),
        "the message names the limit and its value: {message}"
    );
    assert!(message.contains("retry in"), "{message}");
    let retry_after = refused.number("retry-after");
    assert!(retry_after >= 1, "Retry-After is whole seconds");
    assert_eq!(
        refused.header(&format!("x-ratelimit-limit-{kind}")),
        Some(limit)
    );
    assert_eq!(refused.number(&format!("x-ratelimit-remaining-{kind}")), 0);
    retry_after
}

#[tokio::test]
async fn a_key_over_its_request_limit_is_refused_until_a_request_refills() {
    let _serial = serial().await;
    let dir = TempDir::new("limits-rpm");
    let head = Head::start(dir.path(), &[]).expect("starting superfluid head");
    // 60 a minute: a burst of 60, then one more each second.
    let kim = create(&head, &["kim", "--rpm", "60"]);
    let models = || head.client.get(head.url("/v1/models")).bearer_auth(&kim);

    let (passed, refused) = until_refused(models).await;
    assert!(
        passed.len() >= 60,
        "the minute's burst passes: {}",
        passed.len()
    );
    let first = &passed[0];
    assert_eq!(first.header("x-ratelimit-limit-requests"), Some("60"));
    assert_eq!(first.number("x-ratelimit-remaining-requests"), 59);
    assert!(
        first
            .header("x-ratelimit-reset-requests")
            .is_some_and(|r| r.ends_with('s')),
        "{:?}",
        first.headers
    );
    assert!(
        first.header("x-ratelimit-limit-tokens").is_none(),
        "a key without a token limit gets no token headers"
    );

    let retry_after = assert_rate_limited(&refused, "requests", "60");
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    let again = send(models()).await;
    assert_eq!(
        again.status, 200,
        "passes after Retry-After: {}",
        again.body
    );
}

#[tokio::test]
async fn a_key_over_its_token_limit_is_refused_until_its_tokens_refill() {
    let _serial = serial().await;
    let (head, _node, _head_dir, _node_dir) = fleet("limits-tpm").await;
    // 60 tokens a minute refill one a second; each request below costs a
    // few (its prompt and at most 2 generated), so the overdraft stays small.
    let lee = create(&head, &["lee", "--tpm", "60"]);
    let body = json!({"model": MODEL, "prompt": "Hi", "max_tokens": 2, "temperature": 0});
    let complete = || {
        head.client
            .post(head.url("/v1/completions"))
            .bearer_auth(&lee)
            .json(&body)
    };

    let (passed, refused) = until_refused(complete).await;
    let first = passed.first().expect("a full bucket admits a request");
    let spent = first.body["usage"]["total_tokens"].as_u64().unwrap_or(0);
    assert!(spent > 0, "{}", first.body);
    assert_eq!(first.header("x-ratelimit-limit-tokens"), Some("60"));
    assert!(first.header("x-ratelimit-limit-requests").is_none());

    let retry_after = assert_rate_limited(&refused, "tokens", "60");
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    let again = send(complete()).await;
    assert_eq!(
        again.status, 200,
        "passes after Retry-After: {}",
        again.body
    );
}

#[tokio::test]
async fn a_limited_keys_answers_and_streams_carry_its_limits_and_others_get_none() {
    let _serial = serial().await;
    let (head, _node, _head_dir, _node_dir) = fleet("limits-headers").await;
    let limited = create(&head, &["max", "--rpm", "1000", "--tpm", "1000000"]);
    let unlimited = create(&head, &["nia"]);
    let hi = chat(json!([{"role": "user", "content": "Say hi"}]), 4);
    let mut streamed = hi.clone();
    streamed["stream"] = json!(true);
    let post = |key: &str, body: &Value| {
        head.client
            .post(head.url("/v1/chat/completions"))
            .bearer_auth(key)
            .json(body)
    };

    for (what, body) in [("an answer", &hi), ("a stream", &streamed)] {
        let answer = send(post(&limited, body)).await;
        assert_eq!(answer.status, 200, "{what}: {}", answer.body);
        for name in TRIOS {
            assert!(answer.header(name).is_some(), "{what} lacks {name}");
        }
        assert_eq!(answer.header("x-ratelimit-limit-requests"), Some("1000"));
        assert_eq!(answer.header("x-ratelimit-limit-tokens"), Some("1000000"));

        let free = send(post(&unlimited, body)).await;
        assert_eq!(free.status, 200, "{what}: {}", free.body);
        for name in TRIOS {
            assert!(free.header(name).is_none(), "{what} to nia has {name}");
        }
    }
}
