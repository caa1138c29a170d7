//! The agent against a small head stub written on superfluid-link, over loopback QUIC.

use super::*;
use crate::{
    engine::{EngineError, EngineInfo, Generation},
    fake::{FakeCosts, FakeEngine},
    ledger::Ledger,
};
use std::future::Future;
use superfluid_link::quinn::{RecvStream, SendStream};
use superfluid_link::{allow_only, read_frame, server_endpoint, write_frame};
use superfluid_proto::{
    ControlMsg, FailureKind, GenerateEvent, GenerateRequest, HeadReply, ModelDescription,
    NodeHello, Sampling, PROTOCOL_VERSION,
};
use tokio::sync::mpsc;

mod control;

async fn within<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("timed out")
}

fn model() -> ModelDescription {
    ModelDescription {
        id: "m".into(),
        ctx: 256,
        slots: 2,
        sha256: String::new(),
        ..Default::default()
    }
}

type Submitted = (GenerateRequest, mpsc::UnboundedSender<GenerateEvent>);

/// Hands each submitted generation's event sender to the test.
struct TestEngine {
    info: EngineInfo,
    submitted: mpsc::UnboundedSender<Submitted>,
    ledger: Arc<Ledger>,
}

impl Engine for TestEngine {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn submit(&self, request: GenerateRequest) -> Result<Generation, EngineError> {
        if request.model != self.info.model.id {
            return Err(EngineError::UnknownModel {
                requested: request.model,
                served: self.info.model.id.clone(),
            });
        }
        let (tx, events) = mpsc::unbounded_channel();
        self.submitted
            .send((request, tx))
            .map_err(|_| EngineError::Stopped)?;
        Ok(Generation { events })
    }

    fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }
}

fn test_engine() -> (Arc<dyn Engine>, mpsc::UnboundedReceiver<Submitted>) {
    let (submitted, rx) = mpsc::unbounded_channel();
    (
        Arc::new(TestEngine {
            info: EngineInfo { model: model() },
            submitted,
            ledger: Arc::new(Ledger::new(&model().id, model().slots as usize)),
        }),
        rx,
    )
}

struct HeadStub {
    endpoint: quinn::Endpoint,
    config: AgentConfig,
}

/// A head endpoint that authorizes exactly a fresh node identity, and the agent config pinning it.
fn head_stub() -> HeadStub {
    let head = Identity::generate().unwrap();
    let node = Identity::generate().unwrap();
    let endpoint = server_endpoint(
        "127.0.0.1:0".parse().unwrap(),
        &head,
        allow_only([node.fingerprint()]),
    )
    .unwrap();
    let config = AgentConfig {
        head_addrs: vec![endpoint.local_addr().unwrap()],
        head_fingerprint: head.fingerprint(),
        identity: node,
        name: "test-node".into(),
        join_token: None,
        model_sha256: None,
        credential_dir: None,
        join_only: false,
    };
    HeadStub { endpoint, config }
}

struct Joined {
    conn: quinn::Connection,
    hello: NodeHello,
    control: (SendStream, RecvStream),
}

/// Accepts the next node connection, reads its hello and answers `reply`.
async fn accept(head: &HeadStub, reply: HeadReply) -> Joined {
    let conn = within(async { head.endpoint.accept().await.unwrap().await.unwrap() }).await;
    let (mut send, mut recv) = within(conn.accept_bi()).await.unwrap();
    let hello: NodeHello = within(read_frame(&mut recv)).await.unwrap().unwrap();
    write_frame(&mut send, &reply).await.unwrap();
    Joined {
        conn,
        hello,
        control: (send, recv),
    }
}

fn welcome() -> HeadReply {
    HeadReply::Welcome {
        version: PROTOCOL_VERSION,
        node_id: "node-1".into(),
        models: Vec::new(),
    }
}

fn request(model: &str, max_tokens: u32) -> GenerateRequest {
    GenerateRequest {
        model: model.into(),
        prompt: vec![1, 2, 3],
        sampling: Sampling::default(),
        max_tokens,
        slot: None,
        constraint: None,
        logprobs: None,
    }
}

async fn start_generation(
    conn: &quinn::Connection,
    req: &GenerateRequest,
) -> (SendStream, RecvStream) {
    let (mut send, recv) = conn.open_bi().await.unwrap();
    write_frame(
        &mut send,
        &superfluid_proto::HeadStream::Generate(req.clone()),
    )
    .await
    .unwrap();
    send.finish().unwrap();
    (send, recv)
}

