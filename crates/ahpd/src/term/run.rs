//! `ahpd run "PROMPT"`: one turn, the reply streamed to standard output.

use std::collections::VecDeque;
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use ahp_types::actions::StateAction;
use ahp_types::state::TurnState;
use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinHandle;

use super::approve::{self, Ask};
use super::conversation::{Answer, Conversation, NewSession};
use super::render::Printer;
use super::{Conn, RunOpts, Target, connect, runtime, work_dir};
use crate::commands::CommandError;
use crate::locations::Locations;

/// How long the stream may stay silent before the turn's state is asked for.
const QUIET: std::time::Duration = std::time::Duration::from_secs(10);

/// Exit code of a turn stopped before its end.
pub const STOPPED: i32 = 130;

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// `chat/turnComplete`.
    Complete,
    /// `chat/error`.
    Failed,
    /// `chat/turnCancelled`.
    Cancelled,
}

/// Whether `action` ends the turn `turn`.
pub fn end_of(action: &StateAction, turn: &str) -> Option<End> {
    match action {
        StateAction::ChatTurnComplete(a) if a.turn_id == turn => Some(End::Complete),
        StateAction::ChatError(a) if a.turn_id == turn => Some(End::Failed),
        StateAction::ChatTurnCancelled(a) if a.turn_id == turn => Some(End::Cancelled),
        _ => None,
    }
}

/// The session's first working folder, else `fallback`.
pub fn session_dir(conv: &Conversation, fallback: &Path) -> PathBuf {
    conv.session_state
        .working_directories
        .as_ref()
        .and_then(|d| d.first())
        .and_then(|u| ahpd_sdk::util::path_of(u))
        .unwrap_or_else(|| fallback.to_path_buf())
}

/// The settings a new session starts with.
pub fn new_session(model: Option<&str>, mode: Option<&str>) -> NewSession {
    let mut new = NewSession::default();
    if let Some(m) = model {
        new.config.insert("model".into(), m.into());
    }
    if let Some(m) = mode {
        new.config.insert("permissionMode".into(), m.into());
    }
    new
}

fn read_prompt(opts: &RunOpts) -> Result<(String, bool), CommandError> {
    match opts.prompt.as_deref() {
        Some(p) if p != "-" => {
            if p.trim().is_empty() {
                return Err(CommandError::Usage("the prompt is empty".into()));
            }
            Ok((p.to_owned(), false))
        }
        _ => {
            if std::io::stdin().is_terminal() {
                return Err(CommandError::Usage(
                    "give a prompt: ahpd run \"PROMPT\" (or pipe it on standard input)".into(),
                ));
            }
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| CommandError::Failed(format!("cannot read standard input: {e}")))?;
            if text.trim().is_empty() {
                return Err(CommandError::Usage(
                    "the prompt read from standard input is empty".into(),
                ));
            }
            Ok((text, true))
        }
    }
}

/// `ahpd run`; returns the exit code.
pub fn run(loc: &Locations, opts: &RunOpts) -> Result<i32, CommandError> {
    let (prompt, from_stdin) = read_prompt(opts)?;
    let rt = runtime()?;
    let code = rt.block_on(async {
        let dir = work_dir(opts.path.as_deref())?;
        let target = Target {
            path: Some(dir.clone()),
            in_process: opts.in_process,
        };
        let conn = connect(loc, &target).await?;
        tracing::debug!(place = %conn.place, "connected");
        let interactive = !from_stdin && std::io::stdin().is_terminal();
        let result = one_turn(&conn, opts, &prompt, &dir, interactive).await;
        conn.close().await;
        result
    });
    // A question left unanswered holds a thread reading standard input: do not wait for it.
    rt.shutdown_background();
    code
}

