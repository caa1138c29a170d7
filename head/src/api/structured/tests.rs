use serde_json::{json, Value};
use superfluid_proto::Constraint;

use super::{check_grammar, constraint, unpanicked, MAX_SCHEMA_DEPTH};
use crate::api::ApiError;

/// The parameter and message of a refusal.
fn refused(format: Value) -> (String, String) {
    match constraint(Some(&format)) {
        Err(ApiError::InvalidParam { param, message }) => (param, message),
        other => panic!("{format} gave {other:?}"),
    }
}

/// The schema sent to the node, less the whitespace option the head adds.
fn schema_of(format: Value) -> Value {
    match constraint(Some(&format)) {
        Ok(Some(Constraint::JsonSchema(text))) => {
            let mut schema: Value =
                serde_json::from_str(&text).expect("the constraint carries JSON");
            let options = schema
                .as_object_mut()
                .and_then(|o| o.remove("x-guidance"))
                .expect("the head sets the whitespace options");
            assert_eq!(options["whitespace_flexible"], false, "{options}");
            schema
        }
        other => panic!("{format} gave {other:?}"),
    }
}

#[test]
fn text_and_absent_formats_ask_for_no_constraint() {
    assert!(matches!(constraint(None), Ok(None)));
    assert!(matches!(constraint(Some(&Value::Null)), Ok(None)));
    assert!(matches!(
        constraint(Some(&json!({"type": "text"}))),
        Ok(None)
    ));
}

/// A schema compiles on either kind of tokio runtime, and outside one.
fn compiles_here() {
    let schema = schema_of(
        json!({"type": "json_schema", "json_schema": {"name": "n", "schema": {"enum": ["a", "b"]}}}),
    );
    assert_eq!(schema, json!({"enum": ["a", "b"]}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_schema_compiles_on_a_multi_threaded_runtime_off_its_worker() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    compiles_here();
    // One worker: were the compile to hold it, nothing else could run.
    let ticks = Arc::new(AtomicU64::new(0));
    let ticking = ticks.clone();
    let ticker = tokio::spawn(async move {
        loop {
            ticking.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let big: Vec<String> = (0..20_000).map(|i| format!("value number {i}")).collect();
    let format =
        json!({"type": "json_schema", "json_schema": {"name": "n", "schema": {"enum": big}}});
    let during = tokio::spawn(async move {
        let before = ticks.load(Ordering::Relaxed);
        let compiled = constraint(Some(&format));
        (compiled.is_ok(), ticks.load(Ordering::Relaxed) - before)
    });
    let (compiled, ticked) = during.await.unwrap();
    ticker.abort();
    assert!(compiled);
    assert!(ticked > 0, "other tasks ran while the schema compiled");
}

#[tokio::test(flavor = "current_thread")]
async fn a_schema_compiles_on_a_current_thread_runtime() {
    compiles_here();
}

#[test]
fn json_object_asks_for_any_object() {
    assert_eq!(
        schema_of(json!({"type": "json_object"})),
        json!({"type": "object"})
    );
}

#[test]
fn json_schema_sends_the_schema_given() {
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer"},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": false,
    });
    let format = json!({"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": true}});
    assert_eq!(schema_of(format), schema);
}

#[test]
fn a_malformed_response_format_names_the_field() {
    for format in [
        json!("json"),
        json!({"type": "yaml"}),
        json!({}),
        json!({"type": "json_schema"}),
        json!({"type": "json_schema", "json_schema": {"name": "x", "schema": "object"}}),
    ] {
        let (param, message) = refused(format.clone());
        assert!(param.starts_with("response_format"), "{format}: {param}");
        assert!(message.contains("response_format"), "{format}: {message}");
    }
}

#[test]
fn a_schema_that_cannot_compile_is_refused_naming_the_part() {
    let bad_pattern = json!({"type": "object", "properties": {"id": {"type": "string", "pattern": "a(b"}}, "required": ["id"]});
    let unknown_type = json!({"type": "object", "properties": {"x": {"type": "frobnicate"}}});
    let dangling_ref = json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}});
    for schema in [bad_pattern, unknown_type, dangling_ref] {
        let format = json!({"type": "json_schema", "json_schema": {"name": "s", "schema": schema}});
        let (param, message) = refused(format);
        assert_eq!(param, "response_format.json_schema.schema");
        assert!(message.contains("cannot be enforced"), "{message}");
    }
}

#[test]
fn hostile_schemas_are_refused_or_compiled_without_harm() {
    // A request body nests at most 128 levels (serde_json's limit), and
    // each level here is two.
    let mut deep = json!({"type": "integer"});
    for _ in 0..60 {
        deep = json!({"type": "object", "properties": {"a": deep}, "required": ["a"]});
    }
    let huge_enum: Vec<String> = (0..50_000).map(|i| format!("value-{i}")).collect();
    let unsatisfiable = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}}, "required": ["n"]});
    for schema in [deep, json!({"enum": huge_enum}), unsatisfiable] {
        let format = json!({"type": "json_schema", "json_schema": {"name": "s", "schema": schema}});
        // Either answer is fine; what matters is that there is one.
        match constraint(Some(&format)) {
            Ok(Some(_)) | Err(ApiError::InvalidParam { .. }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// `levels` arrays, each the items of the one around it, around an integer.
fn nested_arrays(levels: usize) -> Value {
    let mut schema = json!({"type": "integer"});
    for _ in 0..levels {
        schema = json!({"type": "array", "items": schema});
    }
    schema
}

#[test]
fn a_schema_nested_too_deep_is_refused_naming_it() {
    // Built as a value: a request body could not carry this many levels,
    // but the bound holds whatever the schema came from.
    for levels in [MAX_SCHEMA_DEPTH, 300, 1_000] {
        let format = json!({"type": "json_schema", "json_schema": {"name": "s", "schema": nested_arrays(levels)}});
        let (param, message) = refused(format);
        assert_eq!(param, "response_format.json_schema.schema");
        assert!(
            message.contains(&format!("more than {MAX_SCHEMA_DEPTH} levels deep")),
            "{message}"
        );
    }
    // One level less is compiled (the outermost schema is the first level).
    let format = json!({"type": "json_schema", "json_schema": {"name": "s", "schema": nested_arrays(MAX_SCHEMA_DEPTH - 1)}});
    assert!(matches!(constraint(Some(&format)), Ok(Some(_))));
}

#[test]
fn a_panic_in_the_compiler_is_a_refusal() {
    let reason = unpanicked::<()>(|| panic!("a bug in the compiler")).unwrap_err();
    assert!(reason.contains("compiler failed"), "{reason}");
    assert_eq!(unpanicked(|| Ok::<_, String>(7)), Ok(7));
    // Compiling still works after a caught panic.
    let grammar = llguidance::api::TopLevelGrammar::from_json_schema(json!({"type": "object"}));
    assert_eq!(check_grammar(grammar), Ok(()));
}
