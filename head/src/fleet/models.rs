//! Which of a node's models the head routes to: the model id must be one the
//! head serves and the file's sha256 must equal the head's.

use superfluid_proto::ModelDescription;

/// Hex digits of a hash shown in messages.
const SHORT: usize = 12;

fn short(hash: &str) -> &str {
    hash.get(..SHORT).unwrap_or(hash)
}

/// The ids of `offered` models the head may route, and why the others get
/// no work. With no `expected` models (a head that does not check), every
/// offered model is eligible.
pub(crate) fn eligibility(
    offered: &[ModelDescription],
    expected: &[ModelDescription],
) -> (Vec<String>, Option<String>) {
    if expected.is_empty() {
        return (offered.iter().map(|m| m.id.clone()).collect(), None);
    }
    let mut eligible = Vec::new();
    let mut reasons = Vec::new();
    for model in offered {
        match expected.iter().find(|e| e.id == model.id) {
            None => reasons.push(format!(
                "it serves model {}, which this head does not serve (the head serves {}); start the node with one of the head's model files",
                model.id,
                expected.iter().map(|e| e.id.as_str()).collect::<Vec<_>>().join(", ")
            )),
            Some(head) if !head.sha256.is_empty() && head.sha256 != model.sha256 => {
                let theirs = if model.sha256.is_empty() {
                    "unknown"
                } else {
                    short(&model.sha256)
                };
                reasons.push(format!(
                    "its model file {} differs from the head's (sha256 {}… vs the head's {}…); copy the head's file to the node",
                    model.id,
                    theirs,
                    short(&head.sha256)
                ));
            }
            Some(_) => eligible.push(model.id.clone()),
        }
    }
    let reason = (!reasons.is_empty()).then(|| reasons.join("; "));
    (eligible, reason)
}
