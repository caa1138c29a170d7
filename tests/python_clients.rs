//! The official `openai` Python client against the real binary: what most
//! users' code runs. `scripts/setup` installs it in `$SUPERFLUID_HOME/venv`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::fleet_support::{run_cmd, serial, token, Head, Node, Ran, TempDir};
use crate::keys::create;
use crate::support::{Server, MODEL};

const KEY: &str = "sk-sf-python-client-test";

/// The virtualenv's python, as `scripts/setup` makes it.
pub fn venv_python() -> PathBuf {
    let home = std::env::var("SUPERFLUID_HOME").unwrap_or_else(|_| {
        format!(
            "{}/.cache/superfluid",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    PathBuf::from(home).join("venv/bin/python")
}

/// Runs tests/python/SCRIPT with the virtualenv's python against
/// `base_url` (`SUPERFLUID_BASE_URL`) and the default model, with `env`
/// besides, and none of the settings a client would otherwise take from
/// the environment (OpenAI's, Anthropic's and Ollama's keys and addresses,
/// proxies); at most `limit`.
pub fn python_script(script: &str, base_url: &str, env: &[(&str, &str)], limit: Duration) -> Ran {
    let python = venv_python();
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup, which installs the Python clients there",
        python.display()
    );
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let mut cmd = Command::new(&python);
    cmd.arg(path)
        .env("SUPERFLUID_BASE_URL", base_url)
        .env("SUPERFLUID_TEST_MODEL", MODEL)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("OLLAMA_HOST");
    for (name, value) in env {
        cmd.env(name, value);
    }
    for proxy in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        cmd.env_remove(proxy).env_remove(proxy.to_lowercase());
    }
    run_cmd(script, cmd, limit).unwrap_or_else(|e| panic!("running {script}: {e}"))
}

/// [`python_script`], asserting that each of `cases` printed `ok CASE` and
/// that the script succeeded.
pub fn python_cases(
    script: &str,
    base_url: &str,
    env: &[(&str, &str)],
    cases: &[&str],
    limit: Duration,
) -> Ran {
    let ran = python_script(script, base_url, env, limit);
    assert_passed(&ran, cases);
    assert!(ran.status.success(), "{}", ran.describe());
    ran
}

/// Asserts that each of `cases` printed `ok CASE`.
fn assert_passed(ran: &Ran, cases: &[&str]) {
    for case in cases {
        assert!(
            ran.stdout.contains(&format!("ok {case}\n")),
            "{case} did not pass: {}",
            ran.describe()
        );
    }
}

/// Runs tests/python/openai_client.py against `base_url` (ending in /v1)
/// with `key`; `cases` names the cases to run, all the default ones when
/// empty.
fn openai_client(base_url: &str, key: &str, cases: &[&str]) -> Ran {
    let named = cases.join(",");
    let mut env = vec![("SUPERFLUID_TEST_KEY", key)];
    if !cases.is_empty() {
        env.push(("SUPERFLUID_TEST_CASES", named.as_str()));
    }
    let ran = python_script("openai_client.py", base_url, &env, Duration::from_secs(180));
    assert!(ran.status.success(), "{}", ran.describe());
    ran
}

#[tokio::test]
async fn the_openai_python_client_works_with_a_key_and_raises_without_one() {
    let _serial = serial().await;
    let server = Server::start(&["--api-key", KEY]).expect("starting superfluid serve");
    let ran = openai_client(&server.url("/v1"), KEY, &[]);
    assert_passed(
        &ran,
        &[
            "chat_completion_with_the_key",
            "streamed_chat_completion_with_the_key",
            "models_list_names_the_model",
            "models_retrieve_reads_the_model_and_404s_an_unknown_one",
            "no_key_raises_authentication_error",
            "wrong_key_raises_authentication_error",
            "same_seed_gives_the_same_text",
            "completion_echo_and_refused_suffix",
        ],
    );
}

#[tokio::test]
async fn the_openai_python_client_raises_rate_limit_error_over_a_keys_limit() {
    let _serial = serial().await;
    let head_dir = TempDir::new("python-rpm");
    let head = Head::start(head_dir.path(), &[]).expect("starting superfluid head");
    let node_dir = TempDir::new("python-rpm-node");
    let join = token(&head, &[]).expect("minting a token");
    let mut node = Node::join(&join, node_dir.path(), "rpm", &[]).expect("starting a node");
    node.wait_up(&head, Duration::from_secs(60))
        .expect("the node joins");
    let key = create(&head, &["python-rpm", "--rpm", "1"]);
    let case = "rate_limited_key_raises_rate_limit_error";
    let ran = openai_client(&format!("{}/v1", head.base()), &key, &[case]);
    assert_passed(&ran, &[case]);
}
