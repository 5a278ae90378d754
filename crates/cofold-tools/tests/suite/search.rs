//! tools.md §9.13: web_search's fall-through, and the brave, tavily and duckduckgo providers
//! against loopback servers that answer like the real services.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use cofold_tools::search::{
    BraveOptions, DuckDuckGoOptions, SearchArgs, SearchError, SearchProvider, SearchResult,
    TavilyOptions, brave, duckduckgo, parse_duckduckgo_results, tavily,
};
use cofold_tools::web::{
    Fetch, FetchError, FetchRequest, FetchResponse, ReqwestFetch, WebOptions, web,
};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::tools_driver::{Caps, cancel, controller};

/// A provider with a scripted answer.
struct Scripted {
    id: &'static str,
    answer: Option<Result<Vec<SearchResult>, SearchError>>,
}

impl SearchProvider for Scripted {
    fn id(&self) -> &str {
        self.id
    }

    fn search(&self, _args: SearchArgs) -> BoxFuture<'_, Result<Vec<SearchResult>, SearchError>> {
        let answer = self.answer.clone();
        Box::pin(async move {
            match answer {
                Some(answer) => answer,
                None => futures::future::pending().await,
            }
        })
    }
}

fn result(title: &str, url: &str, snippet: &str) -> SearchResult {
    SearchResult {
        title: title.into(),
        url: url.into(),
        snippet: snippet.into(),
    }
}

fn failing(id: &'static str) -> Arc<dyn SearchProvider> {
    Arc::new(Scripted {
        id,
        answer: Some(Err(SearchError::new("HTTP 429 rate limited"))),
    })
}

fn answering(id: &'static str, results: Vec<SearchResult>) -> Arc<dyn SearchProvider> {
    Arc::new(Scripted {
        id,
        answer: Some(Ok(results)),
    })
}

async fn search_tools(providers: Vec<Arc<dyn SearchProvider>>, timeout_ms: u64) -> Caps {
    let capability = web(WebOptions {
        search: providers,
        timeout_ms,
        ..WebOptions::default()
    });
    Caps::of(&capability, None).await
}

#[tokio::test]
async fn the_first_provider_that_answers_wins() {
    let second = answering(
        "second",
        vec![
            result(
                "About cofold",
                "https://a.example/",
                "A  snippet\n with   space",
            ),
            result("Two", "https://b.example/", ""),
            result("Three", "https://c.example/", "three"),
        ],
    );
    let caps = search_tools(vec![failing("first"), second], 20_000).await;
    assert!(
        caps.tool("web_search")
            .description()
            .contains("(first, then second)")
    );
    let description = caps.tool("web_search").description();
    assert!(
        description.contains("titles, URLs and snippets")
            && description.contains('5')
            && description.contains("20")
    );
    assert_eq!(
        caps.ok("web_search", json!({"query": "cofold", "count": 2}))
            .await,
        "1. About cofold\n   https://a.example/\n   A snippet with space\n2. Two\n   https://b.example/"
    );
    let effects = caps.tool("web_search").effects();
    assert!(effects.network && !effects.writes && !effects.destructive);
}

#[tokio::test]
async fn failures_are_noted_and_empty_answers_end_the_search() {
    let caps = search_tools(vec![failing("first")], 20_000).await;
    assert_eq!(
        caps.refused("web_search", json!({"query": "cofold"})).await,
        "web_search failed: first: HTTP 429 rate limited"
    );
    let caps = search_tools(vec![answering("e", vec![]), failing("never-asked")], 20_000).await;
    assert_eq!(
        caps.ok("web_search", json!({"query": "nothing"})).await,
        "no results for \"nothing\" (e)"
    );
}

#[tokio::test]
async fn a_silent_provider_times_out_and_a_cancel_stops_the_loop() {
    let silent: Arc<dyn SearchProvider> = Arc::new(Scripted {
        id: "slow",
        answer: None,
    });
    let caps = search_tools(vec![silent.clone(), failing("next")], 50).await;
    assert_eq!(
        caps.refused("web_search", json!({"query": "q"})).await,
        "web_search failed: slow: timed out after 0.05 s; next: HTTP 429 rate limited"
    );
    let controller = controller();
    cancel(&controller);
    let caps = search_tools(vec![silent], 20_000).await;
    let refusal = caps
        .call_with("web_search", json!({"query": "q"}), controller.signal())
        .await;
    assert_eq!(
        refusal.expect_err("refused"),
        "web_search failed: the run was cancelled"
    );
}

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

/// Records the count it was asked for and answers with more results than that.
struct Counting {
    asked: Mutex<Vec<usize>>,
}

impl SearchProvider for Counting {
    fn id(&self) -> &str {
        "counting"
    }

    fn search(&self, args: SearchArgs) -> BoxFuture<'_, Result<Vec<SearchResult>, SearchError>> {
        self.asked.lock().expect("lock").push(args.count);
        let results = (1..=30)
            .map(|i| result(&format!("R{i}"), &format!("https://r{i}.example/"), ""))
            .collect();
        Box::pin(async move { Ok(results) })
    }
}

#[tokio::test]
async fn the_count_defaults_to_five_and_cuts_the_rows() {
    let provider = Arc::new(Counting {
        asked: Mutex::default(),
    });
    let caps = search_tools(vec![provider.clone()], 20_000).await;
    let five = caps.ok("web_search", json!({"query": "q"})).await;
    assert_eq!(five.lines().filter(|l| !l.starts_with(' ')).count(), 5);
    assert!(five.ends_with("5. R5\n   https://r5.example/"), "{five}");
    let twenty = caps
        .ok("web_search", json!({"query": "q", "count": 20}))
        .await;
    assert_eq!(twenty.lines().filter(|l| !l.starts_with(' ')).count(), 20);
    assert_eq!(*provider.asked.lock().expect("lock"), [5, 20]);
    assert!(
        caps.tool("web_search")
            .validate(&json!({"query": "q", "count": 21}))
            .is_err()
    );
    assert!(
        caps.tool("web_search")
            .validate(&json!({"query": ""}))
            .is_err()
    );
}
