//! `session/list`: the host's sessions, live and stored, newest first, those of one folder when
//! the editor names it, a page at a time.

use std::path::{Path, PathBuf};

use agent_client_protocol::v1::schema::{ListSessionsResponse, SessionInfo};
use ahp_types::state::SessionSummary;
use serde_json::json;

use super::uri_path;
use crate::term::Conn;

/// Sessions in one page of `session/list`.
pub(crate) const PAGE: usize = 50;

/// Every session the host lists, page after page.
async fn every(conn: &Conn) -> Result<Vec<SessionSummary>, String> {
    let mut rows = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut params = json!({ "channel": ahp_types::ROOT_RESOURCE_URI });
        if let Some(c) = &cursor {
            params["cursor"] = json!(c);
        }
        let page: ahp_types::commands::ListSessionsResult = conn
            .client
            .request("listSessions", params)
            .await
            .map_err(|e| format!("cannot list the sessions: {e}"))?;
        rows.extend(page.items);
        match page.next_cursor {
            Some(c) if cursor.as_deref() != Some(c.as_str()) => cursor = Some(c),
            _ => return Ok(rows),
        }
    }
}

fn folders(row: &SessionSummary) -> Vec<PathBuf> {
    row.working_directories
        .iter()
        .flatten()
        .filter_map(|u| uri_path(u))
        .collect()
}

/// The same folder, whichever way either path was spelled.
fn same(a: &Path, b: &Path) -> bool {
    a == b
        || match (a.canonicalize(), b.canonicalize()) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        }
}

/// One page of the sessions in `cwd` (every session without one), from the opaque `cursor`.
pub(crate) async fn page(
    conn: &Conn,
    cwd: Option<&Path>,
    cursor: Option<&str>,
) -> Result<ListSessionsResponse, String> {
    let skip = match cursor {
        None => 0,
        Some(c) => c
            .strip_prefix("after:")
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| format!("{c} is not a cursor this agent gave"))?,
    };
    let mut rows = every(conn).await?;
    rows.retain(|r| cwd.is_none_or(|dir| folders(r).first().is_some_and(|first| same(first, dir))));
    rows.sort_by(|a, b| b.modified_at.cmp(&a.modified_at));
    let total = rows.len();
    let sessions: Vec<SessionInfo> = rows
        .into_iter()
        .skip(skip)
        .take(PAGE)
        .map(|r| {
            let dirs = folders(&r);
            let cwd = dirs.first().cloned().unwrap_or_default();
            SessionInfo::new(r.resource.clone(), cwd)
                .additional_directories(dirs.into_iter().skip(1).collect())
                .title((!r.title.is_empty()).then(|| r.title.clone()))
                .updated_at(Some(r.modified_at.clone()))
        })
        .collect();
    let next = (skip + PAGE < total).then(|| format!("after:{}", skip + PAGE));
    Ok(ListSessionsResponse::new(sessions).next_cursor(next))
}
