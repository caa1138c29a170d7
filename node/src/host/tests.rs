use std::sync::Arc;
use std::time::Duration;

use superfluid_proto::{
    encode, FailureKind, GenerateEvent, GenerateRequest, KvEvent, ModelDescription, Sampling,
};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

use super::exits::{self, ExitReason};
use super::wire::{FrameSource, FromHost, ToHost, HOST_PROTOCOL_VERSION};
use super::*;
use crate::engine::Engine;
use crate::fake::{FakeCosts, FakeEngine};

fn model(id: &str) -> ModelDescription {
    ModelDescription {
        id: id.into(),
        ctx: 512,
        slots: 2,
        sha256: String::new(),
        ..Default::default()
    }
}

fn request(model: &str, prompt_len: u32, max_tokens: u32) -> GenerateRequest {
    GenerateRequest {
        model: model.into(),
        prompt: (1..=prompt_len).collect(),
        sampling: Sampling::default(),
        max_tokens,
        slot: None,
        constraint: None,
        logprobs: None,
    }
}

/// A host serving a fake engine on one end of a socket pair, in this
/// process; the other end for the test to speak as the agent.
fn host_in_process(id: &str) -> UnixStream {
    let (agent, host) = UnixStream::pair().expect("a socket pair");
    let model = model(id);
    tokio::spawn(serve::run(host, move || {
        Ok(Arc::new(FakeEngine::new(model, FakeCosts::default())) as Arc<dyn Engine>)
    }));
    agent
}

async fn send(socket: &mut (impl tokio::io::AsyncWrite + Unpin), message: &ToHost) {
    let frame = encode(message).expect("encodes");
    socket.write_all(&frame).await.expect("writes");
}

#[tokio::test]
async fn a_host_says_ready_then_relays_a_generations_events_and_its_kv_caches() {
    let socket = host_in_process("relay");
    let (read, mut write) = socket.into_split();
    let mut frames = FrameSource::new(read);
    let ready = frames.next::<FromHost>().await.expect("reads");
    assert_eq!(
        ready,
        Some(FromHost::Ready {
            version: HOST_PROTOCOL_VERSION,
            model: model("relay")
        })
    );
    send(
        &mut write,
        &ToHost::Generate {
            id: 7,
            request: request("relay", 40, 5),
        },
    )
    .await;
    let (mut tokens, mut outcome, mut stored) = (0, None, 0);
    while outcome.is_none() || stored == 0 {
        let message = tokio::time::timeout(Duration::from_secs(10), frames.next::<FromHost>())
            .await
            .expect("the host answers")
            .expect("a good frame")
            .expect("the host is up");
        match message {
            FromHost::Event {
                id: 7,
                event: GenerateEvent::Tokens(ids),
            } => tokens += ids.len(),
            FromHost::Event {
                id: 7,
                event: GenerateEvent::Finished(o),
            } => outcome = Some(o),
            FromHost::Kv(update) => {
                assert_eq!(update.model, "relay");
                stored += update
                    .events
                    .iter()
                    .filter(|e| matches!(e, KvEvent::Stored { .. }))
                    .count();
            }
            FromHost::Load(report) => assert_eq!(report.model, "relay"),
            other => panic!("unexpected {other:?}"),
        }
    }
    let outcome = outcome.expect("finished");
    assert_eq!(tokens, 5);
    assert_eq!(outcome.generated_tokens, 5);
    assert_eq!(outcome.prompt_tokens, 40);
}

#[tokio::test]
async fn a_host_refuses_a_request_its_engine_refuses_with_the_engines_reason() {
    let socket = host_in_process("refuse");
    let (read, mut write) = socket.into_split();
    let mut frames = FrameSource::new(read);
    let ready = frames.next::<FromHost>().await.expect("reads");
    assert!(matches!(ready, Some(FromHost::Ready { .. })), "{ready:?}");
    send(
        &mut write,
        &ToHost::Generate {
            id: 1,
            request: request("refuse", 600, 5),
        },
    )
    .await;
    loop {
        match frames.next::<FromHost>().await.expect("reads") {
            Some(FromHost::Event {
                id: 1,
                event: GenerateEvent::Failed { kind, message },
            }) => {
                assert_eq!(kind, FailureKind::PromptTooLong);
                assert!(message.contains("maximum context length"), "{message}");
                return;
            }
            Some(_) => {}
            None => panic!("the host closed its socket"),
        }
    }
}

#[tokio::test]
async fn a_host_ends_when_the_agent_closes_its_socket() {
    let (agent, host) = UnixStream::pair().expect("a socket pair");
    let served = tokio::spawn(serve::run(host, || {
        Ok(Arc::new(FakeEngine::new(model("ends"), FakeCosts::default())) as Arc<dyn Engine>)
    }));
    drop(agent);
    let ended = tokio::time::timeout(Duration::from_secs(10), served).await;
    assert!(matches!(ended, Ok(Ok(_))), "{ended:?}");
}

