use super::*;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn requests(q: &Quota) -> Remaining {
    q.requests.expect("a request limit")
}

fn tokens(q: &Quota) -> Remaining {
    q.tokens.expect("a token limit")
}

#[test]
fn a_key_without_limits_has_no_limiter() {
    assert!(Limiter::new(None, None).is_none());
    assert!(Limiter::new(Some(1), None).is_some());
    assert!(Limiter::new(None, Some(1)).is_some());
}

#[test]
fn a_full_minute_of_requests_passes_at_once_and_the_next_is_refused() {
    let limiter = Limiter::new(Some(60), None).expect("a limiter");
    let t0 = Instant::now();
    for left in (0..60).rev() {
        let quota = limiter.admit(t0).expect("within the burst");
        assert_eq!(requests(&quota).remaining, left);
        assert_eq!(quota.tokens, None, "no token limit, no token quota");
    }
    let refused = limiter.admit(t0).expect_err("the 61st is refused");
    assert_eq!(refused.kind, LimitKind::Requests);
    assert_eq!(refused.limit, 60);
    assert_eq!(
        refused.retry_after,
        secs(1),
        "60 a minute refill one a second"
    );
    assert_eq!(requests(&refused.quota).remaining, 0);
    assert_eq!(requests(&refused.quota).reset, secs(60));
}

#[test]
fn requests_refill_at_the_limit_per_minute_and_never_beyond_it() {
    let limiter = Limiter::new(Some(6), None).expect("a limiter");
    let t0 = Instant::now();
    for _ in 0..6 {
        limiter.admit(t0).expect("within the burst");
    }
    assert!(limiter.admit(t0 + secs(9)).is_err(), "one refills in 10 s");
    limiter.admit(t0 + secs(10)).expect("one has refilled");
    assert!(limiter.admit(t0 + secs(10)).is_err());
    let later = limiter.quota(t0 + secs(3600));
    assert_eq!(requests(&later).remaining, 6, "a bucket holds one minute");
    assert_eq!(requests(&later).reset, Duration::ZERO);
}

#[test]
fn the_reset_is_the_time_until_the_bucket_is_full() {
    let limiter = Limiter::new(Some(60), Some(600)).expect("a limiter");
    let t0 = Instant::now();
    let quota = limiter.admit(t0).expect("admitted");
    assert_eq!(requests(&quota).reset, secs(1));
    limiter.debit_tokens(300, t0);
    let quota = limiter.quota(t0);
    assert_eq!(tokens(&quota).remaining, 300);
    assert_eq!(
        tokens(&quota).reset,
        secs(30),
        "600 a minute is 10 a second"
    );
}

#[test]
fn a_request_passes_while_the_token_bucket_is_not_negative() {
    let limiter = Limiter::new(None, Some(60)).expect("a limiter");
    let t0 = Instant::now();
    limiter.admit(t0).expect("a full bucket");
    limiter.debit_tokens(60, t0);
    limiter
        .admit(t0)
        .expect("an empty bucket is not a negative one");
    limiter.debit_tokens(5, t0);
    let refused = limiter.admit(t0).expect_err("overdrawn");
    assert_eq!(refused.kind, LimitKind::Tokens);
    assert_eq!(refused.limit, 60);
    assert_eq!(refused.retry_after, secs(5), "5 tokens owed at 1 a second");
    assert_eq!(
        tokens(&refused.quota).remaining,
        0,
        "never reported below 0"
    );
    assert_eq!(tokens(&refused.quota).reset, secs(65));
    assert!(limiter.admit(t0 + secs(4)).is_err());
    limiter.admit(t0 + secs(5)).expect("back to zero");
}

#[test]
fn the_request_limit_is_told_first_when_both_refuse() {
    let limiter = Limiter::new(Some(1), Some(1)).expect("a limiter");
    let t0 = Instant::now();
    limiter.admit(t0).expect("admitted");
    limiter.debit_tokens(10, t0);
    let refused = limiter.admit(t0).expect_err("both are spent");
    assert_eq!(refused.kind, LimitKind::Requests);
}

#[test]
fn a_refused_request_takes_nothing() {
    let limiter = Limiter::new(Some(60), Some(60)).expect("a limiter");
    let t0 = Instant::now();
    limiter.debit_tokens(61, t0);
    for _ in 0..5 {
        assert!(limiter.admit(t0).is_err());
    }
    let quota = limiter.quota(t0);
    assert_eq!(requests(&quota).remaining, 60);
}

#[test]
fn an_earlier_instant_than_the_last_changes_nothing() {
    let limiter = Limiter::new(Some(60), None).expect("a limiter");
    let t0 = Instant::now();
    limiter.admit(t0 + secs(5)).expect("admitted");
    limiter.admit(t0).expect("admitted");
    let quota = limiter.quota(t0 + secs(5));
    assert_eq!(requests(&quota).remaining, 58, "no time was credited twice");
}

#[test]
fn retry_after_is_whole_seconds_rounded_up() {
    assert_eq!(whole_seconds_up(Duration::from_millis(1)), 1);
    assert_eq!(whole_seconds_up(secs(2)), 2);
    assert_eq!(whole_seconds_up(Duration::from_millis(2001)), 3);
    assert_eq!(whole_seconds_up(Duration::ZERO), 1);
}

#[test]
fn resets_are_written_as_openai_writes_them() {
    assert_eq!(format_reset(Duration::ZERO), "0s");
    assert_eq!(format_reset(Duration::from_millis(120)), "120ms");
    assert_eq!(format_reset(Duration::from_micros(1)), "1ms");
    assert_eq!(format_reset(secs(1)), "1s");
    assert_eq!(format_reset(Duration::from_millis(17_280)), "17.28s");
    assert_eq!(format_reset(secs(360)), "6m0s");
    assert_eq!(format_reset(Duration::from_millis(90_500)), "1m30.5s");
    assert_eq!(format_reset(secs(3600)), "1h0m0s");
}
