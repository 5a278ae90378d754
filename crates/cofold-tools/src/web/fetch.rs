//! web_fetch's algorithm: parse, guard and pin every hop, follow redirects by
//! hand, keep text types only, cut the body, reduce HTML to text.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use url::Url;

use super::guard::{Lookup, is_internal};
use super::html::html_to_text;
use super::transport::{Fetch, FetchRequest, FetchResponse};
use crate::shell::seconds;

/// Most redirects one call follows.
pub const MAX_REDIRECTS: usize = 10;

/// The `accept` header web_fetch sends.
pub const ACCEPT: &str = "text/html, text/plain;q=0.9, application/json;q=0.8, */*;q=0.5";

/// The `user-agent` header web_fetch and the DuckDuckGo provider send.
pub const USER_AGENT: &str = "Mozilla/5.0 (compatible; cofold/0.1)";

/// Mime prefixes accepted as text.
const TEXT_TYPES: [&str; 9] = [
    "text/",
    "application/json",
    "application/xml",
    "application/javascript",
    "application/x-yaml",
    "application/yaml",
    "application/toml",
    "application/x-sh",
    "image/svg",
];

/// Why web_fetch refused or failed; each displays as the one sentence the model reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebFetchError {
    /// The input (or a redirect's Location) does not parse as a URL.
    #[error("\"{0}\" is not a URL")]
    NotAUrl(String),
    /// A scheme other than http or https.
    #[error("{0}: only http and https are fetched")]
    NotHttp(String),
    /// The host is, or resolves to, an internal address.
    #[error(
        "{url} is an internal address ({address}); web_fetch does not reach loopback, private, link-local or other special-purpose addresses"
    )]
    Internal {
        /// The hop's URL, serialised.
        url: String,
        /// The first internal address found.
        address: IpAddr,
    },
    /// The lookup, the transport or the body failed, or the time ran out.
    #[error("cannot fetch {url}: {reason}")]
    CannotFetch {
        /// The hop's URL, serialised.
        url: String,
        /// A code, a one-line message, or `timed out after <s> s`.
        reason: String,
    },
    /// The redirect limit was passed.
    #[error("{0}: more than 10 redirects")]
    TooManyRedirects(String),
    /// The response is not a text type.
    #[error("{url} is {mime}, not text")]
    NotText {
        /// The final URL.
        url: String,
        /// The refused mime type.
        mime: String,
    },
}

/// What one call needs besides its input.
#[derive(Clone)]
pub(crate) struct Fetcher {
    pub(crate) fetch: Arc<dyn Fetch>,
    pub(crate) lookup: Arc<dyn Lookup>,
    pub(crate) timeout_ms: u64,
}

/// The time ran out or the run was cancelled.
struct Expired;

impl Fetcher {
    /// The refusal of a fetch that ran out of time at `url`.
    fn timed_out(&self, url: &Url) -> WebFetchError {
        WebFetchError::CannotFetch {
            url: url.to_string(),
            reason: format!("timed out after {} s", seconds(self.timeout_ms)),
        }
    }

    /// Fetches `input`, each redirect hop checked, until an answer that is no redirect; its URL
    /// and the answer, its body not read yet.
    async fn follow(
        &self,
        input: &str,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Result<(Url, FetchResponse), WebFetchError> {
        let mut url = parse_http(input, None)?;
        let mut redirects = 0;
        loop {
            let pinned = match bounded(deadline, cancel, self.guard(&url)).await {
                Ok(result) => result?,
                Err(Expired) => return Err(self.timed_out(&url)),
            };
            let request = FetchRequest {
                method: http::Method::GET,
                url: url.clone(),
                headers: vec![
                    ("accept".to_owned(), ACCEPT.to_owned()),
                    ("user-agent".to_owned(), USER_AGENT.to_owned()),
                ],
                body: None,
                connect_to: Some(pinned),
            };
            let response = match bounded(deadline, cancel, self.fetch.fetch(request)).await {
                Err(Expired) => return Err(self.timed_out(&url)),
                Ok(Err(error)) => {
                    return Err(WebFetchError::CannotFetch {
                        url: url.to_string(),
                        reason: error.reason(),
                    });
                }
                Ok(Ok(response)) => response,
            };
            let location = response
                .headers
                .get(http::header::LOCATION)
                .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
            match location {
                Some(location) if (300..400).contains(&response.status) => {
                    drop(response); // the body of a redirect is never read
                    if redirects == MAX_REDIRECTS {
                        return Err(WebFetchError::TooManyRedirects(input.to_owned()));
                    }
                    redirects += 1;
                    url = parse_http(&location, Some(&url))?;
                }
                _ => return Ok((url, response)),
            }
        }
    }

    /// Fetches `input` and renders the result text, or the refusal.
    pub(crate) async fn fetch_page(
        &self,
        input: &str,
        cap: usize,
        cancel: &CancellationToken,
    ) -> Result<String, WebFetchError> {
        let deadline = Instant::now() + Duration::from_millis(self.timeout_ms);
        let (url, response) = self.follow(input, deadline, cancel).await?;
        let mime = response
            .headers
            .get(http::header::CONTENT_TYPE)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).to_lowercase())
            .map(|value| value.split(';').next().unwrap_or("").trim().to_owned())
            .unwrap_or_default();
        if !mime.is_empty() && !TEXT_TYPES.iter().any(|t| mime.starts_with(t)) {
            return Err(WebFetchError::NotText {
                url: url.to_string(),
                mime,
            });
        }

