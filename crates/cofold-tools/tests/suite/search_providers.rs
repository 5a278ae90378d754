//! Tools cases 9.13 (docs/acceptance.md), the brave, tavily and duckduckgo providers against loopback servers that
//! answer like the real services: requests, parsing, errors, and keys that never show.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use cofold_tools::search::{
    BraveOptions, DuckDuckGoOptions, SearchArgs, TavilyOptions, brave, duckduckgo,
    parse_duckduckgo_results, tavily,
};
use cofold_tools::web::{Fetch, FetchError, FetchRequest, FetchResponse, ReqwestFetch};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::search::{result, search_tools};

/// Scripted answers by path: status, content type, body.
type Answers = Arc<Mutex<HashMap<String, (u16, &'static str, String)>>>;

/// What the loopback server saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path_and_query: String,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

/// A loopback server answering every path with a scripted (status, type, body), recording the
/// requests, and a transport that sends the providers' fixed https URLs to it.
struct Service {
    seen: Arc<Mutex<Vec<Seen>>>,
    answers: Answers,
    transport: Arc<ToLoopback>,
}

struct ToLoopback {
    base: url::Url,
    inner: ReqwestFetch,
    asked: Mutex<Vec<String>>,
}

impl Fetch for ToLoopback {
    fn fetch(&self, mut req: FetchRequest) -> BoxFuture<'_, Result<FetchResponse, FetchError>> {
        self.asked.lock().expect("lock").push(req.url.to_string());
        let mut url = self.base.clone();
        url.set_path(req.url.path());
        url.set_query(req.url.query());
        req.url = url;
        self.inner.fetch(req)
    }
}

