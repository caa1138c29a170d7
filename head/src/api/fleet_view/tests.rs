//! What `/v1/fleet` shows of a node's models.

use std::time::{Duration, SystemTime};

use superfluid_link::Identity;
use superfluid_proto::ModelDescription;

use super::*;
use crate::fleet::NodeLoadSnapshot;

fn node(models: Vec<ModelDescription>) -> NodeSnapshot {
    NodeSnapshot {
        node_id: "n1".into(),
        name: "gpu1".into(),
        fingerprint: Identity::generate().expect("a key").fingerprint(),
        address: "127.0.0.1:4000".parse().expect("an address"),
        models,
        hardware: String::new(),
        connected_since: SystemTime::now(),
        in_flight: 0,
        served: 0,
        state: NodeState::Up,
        last_heartbeat: SystemTime::now(),
        slots: 4,
        ctx: 512,
        labels: Vec::new(),
        ineligible: None,
        load: NodeLoadSnapshot::default(),
        link_rtt: Duration::ZERO,
    }
}

#[test]
fn each_model_shows_its_kv_cache_type_and_bytes() {
    let view = NodeView::new(&node(vec![
        ModelDescription {
            id: "smol".into(),
            ctx: 1024,
            slots: 2,
            kv_cache_type: "q8_0".into(),
            kv_bytes: 25_067_520,
            ..Default::default()
        },
        ModelDescription {
            id: "minilm".into(),
            ctx: 512,
            slots: 2,
            ..Default::default()
        },
    ]));
    assert_eq!(
        view.model_memory,
        vec![
            ModelMemory {
                id: "smol".into(),
                kv_cache_type: "q8_0".into(),
                kv_bytes: 25_067_520,
            },
            ModelMemory {
                id: "minilm".into(),
                kv_cache_type: String::new(),
                kv_bytes: 0,
            },
        ]
    );
    let json = serde_json::to_value(&view).expect("JSON");
    assert_eq!(json["model_memory"][0]["kv_cache_type"], "q8_0");
    assert_eq!(json["model_memory"][0]["kv_bytes"], 25_067_520);
}

#[test]
fn a_view_without_model_memory_still_reads() {
    let mut json = serde_json::to_value(NodeView::new(&node(Vec::new()))).expect("JSON");
    json.as_object_mut()
        .expect("an object")
        .remove("model_memory");
    let view: NodeView = serde_json::from_value(json).expect("an older head's view");
    assert!(view.model_memory.is_empty());
}
