use std::collections::HashMap;

use super::*;
use superfluid_proto::blocks::block_hashes;

const B: usize = BLOCK_TOKENS;

fn tokens(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| i.wrapping_mul(7919) ^ salt).collect()
}

/// The head's copy of a node's caches, built only from the ledger's updates.
#[derive(Default)]
struct Head {
    chains: HashMap<u32, Vec<BlockHash>>,
}

impl Head {
    fn apply(&mut self, update: &KvUpdate) {
        for event in &update.events {
            match event {
                KvEvent::Cleared { slot } => {
                    self.chains.insert(*slot, Vec::new());
                }
                KvEvent::Stored { slot, blocks } => {
                    self.chains.entry(*slot).or_default().extend(blocks)
                }
                KvEvent::Removed { slot, blocks } => {
                    let chain = self.chains.entry(*slot).or_default();
                    assert!(chain.len() >= blocks.len(), "removing more than held");
                    let keep = chain.len() - blocks.len();
                    assert_eq!(&chain[keep..], &blocks[..], "removed blocks are the tail");
                    chain.truncate(keep);
                }
            }
        }
    }

    fn matches(&self, ledger: &Ledger) -> bool {
        ledger.chains().iter().enumerate().all(|(slot, chain)| {
            self.chains
                .get(&(slot as u32))
                .map_or(chain.is_empty(), |c| c == chain)
        })
    }
}

#[test]
fn chains_follow_extend_truncate_and_clear() {
    let ledger = Ledger::new("m", 2);
    let seed = model_seed("m");
    let t = tokens(5 * B + 3, 1);
    ledger.extend(0, &t[..B - 1]);
    assert!(ledger.chains()[0].is_empty());
    assert!(ledger.take().is_none(), "no whole block, nothing to report");
    ledger.extend(0, &t[..2 * B + 1]);
    ledger.extend(0, &t);
    assert_eq!(ledger.chains()[0], block_hashes(seed, &t));
    ledger.truncate(0, 3 * B - 1);
    assert_eq!(ledger.chains()[0], block_hashes(seed, &t[..2 * B]));
    ledger.extend_with(0, 4 * B, |r| t[r].iter().copied());
    assert_eq!(ledger.chains()[0], block_hashes(seed, &t[..4 * B]));
    ledger.clear(0);
    assert!(ledger.chains()[0].is_empty());
    assert!(ledger.chains()[1].is_empty());
}

#[test]
fn extend_with_asks_only_for_new_whole_blocks() {
    let ledger = Ledger::new("m", 1);
    let t = tokens(3 * B + 5, 2);
    ledger.extend(0, &t[..B + 2]);
    let mut asked = None;
    ledger.extend_with(0, t.len(), |r| {
        asked = Some(r.clone());
        t[r].iter().copied()
    });
    assert_eq!(asked, Some(B..3 * B));
    let mut called = false;
    ledger.extend_with(0, t.len(), |r| {
        called = true;
        t[r].iter().copied()
    });
    assert!(!called, "nothing new: the tokens are not read");
}

#[test]
fn pending_events_are_coalesced_per_slot_in_order() {
    let ledger = Ledger::new("m", 2);
    let seed = model_seed("m");
    let (a, b) = (tokens(4 * B, 3), tokens(2 * B, 4));
    ledger.extend(0, &a[..B]);
    ledger.extend(1, &b[..B]);
    ledger.extend(0, &a[..3 * B]);
    ledger.extend(1, &b);
    ledger.truncate(0, 2 * B);
    ledger.truncate(0, 0);
    let ha = block_hashes(seed, &a);
    let hb = block_hashes(seed, &b);
    let update = ledger.take().unwrap();
    assert_eq!(update.model, "m");
    assert_eq!(
        update.events,
        vec![
            KvEvent::Stored {
                slot: 0,
                blocks: ha[..3].to_vec()
            },
            KvEvent::Stored {
                slot: 1,
                blocks: hb.clone()
            },
            KvEvent::Removed {
                slot: 0,
                blocks: ha[..3].to_vec()
            },
        ]
    );
    assert!(ledger.take().is_none());
}

#[test]
fn clearing_an_empty_slot_reports_nothing() {
    let ledger = Ledger::new("m", 1);
    ledger.clear(0);
    assert!(ledger.take().is_none());
    ledger.extend(0, &tokens(B, 0));
    ledger.clear(0);
    let events = ledger.take().unwrap().events;
    assert_eq!(events.last(), Some(&KvEvent::Cleared { slot: 0 }));
}

#[test]
fn a_snapshot_covers_pending_events() {
    let ledger = Ledger::new("m", 3);
    let t = tokens(2 * B, 5);
    ledger.extend(1, &t);
    let snapshot = ledger.snapshot();
    assert_eq!(
        snapshot.events,
        vec![
            KvEvent::Cleared { slot: 0 },
            KvEvent::Cleared { slot: 1 },
            KvEvent::Stored {
                slot: 1,
                blocks: block_hashes(model_seed("m"), &t)
            },
            KvEvent::Cleared { slot: 2 },
        ]
    );
    assert!(ledger.take().is_none(), "nothing stale after a snapshot");
}

#[test]
fn too_many_pending_events_turn_into_the_full_state() {
    let ledger = Ledger::new("m", 2);
    let mut head = Head::default();
    head.apply(&ledger.snapshot());
    let t = tokens(2 * B, 6);
    for _ in 0..MAX_PENDING {
        ledger.extend(0, &t);
        ledger.truncate(0, B);
        ledger.clear(0);
    }
    ledger.extend(1, &t);
    let update = ledger.take().unwrap();
    assert!(update.events.len() <= 4, "{}", update.events.len());
    head.apply(&update);
    assert!(head.matches(&ledger));
    assert!(ledger.take().is_none());
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
    }
}

