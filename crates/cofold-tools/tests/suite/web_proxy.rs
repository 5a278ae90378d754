//! web_fetch through a proxy: a transport given a [`ClientSource`] sends through the proxy it
//! names, `NO_PROXY` hosts go direct to the addresses the guard checked, and a name the guard
//! refuses never reaches the proxy. Both servers are loopback listeners written here.
//!
//! The guard would refuse loopback, so the lookup answers a public address and the transport is
//! wrapped to connect to the loopback target instead: a request that skipped the proxy lands
//! there, never beyond loopback.

use std::net::IpAddr;
use std::sync::Arc;

use cofold_tools::web::{
    ClientSource, Fetch, FetchError, FetchRequest, FetchResponse, ReqwestFetch, SourceError,
    WebOptions, web,
};
use futures::future::BoxFuture;
use serde_json::json;

use super::tools_driver::Caps;
use super::web_fakes::FakeLookup;

/// A loopback HTTP server answering every request with `body` as text; the first line of each
/// request it received, in order.
async fn server(body: &'static str) -> (u16, testkit::Seen) {
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let r = testkit::Recorder::start(answer.into_bytes())
        .await
        .expect("bind");
    (r.addr.port(), r.seen)
}

/// The real transport, with every pin moved to loopback.
struct OntoLoopback(ReqwestFetch);

impl Fetch for OntoLoopback {
    fn fetch(&self, mut req: FetchRequest) -> BoxFuture<'_, Result<FetchResponse, FetchError>> {
        let loopback: IpAddr = "127.0.0.1".parse().expect("address");
        if req.connect_to.is_some() {
            req.connect_to = Some(vec![loopback]);
        }
        self.0.fetch(req)
    }
}

/// A source proxying plain-http requests through `proxy` unless `no_proxy` matches, the way the
/// engine's source reads `HTTP_PROXY` and `NO_PROXY`.
fn source(proxy: String, no_proxy: Option<&'static str>) -> ClientSource {
    ClientSource::new(move || {
        let p = reqwest::Proxy::http(proxy.as_str()).map_err(|e| SourceError(e.to_string()))?;
        let p = p.no_proxy(no_proxy.and_then(reqwest::NoProxy::from_string));
        Ok(reqwest::Client::builder().no_proxy().proxy(p))
    })
}

async fn tools(source: ClientSource, lookup: Arc<FakeLookup>) -> Caps {
    let capability = web(WebOptions {
        fetch: Some(Arc::new(OntoLoopback(ReqwestFetch::with_source(source)))),
        lookup: Some(lookup),
        ..WebOptions::default()
    });
    Caps::of(&capability, None).await
}

#[tokio::test]
async fn web_fetch_goes_through_the_proxy_its_settings_name() {
    let (proxy_port, proxied) = server("through the proxy").await;
    let (port, direct) = server("direct").await;
    let caps = tools(
        source(format!("http://127.0.0.1:{proxy_port}"), None),
        Arc::default(),
    )
    .await;
    let url = format!("http://site.example:{port}/page");
    let text = caps.ok("web_fetch", json!({ "url": url })).await;
    assert!(text.contains("through the proxy"), "{text}");
    assert_eq!(
        *proxied.lock().expect("lock"),
        [format!("GET {url} HTTP/1.1")]
    );
    assert!(direct.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn a_host_no_proxy_names_is_fetched_directly_and_pinned() {
    let (proxy_port, proxied) = server("through the proxy").await;
    let (port, direct) = server("direct").await;
    let caps = tools(
        source(
            format!("http://127.0.0.1:{proxy_port}"),
            Some("other.example,site.example"),
        ),
        Arc::default(),
    )
    .await;
    let text = caps
        .ok(
            "web_fetch",
            json!({ "url": format!("http://site.example:{port}/page") }),
        )
        .await;
    assert!(text.contains("direct"), "{text}");
    assert_eq!(*direct.lock().expect("lock"), ["GET /page HTTP/1.1"]);
    assert!(proxied.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn a_name_the_guard_refuses_never_reaches_the_proxy() {
    let (proxy_port, proxied) = server("through the proxy").await;
    let lookup = Arc::new(FakeLookup::default());
    lookup.answer("intranet.example", &[&["10.0.0.5"]]);
    let caps = tools(
        source(format!("http://127.0.0.1:{proxy_port}"), None),
        lookup,
    )
    .await;
    for url in ["http://intranet.example/", "http://127.0.0.1:9/"] {
        let refusal = caps.refused("web_fetch", json!({ "url": url })).await;
        assert!(refusal.contains("is an internal address"), "{refusal}");
    }
    assert!(proxied.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn an_unusable_source_is_the_fetch_s_one_sentence() {
    let caps = tools(
        ClientSource::new(|| {
            Err(SourceError(
                "the proxy in HTTP_PROXY is not usable".to_owned(),
            ))
        }),
        Arc::default(),
    )
    .await;
    let refusal = caps
        .refused("web_fetch", json!({ "url": "http://site.example/" }))
        .await;
    assert_eq!(
        refusal,
        "cannot fetch http://site.example/: the proxy in HTTP_PROXY is not usable"
    );
}
