//! `POST /v1/completions` bodies: any bytes go through the same parsing and
//! validation as the handler's (JSON into `CompletionRequest`, then the
//! model id, generation parameters and the raw prompt), never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use superfluid_head::api::extract::parse;
use superfluid_head::api::types::CompletionRequest;

fuzz_target!(|data: &[u8]| {
    let Ok(request) = parse::<CompletionRequest>(data) else {
        return;
    };
    let _ = request.model_id();
    if let Ok(params) = request.params() {
        assert!((0.0..=2.0).contains(&params.sampling.temperature));
        assert!(params.sampling.top_p > 0.0 && params.sampling.top_p <= 1.0);
    }
    let _ = request.prompt_text();
});
