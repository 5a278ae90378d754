//! Web search providers behind `web_search`: the `SearchProvider` trait and the shipped
//! `brave`, `tavily` and `duckduckgo` providers.

use std::fmt;
use std::sync::{Arc, LazyLock};

use futures::StreamExt;
use futures::future::BoxFuture;
use regex::Regex;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::fetch::USER_AGENT;
use super::transport::{Fetch, FetchRequest, ReqwestFetch};

/// Most bytes of a provider's answer that are read; a search answer is far smaller.
const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

/// One search hit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SearchResult {
    /// The page title.
    pub title: String,
    /// The page address.
    pub url: String,
    /// A short extract; may be empty.
    pub snippet: String,
}

/// What a provider is asked.
#[derive(Debug, Clone)]
pub struct SearchArgs {
    /// The query text.
    pub query: String,
    /// Results wanted.
    pub count: usize,
    /// The run's cancellation; a provider drops its request when it fires.
    pub cancel: CancellationToken,
}

/// A provider's failure. Its text starts with the provider id, e.g. `brave: HTTP 429`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SearchError {
    /// The whole sentence.
    pub message: String,
}

impl SearchError {
    /// An error with the given text.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// A web search service `web_search` can ask.
pub trait SearchProvider: Send + Sync {
    /// A short name shown to the model and in errors, e.g. `brave`.
    fn id(&self) -> &str;
    /// Runs one search.
    fn search(&self, args: SearchArgs) -> BoxFuture<'_, Result<Vec<SearchResult>, SearchError>>;
}

/// Brave Search API settings.
#[derive(Clone)]
pub struct BraveOptions {
    /// The subscription token.
    pub api_key: String,
    /// The transport; `None` is the default reqwest client.
    pub fetch: Option<Arc<dyn Fetch>>,
}

/// Tavily settings.
#[derive(Clone)]
pub struct TavilyOptions {
    /// The API key.
    pub api_key: String,
    /// The transport; `None` is the default reqwest client.
    pub fetch: Option<Arc<dyn Fetch>>,
}

/// DuckDuckGo settings (no key).
#[derive(Clone, Default)]
pub struct DuckDuckGoOptions {
    /// The transport; `None` is the default reqwest client.
    pub fetch: Option<Arc<dyn Fetch>>,
}

// Keys never show up in debug output.
impl fmt::Debug for BraveOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BraveOptions").finish_non_exhaustive()
    }
}

impl fmt::Debug for TavilyOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TavilyOptions").finish_non_exhaustive()
    }
}

impl fmt::Debug for DuckDuckGoOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DuckDuckGoOptions").finish_non_exhaustive()
    }
}

/// The Brave Search API (`https://api.search.brave.com`), at most 20 results a request.
pub fn brave(options: BraveOptions) -> Arc<dyn SearchProvider> {
    Arc::new(Brave {
        api_key: options.api_key,
        fetch: transport(options.fetch),
    })
}

/// The Tavily search API (`https://api.tavily.com`); its answer comes first, at most 10 results.
pub fn tavily(options: TavilyOptions) -> Arc<dyn SearchProvider> {
    Arc::new(Tavily {
        api_key: options.api_key,
        fetch: transport(options.fetch),
    })
}

/// DuckDuckGo's HTML results page, scraped; needs no key and breaks when the page changes.
pub fn duckduckgo(options: DuckDuckGoOptions) -> Arc<dyn SearchProvider> {
    Arc::new(DuckDuckGo {
        fetch: transport(options.fetch),
    })
}

fn transport(fetch: Option<Arc<dyn Fetch>>) -> Arc<dyn Fetch> {
    fetch.unwrap_or_else(|| Arc::new(ReqwestFetch::new()))
}

struct Brave {
    api_key: String,
    fetch: Arc<dyn Fetch>,
}

struct Tavily {
    api_key: String,
    fetch: Arc<dyn Fetch>,
}

struct DuckDuckGo {
    fetch: Arc<dyn Fetch>,
}

impl SearchProvider for Brave {
    fn id(&self) -> &str {
        "brave"
    }

