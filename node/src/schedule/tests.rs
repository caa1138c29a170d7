use std::sync::Arc;

use superfluid_proto::{
    Constraint, FailureKind, FinishReason, GenerateEvent, GenerateRequest, Outcome, Sampling,
};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::{Backend, BackendError, Fed, Job, Limits, Scheduler, StepPlan};
use crate::ledger::Ledger;

/// What the scheduler asked of the backend.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Copy { from: usize, to: usize, len: usize },
    Keep { slot: usize, len: usize },
    Clear { slot: usize },
}

/// Records every call; its tokens are 500 plus the sequence's length.
struct Recorder {
    ops: Vec<Op>,
    batches: Vec<Vec<Fed>>,
    fail_next_decode: bool,
    /// The sequence length at which [`END`] is sampled.
    end_at: usize,
}

impl Default for Recorder {
    fn default() -> Self {
        Self {
            ops: Vec::new(),
            batches: Vec::new(),
            fail_next_decode: false,
            end_at: usize::MAX,
        }
    }
}

/// Ends a generation.
const END: u32 = 999;

impl Backend for Recorder {
    type Sampler = ();

    fn sampler(
        &mut self,
        _sampling: &Sampling,
        constraint: Option<&Constraint>,
        _logprobs: Option<u8>,
        _generated: &[u32],
    ) -> Result<(), BackendError> {
        match constraint {
            Some(_) => Err(BackendError::Constraint {
                source: "no grammar here".into(),
            }),
            None => Ok(()),
        }
    }

    fn decode(&mut self, batch: &[Fed]) -> Result<(), BackendError> {
        self.batches.push(batch.to_vec());
        if std::mem::take(&mut self.fail_next_decode) {
            return Err(BackendError::Decode {
                backend: "test",
                source: "out of memory".into(),
            });
        }
        Ok(())
    }

    fn copy_prefix(&mut self, from: usize, to: usize, len: usize) -> bool {
        self.ops.push(Op::Copy { from, to, len });
        true
    }

    fn keep_prefix(&mut self, slot: usize, len: usize) -> bool {
        self.ops.push(Op::Keep { slot, len });
        true
    }

    fn clear(&mut self, slot: usize) {
        self.ops.push(Op::Clear { slot });
    }

    fn sample(
        &mut self,
        _: &mut (),
        _batch_index: usize,
        sequence: &[u32],
    ) -> Result<u32, BackendError> {
        Ok(if sequence.len() >= self.end_at {
            END
        } else {
            500 + sequence.len() as u32
        })
    }

    fn is_end_of_generation(&self, token: u32) -> bool {
        token == END
    }

    fn vocab_size(&self) -> u32 {
        1000
    }
}

fn scheduler(slots: usize, min_copy_gain: usize) -> Scheduler<Recorder> {
    let limits = Limits {
        slots,
        ctx: 64,
        prefill_chunk: 16,
        min_copy_gain,
    };
    Scheduler::new(limits, Arc::new(Ledger::new("test", slots)))
}

fn job(
    prompt: &[u32],
    max_tokens: u32,
    slot: Option<u32>,
) -> (Job, UnboundedReceiver<GenerateEvent>) {
    let (events, rx) = unbounded_channel();
    let request = GenerateRequest {
        model: "test".into(),
        prompt: prompt.to_vec(),
        sampling: Sampling::default(),
        max_tokens,
        slot,
        constraint: None,
        logprobs: None,
    };
    (Job { request, events }, rx)
}

/// Plans and finishes one step; its plan.
fn step(s: &mut Scheduler<Recorder>, b: &mut Recorder) -> Option<StepPlan> {
    let plan = s.plan(b)?;
    s.finish_step(b, || 0.01);
    Some(plan)
}

/// Steps until nothing runs.
fn run_all(s: &mut Scheduler<Recorder>, b: &mut Recorder) {
    while step(s, b).is_some() {}
}

/// Every event sent so far.
fn events(rx: &mut UnboundedReceiver<GenerateEvent>) -> Vec<GenerateEvent> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

fn outcome(rx: &mut UnboundedReceiver<GenerateEvent>) -> Outcome {
    match events(rx).pop() {
        Some(GenerateEvent::Finished(outcome)) => outcome,
        other => panic!("not finished: {other:?}"),
    }
}

