//! What to embed, as clients send it: a string, a list of strings, one
//! token array, or a list of token arrays; and vectors as base64.

use serde_json::Value;
use superfluid_proto::{TokenId, MAX_EMBED_INPUTS};

use super::super::ApiError;

/// The inputs of one request, as text or as the model's token ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inputs {
    /// Texts, tokenized by the head with the model's start and end tokens.
    Texts(Vec<String>),
    /// Token ids, sent to the node as they are.
    Tokens(Vec<Vec<TokenId>>),
}

impl Inputs {
    /// How many inputs there are.
    pub fn len(&self) -> usize {
        match self {
            Self::Texts(texts) => texts.len(),
            Self::Tokens(tokens) => tokens.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn invalid(param: &str, message: String) -> ApiError {
    ApiError::param(param, message)
}

/// Reads `input` (named `param` in messages): never empty, no empty
/// string or token array, at most [`MAX_EMBED_INPUTS`] items, ids that fit
/// in a token id (the vocabulary is checked by the caller).
pub fn parse(input: Option<&Value>, param: &str) -> Result<Inputs, ApiError> {
    let shapes =
        "a string, an array of strings, an array of token ids, or an array of token-id arrays";
    let Some(input) = input.filter(|v| !v.is_null()) else {
        return Err(invalid(
            param,
            format!("`{param}` is required: give {shapes}"),
        ));
    };
    let inputs = match input {
        Value::String(text) => Inputs::Texts(vec![text.clone()]),
        Value::Array(items) if items.is_empty() => {
            return Err(invalid(
                param,
                format!("`{param}` is an empty array; give at least one text to embed"),
            ))
        }
        Value::Array(items) => match &items[0] {
            Value::String(_) => Inputs::Texts(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        Value::String(s) => Ok(s.clone()),
                        _ => Err(invalid(param, format!("`{param}[{i}]` is not a string; an array of texts holds only strings"))),
                    })
                    .collect::<Result<_, _>>()?,
            ),
            Value::Number(_) => Inputs::Tokens(vec![token_ids(items, param, None)?]),
            Value::Array(_) => Inputs::Tokens(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        Value::Array(ids) => token_ids(ids, param, Some(i)),
                        _ => Err(invalid(param, format!("`{param}[{i}]` is not an array of token ids; an array of token arrays holds only arrays"))),
                    })
                    .collect::<Result<_, _>>()?,
            ),
            _ => return Err(invalid(param, format!("`{param}` must be {shapes}"))),
        },
        _ => return Err(invalid(param, format!("`{param}` must be {shapes}"))),
    };
    if inputs.len() > MAX_EMBED_INPUTS {
        return Err(invalid(
            param,
            format!(
                "`{param}` has {} items; send at most {MAX_EMBED_INPUTS} per request",
                inputs.len()
            ),
        ));
    }
    let empty = match &inputs {
        Inputs::Texts(texts) => texts.iter().position(String::is_empty),
        Inputs::Tokens(tokens) => tokens.iter().position(Vec::is_empty),
    };
    if let Some(i) = empty {
        let at = if inputs.len() == 1 && matches!(input, Value::String(_)) {
            format!("`{param}`")
        } else {
            format!("`{param}[{i}]`")
        };
        return Err(invalid(
            param,
            format!("{at} is empty; every input needs some text or at least one token"),
        ));
    }
    Ok(inputs)
}

fn token_ids(ids: &[Value], param: &str, at: Option<usize>) -> Result<Vec<TokenId>, ApiError> {
    let name = match at {
        Some(i) => format!("{param}[{i}]"),
        None => param.to_owned(),
    };
    ids.iter()
        .enumerate()
        .map(|(j, v)| {
            v.as_u64()
                .and_then(|n| TokenId::try_from(n).ok())
                .ok_or_else(|| {
                    invalid(
                        param,
                        format!("`{name}[{j}]` is {v}, not a token id (a whole number from 0)"),
                    )
                })
        })
        .collect()
}

/// `vector` as OpenAI's `encoding_format: "base64"` gives it: the
/// little-endian bytes of each float32, in standard base64 with padding.
pub fn base64_floats(vector: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = vector.iter().flat_map(|f| f.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (k, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if k <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_input_shape_is_read() {
        assert_eq!(
            parse(Some(&json!("hi")), "input").unwrap(),
            Inputs::Texts(vec!["hi".into()])
        );
        assert_eq!(
            parse(Some(&json!(["a", "b"])), "input").unwrap(),
            Inputs::Texts(vec!["a".into(), "b".into()])
        );
        assert_eq!(
            parse(Some(&json!([101, 7592, 102])), "input").unwrap(),
            Inputs::Tokens(vec![vec![101, 7592, 102]])
        );
        assert_eq!(
            parse(Some(&json!([[1, 2], [3]])), "input").unwrap(),
            Inputs::Tokens(vec![vec![1, 2], vec![3]])
        );
    }

    #[test]
    fn empty_and_mixed_inputs_are_refused_with_the_field() {
        for (input, says) in [
            (json!(""), "`input` is empty"),
            (json!([]), "empty array"),
            (json!(["a", ""]), "`input[1]` is empty"),
            (json!([[1], []]), "`input[1]` is empty"),
            (json!(["a", 1]), "`input[1]` is not a string"),
            (json!([1, -2]), "`input[1]` is -2"),
            (json!({"a": 1}), "must be a string"),
        ] {
            let err = parse(Some(&input), "input").unwrap_err().to_string();
            assert!(err.contains(says), "{input}: {err}");
        }
        let err = parse(None, "input").unwrap_err().to_string();
        assert!(err.contains("`input` is required"), "{err}");
    }

    #[test]
    fn base64_is_the_little_endian_floats() {
        // 1.0f32 is 00 00 80 3f; 0.5 is 00 00 00 3f.
        assert_eq!(base64_floats(&[1.0]), "AACAPw==");
        assert_eq!(base64_floats(&[1.0, 0.5]), "AACAPwAAAD8=");
        assert_eq!(base64_floats(&[]), "");
    }
}
