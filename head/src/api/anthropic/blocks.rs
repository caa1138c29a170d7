//! Content blocks: the text of a message's or the system prompt's content,
//! given as a string or an array of blocks.
//!
//! Text blocks are read; `cache_control` on them is accepted, since every
//! node caches the prompt prefixes it has seen without being asked. Blocks
//! of other kinds (images, documents, thinking) are
//! refused with a 400 naming the block. Tool blocks in a message's
//! content are read by [`super::tools`].

use crate::api::ApiError;
use serde_json::Value;

/// The keys a text block may carry.
const TEXT_BLOCK_KEYS: &[&str] = &["type", "text", "cache_control", "citations"];

/// The text of `content` (a string or an array of text blocks); `param`
/// names it in errors (`system`, `messages[0].content`).
pub fn text(content: &Value, param: &str) -> Result<String, ApiError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut text = String::new();
            for (j, block) in blocks.iter().enumerate() {
                text.push_str(block_text(block, &format!("{param}[{j}]"))?);
            }
            Ok(text)
        }
        _ => Err(ApiError::param(
            param,
            format!("`{param}` must be a string or an array of {{\"type\":\"text\",\"text\":\"...\"}} blocks"),
        )),
    }
}

/// The text of one text block; `param` names it in errors.
pub fn block_text<'a>(block: &'a Value, param: &str) -> Result<&'a str, ApiError> {
    let Some(fields) = block.as_object() else {
        return Err(ApiError::param(
            param,
            format!(
                "`{param}` must be a content block such as {{\"type\":\"text\",\"text\":\"...\"}}"
            ),
        ));
    };
    match fields.get("type").and_then(Value::as_str) {
        Some("text") => {}
        Some(kind @ ("tool_use" | "tool_result")) => {
            return Err(ApiError::param(
                param,
                format!("`{param}` is a {kind} block; tool blocks belong directly in a message's content, so send text blocks here"),
            ))
        }
        Some(kind) => {
            return Err(ApiError::param(
                param,
                format!("`{param}` is a {kind} block, which this head does not support; send text blocks only"),
            ))
        }
        None => {
            return Err(ApiError::param(
                param,
                format!("`{param}` has no `type`; text blocks are {{\"type\":\"text\",\"text\":\"...\"}}"),
            ))
        }
    }
    if let Some(key) = fields
        .keys()
        .find(|k| !TEXT_BLOCK_KEYS.contains(&k.as_str()))
    {
        return Err(ApiError::param(
            format!("{param}.{key}"),
            format!("`{param}.{key}` is not a field of a text block; text blocks take type, text and cache_control"),
        ));
    }
    if fields.get("citations").is_some_and(|c| !c.is_null()) {
        return Err(ApiError::param(
            format!("{param}.citations"),
            format!("`{param}.citations` is not supported by this head; leave it out"),
        ));
    }
    fields.get("text").and_then(Value::as_str).ok_or_else(|| {
        ApiError::param(
            format!("{param}.text"),
            format!("`{param}.text` must be a string"),
        )
    })
}