#[test]
fn a_head_replaying_the_snapshot_and_events_mirrors_the_ledger() {
    for seed in 1..=20u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let slots = 1 + rng.below(4);
        let ledger = Ledger::new("model", slots);
        let hash_seed = ledger.seed();
        let mut cached: Vec<Vec<u32>> = vec![Vec::new(); slots];
        let mut head: Option<Head> = None;
        for _ in 0..400 {
            let slot = rng.below(slots);
            match rng.below(10) {
                0..=4 => {
                    let more = rng.below(3 * B);
                    // Few distinct tokens so that slots share prefixes.
                    cached[slot].extend((0..more).map(|_| rng.below(3) as u32));
                    ledger.extend(slot, &cached[slot]);
                }
                5 | 6 => {
                    let keep = rng.below(cached[slot].len() + 1);
                    cached[slot].truncate(keep);
                    ledger.truncate(slot, keep);
                }
                7 => {
                    cached[slot].clear();
                    ledger.clear(slot);
                }
                8 => {
                    let mut fresh = Head::default();
                    fresh.apply(&ledger.snapshot());
                    head = Some(fresh);
                }
                _ => {
                    if let (Some(head), Some(update)) = (head.as_mut(), ledger.take()) {
                        head.apply(&update);
                    }
                }
            }
            for (s, tokens) in cached.iter().enumerate() {
                assert_eq!(
                    ledger.chains()[s],
                    block_hashes(hash_seed, tokens),
                    "seed {seed}"
                );
            }
        }
        let mut head = head.unwrap_or_default();
        if let Some(update) = ledger.take() {
            head.apply(&update);
        }
        assert!(head.matches(&ledger), "seed {seed}");
    }
}

#[test]
fn rates_are_moving_averages_of_valid_measurements() {
    let ledger = Ledger::new("m", 1);
    let report = ledger.load_report();
    assert_eq!(report.prefill_tokens_per_sec, 0.0);
    assert_eq!(report.decode_tokens_per_sec, 0.0);
    ledger.record_prefill(100, 0.5);
    ledger.record_prefill(0, 1.0);
    ledger.record_prefill(10, 0.0);
    ledger.record_prefill(10, f64::NAN);
    ledger.record_decode(0.01);
    ledger.record_decode(f64::INFINITY);
    let report = ledger.load_report();
    assert_eq!(report.prefill_tokens_per_sec, 200.0);
    assert_eq!(report.decode_tokens_per_sec, 100.0);
    ledger.record_prefill(300, 1.0);
    assert!((ledger.load_report().prefill_tokens_per_sec - 220.0).abs() < 1e-3);
    ledger.set_load(2, 3, 400);
    let report = ledger.load_report();
    assert_eq!(
        (report.running, report.queued, report.queued_prompt_tokens),
        (2, 3, 400)
    );
    assert_eq!(report.model, "m");
}

#[tokio::test]
async fn changed_wakes_when_events_are_pending() {
    let ledger = std::sync::Arc::new(Ledger::new("m", 1));
    let waiter = tokio::spawn({
        let ledger = ledger.clone();
        async move {
            ledger.changed().await;
            ledger.take()
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(!waiter.is_finished());
    ledger.extend(0, &tokens(B, 9));
    let update = tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        update.unwrap().events[..],
        [KvEvent::Stored { slot: 0, .. }]
    ));
}

#[test]
fn a_mirror_fed_a_hosts_updates_holds_the_same_chains_and_relays_them() {
    let host = Ledger::new("m", 2);
    let mirror = Ledger::new("m", 2);
    let first = mirror.snapshot();
    assert!(first
        .events
        .iter()
        .all(|e| matches!(e, KvEvent::Cleared { .. })));
    let prompt = tokens(3 * B + 5, 1);
    host.extend(0, &prompt);
    host.extend(1, &tokens(2 * B, 2));
    host.truncate(0, B);
    host.clear(1);
    let update = host.take().expect("changes");
    mirror
        .apply("m", update.events.clone())
        .expect("a good update");
    assert_eq!(mirror.chains(), host.chains());
    // The agent relays what the mirror received, so the head's copy matches.
    let mut head = Head::default();
    head.apply(&mirror.take().expect("relayed"));
    assert_eq!(head.chains.get(&0), Some(&host.chains()[0]));
}

#[test]
fn a_mirror_refuses_events_that_cannot_be_a_hosts() {
    let mirror = Ledger::new("m", 2);
    let wrong_slot = vec![KvEvent::Cleared { slot: 2 }];
    assert_eq!(
        mirror.apply("m", wrong_slot),
        Err(MirrorError::NoSuchSlot { slot: 2, slots: 2 })
    );
    let not_held = vec![KvEvent::Removed {
        slot: 0,
        blocks: vec![7],
    }];
    assert_eq!(
        mirror.apply("m", not_held),
        Err(MirrorError::NotHeld { slot: 0 })
    );
    assert!(matches!(
        mirror.apply("other", Vec::new()),
        Err(MirrorError::OtherModel { .. })
    ));
}

#[test]
fn resetting_a_ledger_clears_every_slot_and_its_load() {
    let ledger = Ledger::new("m", 2);
    ledger.extend(0, &tokens(2 * B, 3));
    ledger.set_load(2, 1, 40);
    let _ = ledger.take();
    ledger.reset();
    assert!(ledger.chains().iter().all(Vec::is_empty));
    let load = ledger.load_report();
    assert_eq!(
        (load.running, load.queued, load.queued_prompt_tokens),
        (0, 0, 0)
    );
    let update = ledger.take().expect("the clear is relayed");
    assert_eq!(update.events, vec![KvEvent::Cleared { slot: 0 }]);
}
