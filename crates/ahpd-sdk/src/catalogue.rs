//! `listSessions`: live sessions plus every agent's stored conversations, newest first, in
//! pages with opaque cursors.

use std::collections::HashSet;
use std::sync::Arc;

use ahp_types::commands::{ListSessionsParams, ListSessionsResult};
use ahp_types::state::{SessionStatus, SessionSummary};
use base64::Engine as _;

use crate::error::RpcError;
use crate::host::HostInner;

fn encode_cursor(row: &SessionSummary) -> String {
    let raw = serde_json::json!([row.modified_at, row.resource]).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_cursor(cursor: &str) -> Option<(String, String)> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()?;
    let (m, r): (String, String) = serde_json::from_slice(&bytes).ok()?;
    Some((m, r))
}

/// Rows ordered newest first, then by resource.
fn order(a: &SessionSummary, b: &SessionSummary) -> std::cmp::Ordering {
    b.modified_at
        .cmp(&a.modified_at)
        .then_with(|| a.resource.cmp(&b.resource))
}

pub(crate) async fn list(
    inner: &Arc<HostInner>,
    p: ListSessionsParams,
) -> Result<ListSessionsResult, RpcError> {
    let cap = inner.options.list_cap.max(1);
    let limit = match p.limit {
        Some(n) if n <= 0 => return Err(RpcError::invalid_params("limit must be at least 1")),
        Some(n) => (n as usize).min(cap),
        None => cap,
    };
    let after =
        match &p.cursor {
            Some(c) => Some(decode_cursor(c).ok_or_else(|| {
                RpcError::invalid_params("the cursor is not one this host issued")
            })?),
            None => None,
        };
    let (mut rows, live_ids): (Vec<SessionSummary>, HashSet<(String, String)>) = {
        let reg = inner.registry.lock().unwrap_or_else(|p| p.into_inner());
        let rows = reg
            .sessions
            .values()
            .filter_map(|e| e.summary.clone())
            .collect();
        let ids = reg
            .sessions
            .values()
            .map(|e| (e.provider.clone(), e.backend_id.clone()))
            .collect();
        (rows, ids)
    };
    for agent in inner.agents() {
        let provider = agent.descriptor().provider;
        for row in agent.list().await {
            if live_ids.contains(&(provider.clone(), row.id.clone())) {
                continue;
            }
            rows.push(SessionSummary {
                provider: provider.clone(),
                title: row.title,
                status: SessionStatus::Idle.bits(),
                activity: None,
                origin: None,
                project: None,
                working_directories: (!row.working_directories.is_empty())
                    .then_some(row.working_directories),
                annotations: None,
                resource: format!("{provider}:/{}", row.id),
                created_at: row.created_at,
                modified_at: row.modified_at,
                changes: None,
                meta: None,
                chats: None,
                default_chat: None,
            });
        }
    }
    rows.sort_by(order);
    if let Some((m, r)) = after {
        rows.retain(|row| row.modified_at < m || (row.modified_at == m && row.resource > r));
    }
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next_cursor = if more {
        rows.last().map(encode_cursor)
    } else {
        None
    };
    if more && p.limit.is_none() {
        tracing::warn!(
            "listSessions was cut at {cap} rows; the rest is reachable through nextCursor"
        );
    }
    Ok(ListSessionsResult {
        next_cursor,
        items: rows,
    })
}