impl Service {
    async fn start() -> Service {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let answers: Answers = Arc::default();
        let (seen2, answers2) = (seen.clone(), answers.clone());
        let app = axum::Router::new().fallback(move |request: http::Request<Body>| {
            let (seen, answers) = (seen2.clone(), answers2.clone());
            async move {
                let (parts, body) = request.into_parts();
                let body = axum::body::to_bytes(body, 1 << 20)
                    .await
                    .expect("body")
                    .to_vec();
                let path = parts.uri.path().to_owned();
                seen.lock().expect("lock").push(Seen {
                    method: parts.method.to_string(),
                    path_and_query: parts
                        .uri
                        .path_and_query()
                        .map(|p| p.to_string())
                        .unwrap_or_default(),
                    headers: parts.headers,
                    body,
                });
                let (status, mime, text) = answers
                    .lock()
                    .expect("lock")
                    .get(&path)
                    .cloned()
                    .unwrap_or((404, "text/plain", "no such path".into()));
                http::Response::builder()
                    .status(status)
                    .header("content-type", mime)
                    .body(Body::from(text))
                    .expect("response")
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
        let transport = Arc::new(ToLoopback {
            base: format!("http://{address}/").parse().expect("url"),
            inner: ReqwestFetch::new(),
            asked: Mutex::default(),
        });
        Service {
            seen,
            answers,
            transport,
        }
    }

    fn answer(&self, path: &str, status: u16, mime: &'static str, body: &str) {
        self.answers
            .lock()
            .expect("lock")
            .insert(path.to_owned(), (status, mime, body.to_owned()));
    }

    fn fetch(&self) -> Option<Arc<dyn Fetch>> {
        Some(self.transport.clone())
    }

    fn last(&self) -> Seen {
        self.seen
            .lock()
            .expect("lock")
            .last()
            .cloned()
            .expect("a request")
    }

    fn asked(&self) -> Vec<String> {
        self.transport.asked.lock().expect("lock").clone()
    }
}

fn args(query: &str, count: usize) -> SearchArgs {
    SearchArgs {
        query: query.into(),
        count,
        cancel: CancellationToken::new(),
    }
}

#[tokio::test]
async fn brave_request_and_parsing() {
    let service = Service::start().await;
    service.answer(
        "/res/v1/web/search",
        200,
        "application/json",
        r#"{"web":{"results":[{"title":"T","url":"https://t.example/","description":"D"},{"title":"No url"}]}}"#,
    );
    let provider = brave(BraveOptions {
        api_key: "k".into(),
        fetch: service.fetch(),
    });
    assert_eq!(provider.id(), "brave");
    let results = provider.search(args("q q", 3)).await.expect("results");
    assert_eq!(results, [result("T", "https://t.example/", "D")]);
    assert_eq!(
        service.asked(),
        ["https://api.search.brave.com/res/v1/web/search?q=q+q&count=3"]
    );
    let seen = service.last();
    assert_eq!(seen.method, "GET");
    assert_eq!(seen.path_and_query, "/res/v1/web/search?q=q+q&count=3");
    assert_eq!(seen.headers["x-subscription-token"], "k");
    assert_eq!(seen.headers["accept"], "application/json");

    provider.search(args("many", 50)).await.expect("results");
    assert!(
        service.asked()[1].ends_with("count=20"),
        "{:?}",
        service.asked()
    );

    service.answer("/res/v1/web/search", 200, "application/json", "{}");
    assert_eq!(provider.search(args("q", 3)).await.expect("no web key"), []);
    service.answer("/res/v1/web/search", 200, "text/html", "<html>");
    assert_eq!(
        provider
            .search(args("q", 3))
            .await
            .expect_err("bad json")
            .to_string(),
        "brave: invalid JSON in the answer"
    );
}

#[tokio::test]
async fn tavily_request_and_parsing() {
    let service = Service::start().await;
    service.answer(
        "/search",
        200,
        "application/json",
        r#"{"answer":"Because.","results":[{"title":"R","url":"https://r.example/","content":"C"}]}"#,
    );
    let provider = tavily(TavilyOptions {
        api_key: "k".into(),
        fetch: service.fetch(),
    });
    let results = provider.search(args("why", 5)).await.expect("results");
    assert_eq!(
        results,
        [
            result("Answer: why", "https://tavily.com", "Because."),
            result("R", "https://r.example/", "C")
        ]
    );
    assert_eq!(service.asked(), ["https://api.tavily.com/search"]);
    let seen = service.last();
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.headers["authorization"], "Bearer k");
    assert_eq!(seen.headers["content-type"], "application/json");
    let body: Value = serde_json::from_slice(&seen.body).expect("json body");
    assert_eq!(
        body,
        json!({"query": "why", "max_results": 5, "search_depth": "basic", "include_answer": true, "include_raw_content": false})
    );
    provider.search(args("why", 15)).await.expect("results");
    let body: Value = serde_json::from_slice(&service.last().body).expect("json body");
    assert_eq!(body["max_results"], 10);
}

const DDG_PAGE: &str = r#"<html><body>
<div class="result"><h2><a class="result__a" rel="nofollow" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fone.example%2Fpage&amp;rut=abc">One <b>bold</b></a></h2>
<a class="result__snippet" href="//duckduckgo.com/l/?uddg=x">Snippet &amp; more</a></div>
<div class="result"><h2><a class="result__a" href="https://two.example/">Two</a></h2>
<a class="result__snippet" href="https://two.example/">S2</a></div>
<div class="result"><a class="other" href="https://three.example/">Not a result</a></div>
</body></html>"#;

#[test]
fn duckduckgo_results_are_read_from_the_page() {
    assert_eq!(
        parse_duckduckgo_results(DDG_PAGE),
        [
            result("One bold", "https://one.example/page", "Snippet & more"),
            result("Two", "https://two.example/", "S2"),
        ]
    );
    // A redirect link that does not decode to UTF-8 is skipped; `//` links get https.
    let odd = r#"<a class="result__a" href="/l/?uddg=%FF%FE">Bad</a><a class="result__a" href="//three.example/">Three &amp;lt; x</a>"#;
    assert_eq!(
        parse_duckduckgo_results(odd),
        [result("Three &lt; x", "https://three.example/", "")]
    );
}

#[tokio::test]
async fn duckduckgo_request_count_and_errors() {
    let service = Service::start().await;
    service.answer("/html/", 200, "text/html", DDG_PAGE);
    let provider = duckduckgo(DuckDuckGoOptions {
        fetch: service.fetch(),
    });
    let results = provider
        .search(args("rust lang", 1))
        .await
        .expect("results");
    assert_eq!(results.len(), 1);
    assert_eq!(
        service.asked(),
        ["https://html.duckduckgo.com/html/?q=rust+lang"]
    );
    let seen = service.last();
    assert_eq!(seen.headers["accept"], "text/html");
    assert_eq!(
        seen.headers["user-agent"],
        "Mozilla/5.0 (compatible; cofold/0.1)"
    );

    service.answer("/html/", 403, "text/html", "<h1>Forbidden</h1>\nmore");
    assert_eq!(
        provider
            .search(args("q", 5))
            .await
            .expect_err("403")
            .to_string(),
        "duckduckgo: HTTP 403 <h1>Forbidden</h1>"
    );
    service.answer("/html/", 500, "text/html", "");
    assert_eq!(
        provider
            .search(args("q", 5))
            .await
            .expect_err("500")
            .to_string(),
        "duckduckgo: HTTP 500"
    );
    let long = "x".repeat(300);
    service.answer("/html/", 502, "text/plain", &long);
    assert_eq!(
        provider
            .search(args("q", 5))
            .await
            .expect_err("502")
            .to_string(),
        format!("duckduckgo: HTTP 502 {}", "x".repeat(200))
    );
}

#[tokio::test]
async fn a_transport_failure_names_the_provider() {
    // A port that was just free: the connection is refused.
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let base: url::Url = format!("http://{}/", free.local_addr().expect("address"))
        .parse()
        .expect("url");
    drop(free);
    let transport = Arc::new(ToLoopback {
        base,
        inner: ReqwestFetch::new(),
        asked: Mutex::default(),
    });
    let provider = brave(BraveOptions {
        api_key: "secret-key".into(),
        fetch: Some(transport),
    });
    let error = provider
        .search(args("q", 3))
        .await
        .expect_err("refused")
        .to_string();
    assert_eq!(error, "brave: ECONNREFUSED");
}

#[tokio::test]
async fn keys_never_show() {
    let key = "sk-very-secret-123";
    let service = Service::start().await;
    service.answer(
        "/res/v1/web/search",
        401,
        "application/json",
        r#"{"error":"bad token"}"#,
    );
    service.answer("/search", 429, "text/plain", "slow down");
    let providers = vec![
        brave(BraveOptions {
            api_key: key.into(),
            fetch: service.fetch(),
        }),
        tavily(TavilyOptions {
            api_key: key.into(),
            fetch: service.fetch(),
        }),
    ];
    let caps = search_tools(providers.clone(), 20_000).await;
    let refusal = caps.refused("web_search", json!({"query": "q"})).await;
    assert_eq!(
        refusal,
        "web_search failed: brave: brave: HTTP 401 {\"error\":\"bad token\"}; tavily: tavily: HTTP 429 slow down"
    );
    assert!(!refusal.contains(key));
    assert!(!caps.tool("web_search").description().contains(key));
    assert!(
        !format!(
            "{:?}",
            BraveOptions {
                api_key: key.into(),
                fetch: None
            }
        )
        .contains(key)
    );

    service.answer(
        "/res/v1/web/search",
        200,
        "application/json",
        r#"{"web":{"results":[{"title":"T","url":"https://t.example/"}]}}"#,
    );
    let text = caps.ok("web_search", json!({"query": "q"})).await;
    assert!(!text.contains(key));
    // The key went where the service needs it, and nowhere else in the request.
    let seen = service.seen.lock().expect("lock").clone();
    for request in seen {
        assert!(!request.path_and_query.contains(key));
    }
}
