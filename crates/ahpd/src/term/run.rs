//! `ahpd run "PROMPT"`: one turn, the reply streamed to standard output.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::time::Instant;

use ahp_types::actions::StateAction;
use ahp_types::state::{ChatInputAnswer, MessageAttachment, SessionInputRequest, TurnState};
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinHandle;

use super::approve::{self, Ask, Reply};
use super::conversation::{Answer, Conversation, NewSession};
use super::questions::{self, Answering, Quest, Step};
use super::render::{Out, Printer, Style, cost_of};
use super::screen::clean_line;
use super::{Conn, RunOpts, Target, attach, connect, runtime, work_dir};
use crate::commands::CommandError;
use crate::locations::Locations;

/// How long the stream may stay silent before the turn's state is asked for.
const QUIET: std::time::Duration = std::time::Duration::from_secs(10);

/// Exit code of a turn stopped before its end.
pub const STOPPED: i32 = 130;
/// Exit code of a turn in which the agent asked a question nobody could answer.
pub const UNANSWERED: i32 = 3;

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

/// The `computer` value `--machine` names: a profile's disposable machine, or a value as it is.
pub fn machine_value(machine: &str) -> String {
    if machine.starts_with("computer://") || machine.starts_with("disposable:") {
        machine.to_owned()
    } else {
        format!("disposable:{machine}")
    }
}

/// Refuses `--machine` on a host without `@ahpd/computer`, which would otherwise ignore it
/// and run the session's tools on this host.
pub fn check_machine(conn: &Conn, machine: Option<&str>) -> Result<(), CommandError> {
    let Some(m) = machine else { return Ok(()) };
    let offered = conn
        .root
        .meta
        .as_ref()
        .and_then(|meta| meta.get("ahpd.resourceProviders"))
        .and_then(|p| p.get("computer"))
        .is_some();
    if offered {
        return Ok(());
    }
    Err(CommandError::Usage(format!(
        "--machine {}: this host runs no machines; enable @ahpd/computer (ahpd plugin enable @ahpd/computer) and give it a disposable profile",
        super::screen::clean_line(m)
    )))
}

/// The settings a new session starts with.
pub fn new_session(model: Option<&str>, mode: Option<&str>, machine: Option<&str>) -> NewSession {
    let mut new = NewSession::default();
    if let Some(m) = machine {
        new.config
            .insert("computer".into(), machine_value(m).into());
    }
    if let Some(m) = model {
        new.config.insert("model".into(), m.into());
    }
    if let Some(m) = mode {
        new.config.insert("permissionMode".into(), m.into());
    }
    new
}

/// An input request for this chat that the client cannot put to a person, said in a
/// sentence: a call waiting to be confirmed after it ran, an authentication, a kind this
/// client does not know.
pub fn unanswerable(action: &StateAction, chat: &str) -> Option<String> {
    let StateAction::SessionInputNeededSet(set) = action else {
        return None;
    };
    match &set.request {
        SessionInputRequest::ChatInput(_) => None,
        SessionInputRequest::ToolConfirmation(r) if r.chat != chat => None,
        SessionInputRequest::ToolConfirmation(r) => match &r.tool_call {
            ahp_types::state::ToolCallConfirmationState::PendingConfirmation(_) => None,
            _ => Some("a tool's result waits for a confirmation".into()),
        },
        SessionInputRequest::ToolClientExecution(r) if r.chat != chat => None,
        SessionInputRequest::ToolClientExecution(_) => {
            Some("a tool this client does not run waits for a client to run it".into())
        }
        SessionInputRequest::ToolAuthentication(r) if r.chat != chat => None,
        SessionInputRequest::ToolAuthentication(_) => {
            Some("a tool waits for an MCP sign-in, which this client cannot give".into())
        }
        SessionInputRequest::Unknown(_) => {
            Some("the host asks for input of a kind this client does not know".into())
        }
    }
}

/// Whether standard input is a pipe or a file (not a terminal, nor nothing).
fn stdin_is_data() -> bool {
    let Ok(meta) = rustix::fs::fstat(std::io::stdin()) else {
        return false;
    };
    let ft = rustix::fs::FileType::from_raw_mode(meta.st_mode);
    matches!(
        ft,
        rustix::fs::FileType::Fifo
            | rustix::fs::FileType::RegularFile
            | rustix::fs::FileType::Socket
    )
}