        let mut body = response.body;
        let mut bytes: Vec<u8> = Vec::new();
        // Read one byte past the cap at most, so "exactly cap" and "more" can be told apart.
        while bytes.len() <= cap {
            match bounded(deadline, cancel, body.next()).await {
                Err(Expired) => return Err(self.timed_out(&url)),
                Ok(None) => break,
                Ok(Some(Err(error))) => {
                    return Err(WebFetchError::CannotFetch {
                        url: url.to_string(),
                        reason: error.reason(),
                    });
                }
                Ok(Some(Ok(chunk))) => {
                    let room = cap + 1 - bytes.len();
                    bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
            }
        }
        drop(body);
        let cut = bytes.len() > cap;
        bytes.truncate(cap);
        let text = String::from_utf8_lossy(&bytes);
        let text = if mime == "text/html" {
            html_to_text(&text)
        } else {
            text.trim().to_owned()
        };

        let status = response.status;
        let mut result = if mime.is_empty() {
            format!("{url} ({status})\n\n{text}")
        } else {
            format!("{url} ({status}, {mime})\n\n{text}")
        };
        if cut {
            result.push_str(&format!("\n[cut at {cap} bytes]"));
        }
        Ok(result)
    }

    /// Resolves the hop's host once and checks every address (S13); returns the addresses the
    /// transport may connect to (S15).
    async fn guard(&self, url: &Url) -> Result<Vec<IpAddr>, WebFetchError> {
        let addresses = match url.host() {
            Some(url::Host::Ipv4(v4)) => vec![IpAddr::V4(v4)],
            Some(url::Host::Ipv6(v6)) => vec![IpAddr::V6(v6)],
            Some(url::Host::Domain(domain)) => match self.lookup.lookup(domain).await {
                Ok(found) if !found.is_empty() => found,
                _ => {
                    return Err(WebFetchError::CannotFetch {
                        url: url.to_string(),
                        reason: "ENOTFOUND".to_owned(),
                    });
                }
            },
            None => return Err(WebFetchError::NotAUrl(url.to_string())),
        };
        if let Some(address) = addresses.iter().copied().find(|a| is_internal(*a)) {
            return Err(WebFetchError::Internal {
                url: url.to_string(),
                address,
            });
        }
        Ok(addresses)
    }
}

/// Parses `text` (against `base` for a redirect) and keeps http and https only (S12).
fn parse_http(text: &str, base: Option<&Url>) -> Result<Url, WebFetchError> {
    let parsed = match base {
        Some(base) => base.join(text),
        None => Url::parse(text),
    };
    let url = parsed.map_err(|_| WebFetchError::NotAUrl(text.to_owned()))?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        _ => Err(WebFetchError::NotHttp(match base {
            Some(_) => url.to_string(),
            None => text.to_owned(),
        })),
    }
}

/// Awaits `work` unless the deadline passes or the run is cancelled first.
async fn bounded<F: Future>(
    deadline: Instant,
    cancel: &CancellationToken,
    work: F,
) -> Result<F::Output, Expired> {
    tokio::select! {
        output = work => Ok(output),
        () = tokio::time::sleep_until(deadline) => Err(Expired),
        () = cancel.cancelled() => Err(Expired),
    }
}
