//! `response_format`: structured output.
//!
//! `json_object` and `json_schema` become a [`Constraint`] that the node
//! enforces while sampling. The head compiles every schema here first, with
//! the same compiler the nodes use (llguidance) over a byte-level
//! vocabulary, so a schema it cannot compile is a 400 naming what is wrong
//! before any node is asked; the node compiles it again against the
//! model's own vocabulary.

use std::sync::OnceLock;

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};
use superfluid_proto::Constraint;

use super::ApiError;

/// The parameter named when the schema itself is at fault.
const SCHEMA_PARAM: &str = "response_format.json_schema.schema";

/// The deepest a schema may nest objects and arrays. llguidance compiles
/// a schema by recursion, on the request's task (a tokio worker's 2 MiB
/// stack); a request body nests at most 128 levels in all (serde_json's
/// limit), and this bound keeps the compiler's stack use within the
/// worker's whatever the schema came from.
pub const MAX_SCHEMA_DEPTH: usize = 100;

/// The constraint `response_format` asks for: `None` for text.
///
/// # Errors
/// [`ApiError::InvalidParam`] naming `response_format` (or the part of it at
/// fault) when it is not one of the accepted shapes or its schema does not
/// compile.
pub fn constraint(response_format: Option<&Value>) -> Result<Option<Constraint>, ApiError> {
    let format = match response_format {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(format)) => format,
        Some(_) => return Err(bad_shape()),
    };
    let schema = match format.get("type").and_then(Value::as_str) {
        Some("text") => return Ok(None),
        Some("json_object") => json!({"type": "object"}),
        Some("json_schema") => json_schema(format.get("json_schema"))?,
        _ => return Err(bad_shape()),
    };
    check_depth(&schema, SCHEMA_PARAM)?;
    let schema = without_free_whitespace(schema);
    compile(&schema)?;
    Ok(Some(Constraint::JsonSchema(schema.to_string())))
}

/// `schema` written as JSON with one space after `:` and `,` and no other
/// whitespace between tokens: a small model given free whitespace can pad
/// with newlines until `max_tokens` and never close the JSON. A schema that
/// sets llguidance's own `x-guidance` options keeps them.
fn without_free_whitespace(mut schema: Value) -> Value {
    if let Value::Object(object) = &mut schema {
        object.entry("x-guidance").or_insert_with(
            || json!({"whitespace_flexible": false, "key_separator": ": ", "item_separator": ", "}),
        );
    }
    schema
}

/// The schema of a `json_schema` format; without one, any JSON object.
fn json_schema(spec: Option<&Value>) -> Result<Value, ApiError> {
    let Some(Value::Object(spec)) = spec else {
        return Err(ApiError::param(
            "response_format.json_schema",
            "`response_format.json_schema` must be an object: {\"name\": ..., \"schema\": {...}}",
        ));
    };
    match spec.get("schema") {
        None | Some(Value::Null) => Ok(json!({"type": "object"})),
        Some(schema @ (Value::Object(_) | Value::Bool(_))) => Ok(schema.clone()),
        Some(_) => Err(ApiError::param(
            SCHEMA_PARAM,
            "`response_format.json_schema.schema` must be a JSON Schema object",
        )),
    }
}

fn bad_shape() -> ApiError {
    ApiError::param(
        "response_format",
        "`response_format` must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": \"json_schema\", \"json_schema\": {\"name\": ..., \"schema\": {...}}}",
    )
}

/// Refuses `schema`, naming `param`, when it nests objects and arrays more
/// than [`MAX_SCHEMA_DEPTH`] levels deep. Walks without recursion.
///
/// # Errors
/// [`ApiError::InvalidParam`] naming `param`.
pub fn check_depth(schema: &Value, param: &str) -> Result<(), ApiError> {
    let mut pending = vec![(schema, 0_usize)];
    while let Some((value, depth)) = pending.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Object(o) => Box::new(o.values()),
            Value::Array(a) => Box::new(a.iter()),
            _ => continue,
        };
        if depth >= MAX_SCHEMA_DEPTH {
            return Err(ApiError::param(
                param,
                format!("`{param}` nests objects and arrays more than {MAX_SCHEMA_DEPTH} levels deep; flatten it or use a `$ref`"),
            ));
        }
        pending.extend(children.map(|child| (child, depth + 1)));
    }
    Ok(())
}

/// Compiles `schema` and computes its first step, as a node would.
fn compile(schema: &Value) -> Result<(), ApiError> {
    check_grammar(TopLevelGrammar::from_json_schema(schema.clone())).map_err(|reason| {
        ApiError::param(
            SCHEMA_PARAM,
            format!("the JSON schema cannot be enforced: {reason}; remove or simplify that part of the schema"),
        )
    })
}

/// Compiles `grammar` and computes its first step, as a node would; the
/// error says why it cannot be enforced.
pub fn check_grammar(grammar: TopLevelGrammar) -> Result<(), String> {
    off_the_runtime(|| {
        let factory = factory().map_err(Clone::clone)?;
        let parser = unpanicked(|| factory.create_parser(grammar).map_err(|e| e.to_string()))?;
        // The matcher catches its own panics and reports them as errors.
        let mut matcher = Matcher::new(Ok(parser));
        matcher.compute_mask().map_err(|e| e.to_string())?;
        Ok(())
    })
}

/// Runs `work` (a compile: tens of milliseconds, a third of a second for a
/// schema with a huge `enum`) so that it holds up no other request: on a
/// multi-threaded tokio runtime the worker's other tasks move to another
/// thread meanwhile; anywhere else it simply runs.
fn off_the_runtime<T>(work: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let multi_threaded =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if multi_threaded {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

/// `compile()`, with a panic as an error: llguidance reports what it
/// cannot compile as errors, and a panic would be a bug in it, answered as
/// a refusal rather than a dropped connection.
fn unpanicked<T>(compile: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(compile))
        .map_err(|_| "the grammar compiler failed on it".to_owned())?
}

/// One compiler for every request, over a vocabulary of single bytes: what
/// compiles over it compiles over any model's vocabulary, up to limits.
fn factory() -> Result<&'static ParserFactory, &'static String> {
    static FACTORY: OnceLock<Result<ParserFactory, String>> = OnceLock::new();
    FACTORY
        .get_or_init(|| {
            let env = toktrie::ApproximateTokEnv::single_byte_env();
            let mut factory = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
            factory.quiet();
            Ok(factory)
        })
        .as_ref()
}

#[cfg(test)]
mod tests;