#[tokio::test]
async fn agent_says_hello_and_serves_a_generation_from_the_fake_engine() {
    let head = head_stub();
    let costs = FakeCosts {
        prefill_tokens_per_sec: 1e6,
        decode_tokens_per_sec: 1e6,
    };
    let engine: Arc<dyn Engine> = Arc::new(FakeEngine::new(model(), costs));
    let agent = tokio::spawn(run(engine, head.config.clone()));
    let joined = accept(&head, welcome()).await;
    assert_eq!(
        joined.hello,
        NodeHello {
            version: PROTOCOL_VERSION,
            name: "test-node".into(),
            models: vec![model()],
            join_token: None,
            hardware: crate::hardware::describe().to_owned(),
            // The machine's `MemAvailable`, whatever it is now.
            free_memory: joined.hello.free_memory,
            on_disk: Vec::new(),
        }
    );
    assert!(
        joined.hello.free_memory > 0,
        "this Linux machine reports its free memory"
    );

    let (_send, mut recv) = start_generation(&joined.conn, &request("m", 5)).await;
    let mut tokens = 0;
    let outcome = loop {
        match within(read_frame::<GenerateEvent>(&mut recv))
            .await
            .unwrap()
        {
            Some(GenerateEvent::Tokens(t)) => tokens += t.len() as u32,
            Some(GenerateEvent::Finished(outcome)) => break outcome,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(outcome.generated_tokens, tokens);
    assert!((1..=5).contains(&tokens), "{tokens}");
    assert!(within(read_frame::<GenerateEvent>(&mut recv))
        .await
        .unwrap()
        .is_none());
    agent.abort();
}

/// Starts a generation, sees its first token, cancels as told, and checks the engine saw the drop.
async fn cancel_and_check(stop_reading: bool, reset_sending: bool) {
    let head = head_stub();
    let (engine, mut submitted) = test_engine();
    let agent = tokio::spawn(run(engine, head.config.clone()));
    let joined = accept(&head, welcome()).await;
    let (mut send, recv) = joined.conn.open_bi().await.unwrap();
    write_frame(
        &mut send,
        &superfluid_proto::HeadStream::Generate(request("m", 100)),
    )
    .await
    .unwrap();
    let mut recv = recv;
    let (req, events) = within(submitted.recv()).await.unwrap();
    assert_eq!(req.prompt, vec![1, 2, 3]);
    events.send(GenerateEvent::Tokens(vec![9])).unwrap();
    assert_eq!(
        within(read_frame::<GenerateEvent>(&mut recv))
            .await
            .unwrap(),
        Some(GenerateEvent::Tokens(vec![9]))
    );
    if reset_sending {
        send.reset(superfluid_link::control::STREAM_CANCELLED)
            .unwrap();
    }
    if stop_reading {
        recv.stop(superfluid_link::control::STREAM_CANCELLED)
            .unwrap();
    }
    within(events.closed()).await;
    agent.abort();
}

#[tokio::test]
async fn head_cancelling_the_stream_drops_the_generation() {
    cancel_and_check(true, true).await;
}

#[tokio::test]
async fn head_stopping_reading_drops_the_generation() {
    cancel_and_check(true, false).await;
}

#[tokio::test]
async fn head_resetting_its_side_drops_the_generation() {
    cancel_and_check(false, true).await;
}

#[tokio::test]
async fn a_submit_error_is_sent_as_failed() {
    let head = head_stub();
    let (engine, _submitted) = test_engine();
    let agent = tokio::spawn(run(engine, head.config.clone()));
    let joined = accept(&head, welcome()).await;
    let (_send, mut recv) = start_generation(&joined.conn, &request("other", 4)).await;
    let event = within(read_frame::<GenerateEvent>(&mut recv))
        .await
        .unwrap();
    let Some(GenerateEvent::Failed { kind, message }) = event else {
        panic!("{event:?}")
    };
    assert_eq!(kind, FailureKind::UnknownModel);
    assert!(
        message.contains("does not have model \"other\" loaded") && message.contains("it serves m"),
        "{message}"
    );
    assert!(within(read_frame::<GenerateEvent>(&mut recv))
        .await
        .unwrap()
        .is_none());
    agent.abort();
}

#[tokio::test]
async fn a_refused_node_retries_and_reconnects_after_losing_the_head() {
    let head = head_stub();
    let (engine, _submitted) = test_engine();
    let agent = tokio::spawn(run(engine, head.config.clone()));
    let refused = accept(
        &head,
        HeadReply::Refused {
            reason: "not today".into(),
        },
    )
    .await;
    refused
        .conn
        .close(superfluid_link::control::CLOSE_REFUSED, b"not today");
    let joined = accept(&head, welcome()).await;
    joined.conn.close(0u32.into(), b"head restarting");
    let again = accept(&head, welcome()).await;
    assert_eq!(again.hello.version, PROTOCOL_VERSION);
    agent.abort();
}

#[tokio::test]
async fn agent_does_not_join_a_head_with_another_key() {
    let head = head_stub();
    let (engine, _submitted) = test_engine();
    let mut config = head.config.clone();
    config.head_fingerprint = Identity::generate().unwrap().fingerprint();
    let agent = tokio::spawn(run(engine, config));
    let attempt = within(async { head.endpoint.accept().await.unwrap().await }).await;
    assert!(
        attempt.is_err(),
        "the handshake should fail on the node's pin"
    );
    agent.abort();
}

#[tokio::test]
async fn the_join_token_is_sent_until_the_first_welcome_and_the_credential_saved() {
    let head = head_stub();
    let (engine, _submitted) = test_engine();
    let dir = std::env::temp_dir().join(format!("superfluid-agent-join-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = head.config.clone();
    config.join_token = Some("sfj1.token-text".into());
    config.model_sha256 = Some("ab".repeat(32));
    config.credential_dir = Some(dir.clone());
    let agent = tokio::spawn(run(engine, config.clone()));
    let joined = accept(&head, welcome()).await;
    assert_eq!(joined.hello.join_token.as_deref(), Some("sfj1.token-text"));
    assert_eq!(joined.hello.models[0].sha256, "ab".repeat(32));
    // The credential is written as soon as the welcome is read.
    within(async {
        while !crate::credential::Credential::exists(&dir) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    joined.conn.close(0u32.into(), b"head restarting");
    let again = accept(&head, welcome()).await;
    assert_eq!(again.hello.join_token, None);
    let saved = crate::credential::Credential::load(&dir).unwrap();
    assert_eq!(saved.head_fingerprint, config.head_fingerprint);
    assert_eq!(saved.head_addrs, config.head_addrs);
    assert_eq!(saved.name, "test-node");
    agent.abort();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_refused_join_token_ends_the_agent_with_the_reason() {
    let head = head_stub();
    let (engine, _submitted) = test_engine();
    let mut config = head.config.clone();
    config.join_token = Some("sfj1.token-text".into());
    let agent = tokio::spawn(run(engine, config));
    let refused = accept(
        &head,
        HeadReply::Refused {
            reason: "join token refused: it expired".into(),
        },
    )
    .await;
    let ended = within(agent).await.unwrap();
    let Err(AgentError::Refused { reason }) = ended else {
        panic!("{ended:?}")
    };
    assert!(reason.contains("expired"), "{reason}");
    drop(refused);
}

#[tokio::test]
async fn a_head_with_another_protocol_version_is_left_naming_both() {
    let head = head_stub();
    let (engine, _submitted) = test_engine();
    let mut config = head.config.clone();
    // With a join token, a refusal ends the agent, so its reason can be read.
    config.join_token = Some("sfj1.token-text".into());
    let agent = tokio::spawn(run(engine, config));
    let previous = PROTOCOL_VERSION - 1;
    let old_head = accept(
        &head,
        HeadReply::Welcome {
            version: previous,
            node_id: "node-1".into(),
            models: Vec::new(),
        },
    )
    .await;
    let ended = within(agent).await.unwrap();
    let Err(AgentError::Refused { reason }) = ended else {
        panic!("{ended:?}")
    };
    assert!(
        reason.contains(&format!("version {previous}"))
            && reason.contains(&format!("version {PROTOCOL_VERSION}")),
        "{reason}"
    );
    drop(old_head);
}

#[test]
fn backoff_grows_to_the_cap_with_jitter() {
    for failures in 1..40 {
        let d = backoff(failures);
        assert!(
            d >= BACKOFF_MIN / 2 && d <= BACKOFF_MAX,
            "{failures}: {d:?}"
        );
    }
    assert!(backoff(30) >= BACKOFF_MAX / 2);
}
