//! `listSessions`: live sessions plus every agent's stored conversations, newest first, in
//! pages with opaque cursors.

use std::collections::HashSet;
use std::sync::Arc;

use ahp_types::commands::{ListSessionsParams, ListSessionsResult};
use ahp_types::state::{SessionStatus, SessionSummary};
use base64::Engine as _;

use crate::agent::PastSession;
use crate::error::RpcError;
use crate::inner::HostInner;
use crate::store::sessionstore::SessionRecord;

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

/// The catalogue row of a stored conversation, with what the store remembers about it (its
/// spelling, a client-chosen title, the read and archived flags) on top of the agent's row.
fn past_row(provider: &str, row: PastSession, record: Option<&SessionRecord>) -> SessionSummary {
    let mut status = SessionStatus::Idle.bits();
    if record.is_some_and(|r| r.is_read) {
        status |= SessionStatus::IsRead.bits();
    }
    if record.is_some_and(|r| r.is_archived) {
        status |= SessionStatus::IsArchived.bits();
    }
    let mut dirs = row.working_directories;
    if dirs.is_empty()
        && let Some(r) = record
    {
        dirs = r.working_directories.clone();
    }
    SessionSummary {
        provider: provider.to_owned(),
        title: record.and_then(|r| r.title.clone()).unwrap_or(row.title),
        status,
        activity: None,
        origin: None,
        project: None,
        working_directories: (!dirs.is_empty()).then_some(dirs),
        annotations: None,
        resource: record
            .map(|r| r.uri.clone())
            .unwrap_or_else(|| format!("{provider}:/{}", row.id)),
        created_at: row.created_at,
        modified_at: row.modified_at,
        changes: None,
        meta: None,
        chats: None,
        default_chat: None,
    }
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
    let remembered = inner.store.as_ref().map(|s| s.all()).unwrap_or_default();
    for agent in inner.agents() {
        let provider = agent.descriptor().provider;
        let mut listed: Vec<PastSession> = agent
            .list()
            .await
            .into_iter()
            .filter(|row| !live_ids.contains(&(provider.clone(), row.id.clone())))
            .collect();
        // Remembered conversations the agent does not list but still finds, and those that
        // live in machines.
        for record in remembered.iter().filter(|r| r.provider == provider) {
            let known = live_ids.contains(&(provider.clone(), record.backend_id.clone()))
                || listed.iter().any(|row| row.id == record.backend_id);
            if known {
                continue;
            }
            // A session in a machine is listed from its record, without asking the machine.
            if let Some(row) = record.nested_row() {
                listed.push(row);
            } else if let Some(row) = agent.find(&record.backend_id).await {
                listed.push(row);
            }
        }
        for row in listed {
            let record = remembered
                .iter()
                .find(|r| r.provider == provider && r.backend_id == row.id);
            rows.push(past_row(&provider, row, record));
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