    fn search(&self, args: SearchArgs) -> BoxFuture<'_, Result<Vec<SearchResult>, SearchError>> {
        Box::pin(async move {
            let mut url = fixed_url("https://api.search.brave.com/res/v1/web/search");
            url.query_pairs_mut()
                .append_pair("q", &args.query)
                .append_pair("count", &args.count.min(20).to_string());
            let request = FetchRequest {
                method: http::Method::GET,
                url,
                headers: vec![
                    ("accept".to_owned(), "application/json".to_owned()),
                    ("x-subscription-token".to_owned(), self.api_key.clone()),
                ],
                body: None,
                connect_to: None,
            };
            let body = ask("brave", self.fetch.as_ref(), request, &args.cancel).await?;
            let answer = parse_json("brave", &body)?;
            Ok(entries(answer.pointer("/web/results"), "description"))
        })
    }
}

impl SearchProvider for Tavily {
    fn id(&self) -> &str {
        "tavily"
    }

    fn search(&self, args: SearchArgs) -> BoxFuture<'_, Result<Vec<SearchResult>, SearchError>> {
        Box::pin(async move {
            let body = serde_json::json!({
                "query": args.query,
                "max_results": args.count.min(10),
                "search_depth": "basic",
                "include_answer": true,
                "include_raw_content": false,
            });
            let request = FetchRequest {
                method: http::Method::POST,
                url: fixed_url("https://api.tavily.com/search"),
                headers: vec![
                    ("content-type".to_owned(), "application/json".to_owned()),
                    (
                        "authorization".to_owned(),
                        format!("Bearer {}", self.api_key),
                    ),
                ],
                body: Some(body.to_string().into_bytes()),
                connect_to: None,
            };
            let body = ask("tavily", self.fetch.as_ref(), request, &args.cancel).await?;
            let answer = parse_json("tavily", &body)?;
            let mut results = Vec::new();
            if let Some(text) = answer.get("answer").and_then(Value::as_str)
                && !text.is_empty()
            {
                results.push(SearchResult {
                    title: format!("Answer: {}", args.query),
                    url: "https://tavily.com".to_owned(),
                    snippet: text.to_owned(),
                });
            }
            results.extend(entries(answer.get("results"), "content"));
            Ok(results)
        })
    }
}

impl SearchProvider for DuckDuckGo {
    fn id(&self) -> &str {
        "duckduckgo"
    }

    fn search(&self, args: SearchArgs) -> BoxFuture<'_, Result<Vec<SearchResult>, SearchError>> {
        Box::pin(async move {
            let mut url = fixed_url("https://html.duckduckgo.com/html/");
            url.query_pairs_mut().append_pair("q", &args.query);
            let request = FetchRequest {
                method: http::Method::GET,
                url,
                headers: vec![
                    ("accept".to_owned(), "text/html".to_owned()),
                    ("user-agent".to_owned(), USER_AGENT.to_owned()),
                ],
                body: None,
                connect_to: None,
            };
            let body = ask("duckduckgo", self.fetch.as_ref(), request, &args.cancel).await?;
            let mut results = parse_duckduckgo_results(&String::from_utf8_lossy(&body));
            results.truncate(args.count);
            Ok(results)
        })
    }
}

fn fixed_url(text: &str) -> url::Url {
    // The provider addresses are constants of this file.
    #[allow(clippy::expect_used)]
    url::Url::parse(text).expect("provider URLs parse")
}

/// Sends the request and returns a 2xx body, or the provider's error text. A cancelled
/// run drops the request in flight.
async fn ask(
    id: &str,
    fetch: &dyn Fetch,
    request: FetchRequest,
    cancel: &CancellationToken,
) -> Result<Vec<u8>, SearchError> {
    let cancelled = || SearchError::new(format!("{id}: the run was cancelled"));
    let work = async {
        let response = fetch
            .fetch(request)
            .await
            .map_err(|e| SearchError::new(format!("{id}: {}", e.reason())))?;
        let mut body = Vec::new();
        let mut stream = response.body;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| SearchError::new(format!("{id}: {}", e.reason())))?;
            body.extend_from_slice(&chunk);
            if body.len() >= MAX_ANSWER_BYTES {
                break;
            }
        }
        if !(200..300).contains(&response.status) {
            let text = String::from_utf8_lossy(&body);
            let first: String = text
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(200)
                .collect();
            return Err(SearchError::new(if first.is_empty() {
                format!("{id}: HTTP {}", response.status)
            } else {
                format!("{id}: HTTP {} {first}", response.status)
            }));
        }
        Ok(body)
    };
    tokio::select! {
        result = work => result,
        () = cancel.cancelled() => Err(cancelled()),
    }
}