// Long: one loop over four event sources (the turn's actions, the answer typed, a quiet check,
// Ctrl-C) whose arms share the state of the questions on screen; split, that state would be
// passed around in pieces.
async fn one_turn(
    conn: &Conn,
    opts: &RunOpts,
    prompt: &str,
    dir: &Path,
    interactive: bool,
) -> Result<i32, CommandError> {
    let mut conv = open_conversation(conn, opts, dir).await?;
    tracing::debug!(session = %conv.session, "session open");
    let dir = session_dir(&conv, dir);
    let mut printer = Printer::new(opts.json, opts.show_reasoning);
    let mut interrupts = signal(SignalKind::interrupt())
        .map_err(|e| CommandError::Failed(format!("cannot catch Ctrl-C: {e}")))?;
    let turn = conv.send(conn, prompt, opts.model.as_deref()).await?;
    if !opts.json && opts.session.is_none() {
        let line = format!("session {} on {}", conv.session, conn.place);
        printer.note(&printer.style.dim(&line));
    }
    let mut denied_unasked = false;
    let mut stopping = false;
    let mut asking: Option<(Ask, JoinHandle<Answer>)> = None;
    // Further approvals of the same step wait their turn; one reader of standard input at a
    // time, so no typed line goes to a question already gone.
    let mut waiting: VecDeque<Ask> = VecDeque::new();
    // The question on the screen was answered by another client: its reader's line is dropped.
    let mut moot = false;
    let mut quiet = tokio::time::interval(QUIET);
    quiet.tick().await;
    let mut heard = false;
    loop {
        tokio::select! {
            env = conv.next() => {
                heard = true;
                let Some(env) = env else {
                    return Err(CommandError::Failed("the connection to the host ended during the turn".into()));
                };
                tracing::trace!(seq = env.server_seq, "action");
                printer.show(&env);
                if let Some(why) = &env.rejection_reason
                    && matches!(&env.action, StateAction::ChatTurnStarted(s) if s.turn_id == turn)
                {
                    return Err(CommandError::Failed(format!("the host refused the turn: {why}")));
                }
                if env.rejection_reason.is_none() && let Some(ask) = approve::ask_of(&env.action, &conv.chat) {
                    if opts.yes {
                        conv.confirm(conn, &ask.turn, &ask.call, &Answer::Once).await?;
                    } else if interactive {
                        if asking.is_none() {
                            asking = Some(put_question(&mut printer, ask, &dir));
                        } else {
                            waiting.push_back(ask);
                        }
                    } else {
                        let sentence = approve::no_terminal_sentence(&ask);
                        printer.warn(&format!("ahpd: {sentence}"));
                        denied_unasked = true;
                        conv.confirm(conn, &ask.turn, &ask.call, &Answer::Deny(sentence)).await?;
                    }
                }
                if let Some(id) = approve::settled(&env.action) {
                    waiting.retain(|a| !id.ends_with(&a.call));
                    if !moot && asking.as_ref().is_some_and(|(a, _)| id.ends_with(&a.call)) {
                        // Answered by another client: the line typed next is not an answer.
                        moot = true;
                        printer.note("(answered elsewhere; press Enter)");
                    }
                }
                if let Some(code) = turn_end(&mut printer, opts, &env.action, &turn, denied_unasked) {
                    return Ok(code);
                }
            }
            answer = answer_of(&mut asking) => {
                let Some((ask, _)) = asking.take() else { continue };
                if !std::mem::take(&mut moot) {
                    conv.confirm(conn, &ask.turn, &ask.call, &answer).await?;
                }
                if let Some(next) = waiting.pop_front() {
                    asking = Some(put_question(&mut printer, next, &dir));
                }
            }
            _ = quiet.tick() => {
                if std::mem::take(&mut heard) || asking.is_some() {
                    continue;
                }
                let end = match conv.ended(conn, &turn).await? {
                    Some(TurnState::Complete) => End::Complete,
                    Some(TurnState::Error) => End::Failed,
                    Some(TurnState::Cancelled) => End::Cancelled,
                    None => continue,
                };
                printer.warn("ahpd: some of the turn's output was skipped (the reader fell behind)");
                return Ok(match end {
                    End::Complete if !denied_unasked => 0,
                    End::Cancelled => STOPPED,
                    _ => 1,
                });
            }
            _ = interrupts.recv() => {
                if stopping {
                    printer.break_line();
                    return Ok(STOPPED);
                }
                stopping = true;
                printer.warn("ahpd: stopping the turn (Ctrl-C again to quit)");
                conv.stop(conn, &turn).await?;
            }
        }
    }
}

/// The session the turn goes to: the one named (its approval mode set when one was given), or
/// a new one in `dir`.
async fn open_conversation(
    conn: &Conn,
    opts: &RunOpts,
    dir: &Path,
) -> Result<Conversation, CommandError> {
    Ok(match &opts.session {
        Some(uri) => {
            let conv = Conversation::open(conn, uri).await?;
            if let Some(mode) = &opts.mode {
                conv.configure(conn, "permissionMode", mode).await?;
            }
            conv
        }
        None => {
            let new = new_session(opts.model.as_deref(), opts.mode.as_deref());
            Conversation::create(conn, dir, &new).await?
        }
    })
}

/// The exit code when `action` ends the turn: 0 when it completed (1 when an approval was
/// denied for want of a terminal), 1 when it failed, `STOPPED` when it was stopped.
fn turn_end(
    printer: &mut Printer,
    opts: &RunOpts,
    action: &StateAction,
    turn: &str,
    denied_unasked: bool,
) -> Option<i32> {
    match end_of(action, turn)? {
        End::Complete => {
            finish(printer, opts.json);
            Some(if denied_unasked { 1 } else { 0 })
        }
        End::Failed => {
            if opts.json
                && let StateAction::ChatError(e) = action
            {
                printer.warn(&format!("ahpd: the turn failed: {}", e.part.error.message));
            }
            finish(printer, opts.json);
            Some(1)
        }
        End::Cancelled => {
            printer.warn("ahpd: the turn was stopped");
            Some(super::run::STOPPED)
        }
    }
}

/// Shows an approval and starts reading its answer.
fn put_question(printer: &mut Printer, ask: Ask, dir: &Path) -> (Ask, JoinHandle<Answer>) {
    printer.break_line();
    eprintln!("{}", approve::describe(&ask, dir, printer.style));
    (ask, tokio::task::spawn_blocking(approve::ask_blocking))
}

/// The person's answer once given; pending while nothing is asked.
pub async fn answer_of(asking: &mut Option<(Ask, JoinHandle<Answer>)>) -> Answer {
    match asking {
        Some((_, handle)) => handle
            .await
            .unwrap_or_else(|_| Answer::Deny("No answer came.".into())),
        None => std::future::pending().await,
    }
}

fn finish(printer: &mut Printer, json: bool) {
    printer.break_line();
    if !json && let Some(line) = printer.usage_line() {
        eprintln!("{}", printer.style.dim(&line));
    }
}
