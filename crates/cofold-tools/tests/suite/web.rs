//! tools.md §9.12: web_fetch with an injected transport and resolver, the guard, redirects,
//! pinning, and the default transport against a loopback server.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use cofold_agents::hooks::RunInfo;
use cofold_agents::policy::{Behavior, DecideArgs, Rule, RuleSet, rules};
use cofold_agents::store::MemoryStore;
use cofold_agents::tool::KvScopes;
use cofold_tools::search::{DuckDuckGoOptions, duckduckgo};
use cofold_tools::web::{
    Fetch, FetchError, FetchRequest, FetchResponse, Lookup, ReqwestFetch, SystemLookup, WebOptions,
    html_to_text, web,
};
use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::json;

use super::tools_driver::Caps;

const PAGE: &str = "<!doctype html><html><head><title>Docs &amp; more</title><style>body{color:red}</style><script>var x = \"<p>no</p>\";</script></head><body><nav><a href=\"/\">Home</a></nav><h1>Hello</h1><p>First   paragraph  with <b>bold</b> &amp; an &#39;entity&#39;.</p><ul><li>one</li><li>two</li></ul><!-- a comment --><p>Last.</p></body></html>";
const PAGE_TEXT: &str = "Docs & more\n\nHome\nHello\n\nFirst paragraph with bold & an 'entity'.\n\n- one\n- two\n\nLast.";

#[derive(Clone)]
enum Answer {
    Page {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    },
    Fail(&'static str),
    Never,
}

fn page(status: u16, mime: Option<&str>, body: &str) -> Answer {
    Answer::Page {
        status,
        headers: mime
            .map(|m| vec![("content-type", m.to_owned())])
            .unwrap_or_default(),
        body: body.as_bytes().to_vec(),
    }
}

fn redirect(status: u16, location: &str) -> Answer {
    Answer::Page {
        status,
        headers: vec![
            ("location", location.to_owned()),
            ("content-type", "text/html".into()),
        ],
        body: b"moved".to_vec(),
    }
}

/// Routes by URL prefix (the longest wins), records every request, and fails an unknown URL
/// with `ENOTFOUND`.
#[derive(Default)]
pub struct FakeWeb {
    routes: Mutex<Vec<(String, Answer)>>,
    pub requests: Mutex<Vec<FetchRequest>>,
}

impl FakeWeb {
    fn route(&self, prefix: &str, answer: Answer) {
        self.routes
            .lock()
            .expect("lock")
            .push((prefix.to_owned(), answer));
    }

    fn urls(&self) -> Vec<String> {
        self.requests
            .lock()
            .expect("lock")
            .iter()
            .map(|r| r.url.to_string())
            .collect()
    }
}

impl Fetch for FakeWeb {
    fn fetch(&self, req: FetchRequest) -> BoxFuture<'_, Result<FetchResponse, FetchError>> {
        let url = req.url.to_string();
        self.requests.lock().expect("lock").push(req);
        let answer = self
            .routes
            .lock()
            .expect("lock")
            .iter()
            .filter(|(prefix, _)| url.starts_with(prefix.as_str()))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, answer)| answer.clone());
        Box::pin(async move {
            match answer {
                None => Err(FetchError::with_code("ENOTFOUND", "no route")),
                Some(Answer::Fail(code)) => Err(FetchError::with_code(code, "failed")),
                Some(Answer::Never) => futures::future::pending().await,
                Some(Answer::Page {
                    status,
                    headers,
                    body,
                }) => {
                    let mut map = http::HeaderMap::new();
                    for (name, value) in headers {
                        map.insert(name, value.parse().expect("header value"));
                    }
                    // Several chunks, so the body reader's loop is exercised.
                    let chunks: Vec<Result<Bytes, FetchError>> = body
                        .chunks(700)
                        .map(|c| Ok(Bytes::copy_from_slice(c)))
                        .collect();
                    Ok(FetchResponse {
                        status,
                        headers: map,
                        body: futures::stream::iter(chunks).boxed(),
                    })
                }
            }
        })
    }
}

/// Answers `93.184.215.14` for every name unless told otherwise; counts calls.
#[derive(Default)]
pub struct FakeLookup {
    answers: Mutex<HashMap<String, Vec<Vec<IpAddr>>>>,
    pub calls: AtomicUsize,
}

impl FakeLookup {
    fn answer(&self, host: &str, answers: &[&[&str]]) {
        let parsed = answers
            .iter()
            .map(|list| list.iter().map(|a| a.parse().expect("address")).collect())
            .collect();
        self.answers
            .lock()
            .expect("lock")
            .insert(host.to_owned(), parsed);
    }
}

impl Lookup for FakeLookup {
    fn lookup(&self, host: &str) -> BoxFuture<'_, std::io::Result<Vec<IpAddr>>> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        let answer = match self.answers.lock().expect("lock").get(host) {
            // Successive calls get successive answers (the last one repeats).
            Some(list) => list[call.min(list.len() - 1)].clone(),
            None => vec!["93.184.215.14".parse().expect("address")],
        };
        Box::pin(async move {
            if answer.is_empty() {
                Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no such host",
                ))
            } else {
                Ok(answer)
            }
        })
    }
}