fn read_stdin() -> Result<String, CommandError> {
    let mut bytes = Vec::new();
    std::io::stdin()
        .take(attach::MAX_CONTEXT as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CommandError::Failed(format!("cannot read standard input: {e}")))?;
    if bytes.len() > attach::MAX_CONTEXT {
        return Err(CommandError::Usage(format!(
            "standard input holds more than the {} MiB sent as context",
            attach::MAX_CONTEXT / 1024 / 1024
        )));
    }
    String::from_utf8(bytes)
        .map_err(|_| CommandError::Usage("standard input is not UTF-8 text".into()))
}

/// The prompt, and whether standard input was used up for it (so no terminal can answer).
fn read_prompt(opts: &RunOpts) -> Result<(String, bool), CommandError> {
    match opts.prompt.as_deref() {
        Some(p) if p != "-" => {
            if p.trim().is_empty() {
                return Err(CommandError::Usage("the prompt is empty".into()));
            }
            // Piped input with a prompt is what the prompt is about, as `codex exec` and
            // `claude -p` take it.
            if !std::io::stdin().is_terminal() && stdin_is_data() {
                let context = read_stdin()?;
                if !context.trim().is_empty() {
                    return Ok((attach::with_context(p, &context), true));
                }
            }
            Ok((p.to_owned(), false))
        }
        _ => {
            if std::io::stdin().is_terminal() {
                return Err(CommandError::Usage(
                    "give a prompt: ahpd run \"PROMPT\" (or pipe it on standard input)".into(),
                ));
            }
            let text = read_stdin()?;
            if text.trim().is_empty() {
                return Err(CommandError::Usage(
                    "the prompt read from standard input is empty".into(),
                ));
            }
            Ok((text, true))
        }
    }
}

/// The URI of the most recently active session, of `dir` when given.
pub async fn last_session(conn: &Conn, dir: Option<&Path>) -> Result<String, CommandError> {
    let mut rows = super::sessions::listed(conn).await?;
    rows.sort_by(|a, b| b.modified_at.cmp(&a.modified_at));
    let want = dir.map(ahpd_sdk::util::file_uri);
    rows.into_iter()
        .find(|r| {
            want.as_ref().is_none_or(|w| {
                r.working_directories
                    .as_ref()
                    .and_then(|d| d.first())
                    .is_some_and(|d| d.trim_end_matches('/') == w.trim_end_matches('/'))
            })
        })
        .map(|r| r.resource)
        .ok_or_else(|| {
            CommandError::Usage(match dir {
                Some(d) => format!("no session of {} to continue", d.display()),
                None => "no session to continue".into(),
            })
        })
}

/// `ahpd run`; returns the exit code.
pub fn run(loc: &Locations, opts: &RunOpts) -> Result<i32, CommandError> {
    super::screen::set_color(opts.color);
    let dir = work_dir(opts.path.as_deref())?;
    let (prompt, from_stdin) = read_prompt(opts)?;
    let mut attachments = Vec::new();
    for image in &opts.images {
        attachments.push(attach::image(image, &dir)?);
    }
    attachments.extend(attach::mentions(&prompt, &dir)?);
    let rt = runtime()?;
    let code = rt.block_on(async {
        let target = Target {
            path: Some(dir.clone()),
            in_process: opts.in_process,
            keep_machines: opts.keep,
        };
        let conn = connect(loc, &target).await?;
        tracing::debug!(place = %conn.place, "connected");
        let interactive = !from_stdin && std::io::stdin().is_terminal();
        let result = one_turn(&conn, opts, &prompt, attachments, &dir, interactive).await;
        conn.close().await;
        result
    });
    // A question left unanswered holds a thread reading standard input: do not wait for it.
    rt.shutdown_background();
    code
}

/// What is on the screen waiting for the person.
enum Prompt {
    Approval(Ask),
    Question(Quest),
}

/// What the person gave.
enum Given {
    Approval(Answer),
    Answers(Option<HashMap<String, ChatInputAnswer>>),
}

/// What the turn met that decides its exit code.
#[derive(Default)]
struct Marks {
    denied_unasked: bool,
    unanswered: bool,
    lost: bool,
}

fn read_line() -> Option<String> {
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line),
    }
}

