//! Tools cases 9.13 (docs/acceptance.md), the web_search tool: the first provider that answers wins, failures are
//! noted, a silent provider times out, a cancel stops the loop, and the count cuts the rows.

use std::sync::{Arc, Mutex};

use cofold_tools::search::{SearchArgs, SearchError, SearchProvider, SearchResult};
use cofold_tools::web::{WebOptions, web};
use futures::future::BoxFuture;
use serde_json::json;

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

pub(super) fn result(title: &str, url: &str, snippet: &str) -> SearchResult {
    SearchResult {
        title: title.into(),
        url: url.into(),
        snippet: snippet.into(),
    }
}

pub(super) fn failing(id: &'static str) -> Arc<dyn SearchProvider> {
    Arc::new(Scripted {
        id,
        answer: Some(Err(SearchError::new("HTTP 429 rate limited"))),
    })
}

pub(super) fn answering(id: &'static str, results: Vec<SearchResult>) -> Arc<dyn SearchProvider> {
    Arc::new(Scripted {
        id,
        answer: Some(Ok(results)),
    })
}

pub(super) async fn search_tools(providers: Vec<Arc<dyn SearchProvider>>, timeout_ms: u64) -> Caps {
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