struct Fixture {
    web: Arc<FakeWeb>,
    lookup: Arc<FakeLookup>,
    caps: Caps,
}

async fn fixture_with(timeout_ms: u64) -> Fixture {
    let web_fake = Arc::new(FakeWeb::default());
    let lookup = Arc::new(FakeLookup::default());
    let capability = web(WebOptions {
        fetch: Some(web_fake.clone()),
        lookup: Some(lookup.clone()),
        timeout_ms,
        ..WebOptions::default()
    });
    let caps = Caps::of(&capability, None).await;
    Fixture {
        web: web_fake,
        lookup,
        caps,
    }
}

async fn fixture() -> Fixture {
    fixture_with(20_000).await
}

impl Fixture {
    async fn fetch(&self, url: &str) -> Result<String, String> {
        self.caps.call("web_fetch", json!({"url": url})).await
    }
}

#[test]
fn html_is_reduced_to_text() {
    assert_eq!(html_to_text(PAGE), PAGE_TEXT);
    assert_eq!(
        html_to_text("<pre>a\n  b</pre><p>x&#x1F600;&foo;&NBSP;y</p>"),
        "a\nb\n\nx😀&foo; y"
    );
}

#[tokio::test]
async fn tools_instructions_and_description() {
    let f = fixture().await;
    assert_eq!(f.caps.names(), ["web_fetch"]);
    assert!(!f.caps.text().contains("web_search"));
    let description = f.caps.tool("web_fetch").description().to_owned();
    assert!(
        description
            .to_lowercase()
            .contains("internal addresses are refused"),
        "{description}"
    );
    assert!(description.contains("Internal addresses are refused"));
    assert!(
        description.contains("262144 bytes") && description.contains("20 s"),
        "{description}"
    );
    let effects = f.caps.tool("web_fetch").effects();
    assert!(effects.network && !effects.writes && !effects.reads && !effects.destructive);

    let with_search = web(WebOptions {
        search: vec![duckduckgo(DuckDuckGoOptions::default())],
        ..WebOptions::default()
    });
    let caps = Caps::of(&with_search, None).await;
    assert_eq!(caps.names(), ["web_fetch", "web_search"]);
    assert!(caps.text().contains("web_search"));
    assert!(
        caps.tool("web_search")
            .description()
            .contains("(duckduckgo)")
    );
    assert!(
        caps.text().starts_with("web_search"),
        "the search line comes first"
    );
}

#[tokio::test]
async fn subjects_and_a_rule_on_one_host() {
    let f = fixture().await;
    assert_eq!(
        f.caps
            .subject("web_fetch", json!({"url": "https://a.example/x"})),
        Some("https://a.example/x".to_owned())
    );
    let policy = rules(RuleSet {
        deny: vec![Rule::matching("web_fetch", "https://a.example/*")],
        ..RuleSet::default()
    });
    let run = RunInfo {
        run_id: "run".into(),
        session_id: "session".into(),
        agent_id: "agent".into(),
        step: 1,
        kv: KvScopes::new(Arc::new(MemoryStore::new()), "agent", "ns", None),
    };
    let tool = f.caps.tool("web_fetch");
    let denied = json!({"url": "https://a.example/x"});
    let allowed = json!({"url": "https://other.example/x"});
    let denied = DecideArgs {
        tool,
        input: &denied,
        run: &run,
    };
    assert_eq!(policy.decide(&denied).await.behavior, Behavior::Deny);
    let allowed = DecideArgs {
        tool,
        input: &allowed,
        run: &run,
    };
    assert_ne!(policy.decide(&allowed).await.behavior, Behavior::Deny);

    let search = web(WebOptions {
        search: vec![duckduckgo(DuckDuckGoOptions::default())],
        ..WebOptions::default()
    });
    let caps = Caps::of(&search, None).await;
    assert_eq!(
        caps.subject("web_search", json!({"query": "q"})),
        Some("q".to_owned())
    );
}

#[tokio::test]
async fn pages_json_and_statuses() {
    let f = fixture().await;
    f.web.route(
        "https://docs.example/",
        page(200, Some("text/html; charset=utf-8"), PAGE),
    );
    f.web.route(
        "https://api.example/data",
        page(200, Some("application/json"), "{\"a\":1}"),
    );
    f.web.route(
        "https://gone.example/",
        page(404, Some("text/plain"), "not here"),
    );
    assert_eq!(
        f.fetch("https://docs.example").await.expect("page"),
        format!("https://docs.example/ (200, text/html)\n\n{PAGE_TEXT}")
    );
    assert_eq!(
        f.fetch("https://api.example/data").await.expect("json"),
        "https://api.example/data (200, application/json)\n\n{\"a\":1}"
    );
    assert_eq!(
        f.fetch("https://gone.example/")
            .await
            .expect("a 404 is a result"),
        "https://gone.example/ (404, text/plain)\n\nnot here"
    );
    let request = &f.web.requests.lock().expect("lock")[0];
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        header("accept").as_deref(),
        Some("text/html, text/plain;q=0.9, application/json;q=0.8, */*;q=0.5")
    );
    assert_eq!(
        header("user-agent").as_deref(),
        Some("Mozilla/5.0 (compatible; cofold/0.1)")
    );
    assert_eq!(request.method, http::Method::GET);
}

