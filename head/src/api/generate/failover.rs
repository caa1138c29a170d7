//! Moving a generation to another node when its node is lost or stalls,
//! before or after its first token.
//!
//! The head holds the prompt and every token it has streamed, so another
//! node can take the answer over: it gets the prompt followed by the
//! generated tokens as its prompt (it prefills them instead of sampling them
//! again) and `max_tokens` lowered by what was produced, and is told how
//! many of its prompt's tokens are the answer's, so that its sampler takes
//! up where the lost node's stood (see [`continuation`]). The head's
//! detokenizer and stop matcher carry on across the seam, so the client's
//! text goes on with nothing repeated, nothing lost and no character cut in
//! half.

use std::time::{Duration, Instant};

use superfluid_proto::{GenerateRequest, Sampling, TokenId};

use crate::fleet::{Fleet, FleetError, RemoteGeneration};

/// Nodes one generation may be moved to after its first node, whatever the
/// causes: a request that loses three nodes in a row is unlucky or is
/// killing them, and its client hears why.
pub const MAX_MOVES: usize = 3;

/// How long a generation that lost its node waits for another to come up
/// (a restarted node reconnecting) before its client hears that none can
/// take it over.
const WAIT_FOR_NODE: Duration = Duration::from_secs(5);

/// How often the fleet is asked again while waiting for a node.
const WAIT_STEP: Duration = Duration::from_millis(200);

/// Why a generation left its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The node's connection or the generation's stream failed.
    NodeLost,
    /// The stream made no progress for longer than the node's own step
    /// time allows (see [`Watchdog`]).
    Stalled,
    /// The node said it is stopping.
    NodeStopping,
}

impl Cause {
    /// The label value in `superfluid_failovers_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::NodeLost => "node_lost",
            Cause::Stalled => "stalled",
            Cause::NodeStopping => "node_stopping",
        }
    }
}

pub use superfluid_proto::watchdog::Watchdog;

/// What moving a generation takes: the fleet, the request as first sent,
/// and the nodes it has run on.
pub struct Relay {
    fleet: Fleet,
    /// The request as the client asked it; each move derives its own.
    first: GenerateRequest,
    /// The request last sent.
    request: GenerateRequest,
    /// Ids of the nodes it ran on, the current one last.
    tried: Vec<String>,
    moves: usize,
}

/// A move that could not be made.
#[derive(Debug)]
pub enum Stuck {
    /// Every token asked for was streamed; only the end was lost.
    Complete,
    /// No node took the generation over; the error to answer with.
    Failed(FleetError),
}

impl Relay {
    /// A relay for `request`, first sent to the node with id `node`.
    pub fn new(fleet: Fleet, request: GenerateRequest, node: String) -> Relay {
        Relay {
            fleet,
            first: request.clone(),
            request,
            tried: vec![node],
            moves: 0,
        }
    }

    /// The id of the node it runs on now.
    pub fn node_id(&self) -> Option<&str> {
        self.tried.last().map(String::as_str)
    }

    /// Moves made so far.
    pub fn moves(&self) -> usize {
        self.moves
    }

    /// The fleet it moves generations in.
    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// Sends the generation to another node after its node was given up for
    /// `cause` (`lost` says how), with the `generated` tokens the client has
    /// received appended to the prompt.
    pub async fn move_on(
        &mut self,
        generated: &[TokenId],
        lost: FleetError,
    ) -> Result<RemoteGeneration, Stuck> {
        let done = u32::try_from(generated.len()).unwrap_or(u32::MAX);
        let Some(left) = self.first.max_tokens.checked_sub(done).filter(|n| *n > 0) else {
            return Err(Stuck::Complete);
        };
        if self.moves >= MAX_MOVES {
            return Err(Stuck::Failed(gave_up(
                lost,
                format!("it was moved {MAX_MOVES} times already"),
            )));
        }
        self.request = continuation(&self.first, generated, left);
        let deadline = Instant::now() + WAIT_FOR_NODE;
        loop {
            match self.take_over().await {
                Ok(remote) => {
                    self.moves += 1;
                    self.tried.push(remote.node_id.clone());
                    return Ok(remote);
                }
                Err(error) if Instant::now() >= deadline => {
                    return Err(Stuck::Failed(match error {
                        FleetError::Draining { .. } => error,
                        other => gave_up(lost, other.to_string()),
                    }));
                }
                Err(_) => tokio::time::sleep(WAIT_STEP).await,
            }
        }
    }

    /// The best node that has not failed this generation; failing that, any
    /// but the one just lost (a node that failed earlier may have restarted).
    async fn take_over(&mut self) -> Result<RemoteGeneration, FleetError> {
        match self.fleet.take_over(&mut self.request, &self.tried).await {
            Ok(remote) => Ok(remote),
            Err(first) => {
                let last = self.tried.last().cloned().into_iter().collect::<Vec<_>>();
                if last.len() == self.tried.len() {
                    return Err(first);
                }
                self.fleet.take_over(&mut self.request, &last).await
            }
        }
    }
}

/// `first` continued on another node after it `generated` these tokens,
/// with `left` more to go. The node prefills the generated tokens with the
/// prompt and is told they are the answer's: its random draws go on from
/// the position after them (so a seeded answer samples what the lost node
/// would have), and its penalties and grammar replay them first (so a
/// constrained answer goes on where its text stands in the grammar).
fn continuation(first: &GenerateRequest, generated: &[TokenId], left: u32) -> GenerateRequest {
    GenerateRequest {
        prompt: [first.prompt.as_slice(), generated].concat(),
        max_tokens: left,
        slot: None,
        sampling: Sampling {
            generated: u32::try_from(generated.len()).unwrap_or(u32::MAX),
            ..first.sampling.clone()
        },
        ..first.clone()
    }
}

/// The error a client hears when its generation could not be moved.
fn gave_up(lost: FleetError, why: String) -> FleetError {
    match lost {
        FleetError::NodeLost { node, reason } => FleetError::NodeLost {
            node,
            reason: format!(
                "{reason}; no other node could take the answer over ({why}); retry the request"
            ),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use superfluid_proto::Constraint;

    use super::*;

    #[test]
    fn a_continuation_tells_the_node_where_the_answer_begins() {
        let first = GenerateRequest {
            model: "m".into(),
            prompt: vec![1, 2, 3],
            sampling: Sampling {
                temperature: 1.0,
                seed: 9,
                ..Sampling::default()
            },
            max_tokens: 10,
            slot: Some(2),
            constraint: Some(Constraint::JsonSchema(r#"{"type":"object"}"#.into())),
            logprobs: Some(1),
        };
        let next = continuation(&first, &[7, 8], 8);
        assert_eq!(next.prompt, [1, 2, 3, 7, 8]);
        assert_eq!(next.sampling.generated, 2);
        assert_eq!(next.max_tokens, 8);
        assert_eq!(next.slot, None);
        // The same seed, and the same grammar, replayed on the node.
        assert_eq!(next.sampling.seed, 9);
        assert_eq!(next.constraint, first.constraint);
        assert_eq!(next.logprobs, Some(1));
        let again = continuation(&first, &[7, 8, 4], 7);
        assert_eq!(again.sampling.generated, 3);
    }
}
