//! Hostile JSON schemas through the head's structured-output path, as
//! `/v1/chat/completions` compiles them before any node is asked: a
//! `response_format` (`structured::constraint`) and a function's
//! `parameters` under `tool_choice: "required"` or a named function
//! (`ToolSet::from_request`, then `tools::grammar::constraint`).
//!
//! An input that is JSON is taken as a whole `response_format`, and its
//! schema, if it has one, as a tool's `parameters`; any other input drives
//! a generator of hostile schemas: nesting hundreds deep, huge enums,
//! `pattern`s from arbitrary strings, contradicting bounds, `$ref` loops,
//! `anyOf`/`allOf`/`oneOf`/`not`, unknown keywords.
//!
//! Each is a constraint or a 400 naming the field at fault, never a panic
//! or an abort, and it runs on a thread with a tokio worker's stack (the
//! head compiles schemas on its request tasks), so a schema that would
//! overflow a worker's stack fails here too. A slow input is caught by
//! libFuzzer's `-timeout` (scripts/fuzz gives 10 s).
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use superfluid_head::api::structured::constraint;
use superfluid_head::api::tools::{grammar, ToolSet};
use superfluid_head::api::ApiError;
use superfluid_proto::Constraint;

/// Tokio's default stack for worker threads.
const WORKER_STACK: usize = 2 * 1024 * 1024;

/// The deepest nesting the generator builds on purpose, in wrappers of
/// one `Deep` and in JSON levels of a whole schema.
const MAX_DEPTH: usize = 300;

/// The most members a generated huge enum has, and the longest stem each
/// member starts with: a few hundred kilobytes of schema. A request body
/// is at most 2 MiB, and a 2 MiB enum takes a few tenths of a second to
/// compile in a release build but far longer under the fuzzer's sanitizer,
/// which would read as a timeout.
const MAX_ENUM: usize = 10_000;
const MAX_STEM: usize = 16;

/// How one generated schema is sent.
#[derive(Debug, Arbitrary)]
enum Use {
    /// `{"type": "json_schema", "json_schema": {"schema": ...}}`.
    JsonSchema { strict: Option<bool> },
    /// A function's `parameters`, with `tool_choice: "required"`.
    Required { others: u8 },
    /// A function's `parameters`, with that function named.
    Named,
}

/// A key from a small set (`a`, `b`, `c`), so `required` and `$ref`s meet
/// properties and definitions that exist.
#[derive(Debug, Arbitrary, Clone, Copy)]
struct Key(u8);

impl Key {
    fn name(self) -> &'static str {
        ["a", "b", "c"][usize::from(self.0 % 3)]
    }
}

#[derive(Debug, Arbitrary)]
enum Ref {
    Root,
    Def(Key),
    Missing,
    Odd(String),
}

#[derive(Debug, Arbitrary)]
enum Lit {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Empty,
}

impl Lit {
    fn value(&self) -> Value {
        match self {
            Lit::Null => Value::Null,
            Lit::Bool(b) => json!(b),
            Lit::Int(i) => json!(i),
            // NaN and infinities have no JSON form: null.
            Lit::Float(f) => json!(f),
            Lit::Str(s) => json!(s),
            Lit::Empty => json!({}),
        }
    }
}

#[derive(Debug, Arbitrary)]
enum Wrap {
    Object,
    Array,
    AnyOf,
    AllOf,
    PrefixItems,
}

/// One generated schema.
#[derive(Debug, Arbitrary)]
enum Node {
    Bool(bool),
    Type(String),
    Types(Vec<String>),
    Str {
        pattern: Option<String>,
        format: Option<String>,
        min_length: Option<u32>,
        max_length: Option<u32>,
    },
    Number {
        integer: bool,
        minimum: Option<Lit>,
        maximum: Option<Lit>,
        exclusive_minimum: Option<Lit>,
        exclusive_maximum: Option<Lit>,
        multiple_of: Option<Lit>,
    },
    Array {
        items: Option<Box<Node>>,
        prefix_items: Vec<Node>,
        min_items: Option<u32>,
        max_items: Option<u32>,
        unique_items: bool,
    },
    Object {
        properties: Vec<(Key, Node)>,
        required: Vec<Key>,
        additional: Option<Box<Node>>,
        pattern_properties: Vec<(String, Node)>,
        min_properties: Option<u32>,
        max_properties: Option<u32>,
    },
    Enum(Vec<Lit>),
    HugeEnum {
        count: u16,
        stem: String,
    },
    Const(Lit),
    AnyOf(Vec<Node>),
    AllOf(Vec<Node>),
    OneOf(Vec<Node>),
    Not(Box<Node>),
    Ref(Ref),
    Deep {
        depth: u16,
        wrap: Wrap,
        leaf: Box<Node>,
    },
    Unknown {
        keyword: String,
        value: Lit,
        inner: Box<Node>,
    },
}