/// Asks an approval on the terminal until it is answered; end of input denies.
fn approval_blocking(out: Out, ask: Ask, all: Option<String>) -> Answer {
    let question = approve::question(&ask, all.is_some());
    loop {
        out.err(question.clone());
        out.sync();
        let Some(line) = read_line() else {
            return Answer::Deny(Some("No answer came: standard input ended.".into()));
        };
        match approve::parse_reply(&line, ask.offers_always) {
            Some(Reply::Answer(a)) => return a,
            Some(Reply::No) => {
                out.err(approve::REASON);
                out.sync();
                return approve::reason_of(&read_line().unwrap_or_default());
            }
            Some(Reply::View) => match &all {
                Some(all) => out.err_line(all),
                None => out.err_line("(everything is shown above)"),
            },
            None => {}
        }
    }
}

/// Asks a request's questions in turn; end of input cancels it.
fn questions_blocking(
    out: Out,
    quest: Quest,
    style: Style,
) -> Option<HashMap<String, ChatInputAnswer>> {
    let mut answering = Answering::new(quest);
    if answering.quest.questions.is_empty() {
        return Some(HashMap::new());
    }
    out.err_line(&questions::describe(&answering.quest, 0, style));
    loop {
        let q = &answering.quest.questions[answering.at];
        out.err(questions::prompt(q));
        out.sync();
        let line = read_line()?;
        match answering.take(&line) {
            Step::Next(i) => out.err_line(&questions::describe(&answering.quest, i, style)),
            Step::Again(why) => out.err_line(&style.yellow(&why)),
            Step::Done(all) => return Some(all),
        }
    }
}

/// Shows what waits and starts reading its answer.
async fn put(
    printer: &mut Printer,
    conn: &Conn,
    conv: &Conversation,
    prompt: Prompt,
    dir: &Path,
) -> (String, JoinHandle<Given>) {
    let out = printer.out.clone();
    let style = printer.style;
    match prompt {
        Prompt::Approval(mut ask) => {
            approve::load_previews(conn, &conv.session, &mut ask, dir).await;
            printer.previewed(&ask.call, &ask.previews);
            let (text, all) = approve::describe(&ask, style);
            printer.prompt(&format!("{text}\n"));
            let entry = format!("tool:{}", ask.call);
            (
                entry,
                tokio::task::spawn_blocking(move || {
                    Given::Approval(approval_blocking(out, ask, all))
                }),
            )
        }
        Prompt::Question(quest) => {
            printer.prompt(&format!("{}\n", questions::heading(&quest, style)));
            let entry = questions::entry_of(&quest);
            (
                entry,
                tokio::task::spawn_blocking(move || {
                    Given::Answers(questions_blocking(out, quest, style))
                }),
            )
        }
    }
}

/// What a waiting prompt is about: the call or the request it answers.
struct Asking {
    entry: String,
    prompt: PromptRef,
    handle: JoinHandle<Given>,
}

enum PromptRef {
    Approval { turn: String, call: String },
    Question { chat: String, request: String },
}

fn reference(p: &Prompt) -> PromptRef {
    match p {
        Prompt::Approval(a) => PromptRef::Approval {
            turn: a.turn.clone(),
            call: a.call.clone(),
        },
        Prompt::Question(q) => PromptRef::Question {
            chat: q.chat.clone(),
            request: q.request.clone(),
        },
    }
}

fn entry_of(p: &Prompt) -> String {
    match p {
        Prompt::Approval(a) => format!("tool:{}", a.call),
        Prompt::Question(q) => questions::entry_of(q),
    }
}

async fn start(
    printer: &mut Printer,
    conn: &Conn,
    conv: &Conversation,
    prompt: Prompt,
    dir: &Path,
) -> Asking {
    let r = reference(&prompt);
    let (entry, handle) = put(printer, conn, conv, prompt, dir).await;
    Asking {
        entry,
        prompt: r,
        handle,
    }
}