fn parse_json(id: &str, body: &[u8]) -> Result<Value, SearchError> {
    serde_json::from_slice(body)
        .map_err(|_| SearchError::new(format!("{id}: invalid JSON in the answer")))
}

/// Entries with a non-empty `title` and `url`; the snippet comes from `snippet_key`.
fn entries(list: Option<&Value>, snippet_key: &str) -> Vec<SearchResult> {
    let Some(list) = list.and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|entry| {
            let text = |key: &str| entry.get(key).and_then(Value::as_str).unwrap_or("");
            let (title, url) = (text("title"), text("url"));
            (!title.is_empty() && !url.is_empty()).then(|| SearchResult {
                title: title.to_owned(),
                url: url.to_owned(),
                snippet: text(snippet_key).to_owned(),
            })
        })
        .collect()
}

fn re(pattern: &str) -> Regex {
    #[allow(clippy::expect_used)]
    Regex::new(pattern).expect("result patterns compile")
}

static RESULT_LINK: LazyLock<Regex> =
    LazyLock::new(|| re(r#"(?s)<a class="result__a"([^>]*)>(.*?)</a>"#));
static RESULT_SNIPPET: LazyLock<Regex> =
    LazyLock::new(|| re(r#"(?s)<a class="result__snippet"[^>]*>(.*?)</a>"#));
static HREF: LazyLock<Regex> = LazyLock::new(|| re(r#"href="([^"]*)""#));
static TAG: LazyLock<Regex> = LazyLock::new(|| re(r"<[^>]*>"));
static BASIC_ENTITY: LazyLock<Regex> = LazyLock::new(|| re(r"&(?:amp|lt|gt|quot|#x27|#39);"));
static WHITESPACE: LazyLock<Regex> = LazyLock::new(|| re(r"\s+"));

/// Reads the results out of DuckDuckGo's HTML results page: each `result__a` anchor, with the
/// nearest `result__snippet` anchor after it. Redirect links are unwrapped to their target.
pub fn parse_duckduckgo_results(html: &str) -> Vec<SearchResult> {
    let mut results = Vec::new();
    let mut from = 0;
    while let Some(link) = RESULT_LINK.captures_at(html, from) {
        let (Some(whole), Some(attributes), Some(inner)) = (link.get(0), link.get(1), link.get(2))
        else {
            break;
        };
        from = whole.end();
        let snippet = RESULT_SNIPPET
            .captures_at(html, from)
            .and_then(|c| c.get(1))
            .map(|m| clean(m.as_str()))
            .unwrap_or_default();
        let href = HREF
            .captures(attributes.as_str())
            .and_then(|c| c.get(1))
            .map_or("", |m| m.as_str());
        let Some(url) = result_link(href) else {
            continue;
        };
        let title = clean(inner.as_str());
        if !title.is_empty() && url.starts_with("http") {
            results.push(SearchResult {
                title,
                url,
                snippet,
            });
        }
    }
    results
}

/// The target of a result link: `uddg=` unwrapped and percent-decoded, `//` given `https:`.
fn result_link(href: &str) -> Option<String> {
    if let Some(at) = href.find("uddg=") {
        let value = &href[at + "uddg=".len()..];
        let value = value.split('&').next().unwrap_or("");
        return percent_encoding::percent_decode_str(value)
            .decode_utf8()
            .ok()
            .map(|decoded| decoded.into_owned());
    }
    if let Some(rest) = href.strip_prefix("//") {
        return Some(format!("https://{rest}"));
    }
    Some(href.to_owned())
}

/// Tags removed, the few entities DuckDuckGo writes decoded in one pass, whitespace folded.
fn clean(html: &str) -> String {
    let text = TAG.replace_all(html, "");
    let text = BASIC_ENTITY.replace_all(&text, |c: &regex::Captures<'_>| match &c[0] {
        "&amp;" => "&",
        "&lt;" => "<",
        "&gt;" => ">",
        "&quot;" => "\"",
        _ => "'",
    });
    WHITESPACE.replace_all(&text, " ").trim().to_owned()
}
