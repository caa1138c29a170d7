//! Which API a request speaks, known from its path before any handler or
//! layer runs, so that every error it gets, the key check's and the
//! limits' included, has that API's body (see
//! [`ApiError`](super::ApiError)'s rendering). No layer rewrites a body
//! after the fact.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

/// The API a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI's (`/v1/...`), the head's own routes and anything unknown.
    OpenAi,
    /// Anthropic's Messages (`/v1/messages...`).
    Anthropic,
    /// Ollama's (`/api/...`).
    Ollama,
}

tokio::task_local! {
    static CURRENT: Dialect;
}

impl Dialect {
    /// The API a request on `path` speaks.
    pub fn of_path(path: &str) -> Dialect {
        let under = |prefix: &str| {
            path.strip_prefix(prefix)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        if under("/v1/messages") {
            Dialect::Anthropic
        } else if under("/api") {
            Dialect::Ollama
        } else {
            Dialect::OpenAi
        }
    }

    /// The dialect of the request being answered on this task; OpenAI's
    /// outside one.
    pub fn current() -> Dialect {
        CURRENT.try_with(|d| *d).unwrap_or(Dialect::OpenAi)
    }
}

/// The layer that notes each request's dialect for the routes below it.
pub async fn note(request: Request, next: Next) -> Response {
    let dialect = Dialect::of_path(request.uri().path());
    CURRENT.scope(dialect, next.run(request)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_names_the_dialect() {
        for (path, dialect) in [
            ("/v1/messages", Dialect::Anthropic),
            ("/v1/messages/count_tokens", Dialect::Anthropic),
            ("/v1/messagesx", Dialect::OpenAi),
            ("/api/chat", Dialect::Ollama),
            ("/api", Dialect::Ollama),
            ("/apis", Dialect::OpenAi),
            ("/v1/chat/completions", Dialect::OpenAi),
            ("/", Dialect::OpenAi),
        ] {
            assert_eq!(Dialect::of_path(path), dialect, "{path}");
        }
    }

    /// Without a key, each route's 401 in its own dialect's body.
    #[tokio::test]
    async fn the_key_check_answers_in_each_dialect_s_shape() {
        use axum::body::Body;
        use axum::http::{Request, StatusCode};
        use http_body_util::BodyExt;
        use serde_json::Value;
        let keys = crate::keys::Keys::in_memory(&["sk-sf-dialects".to_owned()]).expect("a key set");
        let app = crate::api::router_with_keys(
            crate::api::AppState {
                catalog: crate::api::tests::catalog(),
                fleet: crate::fleet::Fleet::new(),
                sessions: None,
            },
            keys,
        );
        for path in ["/v1/chat/completions", "/v1/messages", "/api/chat"] {
            let request = Request::post(path)
                .header("content-type", "application/json")
                .body(Body::from("{}"))
                .expect("a request");
            let response = match tower::ServiceExt::oneshot(app.clone(), request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{path}");
            let bytes = response
                .into_body()
                .collect()
                .await
                .expect("a body")
                .to_bytes();
            let body: Value = serde_json::from_slice(&bytes).expect("a JSON body");
            let message = match Dialect::of_path(path) {
                Dialect::OpenAi => &body["error"]["message"],
                Dialect::Anthropic => {
                    assert_eq!(body["type"], "error", "{body}");
                    assert_eq!(body["error"]["type"], "authentication_error", "{body}");
                    &body["error"]["message"]
                }
                Dialect::Ollama => &body["error"],
            };
            let message = message.as_str().unwrap_or_default();
            assert!(message.contains("key"), "{path}: {body}");
        }
    }

    /// The dialects' rooms reach the fleet only through the generation
    /// path: no file of theirs names the fleet itself.
    #[test]
    fn no_dialect_names_the_fleet() {
        fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir)
                .expect("a source directory")
                .flatten()
            {
                let path = entry.path();
                if path.is_dir() {
                    files(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        let api = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api");
        let mut found = Vec::new();
        for room in ["anthropic", "ollama", "responses", "sessions"] {
            files(&api.join(room), &mut found);
            found.push(api.join(format!("{room}.rs")));
        }
        assert!(found.len() > 20, "{found:?}");
        for path in found {
            let name = path.to_string_lossy().into_owned();
            if name.ends_with("tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a source file");
            for needle in ["crate::fleet", ".fleet."] {
                assert!(
                    !text.contains(needle),
                    "{name} names the fleet (`{needle}`); reach it through api::generate"
                );
            }
        }
    }

    #[tokio::test]
    async fn the_current_dialect_is_the_scope_s() {
        assert_eq!(Dialect::current(), Dialect::OpenAi);
        let inside = CURRENT.scope(Dialect::Ollama, async { Dialect::current() });
        assert_eq!(inside.await, Dialect::Ollama);
    }
}
