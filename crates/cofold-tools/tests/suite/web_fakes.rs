//! The web tests' fakes (tools cases, section 9.12 of docs/acceptance.md): a transport that routes by URL prefix and records every
//! request, a lookup with scripted answers, and the web capability built over both.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use cofold_tools::web::{Fetch, FetchError, FetchRequest, FetchResponse, Lookup, WebOptions, web};
use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::json;

use super::tools_driver::Caps;

pub const PAGE: &str = "<!doctype html><html><head><title>Docs &amp; more</title><style>body{color:red}</style><script>var x = \"<p>no</p>\";</script></head><body><nav><a href=\"/\">Home</a></nav><h1>Hello</h1><p>First   paragraph  with <b>bold</b> &amp; an &#39;entity&#39;.</p><ul><li>one</li><li>two</li></ul><!-- a comment --><p>Last.</p></body></html>";
pub const PAGE_TEXT: &str = "Docs & more\n\nHome\nHello\n\nFirst paragraph with bold & an 'entity'.\n\n- one\n- two\n\nLast.";

#[derive(Clone)]
pub enum Answer {
    Page {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    },
    Fail(&'static str),
    Never,
}

pub fn page(status: u16, mime: Option<&str>, body: &str) -> Answer {
    Answer::Page {
        status,
        headers: mime
            .map(|m| vec![("content-type", m.to_owned())])
            .unwrap_or_default(),
        body: body.as_bytes().to_vec(),
    }
}

pub fn redirect(status: u16, location: &str) -> Answer {
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
    pub fn route(&self, prefix: &str, answer: Answer) {
        self.routes
            .lock()
            .expect("lock")
            .push((prefix.to_owned(), answer));
    }

    pub fn urls(&self) -> Vec<String> {
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
    pub fn answer(&self, host: &str, answers: &[&[&str]]) {
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

pub struct Fixture {
    pub web: Arc<FakeWeb>,
    pub lookup: Arc<FakeLookup>,
    pub caps: Caps,
}

pub async fn fixture_with(timeout_ms: u64) -> Fixture {
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

pub async fn fixture() -> Fixture {
    fixture_with(20_000).await
}

impl Fixture {
    pub async fn fetch(&self, url: &str) -> Result<String, String> {
        self.caps.call("web_fetch", json!({"url": url})).await
    }
}
