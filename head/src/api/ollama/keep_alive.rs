//! Ollama's `keep_alive`, mapped onto the fleet's model placement: how long
//! the model stays loaded on its nodes after this request (see
//! `fleet/placement.rs`). A duration (`"5m"`, `"1h30m"`, `"300ms"`, or a
//! number of seconds) sets it, a negative one keeps the model loaded until
//! another request says otherwise, and 0 unloads it as soon as nothing runs.

use crate::api::ApiError;
use serde_json::Value;
use std::time::Duration;

use super::super::generate::residency::KeepAlive;

/// What `keep_alive` asks for; `None` when it is absent or null (the
/// head's `--unload-after` then applies).
pub fn parse(keep_alive: Option<&Value>) -> Result<Option<KeepAlive>, ApiError> {
    let bad = |why: &str| {
        ApiError::param(
            "keep_alive",
            format!("`keep_alive` {why}: give a duration such as \"5m\", \"1h30m\" or a number of seconds; 0 unloads the model after this request, a negative value keeps it loaded"),
        )
    };
    let seconds = match keep_alive {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_f64().ok_or_else(|| bad("is not a number"))?,
        Some(Value::String(s)) => {
            duration_secs(s.trim()).ok_or_else(|| bad(&format!("{s:?} is not a duration")))?
        }
        Some(other) => return Err(bad(&format!("must be a duration or a number, not {other}"))),
    };
    if !seconds.is_finite() {
        return Err(bad("is not a finite duration"));
    }
    if seconds < 0.0 {
        return Ok(Some(KeepAlive::Forever));
    }
    Ok(Some(KeepAlive::For(Duration::from_secs_f64(
        seconds.min(1e9),
    ))))
}

/// Seconds in a Go duration such as `1h30m`, `-1m`, `300ms` or `10`
/// (a bare number is seconds, as Ollama reads it).
fn duration_secs(text: &str) -> Option<f64> {
    let (sign, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (-1.0, rest),
        None => (1.0, text.strip_prefix('+').unwrap_or(text)),
    };
    if let Ok(n) = rest.parse::<f64>() {
        return Some(sign * n);
    }
    let mut total = 0.0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * scale;
    }
    (!text.is_empty()).then_some(sign * total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secs(v: Value) -> Option<KeepAlive> {
        parse(Some(&v)).unwrap_or_else(|e| panic!("{v}: {e:?}"))
    }

    #[test]
    fn durations_numbers_and_signs_read_as_ollama_reads_them() {
        let d = |s: f64| Some(KeepAlive::For(Duration::from_secs_f64(s)));
        assert_eq!(secs(json!("5m")), d(300.0));
        assert_eq!(secs(json!("1h30m")), d(5400.0));
        assert_eq!(secs(json!("300ms")), d(0.3));
        assert_eq!(secs(json!("10")), d(10.0));
        assert_eq!(secs(json!(90)), d(90.0));
        assert_eq!(secs(json!(0)), d(0.0));
        assert_eq!(secs(json!("0s")), d(0.0));
        assert_eq!(secs(json!(-1)), Some(KeepAlive::Forever));
        assert_eq!(secs(json!("-1m")), Some(KeepAlive::Forever));
        assert_eq!(parse(None).ok(), Some(None));
        assert_eq!(secs(Value::Null), None);
    }

    #[test]
    fn anything_else_is_refused_naming_keep_alive() {
        for bad in [
            json!("soon"),
            json!("5 minutes"),
            json!("5d"),
            json!(true),
            json!([1]),
            json!(""),
        ] {
            let e = parse(Some(&bad)).expect_err(&bad.to_string());
            assert!(format!("{e:?}").contains("keep_alive"), "{bad}: {e:?}");
        }
    }
}