impl Node {
    /// The schema, nested at most `room` levels of JSON deep.
    fn value(&self, room: usize) -> Value {
        // Each schema's own object and the map or list inside it.
        let Some(inner) = room.checked_sub(2) else {
            return json!(true);
        };
        match self {
            Node::Bool(b) => json!(b),
            Node::Type(t) => json!({ "type": t }),
            Node::Types(t) => json!({ "type": t }),
            Node::Str {
                pattern,
                format,
                min_length,
                max_length,
            } => {
                let mut o = Map::new();
                o.insert("type".into(), json!("string"));
                put(&mut o, "pattern", pattern.as_ref().map(|p| json!(p)));
                put(&mut o, "format", format.as_ref().map(|f| json!(f)));
                put(&mut o, "minLength", min_length.map(|n| json!(n)));
                put(&mut o, "maxLength", max_length.map(|n| json!(n)));
                Value::Object(o)
            }
            Node::Number {
                integer,
                minimum,
                maximum,
                exclusive_minimum,
                exclusive_maximum,
                multiple_of,
            } => {
                let mut o = Map::new();
                let t = if *integer { "integer" } else { "number" };
                o.insert("type".into(), json!(t));
                put(&mut o, "minimum", minimum.as_ref().map(Lit::value));
                put(&mut o, "maximum", maximum.as_ref().map(Lit::value));
                let (emin, emax) = (exclusive_minimum, exclusive_maximum);
                put(&mut o, "exclusiveMinimum", emin.as_ref().map(Lit::value));
                put(&mut o, "exclusiveMaximum", emax.as_ref().map(Lit::value));
                put(&mut o, "multipleOf", multiple_of.as_ref().map(Lit::value));
                Value::Object(o)
            }
            Node::Array {
                items,
                prefix_items,
                min_items,
                max_items,
                unique_items,
            } => {
                let mut o = Map::new();
                o.insert("type".into(), json!("array"));
                put(&mut o, "items", items.as_ref().map(|n| n.value(inner)));
                if !prefix_items.is_empty() {
                    let prefix = prefix_items.iter().map(|n| n.value(inner)).collect();
                    o.insert("prefixItems".into(), Value::Array(prefix));
                }
                put(&mut o, "minItems", min_items.map(|n| json!(n)));
                put(&mut o, "maxItems", max_items.map(|n| json!(n)));
                if *unique_items {
                    o.insert("uniqueItems".into(), json!(true));
                }
                Value::Object(o)
            }
            Node::Object {
                properties,
                required,
                additional,
                pattern_properties,
                min_properties,
                max_properties,
            } => {
                let props: Map<String, Value> = properties
                    .iter()
                    .map(|(k, n)| (k.name().to_owned(), n.value(inner)))
                    .collect();
                let patterns: Map<String, Value> = pattern_properties
                    .iter()
                    .map(|(p, n)| (p.clone(), n.value(inner)))
                    .collect();
                let required: Vec<&str> = required.iter().map(|k| k.name()).collect();
                let mut o = Map::new();
                o.insert("type".into(), json!("object"));
                o.insert("properties".into(), Value::Object(props));
                o.insert("required".into(), json!(required));
                if !patterns.is_empty() {
                    o.insert("patternProperties".into(), Value::Object(patterns));
                }
                let extra = additional.as_ref().map(|n| n.value(inner));
                put(&mut o, "additionalProperties", extra);
                put(&mut o, "minProperties", min_properties.map(|n| json!(n)));
                put(&mut o, "maxProperties", max_properties.map(|n| json!(n)));
                Value::Object(o)
            }
            Node::Enum(members) => {
                json!({ "enum": members.iter().map(Lit::value).collect::<Vec<_>>() })
            }
            Node::HugeEnum { count, stem } => {
                let n = usize::from(*count) % MAX_ENUM;
                let stem: String = stem.chars().take(MAX_STEM).collect();
                let members: Vec<String> = (0..n).map(|i| format!("{stem}{i}")).collect();
                json!({ "enum": members })
            }
            Node::Const(c) => json!({ "const": c.value() }),
            Node::AnyOf(v) => {
                json!({ "anyOf": v.iter().map(|n| n.value(inner)).collect::<Vec<_>>() })
            }
            Node::AllOf(v) => {
                json!({ "allOf": v.iter().map(|n| n.value(inner)).collect::<Vec<_>>() })
            }
            Node::OneOf(v) => {
                json!({ "oneOf": v.iter().map(|n| n.value(inner)).collect::<Vec<_>>() })
            }
            Node::Not(n) => json!({ "not": n.value(inner) }),
            Node::Ref(r) => {
                let target = match r {
                    Ref::Root => "#".to_owned(),
                    Ref::Def(k) => format!("#/$defs/{}", k.name()),
                    Ref::Missing => "#/$defs/missing".to_owned(),
                    Ref::Odd(s) => s.clone(),
                };
                json!({ "$ref": target })
            }
            Node::Deep { depth, wrap, leaf } => {
                // Each wrapper nests at most three levels.
                let levels = (usize::from(*depth) % MAX_DEPTH).min(room / 3);
                let mut schema = leaf.value(room - 3 * levels);
                for _ in 0..levels {
                    schema = match wrap {
                        Wrap::Object => json!({
                            "type": "object",
                            "properties": {"a": schema},
                            "required": ["a"],
                        }),
                        Wrap::Array => json!({"type": "array", "items": schema, "minItems": 1}),
                        Wrap::AnyOf => json!({"anyOf": [schema, {"type": "null"}]}),
                        Wrap::AllOf => json!({"allOf": [schema]}),
                        Wrap::PrefixItems => json!({"prefixItems": [schema]}),
                    };
                }
                schema
            }
            Node::Unknown {
                keyword,
                value,
                inner: schema,
            } => {
                let mut schema = schema.value(room);
                if let Value::Object(o) = &mut schema {
                    o.insert(keyword.clone(), value.value());
                }
                schema
            }
        }
    }
}

