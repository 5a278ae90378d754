//! `ahpd undo [URI] [--turn N] [--file PATH] [--redo]`, and the chat's `/undo`, `/redo` and
//! `/status` lines: a session's recorded changes, undone or redone through the same
//! changeset operation every AHP client invokes (`invokeChangesetOperation`), so the terminal
//! and, say, VS Code's undo button do exactly the same thing.

use std::path::{Path, PathBuf};

use ahp_types::state::{ChangesetState, SessionState, SnapshotState, Turn};
use serde_json::{Value, json};

use crate::commands::CommandError;
use crate::locations::Locations;
use crate::term::{Conn, Target, connect, runtime};

/// `ahpd undo`.
#[derive(Debug, Clone, clap::Args)]
pub struct UndoOpts {
    /// The session's URI; without it, the most recent session working in the current folder.
    pub uri: Option<String>,
    /// The turn: its number in the conversation (1 is the first) or its id; without it, the
    /// last turn that has a change to undo (or, with --redo, to redo).
    #[arg(long)]
    pub turn: Option<String>,
    /// Only this file (relative to the current folder).
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Put the turn's undone changes back instead.
    #[arg(long)]
    pub redo: bool,
    /// Reach the sessions through a host in this process even when a daemon runs.
    #[arg(long)]
    pub in_process: bool,
}

fn failed(msg: impl Into<String>) -> CommandError {
    CommandError::Failed(msg.into())
}

fn usage(msg: impl Into<String>) -> CommandError {
    CommandError::Usage(msg.into())
}

/// A line safe for a terminal: control characters (escape sequences among them) shown as
/// `\u{…}` rather than sent.
pub(crate) fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() && c != '\n' {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

async fn state_of(conn: &Conn, uri: &str) -> Result<SnapshotState, CommandError> {
    let result: ahp_types::commands::SubscribeResult = conn
        .client
        .request("subscribe", json!({ "channel": uri }))
        .await
        .map_err(|e| match &e {
            ahp::ClientError::Rpc(rpc) if rpc.code == -32001 => {
                usage(format!("no session or changeset {uri}: {}", rpc.message))
            }
            _ => failed(format!("cannot open {uri}: {e}")),
        })?;
    result
        .snapshot
        .map(|s| s.state)
        .ok_or_else(|| failed(format!("{uri} sent no state")))
}

async fn changeset(conn: &Conn, uri: &str) -> Result<ChangesetState, CommandError> {
    let state = state_of(conn, uri).await;
    // The session and chat stay subscribed (a chat's conversation holds them); a changeset
    // was only looked at.
    let _ = conn
        .client
        .notify("unsubscribe", json!({ "channel": uri }))
        .await;
    match state? {
        SnapshotState::Changeset(c) => Ok(*c),
        _ => Err(failed(format!("{uri} is not a changeset"))),
    }
}

/// The most recent session whose working folder is `dir`.
async fn session_in(conn: &Conn, dir: &Path) -> Result<String, CommandError> {
    let folder = ahpd_sdk::util::file_uri(dir);
    let mut rows = listed(conn).await?;
    rows.sort_by(|a, b| b.modified_at.cmp(&a.modified_at));
    rows.into_iter()
        .find(|r| {
            r.working_directories
                .iter()
                .flatten()
                .any(|d| d.trim_end_matches('/') == folder.trim_end_matches('/'))
        })
        .map(|r| r.resource)
        .ok_or_else(|| {
            usage(format!(
                "no session works in {}: name one (ahpd sessions lists them)",
                dir.display()
            ))
        })
}

/// Every session the host lists.
async fn listed(conn: &Conn) -> Result<Vec<ahp_types::state::SessionSummary>, CommandError> {
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
            .map_err(|e| failed(format!("cannot list the sessions: {e}")))?;
        rows.extend(page.items);
        match page.next_cursor {
            Some(c) if cursor.as_deref() != Some(c.as_str()) => cursor = Some(c),
            _ => return Ok(rows),
        }
    }
}

