use super::*;
use futures::FutureExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn loopback() -> (TcpListener, std::net::SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding loopback");
    let addr = listener.local_addr().expect("a bound address");
    (listener, addr)
}

#[tokio::test]
async fn at_the_limit_a_new_connection_waits_until_one_closes() {
    let (listener, addr) = loopback().await;
    let mut limited = ConnectionLimit::new(listener, NonZeroUsize::MIN);
    let _first_client = TcpStream::connect(addr).await.expect("connecting");
    let (first, _) = limited.accept().await;
    let _second_client = TcpStream::connect(addr).await.expect("connecting");
    let mut second = Box::pin(limited.accept());
    // The second client is in the listen queue, but no place is free.
    assert!((&mut second).now_or_never().is_none());
    drop(first);
    let (_second, _) = second.await;
}

/// Sends one raw request and returns the answer's status line.
async fn status_line(addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connecting");
    // The server may answer and close before it has read everything.
    let _ = stream.write_all(request).await;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer);
    text.lines().next().unwrap_or_default().to_owned()
}

async fn serve_ok() -> std::net::SocketAddr {
    let (listener, addr) = loopback().await;
    let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
    let limited = ConnectionLimit::new(listener, DEFAULT_MAX_CONNECTIONS);
    tokio::spawn(async move { axum::serve(limited, app).await });
    addr
}

fn request_with_headers(count: usize, value_len: usize) -> Vec<u8> {
    let mut request = String::from("GET / HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n");
    let value = "v".repeat(value_len);
    for i in 0..count {
        request.push_str(&format!("x-h{i}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.into_bytes()
}

#[tokio::test]
async fn requests_within_the_header_limits_are_served() {
    let addr = serve_ok().await;
    // 2 + 97 = 99 headers of about 4 KiB: under 100 headers and 408 KiB.
    let line = status_line(addr, &request_with_headers(97, 4000)).await;
    assert_eq!(line, "HTTP/1.1 200 OK");
}

#[tokio::test]
async fn more_than_100_headers_are_refused_with_431() {
    let addr = serve_ok().await;
    let line = status_line(addr, &request_with_headers(100, 1)).await;
    assert_eq!(line, "HTTP/1.1 431 Request Header Fields Too Large");
}

/// hyper checks its 408 KiB read buffer limit between reads, so one read
/// may carry a header block somewhat past it; twice the limit never passes.
#[tokio::test]
async fn a_header_block_over_twice_408_kib_is_refused_with_431() {
    let addr = serve_ok().await;
    let line = status_line(addr, &request_with_headers(2, 420 * 1024)).await;
    assert_eq!(line, "HTTP/1.1 431 Request Header Fields Too Large");
}
