//! Tools cases 9.12 (docs/acceptance.md), what web_fetch returns: HTML reduced to text, the tools and their subjects,
//! pages and statuses, the size cut, the text types, bad URLs and transport failures.

use std::sync::Arc;

use cofold_agents::hooks::RunInfo;
use cofold_agents::policy::{Behavior, DecideArgs, Rule, RuleSet, rules};
use cofold_agents::store::MemoryStore;
use cofold_agents::tool::KvScopes;
use cofold_tools::search::{DuckDuckGoOptions, duckduckgo};
use cofold_tools::web::{WebOptions, html_to_text, web};
use serde_json::json;

use super::tools_driver::Caps;
use super::web_fakes::*;

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
    assert!(description.contains("special-purpose") && description.contains("4194304 at most"));
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
