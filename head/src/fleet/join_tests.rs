//! Joining a fleet with membership over real loopback QUIC: each refusal
//! reaches the node with its message, revoke and drain act at once, and
//! model files must match the head's.

use super::*;
use crate::membership::{now_unix, Membership};
use std::{future::Future, path::PathBuf, time::Duration};
use superfluid_link::{allow_any, client_endpoint, connect, quinn, token, Identity};
use superfluid_link::{read_frame, write_frame};
use superfluid_proto::GenerateEvent;
use superfluid_proto::{
    FinishReason, HeadReply, JoinClaims, ModelDescription, NodeHello, Outcome, Sampling,
    PROTOCOL_VERSION,
};

const SHA: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

async fn within<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("timed out")
}

struct Head {
    fleet: Fleet,
    listener: LinkListener,
    membership: Membership,
    dir: PathBuf,
}

impl Drop for Head {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn head(tag: &str) -> Head {
    let dir = std::env::temp_dir().join(format!("superfluid-join-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let membership = Membership::open(&dir).unwrap();
    let fleet = Fleet::new()
        .with_membership(membership.clone())
        .with_models(vec![model(SHA)]);
    let config = LinkListenConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        identity: membership.identity(),
        authorizer: allow_any(),
    };
    let listener = listen(fleet.clone(), config).await.unwrap();
    Head {
        fleet,
        listener,
        membership,
        dir,
    }
}

fn model(sha256: &str) -> ModelDescription {
    ModelDescription {
        id: "m".into(),
        ctx: 512,
        slots: 2,
        sha256: sha256.into(),
        ..Default::default()
    }
}

fn token(head: &Head, uses: u32) -> String {
    head.membership
        .mint(
            Duration::from_secs(600),
            uses,
            vec![],
            vec![head.listener.addr],
        )
        .unwrap()
}

struct Stub {
    conn: quinn::Connection,
    reply: HeadReply,
}

/// A node that says hello with `token` and echoes every generation's prompt.
async fn node(head: &Head, id: &Identity, token: Option<&str>, sha256: &str) -> Stub {
    let fp = head.membership.identity().fingerprint();
    let endpoint = client_endpoint(head.listener.addr, id, fp).unwrap();
    let conn = within(connect(&endpoint, head.listener.addr))
        .await
        .unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let hello = NodeHello {
        version: PROTOCOL_VERSION,
        name: "stub".into(),
        models: vec![model(sha256)],
        join_token: token.map(str::to_owned),
        hardware: "test machine".into(),
        free_memory: 0,
        on_disk: Vec::new(),
    };
    write_frame(&mut send, &hello).await.unwrap();
    let reply: HeadReply = within(read_frame(&mut recv)).await.unwrap().unwrap();
    if matches!(reply, HeadReply::Refused { .. }) {
        conn.close(0u32.into(), b"refused");
    }
    let serving = conn.clone();
    tokio::spawn(async move {
        let _control = (send, recv, endpoint);
        while let Ok((mut send, mut recv)) = serving.accept_bi().await {
            tokio::spawn(async move {
                let Ok(Some(superfluid_proto::HeadStream::Generate(req))) =
                    read_frame::<superfluid_proto::HeadStream>(&mut recv).await
                else {
                    return;
                };
                // Give the test time to act while the generation runs.
                tokio::time::sleep(Duration::from_millis(200)).await;
                let n = req.prompt.len() as u32;
                let _ = write_frame(&mut send, &GenerateEvent::Tokens(req.prompt)).await;
                let outcome = Outcome {
                    finish: FinishReason::Stop,
                    prompt_tokens: n,
                    cached_tokens: 0,
                    generated_tokens: n,
                };
                let _ = write_frame(&mut send, &GenerateEvent::Finished(outcome)).await;
                let _ = send.finish();
            });
        }
    });
    Stub { conn, reply }
}

fn refusal(stub: &Stub) -> &str {
    match &stub.reply {
        HeadReply::Refused { reason } => reason,
        other => panic!("not refused: {other:?}"),
    }
}

fn welcomed(stub: &Stub) {
    assert!(
        matches!(stub.reply, HeadReply::Welcome { .. }),
        "{:?}",
        stub.reply
    );
}

fn count(head: &Head, label: &str) -> u64 {
    head.membership
        .refusals()
        .into_iter()
        .find(|(l, _)| *l == label)
        .map(|(_, n)| n)
        .unwrap()
}

fn request() -> GenerateRequest {
    GenerateRequest {
        model: "m".into(),
        prompt: vec![5, 6, 7],
        sampling: Sampling::default(),
        max_tokens: 8,
        slot: None,
        constraint: None,
        logprobs: None,
    }
}

async fn wait_for(mut done: impl FnMut() -> bool) {
    within(async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_node_joins_with_a_token_and_rejoins_with_its_key_alone() {
    let head = head("rejoin").await;
    let id = Identity::generate().unwrap();
    let first = node(&head, &id, Some(&token(&head, 1)), SHA).await;
    welcomed(&first);
    wait_for(|| head.fleet.nodes().len() == 1).await;
    first.conn.close(0u32.into(), b"restart");
    wait_for(|| head.fleet.nodes().is_empty()).await;
    let roster = head.fleet.roster();
    assert_eq!(roster.len(), 1);
    assert_eq!(
        (roster[0].state, roster[0].fingerprint),
        (NodeState::Down, id.fingerprint())
    );
    let again = node(&head, &id, None, SHA).await;
    welcomed(&again);
    let mut gen = within(head.fleet.generate(&mut request())).await.unwrap();
    assert_eq!(
        within(gen.next_event()).await.unwrap(),
        Some(GenerateEvent::Tokens(vec![5, 6, 7]))
    );
}

#[tokio::test]
async fn bad_signature_expired_and_wrong_fleet_tokens_are_refused_with_their_message() {
    let head = head("tokens").await;
    let other = crate::membership::Membership::open(&head.dir.join("other")).unwrap();
    let good = token(&head, 1);

    let mut claims: JoinClaims = token::parse(&good).unwrap();
    claims.uses = 50;
    let forged = token::mint(&other.identity(), &claims).unwrap();
    let stub = node(&head, &Identity::generate().unwrap(), Some(&forged), SHA).await;
    assert!(refusal(&stub).contains("signature does not match this fleet's key"));
    assert_eq!(count(&head, "bad_signature"), 1);

    let mut claims: JoinClaims = token::parse(&good).unwrap();
    claims.expires_unix = now_unix() - 30;
    let expired = token::mint(&head.membership.identity(), &claims).unwrap();
    let stub = node(&head, &Identity::generate().unwrap(), Some(&expired), SHA).await;
    let reason = refusal(&stub);
    assert!(
        reason.contains("expired at") && reason.contains("superfluid fleet token"),
        "{reason}"
    );
    assert_eq!(count(&head, "expired"), 1);

    let foreign = other
        .mint(Duration::from_secs(60), 1, vec![], vec![])
        .unwrap();
    let stub = node(&head, &Identity::generate().unwrap(), Some(&foreign), SHA).await;
    let reason = refusal(&stub);
    assert!(
        reason.contains(&format!("it is for fleet {}", other.fleet_id())),
        "{reason}"
    );
    assert_eq!(count(&head, "wrong_fleet"), 1);
    assert!(head.fleet.nodes().is_empty());
}

#[tokio::test]
async fn used_and_spent_tokens_and_unknown_keys_are_refused_with_their_message() {
    let head = head("uses").await;
    let once = token(&head, 1);
    welcomed(&node(&head, &Identity::generate().unwrap(), Some(&once), SHA).await);
    let stub = node(&head, &Identity::generate().unwrap(), Some(&once), SHA).await;
    assert!(
        refusal(&stub).contains("already used"),
        "{}",
        refusal(&stub)
    );
    assert_eq!(count(&head, "nonce_used"), 1);

    let twice = token(&head, 2);
    welcomed(&node(&head, &Identity::generate().unwrap(), Some(&twice), SHA).await);
    welcomed(&node(&head, &Identity::generate().unwrap(), Some(&twice), SHA).await);
    let stub = node(&head, &Identity::generate().unwrap(), Some(&twice), SHA).await;
    assert!(
        refusal(&stub).contains("all 2 of its uses are spent"),
        "{}",
        refusal(&stub)
    );
    assert_eq!(count(&head, "uses_exhausted"), 1);

    let stub = node(&head, &Identity::generate().unwrap(), None, SHA).await;
    let reason = refusal(&stub);
    assert!(
        reason.contains("is not enrolled") && reason.contains("superfluid fleet join TOKEN"),
        "{reason}"
    );
    assert_eq!(count(&head, "unknown_node"), 1);
}

#[tokio::test]
async fn a_second_connection_with_a_connected_key_is_refused_and_the_first_kept() {
    let head = head("duplicate").await;
    let id = Identity::generate().unwrap();
    let first = node(&head, &id, Some(&token(&head, 1)), SHA).await;
    welcomed(&first);
    wait_for(|| head.fleet.nodes().len() == 1).await;
    let copy = node(&head, &id, None, SHA).await;
    let reason = refusal(&copy);
    assert!(reason.contains("already connected as node-1"), "{reason}");
    assert_eq!(count(&head, "duplicate"), 1);
    assert!(first.conn.close_reason().is_none());
    assert_eq!(head.fleet.nodes().len(), 1);
    within(head.fleet.generate(&mut request())).await.unwrap();
}

#[tokio::test]
async fn revoke_closes_the_connection_within_a_second_and_the_node_is_refused_after() {
    let head = head("revoke").await;
    let id = Identity::generate().unwrap();
    let stub = node(&head, &id, Some(&token(&head, 1)), SHA).await;
    welcomed(&stub);
    wait_for(|| head.fleet.nodes().len() == 1).await;
    let revoked = head.fleet.revoke("node-1").unwrap();
    assert_eq!(revoked.fingerprint, id.fingerprint());
    assert_eq!(revoked.closed.len(), 1);
    let closed = tokio::time::timeout(Duration::from_secs(1), stub.conn.closed())
        .await
        .expect("the revoked node's connection is still open after a second");
    let quinn::ConnectionError::ApplicationClosed(close) = closed else {
        panic!("{closed:?}")
    };
    assert!(String::from_utf8_lossy(&close.reason).contains("this node was revoked"));
    assert!(head.fleet.nodes().is_empty());
    assert!(
        head.fleet.roster().is_empty(),
        "a revoked key is not listed"
    );
    let again = node(&head, &id, None, SHA).await;
    assert!(refusal(&again).contains("this node was revoked"));
    let with_token = node(&head, &id, Some(&token(&head, 1)), SHA).await;
    assert!(refusal(&with_token).contains("this node was revoked"));
    assert_eq!(count(&head, "revoked"), 2);
    assert!(matches!(
        head.fleet.revoke("nobody"),
        Err(FleetError::UnknownNode { .. })
    ));
}

#[tokio::test]
async fn drain_stops_new_work_while_a_running_generation_finishes() {
    let head = head("drain").await;
    let stub = node(
        &head,
        &Identity::generate().unwrap(),
        Some(&token(&head, 1)),
        SHA,
    )
    .await;
    welcomed(&stub);
    wait_for(|| head.fleet.nodes().len() == 1).await;
    let mut running = within(head.fleet.generate(&mut request())).await.unwrap();
    let snapshot = head.fleet.drain("stub").unwrap();
    assert_eq!(
        (snapshot.state, snapshot.in_flight),
        (NodeState::Draining, 1)
    );
    assert!(matches!(
        head.fleet.generate(&mut request()).await,
        Err(FleetError::Draining { .. })
    ));
    assert_eq!(
        within(running.next_event()).await.unwrap(),
        Some(GenerateEvent::Tokens(vec![5, 6, 7]))
    );
    assert!(matches!(
        within(running.next_event()).await.unwrap(),
        Some(GenerateEvent::Finished(_))
    ));
    let node = &head.fleet.nodes()[0];
    assert_eq!((node.served, node.state), (1, NodeState::Draining));
    head.fleet.undrain("node-1").unwrap();
    within(head.fleet.generate(&mut request())).await.unwrap();
}

#[tokio::test]
async fn a_node_whose_model_file_differs_gets_no_work_and_its_snapshot_says_why() {
    let head = head("sha").await;
    let other = "b".repeat(64);
    let stub = node(
        &head,
        &Identity::generate().unwrap(),
        Some(&token(&head, 1)),
        &other,
    )
    .await;
    welcomed(&stub);
    wait_for(|| head.fleet.nodes().len() == 1).await;
    let snapshot = &head.fleet.nodes()[0];
    let why = snapshot.ineligible.as_deref().unwrap_or_default();
    assert!(
        why.contains("model file m differs from the head's") && why.contains("bbbbbbbbbbbb"),
        "{why}"
    );
    assert_eq!((snapshot.slots, snapshot.ctx), (2, 512));
    assert!(matches!(
        head.fleet.generate(&mut request()).await,
        Err(FleetError::NoNode { .. })
    ));
    assert_eq!(head.fleet.context_len("m"), None);
    let good = node(
        &head,
        &Identity::generate().unwrap(),
        Some(&token(&head, 1)),
        SHA,
    )
    .await;
    welcomed(&good);
    wait_for(|| head.fleet.nodes().len() == 2).await;
    assert_eq!(head.fleet.nodes()[1].ineligible, None);
    let gen = within(head.fleet.generate(&mut request())).await.unwrap();
    assert_eq!(gen.node_name, "stub");
    assert_eq!(head.fleet.context_len("m"), Some(512));
}

#[tokio::test]
async fn join_attempts_past_the_burst_from_one_address_are_refused_before_the_token_is_read() {
    let head = head("join-limit").await;
    let enrolled = Identity::generate().unwrap();
    let first = node(&head, &enrolled, Some(&token(&head, 1)), SHA).await;
    welcomed(&first);
    first.conn.close(0u32.into(), b"restart");
    wait_for(|| head.fleet.nodes().is_empty()).await;
    let stranger = Identity::generate().unwrap();
    for _ in 1..super::join_limit::BURST {
        let stub = node(&head, &stranger, Some("sfj1.not-a-token"), SHA).await;
        assert!(refusal(&stub).contains("damaged"), "{}", refusal(&stub));
    }
    // Even a good token waits once the address has used its attempts.
    let stub = node(&head, &stranger, Some(&token(&head, 1)), SHA).await;
    let reason = refusal(&stub);
    assert!(
        reason.contains("too many join attempts from 127.0.0.1"),
        "{reason}"
    );
    assert!(reason.contains("try again in"), "{reason}");
    // An enrolled node reconnecting presents no token and is not counted.
    welcomed(&node(&head, &enrolled, None, SHA).await);
}
