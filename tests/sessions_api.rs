//! The sessions API end to end, on `superfluid serve` with the real model:
//! create, messages, generations (JSON and events), paging, fork, trim,
//! metadata versions, purge, chat completions recorded in a session, a
//! restart, keys, and a second writer refused while a session generates.

use std::path::Path;

use reqwest::Method;
use serde_json::{json, Value};

use crate::sessions_crash::temp_dir;
use crate::support::{chat, error_message, Server, MODEL};

/// An answer: status, `ETag`, body.
pub(crate) struct Answer {
    pub status: u16,
    pub etag: Option<String>,
    pub body: Value,
}

pub(crate) fn serve(dir: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["--data-dir", dir.to_str().expect("a UTF-8 temp dir")];
    args.extend_from_slice(extra);
    Server::start(&args).expect("starting superfluid serve")
}

pub(crate) async fn call(
    server: &Server,
    method: Method,
    path: &str,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> Answer {
    let mut request = server.client.request(method, server.url(path));
    if let Some(body) = body {
        request = request.json(body);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let resp = request.send().await.expect("sending a request");
    let status = resp.status().as_u16();
    let etag = resp
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = resp.text().await.expect("reading the body");
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    Answer { status, etag, body }
}

pub(crate) async fn post(server: &Server, path: &str, body: &Value) -> Answer {
    call(server, Method::POST, path, Some(body), &[]).await
}

pub(crate) async fn get(server: &Server, path: &str) -> Answer {
    call(server, Method::GET, path, None, &[]).await
}

/// The server-sent events of a response: (event name, data) in order.
async fn sse_events(resp: reqwest::Response) -> Vec<(String, Value)> {
    let text = resp.text().await.expect("reading the stream");
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let name = block.lines().find_map(|l| l.strip_prefix("event:"));
        let data = block.lines().find_map(|l| l.strip_prefix("data:"));
        if let (Some(name), Some(data)) = (name, data) {
            let data = serde_json::from_str(data.trim()).expect("event data is JSON");
            out.push((name.trim().to_owned(), data));
        }
    }
    out
}

fn kinds(events: &Value) -> Vec<(i64, String)> {
    events
        .as_array()
        .expect("an array of events")
        .iter()
        .map(|e| {
            let seq = e["seq"].as_i64().expect("seq");
            (seq, e["kind"].as_str().expect("kind").to_owned())
        })
        .collect()
}

/// The error body's `code`.
pub(crate) fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_generate_fork_trim_purge_and_survive_a_restart() {
    let dir = temp_dir("sessions-api");
    let server = serve(&dir, &[]);

    // Create.
    let created = post(
        &server,
        "/v1/sessions",
        &json!({"model": MODEL, "system": "You are a helpful assistant.",
                "params": {"temperature": 0, "max_tokens": 8}, "title": "first"}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let sid = created.body["id"].as_i64().expect("an id");
    assert_eq!(created.etag.as_deref(), Some("\"1\""));
    assert_eq!(
        created.body,
        json!({"id": sid, "object": "session", "parent": null, "at": null,
               "created_ms": created.body["created_ms"], "title": "first", "tags": [],
               "archived": false, "version": 1, "last_seq": 1, "generating": false})
    );

    // A message, then a generation that answers it as chat completions would.
    let msg = post(
        &server,
        &format!("/v1/sessions/{sid}/messages"),
        &json!({"role": "user", "content": "Name a colour."}),
    )
    .await;
    assert_eq!(msg.status, 201, "{}", msg.body);
    assert_eq!(msg.body["seq"], 2);
    assert_eq!(msg.body["kind"], "message");
    assert_eq!(msg.body["session"], sid);
    assert_eq!(
        msg.body["body"],
        json!({"role": "user", "content": "Name a colour."})
    );
    let first_message_id = msg.body["id"].as_i64().expect("event id");

    let generated = post(&server, &format!("/v1/sessions/{sid}/generate"), &json!({})).await;
    assert_eq!(generated.status, 200, "{}", generated.body);
    assert_eq!(
        kinds(&generated.body["events"]),
        vec![(3, "generation_prompt".into()), (4, "generated".into())]
    );
    assert_eq!(generated.body["next_cursor"], 4);
    let given = &generated.body["events"][0]["body"];
    assert_eq!(given["model"], MODEL);
    assert_eq!(given["params"], json!({"temperature": 0, "max_tokens": 8}));
    let reply = &generated.body["events"][1]["body"];
    assert_eq!(reply["role"], "assistant");
    let stateless = post(
        &server,
        "/v1/chat/completions",
        &chat(
            json!([{"role": "system", "content": "You are a helpful assistant."},
                   {"role": "user", "content": "Name a colour."}]),
            8,
        ),
    )
    .await;
    assert_eq!(stateless.status, 200, "{}", stateless.body);
    assert_eq!(
        reply["content"], stateless.body["choices"][0]["message"]["content"],
        "the session's history is the chat request"
    );
    assert_eq!(
        reply["usage"]["completion_tokens"],
        stateless.body["usage"]["completion_tokens"]
    );
    assert_eq!(
        reply["finish_reason"],
        stateless.body["choices"][0]["finish_reason"]
    );

    // A streamed generation: the committed events, the text between them.
    let msg = post(
        &server,
        &format!("/v1/sessions/{sid}/messages"),
        &json!({"role": "user", "content": "And another?"}),
    )
    .await;
    assert_eq!(msg.body["seq"], 5);
    let resp = server
        .client
        .post(server.url(&format!("/v1/sessions/{sid}/generate")))
        .json(&json!({"stream": true}))
        .send()
        .await
        .expect("streaming");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream")));
    let events = sse_events(resp).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"event"), "{names:?}");
    assert_eq!(events[0].1["kind"], "generation_prompt");
    assert_eq!(events[0].1["seq"], 6);
    let (last_name, last) = &events[events.len() - 1];
    assert_eq!(last_name, "done");
    assert_eq!(last, &json!({"next_cursor": 7}));
    let (committed_name, committed) = &events[events.len() - 2];
    assert_eq!(committed_name, "event");
    assert_eq!(committed["kind"], "generated");
    assert_eq!(committed["seq"], 7);
    let streamed: String = events
        .iter()
        .filter(|(n, _)| n == "delta")
        .map(|(_, d)| d["content"].as_str().expect("delta text"))
        .collect();
    assert_eq!(committed["body"]["content"], streamed);

    // Paging through the history.
    let page = get(
        &server,
        &format!("/v1/sessions/{sid}/events?cursor=0&limit=3"),
    )
    .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(
        kinds(&page.body["events"]),
        vec![
            (1, "created".into()),
            (2, "message".into()),
            (3, "generation_prompt".into())
        ]
    );
    assert_eq!(page.body["next_cursor"], 3);
    assert_eq!(
        page.body["events"][0]["body"]["system"],
        "You are a helpful assistant."
    );
    let page = get(
        &server,
        &format!("/v1/sessions/{sid}/events?cursor=3&limit=3"),
    )
    .await;
    assert_eq!(
        kinds(&page.body["events"]),
        vec![
            (4, "generated".into()),
            (5, "message".into()),
            (6, "generation_prompt".into())
        ]
    );
    let page = get(&server, &format!("/v1/sessions/{sid}/events?cursor=6")).await;
    assert_eq!(kinds(&page.body["events"]), vec![(7, "generated".into())]);
    assert_eq!(page.body["next_cursor"], 7);
    let page = get(&server, &format!("/v1/sessions/{sid}/events?cursor=7")).await;
    assert_eq!(page.body["events"], json!([]));
    assert_eq!(page.body["next_cursor"], 7);
    let bad = get(&server, &format!("/v1/sessions/{sid}/events?limit=0")).await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.body["error"]["param"], "limit");

    // Fork at the first message: the child shares seq 1 and 2.
    let fork = post(
        &server,
        &format!("/v1/sessions/{sid}/fork"),
        &json!({"at": first_message_id}),
    )
    .await;
    assert_eq!(fork.status, 201, "{}", fork.body);
    let child = fork.body["id"].as_i64().expect("child id");
    assert_eq!(fork.body["parent"], sid);
    assert_eq!(fork.body["at"], first_message_id);
    let child_events = get(&server, &format!("/v1/sessions/{child}/events")).await;
    assert_eq!(
        kinds(&child_events.body["events"]),
        vec![
            (1, "created".into()),
            (2, "message".into()),
            (3, "forked".into())
        ]
    );
    let owners: Vec<&Value> = child_events.body["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| &e["session"])
        .collect();
    assert_eq!(owners, vec![&json!(sid), &json!(sid), &json!(child)]);
    let child_gen = post(
        &server,
        &format!("/v1/sessions/{child}/generate"),
        &json!({}),
    )
    .await;
    assert_eq!(child_gen.status, 200, "{}", child_gen.body);
    assert_eq!(
        child_gen.body["events"][1]["body"]["content"], reply["content"],
        "the fork continues from the shared history"
    );

    // Trim the parent to its first reply; trimming below the fork is refused.
    let first_reply_id = generated.body["events"][1]["id"].as_i64().expect("id");
    let trimmed = post(
        &server,
        &format!("/v1/sessions/{sid}/trim"),
        &json!({"at": first_reply_id}),
    )
    .await;
    assert_eq!(trimmed.status, 200, "{}", trimmed.body);
    assert_eq!(trimmed.body["last_seq"], 4);
    assert_eq!(trimmed.body["version"], 2);
    let created_id = page_first_id(&server, sid).await;
    let refused = post(
        &server,
        &format!("/v1/sessions/{sid}/trim"),
        &json!({"at": created_id}),
    )
    .await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(code(&refused.body), "session_forked_after");
    assert_eq!(
        error_message(&refused.body),
        format!("session {child} was forked from session {sid} at event {first_message_id}, after the point you trim to; trim to a later event, or purge the fork first")
    );

    // Metadata with If-Match: stale is 412, missing is 428, current wins.
    let path = format!("/v1/sessions/{sid}");
    let change = json!({"title": "renamed", "tags": ["demo"]});
    let stale = call(
        &server,
        Method::PATCH,
        &path,
        Some(&change),
        &[("if-match", "\"1\"")],
    )
    .await;
    assert_eq!(stale.status, 412, "{}", stale.body);
    assert_eq!(
        stale.body,
        json!({"error": {
            "message": format!("session {sid} is at version 2, not 1: it changed since you read it; read it again and retry with version 2"),
            "type": "invalid_request_error", "param": "If-Match", "code": "stale_version"}})
    );
    let missing = call(&server, Method::PATCH, &path, Some(&change), &[]).await;
    assert_eq!(missing.status, 428, "{}", missing.body);
    assert_eq!(code(&missing.body), "if_match_required");
    let patched = call(
        &server,
        Method::PATCH,
        &path,
        Some(&change),
        &[("if-match", "2")],
    )
    .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    assert_eq!(patched.body["title"], "renamed");
    assert_eq!(patched.body["tags"], json!(["demo"]));
    assert_eq!(patched.body["version"], 3);
    assert_eq!(patched.etag.as_deref(), Some("\"3\""));

    // A chat completion recorded in a session.
    let recorded = post(&server, "/v1/sessions", &json!({"model": MODEL})).await;
    assert_eq!(recorded.status, 201, "{}", recorded.body);
    let rid = recorded.body["id"].as_i64().expect("id");
    let rid_text = rid.to_string();
    let header = [("x-superfluid-session", rid_text.as_str())];
    let turn = chat(json!([{"role": "user", "content": "Hi there"}]), 8);
    let answer = call(
        &server,
        Method::POST,
        "/v1/chat/completions",
        Some(&turn),
        &header,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let said = answer.body["choices"][0]["message"]["content"].clone();
    let turn = chat(
        json!([{"role": "user", "content": "Hi there"},
               {"role": "assistant", "content": said},
               {"role": "user", "content": "Thanks"}]),
        8,
    );
    let again = call(
        &server,
        Method::POST,
        "/v1/chat/completions",
        Some(&turn),
        &header,
    )
    .await;
    assert_eq!(again.status, 200, "{}", again.body);
    let history = get(&server, &format!("/v1/sessions/{rid}/events")).await;
    assert_eq!(
        kinds(&history.body["events"]),
        vec![
            (1, "created".into()),
            (2, "message".into()),
            (3, "generated".into()),
            (4, "message".into()),
            (5, "generated".into())
        ]
    );
    let events = &history.body["events"];
    assert_eq!(
        events[1]["body"],
        json!({"role": "user", "content": "Hi there"})
    );
    assert_eq!(events[2]["body"]["content"], said);
    assert_eq!(
        events[3]["body"],
        json!({"role": "user", "content": "Thanks"})
    );
    assert_eq!(
        events[4]["body"]["content"],
        again.body["choices"][0]["message"]["content"]
    );
    let unknown = call(
        &server,
        Method::POST,
        "/v1/chat/completions",
        Some(&turn),
        &[("x-superfluid-session", "999999")],
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(
        error_message(&unknown.body),
        "no session 999999; list sessions to find the one you want"
    );

    // Listing, paged.
    let listed = get(&server, "/v1/sessions?limit=2").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let ids: Vec<i64> = listed.body["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|s| s["id"].as_i64().expect("id"))
        .collect();
    assert_eq!(ids, vec![sid, child]);
    assert_eq!(listed.body["has_more"], true);
    assert_eq!(listed.body["next_after"], child);
    let rest = get(&server, &format!("/v1/sessions?after={child}")).await;
    assert_eq!(rest.body["data"][0]["id"], rid);
    assert_eq!(rest.body["has_more"], false);

    // A restart keeps everything.
    let before = get(&server, &format!("/v1/sessions/{rid}/events")).await;
    drop(server);
    let server = serve(&dir, &[]);
    let after = get(&server, &format!("/v1/sessions/{rid}/events")).await;
    assert_eq!(after.status, 200, "{}", after.body);
    assert_eq!(after.body, before.body);
    let kept = get(&server, &format!("/v1/sessions/{sid}")).await;
    assert_eq!(kept.body["title"], "renamed");
    assert_eq!(kept.body["version"], 3);

    // Purge: refused with forks, then with cascade; then 404.
    let purge = call(&server, Method::DELETE, &path, None, &[]).await;
    assert_eq!(purge.status, 409, "{}", purge.body);
    assert_eq!(
        error_message(&purge.body),
        format!("session {sid} has forks ({child}); purge them first, or purge with cascade to remove them too")
    );
    let purge = call(
        &server,
        Method::DELETE,
        &format!("{path}?cascade=true"),
        None,
        &[],
    )
    .await;
    assert_eq!(purge.status, 200, "{}", purge.body);
    assert_eq!(purge.body["deleted"], true);
    let mut purged: Vec<i64> = purge.body["purged"]
        .as_array()
        .expect("purged")
        .iter()
        .map(|v| v.as_i64().expect("id"))
        .collect();
    purged.sort_unstable();
    assert_eq!(purged, vec![sid, child]);
    for gone in [sid, child] {
        let missing = get(&server, &format!("/v1/sessions/{gone}")).await;
        assert_eq!(missing.status, 404, "{}", missing.body);
        assert_eq!(
            missing.body,
            json!({"error": {"message": format!("no session {gone}; list sessions to find the one you want"),
                   "type": "invalid_request_error", "param": null, "code": "session_not_found"}})
        );
    }
    let missing = get(&server, &format!("/v1/sessions/{sid}/events")).await;
    assert_eq!(missing.status, 404);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The id of a session's first event.
async fn page_first_id(server: &Server, session: i64) -> i64 {
    let page = get(server, &format!("/v1/sessions/{session}/events?limit=1")).await;
    page.body["events"][0]["id"].as_i64().expect("id")
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_need_a_key_and_refuse_a_second_writer_while_generating() {
    let dir = temp_dir("sessions-busy");
    let server = serve(&dir, &["--api-key", "sk-sessions-test"]);
    let auth = [("authorization", "Bearer sk-sessions-test")];

    let refused = post(&server, "/v1/sessions", &json!({"model": MODEL})).await;
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert_eq!(code(&refused.body), "invalid_api_key");
    let listed = get(&server, "/v1/sessions").await;
    assert_eq!(listed.status, 401, "{}", listed.body);

    // The schema makes the answer long and bounded: 300 digits.
    let long = json!({"type": "json_schema", "json_schema": {"name": "numbers", "schema": {
        "type": "object",
        "properties": {"n": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
              "minItems": 300, "maxItems": 300}},
        "required": ["n"], "additionalProperties": false}}});
    let body = json!({"model": MODEL, "params": {"temperature": 0, "max_tokens": 3000, "response_format": long}});
    let created = call(&server, Method::POST, "/v1/sessions", Some(&body), &auth).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let sid = created.body["id"].as_i64().expect("id");
    let message = json!({"role": "user", "content": "List numbers."});
    let path = format!("/v1/sessions/{sid}/messages");
    let added = call(&server, Method::POST, &path, Some(&message), &auth).await;
    assert_eq!(added.status, 201, "{}", added.body);

    let running = server
        .client
        .post(server.url(&format!("/v1/sessions/{sid}/generate")))
        .header("authorization", "Bearer sk-sessions-test")
        .json(&json!({"stream": true}))
        .send()
        .await
        .expect("starting a generation");
    assert_eq!(running.status().as_u16(), 200);

    let busy_message =
        format!("session {sid} is generating; wait for the generation to finish, then retry");
    let gen_path = format!("/v1/sessions/{sid}/generate");
    let second = call(&server, Method::POST, &gen_path, Some(&json!({})), &auth).await;
    assert_eq!(second.status, 409, "{}", second.body);
    assert_eq!(
        second.body,
        json!({"error": {"message": busy_message, "type": "invalid_request_error",
               "param": null, "code": "session_busy"}})
    );
    let write = call(&server, Method::POST, &path, Some(&message), &auth).await;
    assert_eq!(write.status, 409, "{}", write.body);
    assert_eq!(error_message(&write.body), busy_message);
    let shown = call(
        &server,
        Method::GET,
        &format!("/v1/sessions/{sid}"),
        None,
        &auth,
    )
    .await;
    assert_eq!(shown.body["generating"], true);

    let events = sse_events(running).await;
    let (last, done) = &events[events.len() - 1];
    assert_eq!(last, "done");
    assert_eq!(done, &json!({"next_cursor": 4}));
    let generated = &events[events.len() - 2].1;
    assert_eq!(generated["kind"], "generated");
    let content = generated["body"]["content"].as_str().expect("content");
    let numbers: Value = serde_json::from_str(content).expect("the schema's JSON");
    assert_eq!(numbers["n"].as_array().expect("n").len(), 300);
    assert_eq!(generated["body"]["finish_reason"], "stop");

    let after = call(&server, Method::POST, &path, Some(&message), &auth).await;
    assert_eq!(after.status, 201, "{}", after.body);
    assert_eq!(after.body["seq"], 5);
    let _ = std::fs::remove_dir_all(&dir);
}