/// The slots whose tokens are in the last batch.
fn fed_slots(b: &Recorder) -> Vec<usize> {
    let mut slots: Vec<usize> = b
        .batches
        .last()
        .into_iter()
        .flatten()
        .map(|f| f.slot)
        .collect();
    slots.dedup();
    slots
}

#[test]
fn requests_wait_for_a_slot_and_are_admitted_in_arrival_order() {
    let (mut s, mut b) = (scheduler(1, 1), Recorder::default());
    let (first, mut first_rx) = job(&[1, 2], 2, None);
    let (second, mut second_rx) = job(&[3, 4], 2, None);
    s.push(first);
    s.push(second);
    let plan = step(&mut s, &mut b);
    assert_eq!(
        plan,
        Some(StepPlan {
            decoded: 0,
            prefilled: 2
        })
    );
    assert_eq!(
        b.batches[0].iter().map(|f| f.token).collect::<Vec<_>>(),
        [1, 2]
    );
    assert!(events(&mut second_rx).is_empty());
    run_all(&mut s, &mut b);
    assert_eq!(outcome(&mut first_rx).generated_tokens, 2);
    assert_eq!(outcome(&mut second_rx).generated_tokens, 2);
    assert!(!s.busy());
}

#[test]
fn a_step_feeds_tokens_in_slot_order_and_samples_the_last_of_each() {
    let (mut s, mut b) = (scheduler(2, 1), Recorder::default());
    let (a, mut a_rx) = job(&[1, 2, 3], 5, Some(1));
    let (c, mut c_rx) = job(&[4, 5], 5, Some(0));
    s.push(a);
    s.push(c);
    let plan = s.plan(&mut b);
    assert_eq!(
        plan,
        Some(StepPlan {
            decoded: 0,
            prefilled: 5
        })
    );
    let fed: Vec<(usize, usize, bool)> = s
        .batch()
        .iter()
        .map(|f| (f.slot, f.pos, f.logits))
        .collect();
    assert_eq!(
        fed,
        [
            (0, 0, false),
            (0, 1, true),
            (1, 0, false),
            (1, 1, false),
            (1, 2, true)
        ]
    );
    // Each slot's first token follows its whole prompt.
    assert!(s.finish_step(&mut b, || 0.01));
    assert_eq!(events(&mut a_rx), [GenerateEvent::Tokens(vec![503])]);
    assert_eq!(events(&mut c_rx), [GenerateEvent::Tokens(vec![502])]);
}

#[test]
fn a_copy_is_made_only_when_it_saves_the_minimum_gain() {
    let (mut s, mut b) = (scheduler(2, 4), Recorder::default());
    let system: Vec<u32> = (1..=10).collect();
    let (a, _rx) = job(&system, 1, Some(0));
    s.push(a);
    run_all(&mut s, &mut b);
    // 3 tokens in common: not worth a copy, the empty slot computes them.
    let (short, mut short_rx) = job(&[1, 2, 3, 9, 9], 1, Some(1));
    s.push(short);
    run_all(&mut s, &mut b);
    assert_eq!(outcome(&mut short_rx).cached_tokens, 0);
    assert!(!b.ops.iter().any(|op| matches!(op, Op::Copy { .. })));
    // Into slot 1 again, which keeps 3 of its own: 8 in slot 0 save 5 more.
    let mut long = system[..8].to_vec();
    long.extend([50, 51]);
    let (long, mut long_rx) = job(&long, 1, Some(1));
    s.push(long);
    run_all(&mut s, &mut b);
    assert_eq!(outcome(&mut long_rx).cached_tokens, 8);
    assert!(b.ops.contains(&Op::Copy {
        from: 0,
        to: 1,
        len: 8
    }));
}

#[test]
fn the_hint_picks_among_empty_slots() {
    let (mut s, mut b) = (scheduler(3, 1), Recorder::default());
    let (a, _rx) = job(&[1, 2], 4, Some(2));
    s.push(a);
    step(&mut s, &mut b);
    assert_eq!(fed_slots(&b), [2]);
}

#[test]
fn a_new_conversation_takes_an_idle_slot_beside_a_running_one() {
    let (mut s, mut b) = (scheduler(4, 1), Recorder::default());
    // Fill all four slots with short conversations, then keep slot 2 running.
    for slot in 0..4u32 {
        let (j, _rx) = job(&[10 + slot, 20], 1, Some(slot));
        s.push(j);
        run_all(&mut s, &mut b);
    }
    let (long, _long_rx) = job(&[30, 31], 50, Some(2));
    s.push(long);
    step(&mut s, &mut b);
    // Slot 0 is the least recently used, but slot 1 and 3 join slot 2's pass.
    let (other, _other_rx) = job(&[40, 41], 5, None);
    s.push(other);
    step(&mut s, &mut b);
    let slots = fed_slots(&b);
    assert_eq!(slots.len(), 2);
    assert!(slots == [1, 2] || slots == [2, 3], "{slots:?}");
}

