//! Tools cases 9.12 (docs/acceptance.md), where web_fetch may go: internal addresses refused before any request,
//! redirects followed by hand and guarded, pinned connections, and the default transport
//! against a loopback server.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cofold_tools::web::{Fetch, FetchRequest, Lookup, ReqwestFetch, SystemLookup, WebOptions, web};
use futures::StreamExt;
use serde_json::json;

use super::tools_driver::Caps;
use super::web_fakes::*;

#[tokio::test]
async fn internal_addresses_are_refused_before_any_request() {
    let f = fixture().await;
    for url in [
        "http://127.0.0.1/",
        "http://169.254.169.254/",
        "http://[::1]/",
        "http://[::ffff:192.168.1.1]/",
        "http://0.0.0.0:8080/",
        "http://2130706433/",
        "http://[fd00::1]/",
        "http://[fe80::1]/",
        "http://172.20.0.1/",
        "http://100.64.0.1/",
        "http://100.127.255.254/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[64:ff9b::8.8.8.8]/",
        "http://198.18.0.1/",
        "http://192.0.0.8/",
        "http://240.0.0.1/",
        "http://[2001:db8::1]/",
        "http://[2002:a00:1::1]/",
        "http://[::127.0.0.1]/",
    ] {
        f.web.route(url, page(200, Some("text/plain"), "secret"));
        let refusal = f.fetch(url).await.expect_err("refused");
        assert!(
            refusal.contains("is an internal address"),
            "{url}: {refusal}"
        );
    }
    assert_eq!(
        f.fetch("http://2130706433/").await.expect_err("refused"),
        "http://127.0.0.1/ is an internal address (127.0.0.1); web_fetch does not reach loopback, private, link-local or other special-purpose addresses"
    );
    assert!(
        f.fetch("http://[::ffff:192.168.1.1]/")
            .await
            .expect_err("refused")
            .contains("(::ffff:192.168.1.1)")
    );
    f.lookup.answer("intranet.example", &[&["10.0.0.5"]]);
    assert_eq!(
        f.fetch("http://intranet.example/")
            .await
            .expect_err("refused"),
        "http://intranet.example/ is an internal address (10.0.0.5); web_fetch does not reach loopback, private, link-local or other special-purpose addresses"
    );
    // One internal address among public ones is enough.
    f.lookup
        .answer("mixed.example", &[&["93.184.215.14", "192.168.0.9"]]);
    assert!(
        f.fetch("http://mixed.example/")
            .await
            .expect_err("refused")
            .contains("(192.168.0.9)")
    );
    assert!(
        f.web.urls().is_empty(),
        "the transport got {:?}",
        f.web.urls()
    );
}

#[tokio::test]
async fn neighbours_of_the_refused_ranges_are_fetched() {
    let f = fixture().await;
    for url in [
        "http://172.32.0.1/",
        "http://100.128.0.1/",
        "http://[64:ff9b:2::1]/",
    ] {
        f.web.route(url, page(200, Some("text/plain"), "secret"));
        let text = f.fetch(url).await.expect("fetched");
        assert!(text.contains("secret"), "{url}: {text}");
    }
    assert_eq!(f.web.urls().len(), 3);
}

#[tokio::test]
async fn a_failed_lookup_makes_no_request() {
    let f = fixture().await;
    f.lookup.answer("nowhere.example", &[&[]]);
    assert_eq!(
        f.fetch("http://nowhere.example/").await.expect_err("fails"),
        "cannot fetch http://nowhere.example/: ENOTFOUND"
    );
    assert!(f.web.urls().is_empty());
}

#[tokio::test]
async fn redirects_are_followed_by_hand_and_guarded() {
    let f = fixture().await;
    f.web.route(
        "https://metadata.example/",
        redirect(302, "http://169.254.169.254/"),
    );
    let refusal = f
        .fetch("https://metadata.example/")
        .await
        .expect_err("refused");
    assert!(
        refusal.starts_with("http://169.254.169.254/ is an internal address"),
        "{refusal}"
    );
    assert_eq!(f.web.urls(), ["https://metadata.example/"]);

    f.web.route("https://moved.example/", redirect(301, "/new"));
    f.web.route(
        "https://moved.example/new",
        page(200, Some("text/plain"), "arrived"),
    );
    assert_eq!(
        f.fetch("https://moved.example/").await.expect("followed"),
        "https://moved.example/new (200, text/plain)\n\narrived"
    );

    f.web.route(
        "https://choice.example/",
        page(300, Some("text/plain"), "pick one"),
    );
    assert_eq!(
        f.fetch("https://choice.example/").await.expect("final"),
        "https://choice.example/ (300, text/plain)\n\npick one"
    );

    f.web.route(
        "https://ftp-hop.example/",
        redirect(302, "ftp://files.example/x"),
    );
    assert_eq!(
        f.fetch("https://ftp-hop.example/")
            .await
            .expect_err("refused"),
        "ftp://files.example/x: only http and https are fetched"
    );
}

