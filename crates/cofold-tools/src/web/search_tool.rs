//! The web_search tool: providers asked in order, the first that answers wins.

use std::sync::Arc;
use std::time::Duration;

use cofold_agents::tool::{ToolContext, ToolDef, ToolEffects, ToolError, ToolOutput, handler_fn};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::search::{SearchArgs, SearchProvider, SearchResult};
use crate::shell::seconds;

/// Results a call gets when it gives no `count`.
const DEFAULT_COUNT: usize = 5;
/// Most results a call may ask for.
const MAX_COUNT: usize = 20;

#[derive(Deserialize)]
struct SearchInput {
    query: String,
    count: Option<usize>,
}

pub(super) fn web_search_def(
    providers: Arc<Vec<Arc<dyn SearchProvider>>>,
    timeout_ms: u64,
) -> ToolDef {
    let ids: Vec<&str> = providers.iter().map(|p| p.id()).collect();
    let description = format!(
        "Search the web and get titles, URLs and snippets ({}). {DEFAULT_COUNT} results unless \
         count says otherwise, {MAX_COUNT} at most.",
        ids.join(", then ")
    );
    let input = json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "What to search for"},
            "count": {"type": "integer", "minimum": 1, "maximum": MAX_COUNT, "description": format!("Results wanted; default {DEFAULT_COUNT}")},
        },
        "required": ["query"],
        "additionalProperties": false,
    });
    ToolDef::new(
        "web_search",
        description,
        input,
        handler_fn(move |input: Value, ctx: ToolContext| {
            let providers = Arc::clone(&providers);
            async move {
                let input: SearchInput = serde_json::from_value(input)
                    .map_err(|e| ToolError::failed(format!("bad input: {e}")))?;
                let count = input.count.unwrap_or(DEFAULT_COUNT).min(MAX_COUNT);
                search(
                    &providers,
                    &input.query,
                    count,
                    timeout_ms,
                    ctx.signal.token(),
                )
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
    .subject(|input: &Value| {
        input
            .get("query")
            .and_then(Value::as_str)
            .map(str::to_owned)
    })
}

/// Asks each provider in turn; a failure (or its timeout) is noted and the next one asked.
pub(crate) async fn search(
    providers: &[Arc<dyn SearchProvider>],
    query: &str,
    count: usize,
    timeout_ms: u64,
    cancel: &CancellationToken,
) -> Result<String, String> {
    let mut notes: Vec<String> = Vec::new();
    for provider in providers {
        if cancel.is_cancelled() {
            break;
        }
        let id = provider.id();
        let args = SearchArgs {
            query: query.to_owned(),
            count,
            cancel: cancel.clone(),
        };
        let answer =
            tokio::time::timeout(Duration::from_millis(timeout_ms), provider.search(args)).await;
        match answer {
            Err(_) => notes.push(format!("{id}: timed out after {} s", seconds(timeout_ms))),
            Ok(Err(error)) => notes.push(format!("{id}: {error}")),
            Ok(Ok(mut results)) => {
                results.truncate(count);
                if results.is_empty() {
                    return Ok(format!("no results for \"{query}\" ({id})"));
                }
                return Ok(rows(&results));
            }
        }
    }
    if notes.is_empty() {
        return Err("web_search failed: the run was cancelled".to_owned());
    }
    Err(format!("web_search failed: {}", notes.join("; ")))
}

fn rows(results: &[SearchResult]) -> String {
    results
        .iter()
        .enumerate()
        .map(|(i, result)| {
            let mut row = format!("{}. {}\n   {}", i + 1, result.title, result.url);
            let snippet = result
                .snippet
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            if !snippet.is_empty() {
                row.push_str("\n   ");
                row.push_str(&snippet);
            }
            row
        })
        .collect::<Vec<_>>()
        .join("\n")
}