#[tokio::test]
async fn the_body_is_cut_at_max_bytes() {
    let f = fixture().await;
    f.web.route(
        "https://big.example/",
        page(200, Some("text/plain"), &"x".repeat(5000)),
    );
    f.web.route(
        "https://exact.example/",
        page(200, Some("text/plain"), &"y".repeat(1024)),
    );
    let big = f
        .caps
        .ok(
            "web_fetch",
            json!({"url": "https://big.example/", "maxBytes": 1024}),
        )
        .await;
    assert_eq!(
        big,
        format!(
            "https://big.example/ (200, text/plain)\n\n{}\n[cut at 1024 bytes]",
            "x".repeat(1024)
        )
    );
    let exact = f
        .caps
        .ok(
            "web_fetch",
            json!({"url": "https://exact.example/", "maxBytes": 1024}),
        )
        .await;
    assert_eq!(
        exact,
        format!(
            "https://exact.example/ (200, text/plain)\n\n{}",
            "y".repeat(1024)
        )
    );
}

#[tokio::test]
async fn only_text_types_are_kept() {
    let f = fixture().await;
    f.web.route(
        "https://img.example/",
        page(200, Some("image/png"), "\u{0}PNG"),
    );
    f.web.route(
        "https://xhtml.example/",
        page(200, Some("application/xhtml+xml"), "<p/>"),
    );
    f.web.route(
        "https://svg.example/",
        page(200, Some("image/svg+xml"), "<svg/>"),
    );
    f.web.route(
        "https://yaml.example/",
        page(200, Some("application/x-yaml"), "a: 1"),
    );
    f.web
        .route("https://bare.example/", page(200, None, "plain"));
    assert_eq!(
        f.fetch("https://img.example/").await.expect_err("refused"),
        "https://img.example/ is image/png, not text"
    );
    assert_eq!(
        f.fetch("https://xhtml.example/")
            .await
            .expect_err("refused"),
        "https://xhtml.example/ is application/xhtml+xml, not text"
    );
    assert_eq!(
        f.fetch("https://svg.example/").await.expect("svg"),
        "https://svg.example/ (200, image/svg+xml)\n\n<svg/>"
    );
    assert_eq!(
        f.fetch("https://yaml.example/").await.expect("yaml"),
        "https://yaml.example/ (200, application/x-yaml)\n\na: 1"
    );
    assert_eq!(
        f.fetch("https://bare.example/").await.expect("no type"),
        "https://bare.example/ (200)\n\nplain"
    );
}

#[tokio::test]
async fn bad_urls_are_one_sentence() {
    let f = fixture().await;
    let ftp = f.fetch("ftp://x").await.expect_err("refused");
    assert_eq!(ftp, "ftp://x: only http and https are fetched");
    assert_eq!(
        f.fetch("not a url").await.expect_err("refused"),
        "\"not a url\" is not a URL"
    );
    assert!(f.web.urls().is_empty());
}

#[tokio::test]
async fn transport_failures_and_the_deadline() {
    let f = fixture_with(50).await;
    f.web
        .route("https://down.example/", Answer::Fail("ENOTFOUND"));
    f.web.route("https://slow.example/", Answer::Never);
    assert_eq!(
        f.fetch("https://down.example/").await.expect_err("fails"),
        "cannot fetch https://down.example/: ENOTFOUND"
    );
    assert_eq!(
        f.fetch("https://slow.example/")
            .await
            .expect_err("times out"),
        "cannot fetch https://slow.example/: timed out after 0.05 s"
    );
}

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
        "http://127.0.0.1/ is an internal address (127.0.0.1); web_fetch does not reach loopback, private or link-local hosts"
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
        "http://intranet.example/ is an internal address (10.0.0.5); web_fetch does not reach loopback, private or link-local hosts"
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
        "http://100.64.0.1/",
        "http://[64:ff9b::1]/",
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
    let status = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--ignored",
            "--exact",
            "suite::web::pinned_request_with_a_dead_proxy",
            "--test-threads",
            "1",
        ])
        .env("HTTP_PROXY", &proxy)
        .env("http_proxy", &proxy)
        .env("ALL_PROXY", &proxy)
        .status()
        .expect("the test binary runs");
    assert!(
        status.success(),
        "the pinned request failed with a proxy in the environment"
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
