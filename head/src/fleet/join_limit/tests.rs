use super::*;
use std::net::{Ipv4Addr, Ipv6Addr};

const HOST: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));

fn attempts(limit: &JoinLimit, addr: IpAddr, now: Instant, n: u32) -> Vec<bool> {
    (0..n).map(|_| limit.attempt(addr, now).is_ok()).collect()
}

#[test]
fn an_address_may_try_a_burst_then_is_refused_with_when_to_retry() {
    let limit = JoinLimit::default();
    let now = Instant::now();
    assert!(attempts(&limit, HOST, now, BURST).iter().all(|ok| *ok));
    let refused = limit.attempt(HOST, now);
    assert_eq!(
        refused,
        Err(JoinLimited::TooMany {
            addr: HOST,
            retry_after_secs: REFILL.as_secs()
        })
    );
    let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("192.0.2.7"), "{message}");
    assert!(message.contains("try again in 6 s"), "{message}");
}

#[test]
fn attempts_come_back_one_per_refill_interval() {
    let limit = JoinLimit::default();
    let start = Instant::now();
    attempts(&limit, HOST, start, BURST);
    let later = start + REFILL;
    assert!(limit.attempt(HOST, later).is_ok());
    assert!(limit.attempt(HOST, later).is_err());
    let much_later = start + REFILL * (BURST + 1);
    assert!(attempts(&limit, HOST, much_later, BURST)
        .iter()
        .all(|ok| *ok));
}

#[test]
fn refused_attempts_do_not_push_the_retry_time_further() {
    let limit = JoinLimit::default();
    let start = Instant::now();
    attempts(&limit, HOST, start, BURST + 20);
    assert!(limit.attempt(HOST, start + REFILL).is_ok());
}

#[test]
fn other_addresses_keep_their_own_attempts() {
    let limit = JoinLimit::default();
    let now = Instant::now();
    attempts(&limit, HOST, now, BURST + 1);
    let other = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 8));
    assert!(limit.attempt(other, now).is_ok());
}

#[test]
fn ipv6_hosts_in_one_slash_64_share_their_attempts() {
    let limit = JoinLimit::default();
    let now = Instant::now();
    let a = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0, 0, 0, 1));
    let b = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0xdead, 0xbeef, 7, 9));
    let elsewhere = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 3, 0, 0, 0, 1));
    attempts(&limit, a, now, BURST);
    assert!(limit.attempt(b, now).is_err());
    assert!(limit.attempt(elsewhere, now).is_ok());
}

#[test]
fn ipv4_mapped_ipv6_counts_as_the_ipv4_address() {
    let limit = JoinLimit::default();
    let now = Instant::now();
    attempts(&limit, HOST, now, BURST);
    let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 7).to_ipv6_mapped());
    assert!(limit.attempt(mapped, now).is_err());
}

#[test]
fn a_full_table_refuses_new_addresses_until_old_ones_expire() {
    let limit = JoinLimit::default();
    let now = Instant::now();
    for i in 0..MAX_TRACKED {
        let addr = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i as u32));
        assert!(limit.attempt(addr, now).is_ok());
    }
    assert_eq!(limit.attempt(HOST, now), Err(JoinLimited::Busy));
    // One attempt is regained after REFILL, so by then every entry has expired.
    assert!(limit.attempt(HOST, now + REFILL).is_ok());
}