#[tokio::test]
async fn more_than_ten_redirects_are_refused() {
    let f = fixture().await;
    f.web.route(
        "https://loop.example/",
        redirect(302, "https://loop.example/"),
    );
    assert_eq!(
        f.fetch("https://loop.example/").await.expect_err("refused"),
        "https://loop.example/: more than 10 redirects"
    );
    assert_eq!(f.web.urls().len(), 11);
}

#[tokio::test]
async fn each_hop_connects_to_the_addresses_it_checked() {
    let f = fixture().await;
    f.lookup
        .answer("rebind.example", &[&["93.184.215.14"], &["127.0.0.1"]]);
    f.web.route(
        "https://rebind.example/",
        page(200, Some("text/plain"), "ok"),
    );
    f.fetch("https://rebind.example/").await.expect("fetched");
    assert_eq!(f.lookup.calls.load(Ordering::SeqCst), 1);
    let requests = f.web.requests.lock().expect("lock");
    let expected: Vec<IpAddr> = vec!["93.184.215.14".parse().expect("address")];
    assert_eq!(requests[0].connect_to.as_ref(), Some(&expected));
}

/// A loopback server answering `pinned` with the Host header it saw.
async fn loopback_server() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move |headers: http::HeaderMap| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                let host = headers
                    .get("host")
                    .and_then(|h| h.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                format!("pinned {host}")
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    (address, hits)
}

async fn pinned_request(port: u16) -> String {
    let transport = ReqwestFetch::new();
    let response = transport
        .fetch(FetchRequest {
            method: http::Method::GET,
            url: format!("http://pinned.invalid:{port}/")
                .parse()
                .expect("url"),
            headers: vec![],
            body: None,
            connect_to: Some(vec!["127.0.0.1".parse().expect("address")]),
        })
        .await
        .expect("the pinned address answers");
    assert_eq!(response.status, 200);
    let mut body = Vec::new();
    let mut stream = response.body;
    while let Some(chunk) = stream.next().await {
        body.extend_from_slice(&chunk.expect("chunk"));
    }
    String::from_utf8(body).expect("utf-8")
}

#[tokio::test]
async fn the_default_transport_connects_to_the_pinned_address() {
    let (address, hits) = loopback_server().await;
    let body = pinned_request(address.port()).await;
    // `.invalid` never resolves, so reaching the server proves no DNS was used; the Host header
    // is still the URL's.
    assert_eq!(body, format!("pinned pinned.invalid:{}", address.port()));
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

/// Runs only in a child process started by `proxies_in_the_environment_are_ignored`, with
/// `HTTP_PROXY` pointing at a dead proxy.
#[tokio::test]
#[ignore = "run by proxies_in_the_environment_are_ignored in a process of its own"]
async fn pinned_request_with_a_dead_proxy() {
    assert!(
        std::env::var("HTTP_PROXY").is_ok(),
        "the parent sets HTTP_PROXY"
    );
    let (address, _) = loopback_server().await;
    let body = pinned_request(address.port()).await;
    assert!(body.starts_with("pinned pinned.invalid:"));
}

#[test]
fn proxies_in_the_environment_are_ignored() {
    // A dead proxy: a port that was just free.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let proxy = format!("http://{}", dead.local_addr().expect("address"));
    drop(dead);
    let output = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--ignored",
            "--exact",
            "suite::web_guard::pinned_request_with_a_dead_proxy",
            "--test-threads",
            "1",
        ])
        .env("HTTP_PROXY", &proxy)
        .env("http_proxy", &proxy)
        .env("ALL_PROXY", &proxy)
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the pinned request failed with a proxy in the environment: {stdout}"
    );
    // A renamed child would match nothing and pass vacuously: it must have run.
    assert!(
        stdout.contains("1 passed"),
        "the child test did not run: {stdout}"
    );
}

#[tokio::test]
async fn the_real_guard_refuses_a_real_loopback_server() {
    let (address, hits) = loopback_server().await;
    let capability = web(WebOptions::default());
    let caps = Caps::of(&capability, None).await;
    for url in [
        format!("http://127.0.0.1:{}/", address.port()),
        format!("http://localhost:{}/", address.port()),
    ] {
        let refusal = caps.refused("web_fetch", json!({"url": url})).await;
        assert!(refusal.contains("is an internal address"), "{refusal}");
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the server must not be reached"
    );
    // The system resolver answers for localhost with loopback addresses.
    let found = SystemLookup
        .lookup("localhost")
        .await
        .expect("localhost resolves");
    assert!(found.iter().all(|a| a.is_loopback()), "{found:?}");
}

#[tokio::test]
async fn a_cancelled_run_ends_the_fetch() {
    let f = fixture().await;
    f.web.route("https://slow.example/", Answer::Never);
    let controller = super::tools_driver::controller();
    super::tools_driver::cancel(&controller);
    let refusal = f
        .caps
        .call_with(
            "web_fetch",
            json!({"url": "https://slow.example/"}),
            controller.signal(),
        )
        .await
        .expect_err("ended");
    assert_eq!(
        refusal,
        "cannot fetch https://slow.example/: timed out after 20 s"
    );
}