fn undone(file: &ahp_types::state::ChangesetFile) -> bool {
    file.meta
        .as_ref()
        .and_then(|m| m.get("ahpd.undone"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// What one request asks for.
pub(crate) struct Request {
    pub session: String,
    pub turn: Option<String>,
    pub file: Option<PathBuf>,
    pub redo: bool,
}

/// Runs an undo or redo; the lines to show, and whether every file asked for is now as asked.
pub(crate) async fn perform(
    conn: &Conn,
    req: &Request,
) -> Result<(Vec<String>, bool), CommandError> {
    let session = match state_of(conn, &req.session).await? {
        SnapshotState::Session(s) => *s,
        _ => return Err(usage(format!("{} is not a session", req.session))),
    };
    let chat = session
        .default_chat
        .clone()
        .unwrap_or_else(|| ahpd_sdk::util::default_chat_uri(&req.session));
    let chat_state = match state_of(conn, &chat).await? {
        SnapshotState::Chat(c) => *c,
        _ => return Err(failed(format!("{chat} is not a chat"))),
    };
    // A chat whose backend has not opened yet shows no catalogue; the cofold engine's turn
    // changesets live at this template.
    let template = chat_state
        .changesets
        .iter()
        .flatten()
        .find(|c| c.change_kind == "turn")
        .map(|c| c.uri_template.clone())
        .unwrap_or_else(|| format!("{chat}/changes/turn/{{turnId}}"));
    let turns: Vec<&Turn> = chat_state.turns.iter().collect();
    let uri_of = |turn: &str| template.replace("{turnId}", &turn_segment(turn));
    let wanted_file = req.file.as_ref().map(|f| ahpd_sdk::util::file_uri(f));
    let fits = |state: &ChangesetState| {
        state
            .files
            .iter()
            .any(|f| wanted_file.as_ref().is_none_or(|w| *w == f.id) && undone(f) == req.redo)
    };
    let turn = match &req.turn {
        Some(t) => match t.parse::<usize>() {
            Ok(n) if n >= 1 && n <= turns.len() => turns[n - 1].id.clone(),
            Ok(n) => {
                return Err(usage(format!(
                    "the conversation has {} turns, so there is no turn {n}",
                    turns.len()
                )));
            }
            Err(_) => t.clone(),
        },
        None => {
            let mut found = None;
            for t in turns.iter().rev() {
                if fits(&changeset(conn, &uri_of(&t.id)).await?) {
                    found = Some(t.id.clone());
                    break;
                }
            }
            found.ok_or_else(|| {
                usage(if req.redo {
                    "no turn of this session has an undone change to redo".to_owned()
                } else {
                    "no turn of this session has a change left to undo".to_owned()
                })
            })?
        }
    };
    let channel = uri_of(&turn);
    let operation = match (req.redo, wanted_file.is_some()) {
        (false, false) => ahpd_agent_cofold::UNDO_ALL,
        (false, true) => ahpd_agent_cofold::UNDO_FILE,
        (true, false) => ahpd_agent_cofold::REDO_ALL,
        (true, true) => ahpd_agent_cofold::REDO_FILE,
    };
    let mut params = json!({ "channel": channel, "operationId": operation });
    if let Some(uri) = &wanted_file {
        params["target"] = json!({ "kind": "resource", "resource": uri });
    }
    let answer: Result<ahp_types::commands::InvokeChangesetOperationResult, _> = conn
        .client
        .request("invokeChangesetOperation", params)
        .await;
    let message = match answer {
        Ok(r) => match r.message {
            Some(ahp_types::common::StringOrMarkdown::Plain(s)) => s,
            Some(other) => serde_json::to_value(other)
                .ok()
                .and_then(|v| v.get("markdown").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_default(),
            None => String::new(),
        },
        Err(ahp::ClientError::Rpc(rpc)) => {
            return Ok((rpc.message.lines().map(printable).collect(), false));
        }
        Err(e) => return Err(failed(format!("cannot reach {}: {e}", req.session))),
    };
    let after = changeset(conn, &channel).await?;
    let done = !after
        .files
        .iter()
        .filter(|f| wanted_file.as_ref().is_none_or(|w| *w == f.id))
        .any(|f| undone(f) == req.redo);
    let mut lines = vec![format!(
        "{} turn {turn}:",
        if req.redo { "redo" } else { "undo" }
    )];
    lines.extend(message.lines().map(|l| format!("  {}", printable(l))));
    Ok((lines, done))
}

fn turn_segment(id: &str) -> String {
    let mut out = String::new();
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `ahpd undo`; 0 when every file asked for was undone (or redone), 1 when one was left as it
/// is, 2 for a request that cannot be met.
pub fn undo(loc: &Locations, opts: &UndoOpts) -> Result<i32, CommandError> {
    let rt = runtime()?;
    let cwd = std::env::current_dir()
        .map_err(|e| failed(format!("cannot read the current folder: {e}")))?;
    let code = rt.block_on(async {
        let target = Target {
            path: None,
            in_process: opts.in_process,
            ..Target::default()
        };
        let conn = connect(loc, &target).await?;
        let result = async {
            let session = match &opts.uri {
                Some(u) => u.clone(),
                None => session_in(&conn, &cwd).await?,
            };
            let request = Request {
                session,
                turn: opts.turn.clone(),
                file: opts.file.as_ref().map(|f| crate::undo::absolute(&cwd, f)),
                redo: opts.redo,
            };
            perform(&conn, &request).await
        }
        .await;
        conn.close().await;
        result
    });
    rt.shutdown_background();
    let (lines, done) = code?;
    for line in lines {
        println!("{line}");
    }
    Ok(if done { 0 } else { 1 })
}

pub(crate) fn absolute(cwd: &Path, file: &Path) -> PathBuf {
    let joined = cwd.join(file);
    cofold_changes::real_path(&joined)
}

/// `/undo [N|FILE]` and `/redo [N|FILE]` in a chat: a number names a turn, anything else a
/// file of the last turn that has one to undo.
pub(crate) async fn in_chat(conn: &Conn, session: &str, redo: bool, arg: &str) -> Vec<String> {
    let cwd = std::env::current_dir().unwrap_or_default();
    let (turn, file) = match arg.trim() {
        "" => (None, None),
        a if a.parse::<usize>().is_ok() => (Some(a.to_owned()), None),
        a => (None, Some(absolute(&cwd, Path::new(a)))),
    };
    let request = Request {
        session: session.to_owned(),
        turn,
        file,
        redo,
    };
    match perform(conn, &request).await {
        Ok((lines, _)) => lines,
        Err(e) => vec![printable(&e.to_string())],
    }
}

/// `/status` in a chat: the session, its instruction files and what its record holds.
pub(crate) fn status_lines(session: &str, state: &SessionState) -> Vec<String> {
    let mut lines = vec![format!("session {}", printable(session))];
    let meta = state.meta.as_ref();
    let instructions = meta.and_then(|m| m.get(ahpd_agent_cofold::INSTRUCTIONS_META_KEY));
    match instructions.and_then(|i| i["files"].as_array()) {
        Some(files) if !files.is_empty() => {
            lines.push("instructions:".to_owned());
            for f in files {
                let path = f["path"].as_str().unwrap_or_default();
                let how = match f["included"].as_str() {
                    Some("whole") | None => String::new(),
                    Some(other) => format!(" ({other}, over the 32 KiB budget)"),
                };
                lines.push(format!("  {}{how}", printable(path)));
            }
        }
        _ => lines.push("instructions: no AGENTS.md or CLAUDE.md read".to_owned()),
    }
    if let Some(withheld) = instructions.and_then(|i| i["withheld"].as_array()) {
        lines.push(format!(
            "  not read (outside the served folders, not allowed): {}",
            withheld
                .iter()
                .filter_map(Value::as_str)
                .map(printable)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(changes) = meta.and_then(|m| m.get(ahpd_agent_cofold::CHANGES_META_KEY)) {
        let turns = changes["turns"].as_u64().unwrap_or(0);
        let stored = changes["storedBytes"].as_u64().unwrap_or(0);
        let bound = changes["storageBound"].as_u64().unwrap_or(0);
        lines.push(format!(
            "changes: {turns} turn(s) recorded, {} KiB of earlier contents kept (bound {} MiB)",
            stored / 1024,
            bound / (1024 * 1024)
        ));
        if let Some(dropped) = changes["droppedTurns"].as_array().filter(|d| !d.is_empty()) {
            lines.push(format!(
                "  earlier contents dropped for the bound: turns {}",
                dropped
                    .iter()
                    .filter_map(Value::as_str)
                    .map(printable)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if let Some(incomplete) = changes["incomplete"].as_object() {
            for (turn, notes) in incomplete {
                for n in notes
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                {
                    lines.push(format!("  turn {}: {}", printable(turn), printable(n)));
                }
            }
        }
    } else {
        lines.push("changes: none recorded".to_owned());
    }
    lines
}
