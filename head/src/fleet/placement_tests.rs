//! Placement over real loopback QUIC: stub nodes that answer the head's
//! placements as a node would (or fail to), on their control stream.

use super::model_store::{ModelFile, ModelStore};
use super::placement::PlacementConfig;
use super::*;
use std::time::Duration;
use superfluid_link::{client_endpoint, connect, quinn, read_frame, write_frame, Identity};
use superfluid_proto::{
    ControlMsg, HeadReply, ModelDescription, ModelsReport, NodeHello, Placement,
};
use tokio::sync::mpsc;

fn file(id: &str) -> ModelFile {
    ModelFile {
        id: id.into(),
        sha256: format!("{:0>64}", id.len()),
        size: 1000,
        path: format!("/nonexistent/{id}.gguf").into(),
    }
}

fn description(file: &ModelFile) -> ModelDescription {
    ModelDescription {
        id: file.id.clone(),
        ctx: 512,
        slots: 2,
        sha256: file.sha256.clone(),
        ..Default::default()
    }
}

/// How the stub answers a `Load`.
#[derive(Clone)]
enum OnLoad {
    /// Reports the model loaded.
    Load,
    /// Reports that it could not, with this reason.
    Fail(&'static str),
    /// Never reports back.
    Ignore,
}

struct Stub {
    /// The placements the head sent, in order.
    placements: mpsc::UnboundedReceiver<Placement>,
    _conn: quinn::Connection,
}

async fn head(config: PlacementConfig) -> (Fleet, LinkListener, Identity) {
    let fleet = Fleet::new()
        .with_model_store(ModelStore::new(vec![file("m"), file("m2")]))
        .with_placement(config);
    let (listener, identity) = super::listen::loopback(fleet.clone()).await;
    (fleet, listener, identity)
}

/// A node serving `loaded` that answers placements as `on_load` says.
async fn stub(
    listener: &LinkListener,
    head: &Identity,
    name: &str,
    loaded: Vec<ModelDescription>,
    on_load: OnLoad,
) -> Stub {
    stub_with_files(listener, head, name, loaded, Vec::new(), on_load).await
}

/// [`stub`], with the sha256 of the files it has on disk.
async fn stub_with_files(
    listener: &LinkListener,
    head: &Identity,
    name: &str,
    loaded: Vec<ModelDescription>,
    on_disk: Vec<String>,
    on_load: OnLoad,
) -> Stub {
    let id = Identity::generate().unwrap();
    let endpoint = client_endpoint(listener.addr, &id, head.fingerprint()).unwrap();
    let conn = connect(&endpoint, listener.addr).await.unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let hello = NodeHello {
        version: superfluid_proto::PROTOCOL_VERSION,
        name: name.into(),
        models: loaded.clone(),
        join_token: None,
        hardware: String::new(),
        free_memory: 0,
        on_disk,
    };
    write_frame(&mut send, &hello).await.unwrap();
    let reply: HeadReply = read_frame(&mut recv).await.unwrap().unwrap();
    assert!(matches!(reply, HeadReply::Welcome { .. }), "{reply:?}");
    let (tx, placements) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let _endpoint = endpoint;
        let mut models = loaded;
        while let Ok(Some(msg)) = read_frame::<ControlMsg>(&mut recv).await {
            let ControlMsg::Place(placement) = msg else {
                continue;
            };
            let _ = tx.send(placement.clone());
            if matches!(on_load, OnLoad::Ignore) {
                continue;
            }
            let failed = match (&placement, &on_load) {
                (Placement::Load(offer), OnLoad::Load) => {
                    models.push(description(&file(&offer.id)));
                    None
                }
                (Placement::Load(offer), OnLoad::Fail(why)) => {
                    Some((offer.id.clone(), (*why).to_owned()))
                }
                (Placement::Load(_), OnLoad::Ignore) => None,
                (Placement::Unload(id), _) => {
                    models.retain(|m| &m.id != id);
                    None
                }
            };
            let report = ModelsReport {
                models: models.clone(),
                free_memory: 0,
                on_disk: Vec::new(),
                failed,
            };
            if write_frame(&mut send, &ControlMsg::Models(report))
                .await
                .is_err()
            {
                return;
            }
        }
    });
    Stub {
        placements,
        _conn: conn,
    }
}

/// Waits (5 s at most) until `done` holds; fails with `what` otherwise.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    let polled = tokio::time::timeout(Duration::from_secs(5), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    polled.await.unwrap_or_else(|_| panic!("{what}"));
}

async fn joined(fleet: &Fleet, count: usize) {
    eventually("the stub nodes did not join", || {
        fleet.nodes().len() >= count
    })
    .await;
}

/// A head with `config` and one node, "a", serving "m" and loading what
/// it is asked to, joined.
async fn head_with_node_a(config: PlacementConfig) -> (Fleet, Stub) {
    let (fleet, listener, identity) = head(config).await;
    let node = stub(
        &listener,
        &identity,
        "a",
        vec![description(&file("m"))],
        OnLoad::Load,
    )
    .await;
    joined(&fleet, 1).await;
    (fleet, node)
}