// Long: one loop over four event sources (the turn's actions, the answer typed, a quiet check,
// Ctrl-C) whose arms share the state of what is on screen; split, that state would be passed
// around in pieces.
async fn one_turn(
    conn: &Conn,
    opts: &RunOpts,
    prompt: &str,
    attachments: Vec<MessageAttachment>,
    dir: &Path,
    interactive: bool,
) -> Result<i32, CommandError> {
    let mut conv = open_conversation(conn, opts, dir).await?;
    tracing::debug!(session = %conv.session, "session open");
    let dir = session_dir(&conv, dir);
    let mut printer = Printer::new(opts.json, opts.show_reasoning, opts.quiet);
    let mut interrupts = signal(SignalKind::interrupt())
        .map_err(|e| CommandError::Failed(format!("cannot catch Ctrl-C: {e}")))?;
    let began = Instant::now();
    let turn = conv
        .send(conn, prompt, opts.model.as_deref(), attachments)
        .await?;
    if !opts.json && opts.session.is_none() {
        let line = format!("session {} on {}", conv.session, conn.place);
        printer.note(&printer.style.dim(&line));
    }
    let mut marks = Marks::default();
    let mut stopping = false;
    let mut asking: Option<Asking> = None;
    // What else waits its turn: one reader of standard input at a time, so no typed line
    // goes to a question already gone.
    let mut waiting: VecDeque<Prompt> = VecDeque::new();
    // The prompt on the screen was answered by another client: its reader's line is dropped.
    let mut moot = false;
    let mut quiet = tokio::time::interval(QUIET);
    quiet.tick().await;
    let mut heard = false;
    let end = loop {
        tokio::select! {
            env = conv.next() => {
                heard = true;
                let Some(env) = env else {
                    printer.break_line();
                    printer.out.sync();
                    return Err(CommandError::Failed("the connection to the host ended during the turn".into()));
                };
                tracing::trace!(seq = env.server_seq, "action");
                printer.show(&env);
                if let Some(why) = &env.rejection_reason
                    && matches!(&env.action, StateAction::ChatTurnStarted(s) if s.turn_id == turn)
                {
                    printer.out.sync();
                    return Err(CommandError::Failed(format!("the host refused the turn: {}", clean_line(why))));
                }
                if env.rejection_reason.is_none() {
                    let next = if let Some(ask) = approve::ask_of(&env.action, &conv.chat) {
                        if opts.yes {
                            conv.confirm(conn, &ask.turn, &ask.call, &Answer::Once).await?;
                            None
                        } else if interactive {
                            Some(Prompt::Approval(ask))
                        } else {
                            let sentence = approve::no_terminal_sentence(&ask);
                            printer.warn(&format!("ahpd: {sentence}"));
                            marks.denied_unasked = true;
                            conv.confirm(conn, &ask.turn, &ask.call, &Answer::Deny(Some(sentence))).await?;
                            None
                        }
                    } else if let Some(quest) = questions::quest_of(&env.action, &conv.chat) {
                        // `--yes` approves calls; it never answers for the person.
                        if interactive {
                            Some(Prompt::Question(quest))
                        } else {
                            printer.warn("ahpd: the agent asked a question and standard input is not a terminal: it was told nobody is there to answer");
                            marks.unanswered = true;
                            let answers = questions::nobody_answers(&quest);
                            conv.answer_input(conn, &quest.chat, &quest.request, Some(answers)).await?;
                            None
                        }
                    } else if let Some(what) = unanswerable(&env.action, &conv.chat) {
                        printer.warn(&format!("ahpd: {what}; stopping the turn"));
                        conv.stop(conn, &turn).await?;
                        None
                    } else {
                        None
                    };
                    if let Some(p) = next {
                        if asking.is_none() {
                            asking = Some(start(&mut printer, conn, &conv, p, &dir).await);
                        } else {
                            waiting.push_back(p);
                        }
                    }
                }
                if let Some(id) = approve::settled(&env.action) {
                    waiting.retain(|p| entry_of(p) != id);
                    if !moot && asking.as_ref().is_some_and(|a| a.entry == id) {
                        // Answered by another client: the line typed next is not an answer.
                        moot = true;
                        printer.note("(answered elsewhere; press Enter)");
                    }
                }
                if let Some(end) = end_of(&env.action, &turn) {
                    break end;
                }
            }
            given = given_of(&mut asking) => {
                let Some(a) = asking.take() else { continue };
                if !std::mem::take(&mut moot) {
                    match (a.prompt, given) {
                        (PromptRef::Approval { turn, call }, Given::Approval(answer)) => {
                            conv.confirm(conn, &turn, &call, &answer).await?;
                        }
                        (PromptRef::Question { chat, request }, Given::Answers(answers)) => {
                            conv.answer_input(conn, &chat, &request, answers).await?;
                        }
                        _ => {}
                    }
                }
                if let Some(next) = waiting.pop_front() {
                    asking = Some(start(&mut printer, conn, &conv, next, &dir).await);
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
                marks.lost = true;
                printer.warn("ahpd: the turn's end never arrived here (actions were lost between the host and this client); its state was read from the host instead, so the output above may be incomplete");
                break end;
            }
            _ = interrupts.recv() => {
                if stopping {
                    printer.break_line();
                    printer.out.sync();
                    return Ok(STOPPED);
                }
                stopping = true;
                printer.warn("ahpd: stopping the turn (Ctrl-C again to quit)");
                conv.stop(conn, &turn).await?;
            }
        }
    };
    let code = finish(&mut printer, opts, &conv, end, &marks, began)?;
    printer.out.sync();
    Ok(code)
}

/// The answer once given; pending while nothing is asked.
async fn given_of(asking: &mut Option<Asking>) -> Given {
    match asking {
        Some(a) => (&mut a.handle)
            .await
            .unwrap_or(Given::Approval(Answer::Deny(None))),
        None => std::future::pending().await,
    }
}

/// The session the turn goes to: the one named or the last one (its approval mode set when
/// one was given), or a new one in `dir`.
async fn open_conversation(
    conn: &Conn,
    opts: &RunOpts,
    dir: &Path,
) -> Result<Conversation, CommandError> {
    let uri = match &opts.session {
        Some(uri) => Some(uri.clone()),
        None if opts.continue_last => Some(last_session(conn, Some(dir)).await?),
        None if opts.last => Some(last_session(conn, None).await?),
        None => None,
    };
    Ok(match uri {
        Some(uri) => {
            let conv = Conversation::open(conn, &uri).await?;
            if let Some(mode) = &opts.mode {
                conv.configure(conn, "permissionMode", mode).await?;
            }
            if let Some(model) = &opts.model {
                conv.configure(conn, "model", model).await?;
            }
            conv
        }
        None => {
            check_machine(conn, opts.machine.as_deref())?;
            let new = new_session(
                opts.model.as_deref(),
                opts.mode.as_deref(),
                opts.machine.as_deref(),
            );
            Conversation::create(conn, dir, &new).await?
        }
    })
}

/// The exit code of the turn's end, with the usage line, `-o`'s file and `--json`'s result
/// line written: 0 complete, 1 failed (or a call denied for want of a terminal, or actions
/// lost), 3 a question nobody could answer, `STOPPED` stopped.
fn finish(
    printer: &mut Printer,
    opts: &RunOpts,
    conv: &Conversation,
    end: End,
    marks: &Marks,
    began: Instant,
) -> Result<i32, CommandError> {
    printer.break_line();
    let code = match end {
        End::Complete if marks.lost || marks.denied_unasked => 1,
        End::Complete if marks.unanswered => UNANSWERED,
        End::Complete => 0,
        End::Failed => 1,
        End::Cancelled => STOPPED,
    };
    let error = printer.error.clone().filter(|_| end == End::Failed);
    match end {
        End::Cancelled => printer.warn("ahpd: the turn was stopped"),
        End::Failed if opts.json => {
            if let Some(e) = &error {
                printer.warn(&format!(
                    "ahpd: the turn failed: {}",
                    super::screen::clean(e)
                ));
            }
        }
        _ => {}
    }
    if !opts.json
        && end == End::Complete
        && let Some(line) = printer.usage_line()
    {
        printer.note(&printer.style.dim(&line));
    }
    let text = printer.last_text().to_owned();
    if let Some(file) = &opts.output_last_message {
        std::fs::write(file, &text).map_err(|e| {
            CommandError::Failed(format!(
                "cannot write the last message to {}: {e}",
                file.display()
            ))
        })?;
    }
    if opts.json {
        let usage = printer.usage().map(|u| {
            json!({
                "inputTokens": u.input_tokens,
                "outputTokens": u.output_tokens,
                "cacheReadTokens": u.cache_read_tokens,
                "model": u.model,
            })
        });
        let result = json!({
            "type": "result",
            "status": match end {
                End::Complete => "complete",
                End::Failed => "failed",
                End::Cancelled => "cancelled",
            },
            "exitCode": code,
            "text": text,
            "error": error,
            "session": conv.session,
            "durationMs": began.elapsed().as_millis() as u64,
            "usage": usage,
            "cost": printer.usage().and_then(cost_of),
            "questionUnanswered": marks.unanswered,
            "deniedWithoutTerminal": marks.denied_unasked,
            "actionsLost": marks.lost,
        });
        printer.out.out(super::render::json_line(&result));
    }
    Ok(code)
}