#[test]
fn a_cancelled_generation_frees_its_slot_keeping_what_was_computed() {
    let (mut s, mut b) = (scheduler(1, 1), Recorder::default());
    let (a, a_rx) = job(&[1, 2, 3], 50, None);
    s.push(a);
    step(&mut s, &mut b);
    drop(a_rx);
    let (c, mut c_rx) = job(&[1, 2, 3, 7], 2, None);
    s.push(c);
    run_all(&mut s, &mut b);
    // The cancelled sequence's computed prompt is reused.
    assert_eq!(outcome(&mut c_rx).cached_tokens, 3);
    assert!(!s.busy());
}

#[test]
fn tokens_outside_the_vocabulary_and_prompts_too_long_are_refused() {
    let (mut s, mut b) = (scheduler(1, 1), Recorder::default());
    let (bad, mut bad_rx) = job(&[1, 1000], 2, None);
    let (long, mut long_rx) = job(&[1; 64], 2, None);
    s.push(bad);
    s.push(long);
    assert_eq!(s.plan(&mut b), None);
    let failed = |rx: &mut UnboundedReceiver<GenerateEvent>| match events(rx).as_slice() {
        [GenerateEvent::Failed { kind, message }] => (*kind, message.clone()),
        other => panic!("{other:?}"),
    };
    let (kind, message) = failed(&mut bad_rx);
    assert_eq!(kind, FailureKind::InvalidToken);
    assert!(message.contains("token 1000 is not in the model's vocabulary of 1000"));
    let (kind, message) = failed(&mut long_rx);
    assert_eq!(kind, FailureKind::PromptTooLong);
    assert!(message.contains("maximum context length is 64 tokens"));
    assert!(!s.busy());
}

#[test]
fn max_tokens_zero_finishes_at_once_without_a_slot() {
    let (mut s, mut b) = (scheduler(1, 1), Recorder::default());
    let (j, mut rx) = job(&[1, 2, 3], 0, None);
    s.push(j);
    assert_eq!(s.plan(&mut b), None);
    let want = Outcome {
        finish: FinishReason::Length,
        prompt_tokens: 3,
        cached_tokens: 0,
        generated_tokens: 0,
    };
    assert_eq!(outcome(&mut rx), want);
    assert!(b.batches.is_empty());
}

#[test]
fn an_end_of_generation_token_stops_without_being_sent() {
    let (mut s, mut b) = (scheduler(1, 1), Recorder::default());
    b.end_at = 4;
    let (j, mut rx) = job(&[1, 2], 10, None);
    s.push(j);
    run_all(&mut s, &mut b);
    let want = Outcome {
        finish: FinishReason::Stop,
        prompt_tokens: 2,
        cached_tokens: 0,
        generated_tokens: 2,
    };
    assert_eq!(
        events(&mut rx),
        [
            GenerateEvent::Tokens(vec![502]),
            GenerateEvent::Tokens(vec![503]),
            GenerateEvent::Finished(want),
        ]
    );
}

#[test]
fn a_failed_decode_fails_only_the_generations_fed_in_it() {
    let (mut s, mut b) = (scheduler(2, 1), Recorder::default());
    // The first prompt takes the whole prefill budget of 16 tokens, so the
    // second is not fed in the first step.
    let (a, mut a_rx) = job(&[1; 20], 3, Some(0));
    let (c, mut c_rx) = job(&[5, 6], 3, Some(1));
    s.push(a);
    s.push(c);
    b.fail_next_decode = true;
    step(&mut s, &mut b);
    match events(&mut a_rx).as_slice() {
        [GenerateEvent::Failed { kind, message }] => {
            assert_eq!(*kind, FailureKind::Engine);
            assert_eq!(message, "test could not decode the batch: out of memory");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(b.ops.last(), Some(&Op::Clear { slot: 0 }));
    run_all(&mut s, &mut b);
    assert_eq!(outcome(&mut c_rx).generated_tokens, 3);
}

mod shared_prefill;