#[tokio::test]
async fn a_model_no_node_has_loaded_is_loaded_on_a_node_and_then_served() {
    let (fleet, mut node) = head_with_node_a(PlacementConfig::default()).await;
    assert_eq!(fleet.context_len("m2"), None);
    assert!(fleet.can_load("m2"));
    let ctx = tokio::time::timeout(Duration::from_secs(10), fleet.ready("m2"))
        .await
        .expect("ready should not wait out its timeout");
    assert_eq!(ctx.unwrap(), 512);
    assert!(matches!(node.placements.recv().await, Some(Placement::Load(o)) if o.id == "m2"));
    assert_eq!(fleet.loaded_on("m2"), vec!["a".to_owned()]);
    let placed = fleet.placements();
    assert_eq!(placed.len(), 2);
    assert!(placed.iter().all(|m| m.loaded_on.len() == 1), "{placed:?}");
    // Unloaded by hand, then asked for again: loaded again, not waited for.
    assert_eq!(
        fleet.unload_model("m2", None).unwrap(),
        vec!["a".to_owned()]
    );
    eventually("the unload should be reported", || {
        fleet.context_len("m2").is_none()
    })
    .await;
    let again = tokio::time::timeout(Duration::from_secs(10), fleet.ready("m2"))
        .await
        .expect("a second load should not wait out the timeout");
    assert_eq!(again.unwrap(), 512);
}

#[tokio::test]
async fn a_node_with_the_file_on_disk_is_preferred_for_a_load() {
    let (fleet, listener, identity) = head(PlacementConfig::default()).await;
    let mut without = stub(&listener, &identity, "without", vec![], OnLoad::Load).await;
    joined(&fleet, 1).await;
    let sha = file("m2").sha256;
    let _with = stub_with_files(
        &listener,
        &identity,
        "with",
        vec![],
        vec![sha],
        OnLoad::Load,
    )
    .await;
    joined(&fleet, 2).await;
    tokio::time::timeout(Duration::from_secs(10), fleet.ready("m2"))
        .await
        .expect("the load should finish")
        .unwrap();
    assert_eq!(fleet.loaded_on("m2"), vec!["with".to_owned()]);
    assert!(
        without.placements.try_recv().is_err(),
        "the node without the file was not asked"
    );
}

#[tokio::test]
async fn a_load_that_fails_everywhere_is_a_clear_error_naming_the_reason() {
    let (fleet, listener, identity) = head(PlacementConfig::default()).await;
    let _a = stub(
        &listener,
        &identity,
        "a",
        vec![],
        OnLoad::Fail("out of memory on a"),
    )
    .await;
    let _b = stub(
        &listener,
        &identity,
        "b",
        vec![],
        OnLoad::Fail("out of memory on b"),
    )
    .await;
    joined(&fleet, 2).await;
    let error = tokio::time::timeout(Duration::from_secs(10), fleet.ready("m2"))
        .await
        .expect("a failed load should end the wait at once")
        .unwrap_err();
    match error {
        FleetError::NotLoaded { model, reason } => {
            assert_eq!(model, "m2");
            assert!(reason.starts_with("out of memory on"), "{reason}");
        }
        other => panic!("expected NotLoaded, got {other:?}"),
    }
}

#[tokio::test]
async fn a_load_that_never_finishes_ends_at_the_load_timeout() {
    let config = PlacementConfig {
        load_timeout: Duration::from_millis(300),
        unload_after: None,
    };
    let (fleet, listener, identity) = head(config).await;
    // A node that takes the placement and never reports back.
    let silent = stub(&listener, &identity, "silent", vec![], OnLoad::Ignore).await;
    joined(&fleet, 1).await;
    let error = fleet.ready("m2").await.unwrap_err();
    assert!(
        matches!(&error, FleetError::NotLoaded { reason, .. } if reason.contains("--load-timeout")),
        "{error:?}"
    );
    // A model the head does not serve: no wait, the usual NoNode.
    drop(silent);
    let unserved = fleet.ready("not-a-head-model").await.unwrap_err();
    assert!(
        matches!(unserved, FleetError::NoNode { .. }),
        "{unserved:?}"
    );
}

#[tokio::test]
async fn a_model_idle_past_unload_after_is_unloaded() {
    let config = PlacementConfig {
        load_timeout: Duration::from_secs(10),
        unload_after: Some(Duration::from_millis(50)),
    };
    let (fleet, mut node) = head_with_node_a(config).await;
    assert_eq!(fleet.loaded_on("m"), vec!["a".to_owned()]);
    // Not idle yet: nothing is unloaded.
    fleet.unload_idle();
    tokio::time::sleep(Duration::from_millis(80)).await;
    fleet.unload_idle();
    let placement = tokio::time::timeout(Duration::from_secs(5), node.placements.recv())
        .await
        .expect("the idle model should be unloaded");
    assert_eq!(placement, Some(Placement::Unload("m".into())));
    eventually(
        "the head should list the model nowhere once the node reports it unloaded",
        || fleet.loaded_on("m").is_empty(),
    )
    .await;
    assert_eq!(fleet.context_len("m"), None);
}
