//! Output constraints, compiled by llguidance against the model's own
//! vocabulary.
//!
//! llguidance is used rather than llama.cpp's GBNF sampler because it
//! compiles JSON Schema itself and reports what it cannot compile, while the
//! GBNF sampler aborts the process on some grammar states (an end token
//! before the grammar completes, an empty stack). Its matcher runs on the
//! Rust side, so a grammar that fails while sampling fails that generation
//! alone (see [`super::sampler::Picker`]).

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use superfluid_proto::Constraint;

use crate::schedule::BackendError;

/// Compiles constraints for one model. Building it walks the whole
/// vocabulary, so it is built once, on the first constrained request.
pub struct Grammars {
    factory: ParserFactory,
}

impl Grammars {
    /// The compiler for `model`'s vocabulary.
    ///
    /// # Errors
    /// [`BackendError::Constraint`] when llguidance cannot index the vocabulary.
    pub fn new(model: &LlamaModel) -> Result<Self, BackendError> {
        let env = LlamaSampler::llguidance_tok_env(model);
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| BackendError::Constraint { source: e.into() })?;
        factory.quiet();
        Ok(Self { factory })
    }

    /// A matcher at the start of `constraint`: its first token is the first
    /// generated one, whatever prefix of the prompt the slot reused.
    ///
    /// # Errors
    /// [`BackendError::Constraint`] when the constraint does not compile.
    pub fn matcher(&self, constraint: &Constraint) -> Result<Matcher, BackendError> {
        let grammar = match constraint {
            Constraint::JsonSchema(text) => {
                let schema = serde_json::from_str(text).map_err(|e| BackendError::Constraint {
                    source: Box::new(e),
                })?;
                TopLevelGrammar::from_json_schema(schema)
            }
            Constraint::Lark(text) => TopLevelGrammar::from_lark(text.clone()),
        };
        // llguidance reports what it cannot compile as errors; a panic in it
        // would still be a bug there, and must not take the engine down.
        let parser = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.factory.create_parser(grammar)
        }))
        .map_err(|_| BackendError::Constraint {
            source: "llguidance panicked while compiling the schema".into(),
        })?
        .map_err(|e| BackendError::Constraint { source: e.into() })?;
        let matcher = Matcher::new(Ok(parser));
        match matcher.get_error() {
            Some(reason) => Err(BackendError::Constraint {
                source: reason.into(),
            }),
            None => Ok(matcher),
        }
    }
}
