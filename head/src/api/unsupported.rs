//! Request fields a client may send that an endpoint cannot honour.
//!
//! Ignoring them would hand back an answer that looks right and is not what
//! was asked for (prose where JSON was required, no function call where one
//! was offered), so each is a 400 that names the field and says what to send
//! instead. Their "off" values (`false`, `0`, an empty list) are accepted,
//! since many clients always send them. `response_format` is read by
//! [`super::structured`], `tools` by [`super::tools`]; `/v1/chat/completions`
//! and `/v1/completions` read `logprobs` themselves ([`super::choices`]).

use super::ApiError;
use serde_json::Value;

/// The fields of a request body that ask for optional features, as the
/// client sent them (`None` when absent). The request type lends them here,
/// so these checks do not depend on how the request is read.
#[derive(Debug, Clone, Copy, Default)]
pub struct Features<'a> {
    /// `logprobs`.
    pub logprobs: Option<&'a Value>,
    /// `top_logprobs`.
    pub top_logprobs: Option<&'a Value>,
}

impl Features<'_> {
    /// The first field that asks for something not supported.
    pub fn check(&self) -> Result<(), ApiError> {
        for (field, value) in [
            ("logprobs", self.logprobs),
            ("top_logprobs", self.top_logprobs),
        ] {
            if asks(value) {
                return Err(ApiError::param(
                    field,
                    format!("`{field}` is not supported on this endpoint (/v1/chat/completions and /v1/completions take it); send the request without it"),
                ));
            }
        }
        Ok(())
    }
}

/// Whether a field's value asks for its feature: anything but null, false,
/// 0 and an empty list or object.
pub(super) fn asks(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The features a body asks for, as a request would lend them.
    fn features(body: &Value) -> Features<'_> {
        Features {
            logprobs: body.get("logprobs"),
            top_logprobs: body.get("top_logprobs"),
        }
    }

    fn refused(body: Value) -> Option<(String, String)> {
        match features(&body).check() {
            Ok(()) => None,
            Err(ApiError::InvalidParam { param, message }) => Some((param, message)),
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }

    #[test]
    fn asking_for_an_unsupported_feature_names_the_field() {
        for (body, field) in [
            (json!({"logprobs": true}), "logprobs"),
            (json!({"logprobs": 3}), "logprobs"),
            (json!({"top_logprobs": 2}), "top_logprobs"),
        ] {
            let (param, message) =
                refused(body.clone()).unwrap_or_else(|| panic!("{body} accepted"));
            assert_eq!(param, field, "{body}");
            assert!(
                message.contains(field) && message.contains("not supported on this endpoint"),
                "{message}"
            );
        }
    }

    #[test]
    fn the_off_values_clients_send_by_default_are_accepted() {
        for body in [
            json!({}),
            json!({"logprobs": false, "top_logprobs": 0}),
            json!({"logprobs": null}),
            json!({"logprobs": 0}),
        ] {
            assert_eq!(refused(body.clone()), None, "{body}");
        }
    }
}
