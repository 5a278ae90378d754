//! `ahpd sessions [list|show URI|rm URI]`: the stored sessions, a transcript, a deletion.

use std::collections::HashMap;

use ahp_types::state::{ResponsePart, SessionSummary, ToolCallState, Turn};
use ahpd_sdk::ports::{FileSessionStore, SessionStore};
use serde_json::{Value, json};

use super::conversation::Conversation;
use super::render::{Style, one_line, text_of};
use super::screen::{clean, clean_line};
use super::{Conn, SessionsAction, SessionsOpts, Target, connect, runtime};
use crate::commands::CommandError;
use crate::locations::Locations;

/// `ahpd sessions`; returns the exit code.
pub fn sessions(loc: &Locations, opts: &SessionsOpts) -> Result<i32, CommandError> {
    let rt = runtime()?;
    let code = rt.block_on(async {
        let target = Target {
            path: None,
            in_process: opts.in_process,
            ..Target::default()
        };
        let conn = connect(loc, &target).await?;
        let result = match opts.action.clone().unwrap_or(SessionsAction::List) {
            SessionsAction::List => list(loc, &conn, opts.json).await,
            SessionsAction::Show { uri } => show(&conn, &uri, opts.json).await,
            SessionsAction::Rm { uri } => remove(&conn, &uri, opts.json).await,
        };
        conn.close().await;
        result
    });
    rt.shutdown_background();
    code.map(|()| 0)
}

/// Every session the host lists, page after page.
pub async fn listed(conn: &Conn) -> Result<Vec<SessionSummary>, CommandError> {
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
            .map_err(|e| CommandError::Failed(format!("cannot list the sessions: {e}")))?;
        rows.extend(page.items);
        match page.next_cursor {
            Some(c) if cursor.as_deref() != Some(c.as_str()) => cursor = Some(c),
            _ => return Ok(rows),
        }
    }
}

/// The model each session was given, from the session store beside the configuration.
fn models(loc: &Locations) -> HashMap<String, String> {
    let Ok(store) = FileSessionStore::open(loc.sessions()) else {
        return HashMap::new();
    };
    store
        .load()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|r| {
            let model = r.config.get("model")?.as_str()?.to_owned();
            Some((r.uri, model))
        })
        .collect()
}

fn workspace(row: &SessionSummary) -> String {
    row.working_directories
        .as_ref()
        .and_then(|d| d.first())
        .map(|u| {
            ahpd_sdk::util::path_of(u)
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| u.clone())
        })
        .unwrap_or_default()
}

async fn list(loc: &Locations, conn: &Conn, as_json: bool) -> Result<(), CommandError> {
    let mut rows = listed(conn).await?;
    rows.sort_by(|a, b| b.modified_at.cmp(&a.modified_at));
    let models = models(loc);
    let view: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "uri": r.resource,
                "title": r.title,
                "workspace": workspace(r),
                "model": models.get(&r.resource),
                "modifiedAt": r.modified_at,
                "createdAt": r.created_at,
            })
        })
        .collect();
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&view).unwrap_or_default()
        );
        return Ok(());
    }
    if rows.is_empty() {
        println!("no sessions yet: start one with ahpd run \"PROMPT\"");
        return Ok(());
    }
    let cell = |v: &Value, k: &str| clean_line(v[k].as_str().unwrap_or("-"));
    let cols = ["modifiedAt", "uri", "title", "model", "workspace"];
    let heads = ["LAST ACTIVITY", "SESSION", "TITLE", "MODEL", "WORKSPACE"];
    let widths: Vec<usize> = cols
        .iter()
        .zip(heads)
        .map(|(c, h)| {
            view.iter()
                .map(|v| fit(c, &cell(v, c)).chars().count())
                .max()
                .unwrap_or(0)
                .max(h.len())
        })
        .collect();
    let line = |cells: Vec<String>| {
        let mut out = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:w$}  ", w = widths[i]));
            }
        }
        println!("{}", out.trim_end());
    };
    line(heads.iter().map(|h| (*h).to_owned()).collect());
    for v in &view {
        line(cols.iter().map(|c| fit(c, &cell(v, c))).collect());
    }
    Ok(())
}

/// A cell as shown: titles are cut to 40 characters, the rest is kept whole to be copied.
fn fit(column: &str, s: &str) -> String {
    if column == "title" {
        short(s, 40)
    } else {
        s.to_owned()
    }
}

fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.push('…');
    out
}

async fn show(conn: &Conn, uri: &str, as_json: bool) -> Result<(), CommandError> {
    let conv = Conversation::open(conn, uri).await?;
    let state = &conv.chat_state;
    if as_json {
        let value = json!({
            "uri": conv.session,
            "title": conv.session_state.title,
            "turns": state.turns,
            "activeTurn": state.active_turn,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        );
        return Ok(());
    }
    let style = Style::for_stdout();
    println!("{}", style.bold(&clean_line(&conv.session_state.title)));
    println!("{}", style.dim(&clean_line(&conv.session)));
    if state.turns_next_cursor.is_some() {
        println!("{}", style.dim("(older turns are not shown)"));
    }
    for turn in &state.turns {
        print_turn(turn, style);
    }
    if let Some(active) = &state.active_turn {
        println!(
            "\n{} {}",
            style.bold(">"),
            clean(active.message.text.trim_end())
        );
        println!("{}", style.dim("(this turn is still running)"));
    }
    Ok(())
}

fn print_turn(turn: &Turn, style: Style) {
    println!(
        "\n{} {}",
        style.bold(">"),
        clean(turn.message.text.trim_end())
    );
    for part in &turn.response_parts {
        match part {
            ResponsePart::Markdown(m) => println!("{}", clean(m.content.trim_end())),
            ResponsePart::ToolCall(tc) => {
                let line = match &tc.tool_call {
                    ToolCallState::Completed(c) => format!(
                        "• {} {}: {}",
                        clean_line(&c.tool_name),
                        one_line(text_of(&c.invocation_message)),
                        if c.success { "ok" } else { "failed" }
                    ),
                    ToolCallState::Cancelled(c) => format!(
                        "• {} {}: {}",
                        clean_line(&c.tool_name),
                        one_line(text_of(&c.invocation_message)),
                        serde_json::to_value(c.reason)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_else(|| "cancelled".into())
                    ),
                    _ => continue,
                };
                println!("{}", style.dim(&line));
            }
            ResponsePart::Error(e) => {
                println!(
                    "{}",
                    style.red(&format!("error: {}", clean(&e.error.message)))
                );
            }
            _ => {}
        }
    }
}

async fn remove(conn: &Conn, uri: &str, as_json: bool) -> Result<(), CommandError> {
    let result: Result<Value, _> = conn
        .client
        .request("disposeSession", json!({ "channel": uri }))
        .await;
    match result {
        Ok(_) => {}
        Err(ahp::ClientError::Rpc(e)) if e.code == -32001 => {
            return Err(CommandError::Usage(format!("there is no session {uri}")));
        }
        Err(e) => {
            return Err(CommandError::Failed(format!("cannot remove {uri}: {e}")));
        }
    }
    if as_json {
        println!("{}", json!({ "removed": uri }));
    } else {
        println!("removed {}", clean_line(uri));
    }
    Ok(())
}