fn put(o: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(value) = value {
        o.insert(key.to_owned(), value);
    }
}

/// A generated schema with its definitions, and how it is sent.
#[derive(Debug, Arbitrary)]
struct Generated {
    root: Node,
    defs: Vec<(Key, Node)>,
    definitions_keyword: bool,
    wrap_for_tools: bool,
    send: Use,
}

impl Generated {
    fn schema(&self) -> Value {
        let mut schema = self.root.value(MAX_DEPTH);
        if let (Value::Object(o), false) = (&mut schema, self.defs.is_empty()) {
            let defs: Map<String, Value> = self
                .defs
                .iter()
                .map(|(k, n)| (k.name().to_owned(), n.value(MAX_DEPTH)))
                .collect();
            let keyword = if self.definitions_keyword {
                "definitions"
            } else {
                "$defs"
            };
            o.insert(keyword.into(), Value::Object(defs));
        }
        schema
    }
}

/// A `response_format` answers with a JSON schema constraint, or a 400
/// naming `response_format` or a part of it.
fn check_response_format(format: &Value) {
    match constraint(Some(format)) {
        Ok(None) => {}
        Ok(Some(Constraint::JsonSchema(text))) => {
            assert!(serde_json::from_str::<Value>(&text).is_ok(), "{text}");
        }
        Ok(Some(other)) => panic!("response_format gave {other:?}"),
        Err(ApiError::InvalidParam { param, message }) => {
            assert!(param.starts_with("response_format"), "{param}: {message}");
            assert!(!message.is_empty());
        }
        Err(other) => panic!("response_format gave {other:?}"),
    }
}

/// `parameters` offered as function `f` (with `others` more functions) and
/// a call required: a Lark constraint, or a 400 naming `tools` or the
/// parameters at fault.
fn check_tool(parameters: &Value, others: u8, named: bool) {
    let mut tools = vec![json!({
        "type": "function",
        "function": {"name": "f", "description": "hostile", "parameters": parameters},
    })];
    for i in 0..others % 4 {
        tools.push(json!({"type": "function", "function": {"name": format!("g{i}")}}));
    }
    let choice = if named {
        json!({"type": "function", "function": {"name": "f"}})
    } else {
        json!("required")
    };
    let refused = |e: ApiError| match e {
        ApiError::InvalidParam { param, message } => {
            assert!(param.starts_with("tools"), "{param}: {message}");
        }
        other => panic!("tools gave {other:?}"),
    };
    let set = match ToolSet::from_request(Some(&json!(tools)), Some(&choice), None) {
        Ok(Some(set)) => set,
        Ok(None) => panic!("a required call gave no tool set"),
        Err(e) => return refused(e),
    };
    match grammar::constraint(&set) {
        Ok(Some(Constraint::Lark(_))) => {}
        Ok(other) => panic!("a required call gave {other:?}"),
        Err(e) => refused(e),
    }
}

fn run(data: &[u8]) {
    if let Ok(value) = serde_json::from_slice::<Value>(data) {
        check_response_format(&value);
        if let Some(schema) = value.get("json_schema").and_then(|s| s.get("schema")) {
            check_tool(schema, 0, false);
        }
        return;
    }
    let Ok(generated) = Generated::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let mut schema = generated.schema();
    match generated.send {
        Use::JsonSchema { strict } => {
            let mut spec = json!({"name": "hostile", "schema": schema});
            if let Some(strict) = strict {
                spec["strict"] = json!(strict);
            }
            check_response_format(&json!({"type": "json_schema", "json_schema": spec}));
        }
        Use::Required { others } => {
            if generated.wrap_for_tools {
                schema = json!({"type": "object", "properties": {"x": schema}, "required": ["x"]});
            }
            check_tool(&schema, others, false);
        }
        Use::Named => {
            if generated.wrap_for_tools {
                schema = json!({"type": "object", "properties": {"x": schema}});
            }
            check_tool(&schema, 0, true);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .stack_size(WORKER_STACK)
            .spawn_scoped(scope, || run(data))
            .expect("a thread for the schema");
        // A panic on the worker has already aborted the run (libFuzzer's
        // panic hook); joining only waits for it.
        let _ = worker.join();
    });
});
