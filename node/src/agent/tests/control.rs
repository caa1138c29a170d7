//! What the node sends on the control stream after the welcome.

use super::*;
use superfluid_proto::{block_hashes, model_seed, KvEvent, KvUpdate, LoadReport};

/// Reads control messages until `want` picks one, skipping the others.
async fn next_control<T>(
    recv: &mut RecvStream,
    mut want: impl FnMut(ControlMsg) -> Option<T>,
) -> T {
    within(async {
        loop {
            let msg = read_frame::<ControlMsg>(recv)
                .await
                .unwrap()
                .expect("the control stream is open");
            if let Some(found) = want(msg) {
                return found;
            }
        }
    })
    .await
}

fn kv(msg: ControlMsg) -> Option<KvUpdate> {
    match msg {
        ControlMsg::Kv(update) => Some(update),
        _ => None,
    }
}

fn load(msg: ControlMsg) -> Option<LoadReport> {
    match msg {
        ControlMsg::Load(report) => Some(report),
        _ => None,
    }
}

#[tokio::test]
async fn the_node_reports_its_caches_and_load_on_the_control_stream() {
    let head = head_stub();
    let costs = FakeCosts {
        prefill_tokens_per_sec: 1e6,
        decode_tokens_per_sec: 1e6,
    };
    let engine: Arc<dyn Engine> = Arc::new(FakeEngine::new(model(), costs));
    let agent = tokio::spawn(run(engine, head.config.clone()));
    let mut joined = accept(&head, welcome()).await;
    let control = &mut joined.control.1;
    // Right after the welcome: the whole (empty) cache state, then the load.
    let first = within(read_frame::<ControlMsg>(control)).await.unwrap();
    let snapshot = KvUpdate {
        model: "m".into(),
        events: vec![KvEvent::Cleared { slot: 0 }, KvEvent::Cleared { slot: 1 }],
    };
    assert_eq!(first, Some(ControlMsg::Kv(snapshot)));
    let report = next_control(control, load).await;
    assert_eq!(
        (report.model.as_str(), report.running, report.queued),
        ("m", 0, 0)
    );

    // A prompt of two whole blocks and a bit: both blocks are reported stored.
    let prompt: Vec<u32> = (0..70).map(|i| i * 3 + 1).collect();
    let req = GenerateRequest {
        prompt: prompt.clone(),
        ..request("m", 4)
    };
    let (_send, mut recv) = start_generation(&joined.conn, &req).await;
    while let Some(event) = within(read_frame::<GenerateEvent>(&mut recv))
        .await
        .unwrap()
    {
        assert!(!matches!(event, GenerateEvent::Failed { .. }), "{event:?}");
    }
    let want = block_hashes(model_seed("m"), &prompt);
    assert_eq!(want.len(), 2);
    let mut chains = vec![Vec::new(); 2];
    let mut updates = 0;
    while !chains.iter().any(|c: &Vec<u64>| c.starts_with(&want)) {
        let update = next_control(control, kv).await;
        updates += 1;
        assert!(updates < 100, "the prompt's blocks were never reported");
        assert_eq!(update.model, "m");
        for event in update.events {
            match event {
                KvEvent::Stored { slot, blocks } => chains[slot as usize].extend(blocks),
                KvEvent::Removed { slot, blocks } => {
                    let chain = &mut chains[slot as usize];
                    chain.truncate(chain.len() - blocks.len());
                }
                KvEvent::Cleared { slot } => chains[slot as usize].clear(),
            }
        }
    }
    // The load changed (a measured prefill rate), so it is reported again.
    let report = next_control(control, |m| {
        load(m).filter(|r| r.prefill_tokens_per_sec > 0.0)
    })
    .await;
    assert!(report.decode_tokens_per_sec >= 0.0);
    agent.abort();
}