#[tokio::test]
async fn a_host_that_cannot_load_says_why() {
    let (agent, host) = UnixStream::pair().expect("a socket pair");
    tokio::spawn(serve::run(host, || Err("no such file: x.gguf".into())));
    let (read, _write) = agent.into_split();
    let mut frames = FrameSource::new(read);
    let said = frames.next::<FromHost>().await.expect("reads");
    assert_eq!(
        said,
        Some(FromHost::LoadFailed {
            message: "no such file: x.gguf".into()
        })
    );
    assert_eq!(frames.next::<FromHost>().await.expect("reads"), None);
}

/// `printf` escapes for `bytes`.
fn printf_escaped(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\{b:03o}")).collect()
}

/// A host played by a shell script: it says ready for `id`, then does `then`.
fn scripted_host(id: &str, then: &str) -> HostCommand {
    let ready = encode(&FromHost::Ready {
        version: HOST_PROTOCOL_VERSION,
        model: model(id),
    })
    .expect("encodes");
    let script = format!("printf '{}' >&0; {then}", printf_escaped(&ready));
    HostCommand {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        model_id: id.into(),
    }
}

fn quick_policy(max_deaths: usize) -> RestartPolicy {
    RestartPolicy {
        first_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        max_deaths,
        window: Duration::from_secs(60),
        ready_timeout: Duration::from_secs(10),
    }
}

async fn next_event(generation: &mut crate::engine::Generation) -> GenerateEvent {
    tokio::time::timeout(Duration::from_secs(20), generation.events.recv())
        .await
        .expect("an event in time")
        .expect("an event")
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..400 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("waited 20 s for {what}");
}

#[tokio::test]
async fn a_host_sending_garbage_is_ended_and_restarted_and_its_generation_fails_over() {
    let id = "garbage-host";
    let command = scripted_host(id, "sleep 0.3; printf 'garbage, not a frame' >&0; sleep 30");
    let engine = HostEngine::start(command, quick_policy(3))
        .await
        .expect("the first host says ready");
    let first = engine.host_pid().expect("a host runs");
    let mut generation = engine.submit(request(id, 10, 5)).expect("taken");
    match next_event(&mut generation).await {
        GenerateEvent::Failed { kind, message } => {
            assert_eq!(kind, FailureKind::Stopped, "the head moves it: {message}");
            assert!(message.contains("bad frame"), "{message}");
        }
        other => panic!("expected the generation to fail, got {other:?}"),
    }
    // The host that sent garbage is gone, and a new one took its place.
    wait_for("a new host", || {
        engine.host_pid().is_some_and(|pid| pid != first)
    })
    .await;
    assert!(!std::path::Path::new(&format!("/proc/{first}")).exists());
    assert!(exits::count(id, ExitReason::BadFrame) >= 1);
    // Every host of this model sends garbage: after three, it is given up on.
    wait_for("the model to be given up on", || engine.failure().is_some()).await;
    assert_eq!(exits::count(id, ExitReason::BadFrame), 3);
    let refused = engine.submit(request(id, 10, 5));
    assert!(
        matches!(refused, Err(crate::EngineError::HostFailed { .. })),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_killed_host_fails_its_generations_as_stopped_and_is_restarted() {
    let id = "killed-host";
    let command = scripted_host(id, "exec sleep 30");
    let engine = HostEngine::start(command, quick_policy(5))
        .await
        .expect("the host says ready");
    let pid = engine.host_pid().expect("a host runs");
    let mut generation = engine.submit(request(id, 10, 5)).expect("taken");
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    match next_event(&mut generation).await {
        GenerateEvent::Failed { kind, message } => {
            assert_eq!(kind, FailureKind::Stopped);
            assert!(message.contains("signal 9"), "{message}");
        }
        other => panic!("expected the generation to fail, got {other:?}"),
    }
    assert_eq!(exits::count(id, ExitReason::Signal), 1);
    wait_for("a new host", || engine.host_pid().is_some_and(|p| p != pid)).await;
    assert!(engine.failure().is_none());
}

#[tokio::test]
async fn dropping_the_engine_ends_its_host() {
    let id = "dropped-host";
    // `cat` reads the socket until the node closes it.
    let command = scripted_host(id, "exec cat <&0 >/dev/null");
    let engine = HostEngine::start(command, quick_policy(5))
        .await
        .expect("the host says ready");
    let pid = engine.host_pid().expect("a host runs");
    drop(engine);
    wait_for("the host to exit", || {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    })
    .await;
    assert_eq!(exits::count(id, ExitReason::Exited), 0);
}

#[tokio::test]
async fn a_host_that_cannot_load_is_refused_with_its_last_output() {
    let command = HostCommand {
        program: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            "echo 'GGML_ASSERT failed: out of memory' >&2; exit 3".into(),
        ],
        model_id: "never".into(),
    };
    let err = HostEngine::start(command, quick_policy(5))
        .await
        .expect_err("refused");
    let text = err.to_string();
    assert!(text.contains("exited with status 3"), "{text}");
    assert!(text.contains("GGML_ASSERT failed"), "{text}");
}
