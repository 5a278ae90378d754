//! The web capability: `web_fetch` (every hop guarded and pinned, redirects followed by hand)
//! and, when providers are given, `web_search`.

pub(crate) mod fetch;
mod guard;
mod html;
pub mod search;
mod search_tool;
pub(crate) mod transport;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use cofold_agents::capability::{Capability, CapabilityArgs, CapabilityError};
use cofold_agents::tool::{
    Tool, ToolContext, ToolDef, ToolEffects, ToolError, ToolOutput, handler_fn,
};
use serde::Deserialize;
use serde_json::{Value, json};

pub use fetch::{ACCEPT, MAX_REDIRECTS, USER_AGENT, WebFetchError};
pub use guard::{Lookup, SystemLookup, is_internal};
pub use html::html_to_text;
pub use transport::{
    ClientSource, Fetch, FetchError, FetchRequest, FetchResponse, ReqwestFetch, SourceError,
};

use crate::shell::seconds;
use fetch::Fetcher;
use search::SearchProvider;

/// The most body bytes one web_fetch call keeps, whatever `maxBytes` or the options say (4 MiB):
/// a page is read into memory and handed to the model whole, so the cap bounds both.
pub const MAX_FETCH_BYTES: usize = 4 * 1024 * 1024;

/// Options of the web capability. `Default` gives the documented defaults.
#[derive(Clone)]
pub struct WebOptions {
    /// Search providers, asked in this order; none means no web_search tool.
    pub search: Vec<Arc<dyn SearchProvider>>,
    /// Time limit of one web_fetch call, and of one provider's answer (default 20 000 ms).
    pub timeout_ms: u64,
    /// Bytes of body web_fetch keeps when a call gives no `maxBytes` (default 262 144; at most
    /// [`MAX_FETCH_BYTES`]).
    pub max_bytes: usize,
    /// The transport; `None` is [`ReqwestFetch`], built from `client` when one is given.
    pub fetch: Option<Arc<dyn Fetch>>,
    /// Where the default transport gets its client builders (proxies, certificates); `None`
    /// uses no proxy.
    pub client: Option<ClientSource>,
    /// The resolver; `None` is [`SystemLookup`].
    pub lookup: Option<Arc<dyn Lookup>>,
}

impl Default for WebOptions {
    fn default() -> Self {
        Self {
            search: Vec::new(),
            timeout_ms: 20_000,
            max_bytes: 262_144,
            fetch: None,
            client: None,
            lookup: None,
        }
    }
}

impl fmt::Debug for WebOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<&str> = self.search.iter().map(|p| p.id()).collect();
        f.debug_struct("WebOptions")
            .field("search", &ids)
            .field("timeout_ms", &self.timeout_ms)
            .field("max_bytes", &self.max_bytes)
            .field("fetch", &self.fetch.is_some())
            .field("client", &self.client.is_some())
            .field("lookup", &self.lookup.is_some())
            .finish()
    }
}

/// The web capability (id `web`), built by [`web`].
#[derive(Clone)]
pub struct WebCapability {
    fetcher: Fetcher,
    max_bytes: usize,
    search: Arc<Vec<Arc<dyn SearchProvider>>>,
}

impl fmt::Debug for WebCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<&str> = self.search.iter().map(|p| p.id()).collect();
        f.debug_struct("WebCapability")
            .field("search", &ids)
            .finish_non_exhaustive()
    }
}

/// Builds the web capability: web_fetch, then web_search when at least one provider is given.
pub fn web(options: WebOptions) -> WebCapability {
    WebCapability {
        fetcher: Fetcher {
            fetch: options.fetch.unwrap_or_else(|| {
                Arc::new(match options.client {
                    Some(source) => ReqwestFetch::with_source(source),
                    None => ReqwestFetch::new(),
                })
            }),
            lookup: options.lookup.unwrap_or_else(|| Arc::new(SystemLookup)),
            timeout_ms: options.timeout_ms,
        },
        max_bytes: options.max_bytes.min(MAX_FETCH_BYTES),
        search: Arc::new(options.search),
    }
}

#[async_trait]
impl Capability for WebCapability {
    fn id(&self) -> &str {
        "web"
    }

    async fn tools(&self, _args: &CapabilityArgs) -> Result<Vec<Tool>, CapabilityError> {
        let mut defs = vec![self.web_fetch_def()];
        if !self.search.is_empty() {
            defs.push(search_tool::web_search_def(
                Arc::clone(&self.search),
                self.fetcher.timeout_ms,
            ));
        }
        defs.into_iter()
            .map(|def| Tool::new(def).map_err(|e| CapabilityError::from(e.to_string())))
            .collect()
    }

    async fn instructions(
        &self,
        _args: &CapabilityArgs,
    ) -> Result<Option<String>, CapabilityError> {
        let fetch_line = "web_fetch reads one page as plain text from a complete URL \
            (https://…); fetch the pages that answer the question and cite them by URL. Internal \
            and special-purpose addresses (localhost, loopback, private, shared and link-local \
            networks, NAT64 prefixes) are refused, \
            redirects included, so retrying them is pointless.";
        Ok(Some(if self.search.is_empty() {
            fetch_line.to_owned()
        } else {
            format!(
                "web_search gives titles, URLs and snippets for a query: search first, then \
                 web_fetch the results that look right.\n{fetch_line}"
            )
        }))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FetchInput {
    url: String,
    max_bytes: Option<usize>,
}

impl WebCapability {
    fn web_fetch_def(&self) -> ToolDef {
        let description = format!(
            "GET one http or https URL and return the page as text. HTML is reduced to its text; \
             JSON and other text types come back as they are; other types are refused. The body \
             is cut at {} bytes unless maxBytes says otherwise ({MAX_FETCH_BYTES} at most), and the \
             call gives up after {} s. Internal addresses are refused: loopback, private, shared, \
             link-local, NAT64 and the other special-purpose ranges, redirects included.",
            self.max_bytes,
            seconds(self.fetcher.timeout_ms),
        );
        let input = json!({
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "Complete http or https URL"},
                "maxBytes": {"type": "integer", "minimum": 1024, "maximum": MAX_FETCH_BYTES, "description": format!("Bytes of body to keep; default {}, at most {MAX_FETCH_BYTES}", self.max_bytes)},
            },
            "required": ["url"],
            "additionalProperties": false,
        });
        let fetcher = self.fetcher.clone();
        let default_cap = self.max_bytes;
        ToolDef::new(
            "web_fetch",
            description,
            input,
            handler_fn(move |input: Value, ctx: ToolContext| {
                let fetcher = fetcher.clone();
                async move {
                    let input: FetchInput = serde_json::from_value(input)
                        .map_err(|e| ToolError::failed(format!("bad input: {e}")))?;
                    // The schema already says the maximum; a caller that skipped validation
                    // still gets no more.
                    let cap = input.max_bytes.unwrap_or(default_cap).min(MAX_FETCH_BYTES);
                    fetcher
                        .fetch_page(&input.url, cap, ctx.signal.token())
                        .await
                        .map(ToolOutput::from)
                        .map_err(ToolError::failed)
                }
            }),
        )
        .effects(ToolEffects {
            network: true,
            ..ToolEffects::default()
        })
        .subject(|input: &Value| input.get("url").and_then(Value::as_str).map(str::to_owned))
    }
}
