use super::*;
use axum::http::HeaderValue;

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, HeaderValue::from_str(value).expect("a header value"));
    }
    map
}

#[test]
fn a_bearer_key_is_read_whatever_the_scheme_case() {
    assert_eq!(
        presented_key(&headers(&[("authorization", "Bearer sk-sf-abc")])),
        Some("sk-sf-abc")
    );
    assert_eq!(
        presented_key(&headers(&[("authorization", "bearer  sk-sf-abc ")])),
        Some("sk-sf-abc")
    );
}

#[test]
fn an_x_api_key_is_read_when_there_is_no_bearer() {
    assert_eq!(
        presented_key(&headers(&[("x-api-key", "sk-sf-xyz")])),
        Some("sk-sf-xyz")
    );
    assert_eq!(
        presented_key(&headers(&[
            ("authorization", "Bearer sk-sf-abc"),
            ("x-api-key", "sk-sf-xyz")
        ])),
        Some("sk-sf-abc")
    );
}

#[test]
fn other_schemes_and_empty_keys_present_nothing() {
    assert_eq!(presented_key(&headers(&[])), None);
    assert_eq!(
        presented_key(&headers(&[("authorization", "Basic dXNlcjpwYXNz")])),
        None
    );
    assert_eq!(
        presented_key(&headers(&[("authorization", "Bearer ")])),
        None
    );
    assert_eq!(presented_key(&headers(&[("x-api-key", "  ")])), None);
}
