//! `ahpd chat`: a conversation at the terminal. A line sent while no turn runs starts one; a
//! line typed while one runs steers it (or answers the approval or question it asks); `/`
//! lines are commands. Between turns the line is edited with history on the arrows and Tab
//! completion; during a turn the terminal stays in its ordinary mode, so Ctrl-C stops the turn
//! and typing shows as typed.
//!
//! The line editor catches SIGINT while it exists, so it exists only while it reads a line
//! (where Ctrl-C is a key that clears the line): during a turn the signal reaches this
//! process's own handler, whatever the editor does.

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use super::approve::{self, Ask, Reply};
use super::conversation::Conversation;
use super::questions::{self, Answering, Step};
use super::render::{Out, Printer, Style, cost_of, usage_line};
use super::run::{
    End, check_machine, end_of, last_session, new_session, session_dir, unanswerable,
};
use super::screen::{self, clean_line};
use super::{ChatOpts, Conn, MODES, Target, attach, connect, history, runtime, work_dir};
use crate::commands::CommandError;
use crate::locations::Locations;

/// The prompt between turns.
pub const PROMPT: &str = "you> ";

/// The commands, for `/help` and Tab.
const COMMANDS: [(&str, &str); 16] = [
    ("/stop", "stop the running turn (Ctrl-C does the same)"),
    ("/model", "[M] show or set the session's model"),
    (
        "/mode",
        "[MODE] show or set the permission mode (auto, default, acceptEdits, plan, bypassPermissions, dontAsk)",
    ),
    (
        "/status",
        "the session, its instruction files (AGENTS.md) and its recorded changes",
    ),
    (
        "/undo",
        "[N|FILE] undo the last turn's changes (or turn N's, or one file's)",
    ),
    ("/redo", "[N|FILE] put undone changes back"),
    ("/mcp", "the session's MCP servers and their state"),
    ("/cost", "the tokens and cost of this session's turns"),
    ("/diff", "the changes the edits run in this chat made"),
    ("/sessions", "list the stored sessions"),
    (
        "/resume",
        "[URI] continue another session (without URI: pick a recent one)",
    ),
    ("/new", "start a new session"),
    ("/help", "this list"),
    ("/quit", "leave (Ctrl-D too)"),
    ("/exit", "leave"),
    (
        "/compact",
        "(not offered: the host has no command to compact a session)",
    ),
];

fn help() -> String {
    let mut out = String::from(
        "  a line sends a message; typed while a turn runs, it steers that turn\n  @path attaches a file or folder; Tab completes /commands and @paths\n",
    );
    for (c, d) in COMMANDS.iter().filter(|(c, _)| *c != "/exit") {
        out.push_str(&format!("  {c:<10} {d}\n"));
    }
    out.trim_end().to_owned()
}

const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// Tab completion: `/commands` at the start of the line, `@paths` anywhere.
struct Completion {
    dir: PathBuf,
}

impl rustyline::completion::Completer for Completion {
    type Candidate = rustyline::completion::Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Self::Candidate>)> {
        let before = &line[..pos];
        let start = before
            .rfind(char::is_whitespace)
            .map(|i| i + 1)
            .unwrap_or(0);
        let word = &before[start..];
        let pair = |s: String| rustyline::completion::Pair {
            display: s.clone(),
            replacement: s,
        };
        if start == 0 && word.starts_with('/') {
            let found = COMMANDS
                .iter()
                .filter(|(c, _)| c.starts_with(word))
                .map(|(c, _)| pair(format!("{c} ")))
                .collect();
            return Ok((0, found));
        }
        let Some(path) = word.strip_prefix('@') else {
            return Ok((pos, Vec::new()));
        };
        let (folder, prefix) = match path.rfind('/') {
            Some(i) => (&path[..=i], &path[i + 1..]),
            None => ("", path),
        };
        let Ok(entries) = std::fs::read_dir(self.dir.join(folder)) else {
            return Ok((pos, Vec::new()));
        };
        let mut found: Vec<_> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                if !name.starts_with(prefix) || (name.starts_with('.') && !prefix.starts_with('.'))
                {
                    return None;
                }
                let slash = if e.path().is_dir() { "/" } else { "" };
                Some(pair(format!("@{folder}{}{slash}", clean_line(&name))))
            })
            .collect();
        found.sort_by(|a, b| a.replacement.cmp(&b.replacement));
        Ok((start, found))
    }
}

impl rustyline::hint::Hinter for Completion {
    type Hint = String;
}
impl rustyline::highlight::Highlighter for Completion {}
impl rustyline::validate::Validator for Completion {}
impl rustyline::Helper for Completion {}

/// What the reader thread shares with the loop.
struct Shared {
    running: AtomicBool,
    history: Mutex<Vec<String>>,
    history_file: PathBuf,
    dir: PathBuf,
    out: Out,
}

/// Reads one edited line at the prompt, with an editor that lives only as long.
fn edited_line(shared: &Shared) -> Result<Option<String>, ()> {
    use rustyline::error::ReadlineError;
    let Ok(mut ed) = rustyline::Editor::<Completion, rustyline::history::MemHistory>::with_history(
        rustyline::Config::builder()
            .completion_type(rustyline::CompletionType::List)
            .build(),
        rustyline::history::MemHistory::new(),
    ) else {
        return Err(());
    };
    ed.set_helper(Some(Completion {
        dir: shared.dir.clone(),
    }));
    for h in shared.history.lock().map(|h| h.clone()).unwrap_or_default() {
        let _ = ed.add_history_entry(h);
    }
    // Whatever the loop wrote goes first, so the prompt is drawn after it.
    shared.out.sync();
    match ed.readline(PROMPT) {
        Ok(line) => {
            if !line.trim().is_empty() {
                if let Ok(mut h) = shared.history.lock()
                    && h.last() != Some(&line)
                {
                    h.push(line.clone());
                }
                history::append(&shared.history_file, &line);
            }
            Ok(Some(line))
        }
        // Ctrl-C at the prompt empties the line, as in a shell.
        Err(ReadlineError::Interrupted) => Ok(None),
        Err(_) => Err(()),
    }
}

/// Reads lines for the loop: edited lines between turns, plain lines while a turn runs (so
/// output can stream without a line editor redrawing over it). Standard input that is not a
/// terminal is read line by line throughout.
fn reader(
    tx: mpsc::UnboundedSender<String>,
    done: std::sync::mpsc::Receiver<()>,
    shared: Arc<Shared>,
) {
    let terminal = std::io::stdin().is_terminal();
    loop {
        let line = if !terminal {
            match plain_line() {
                Some(l) => l,
                None => return,
            }
        } else if !shared.running.load(Ordering::SeqCst) {
            match edited_line(&shared) {
                Ok(Some(l)) => l,
                Ok(None) => continue,
                Err(()) => return,
            }
        } else {
            match plain_line_while(&shared.running) {
                Plain::Line(l) => l,
                Plain::TurnOver => continue,
                Plain::End => return,
            }
        };
        if tx.send(line).is_err() {
            return;
        }
        // The next line waits until this one is handled, so a command's output comes before
        // the prompt (and, from a file or pipe, a message's whole turn comes before the next).
        if done.recv().is_err() {
            return;
        }
    }
}

enum Plain {
    Line(String),
    TurnOver,
    End,
}

fn plain_line() -> Option<String> {
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim_end_matches(['\n', '\r']).to_owned()),
    }
}

/// A line from the terminal while the turn runs; once the turn ends, the line editor takes
/// over again (a terminal in its ordinary mode is readable only once a whole line is typed).
fn plain_line_while(running: &AtomicBool) -> Plain {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let stdin = std::io::stdin();
    let wait = Timespec {
        tv_sec: 0,
        tv_nsec: 100_000_000,
    };
    loop {
        if !running.load(Ordering::SeqCst) {
            return Plain::TurnOver;
        }
        let mut fds = [PollFd::new(&stdin, PollFlags::IN)];
        match poll(&mut fds, Some(&wait)) {
            Ok(0) => continue,
            Ok(_) => {
                return match plain_line() {
                    Some(l) => Plain::Line(l),
                    None => Plain::End,
                };
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return Plain::End,
        }
    }
}

/// Something of this turn waiting for the person.
enum Waiting {
    Approval { ask: Ask, all: Option<String> },
    Reason(Ask),
    Question(Answering),
}

impl Waiting {
    fn entry(&self) -> String {
        match self {
            Waiting::Approval { ask, .. } | Waiting::Reason(ask) => format!("tool:{}", ask.call),
            Waiting::Question(a) => questions::entry_of(&a.quest),
        }
    }
}

struct Loop<'a> {
    conn: &'a Conn,
    conv: Conversation,
    printer: Printer,
    style: Style,
    fallback_dir: PathBuf,
    turn: Option<String>,
    /// What this turn asks, the first on the screen; several calls of one step may each ask.
    asking: VecDeque<Waiting>,
    shared: Arc<Shared>,
    /// Whether the spinner is on screen.
    spinning: Option<usize>,
    model: Option<String>,
    /// `--machine`, for the sessions `/new` starts.
    machine: Option<String>,
    /// Sessions listed by `/resume`, to pick one by number.
    picking: Option<Vec<String>>,
    /// Sessions this chat created, and whether each was sent anything.
    created: Vec<(String, bool)>,
    /// Ctrl-C was pressed while this turn runs: the next one leaves.
    stopping: bool,
}

/// `ahpd chat`; returns the exit code.
pub fn chat(loc: &Locations, opts: &ChatOpts) -> Result<i32, CommandError> {
    super::screen::set_color(opts.color);
    let rt = runtime()?;
    let code = rt.block_on(async {
        let dir = work_dir(opts.path.as_deref())?;
        let target = Target {
            path: Some(dir.clone()),
            in_process: opts.in_process,
            keep_machines: opts.keep,
        };
        let conn = connect(loc, &target).await?;
        let result = talk(loc, &conn, opts, &dir).await;
        conn.close().await;
        result
    });
    rt.shutdown_background();
    code
}

async fn talk(
    loc: &Locations,
    conn: &Conn,
    opts: &ChatOpts,
    dir: &Path,
) -> Result<i32, CommandError> {
    let uri = match &opts.session {
        Some(uri) => Some(uri.clone()),
        None if opts.continue_last => Some(last_session(conn, Some(dir)).await?),
        None if opts.last => Some(last_session(conn, None).await?),
        None => None,
    };
    let mut created = Vec::new();
    let conv = match uri {
        Some(uri) => Conversation::open(conn, &uri).await?,
        None => {
            check_machine(conn, opts.machine.as_deref())?;
            let new = new_session(
                opts.model.as_deref(),
                opts.mode.as_deref(),
                opts.machine.as_deref(),
            );
            let conv = Conversation::create(conn, dir, &new).await?;
            created.push((conv.session.clone(), false));
            conv
        }
    };
    // Caught before the reader's line editor exists, so the editor saves this handler and
    // puts it back each time it goes.
    let mut interrupts = signal(SignalKind::interrupt())
        .map_err(|e| CommandError::Failed(format!("cannot catch Ctrl-C: {e}")))?;
    let printer = Printer::new(false, opts.show_reasoning, opts.quiet);
    let history_file = history::file_in(&loc.dir);
    let shared = Arc::new(Shared {
        running: AtomicBool::new(false),
        history: Mutex::new(history::load(&history_file)),
        history_file,
        dir: dir.to_path_buf(),
        out: printer.out.clone(),
    });
    let (tx, mut lines) = mpsc::unbounded_channel();
    let (done, handled) = std::sync::mpsc::channel();
    {
        let shared = shared.clone();
        std::thread::spawn(move || reader(tx, handled, shared));
    }
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    let style = Style::for_stderr();
    let mut lp = Loop {
        conn,
        conv,
        printer,
        style,
        fallback_dir: dir.to_path_buf(),
        turn: None,
        asking: VecDeque::new(),
        shared,
        spinning: None,
        model: opts.model.clone(),
        machine: opts.machine.clone(),
        picking: None,
        created,
        stopping: false,
    };
    lp.header();
    let terminal = std::io::stdin().is_terminal();
    let mut owed = false;
    let mut code = 0;
    loop {
        tokio::select! {
            line = lines.recv() => {
                let Some(line) = line else { break };
                if !lp.line(line.trim()).await? {
                    break;
                }
                owed = true;
            }
            env = lp.conv.next() => {
                let Some(env) = env else {
                    lp.printer.out.sync();
                    return Err(CommandError::Failed("the connection to the host ended".into()));
                };
                lp.action(env).await?;
            }
            _ = interrupts.recv() => {
                lp.unspin();
                match lp.turn.clone() {
                    Some(_) if lp.stopping => {
                        lp.printer.note("(leaving)");
                        code = super::run::STOPPED;
                        break;
                    }
                    Some(turn) => {
                        lp.stopping = true;
                        lp.printer.note("stopping the turn (Ctrl-C again leaves)");
                        lp.conv.stop(lp.conn, &turn).await?;
                    }
                    None => lp.printer.note("(Ctrl-D or /quit leaves)"),
                }
            }
            _ = ticks.tick(), if lp.spinning.is_some() => lp.spin(),
        }
        // At a terminal the next line is read at once, to steer or answer; from a pipe only
        // once the turn is over or asks something.
        if owed && (terminal || lp.turn.is_none() || !lp.asking.is_empty()) {
            owed = false;
            let _ = done.send(());
        }
    }
    lp.unspin();
    lp.leave().await;
    lp.printer.out.sync();
    Ok(code)
}

impl Loop<'_> {
    fn header(&mut self) {
        let model = self.conv.setting("model").unwrap_or_else(|| "-".into());
        let mode = self
            .conv
            .setting("permissionMode")
            .unwrap_or_else(|| "auto".into());
        // A session without turns still has the engine's placeholder title.
        let title = if self.conv.chat_state.turns.is_empty() {
            String::new()
        } else {
            clean_line(&self.conv.session_state.title)
        };
        let line = format!(
            "{} · {} · model {} · mode {} · /help for commands",
            clean_line(&self.conv.session),
            if title.is_empty() { "new" } else { &title },
            clean_line(&model),
            clean_line(&mode),
        );
        self.printer.note(&self.style.dim(&line));
    }

    /// Disposes of the sessions this chat made and never sent anything to.
    async fn leave(&mut self) {
        for (uri, used) in std::mem::take(&mut self.created) {
            if used {
                continue;
            }
            let _: Result<Value, _> = self
                .conn
                .client
                .request("disposeSession", serde_json::json!({ "channel": uri }))
                .await;
        }
    }

    fn spin(&mut self) {
        let Some(i) = self.spinning else { return };
        if std::io::stderr().is_terminal() {
            self.printer
                .out
                .err(format!("\r{} thinking", SPINNER[i % SPINNER.len()]));
        }
        self.spinning = Some(i + 1);
    }

    fn unspin(&mut self) {
        if self.spinning.take().is_some_and(|i| i > 0) && std::io::stderr().is_terminal() {
            self.printer.out.err("\r\x1b[K");
        }
    }

    /// Shows what waits first, if anything.
    fn put_next(&mut self) {
        let Some(w) = self.asking.front() else {
            return;
        };
        let text = match w {
            Waiting::Approval { ask, all } => {
                let (text, _) = approve::describe(ask, self.style);
                format!("{text}\n{}", approve::question(ask, all.is_some()))
            }
            Waiting::Reason(_) => approve::REASON.to_owned(),
            Waiting::Question(a) => {
                let mut text = String::new();
                if a.at == 0 {
                    text.push_str(&questions::heading(&a.quest, self.style));
                    text.push('\n');
                }
                if let Some(q) = a.quest.questions.get(a.at) {
                    text.push_str(&questions::describe(&a.quest, a.at, self.style));
                    text.push('\n');
                    text.push_str(&questions::prompt(q));
                }
                text
            }
        };
        self.printer.prompt(&text);
    }

    /// The prompt of what waits first, again (after a line that was not an answer).
    fn reprompt(&mut self, why: Option<&str>) {
        if let Some(why) = why {
            self.printer.note(&self.style.yellow(why));
        }
        let text = match self.asking.front() {
            Some(Waiting::Approval { ask, all }) => approve::question(ask, all.is_some()),
            Some(Waiting::Reason(_)) => approve::REASON.to_owned(),
            Some(Waiting::Question(a)) => a
                .quest
                .questions
                .get(a.at)
                .map(questions::prompt)
                .unwrap_or_default(),
            None => return,
        };
        self.printer.prompt(&text);
    }

    fn dir(&self) -> PathBuf {
        session_dir(&self.conv, &self.fallback_dir)
    }

    /// Takes a line as the answer to what waits first.
    async fn answer(&mut self, line: &str) -> Result<(), CommandError> {
        let Some(w) = self.asking.pop_front() else {
            return Ok(());
        };
        match w {
            Waiting::Approval { ask, all } => match approve::parse_reply(line, ask.offers_always) {
                Some(Reply::Answer(a)) => {
                    self.conv
                        .confirm(self.conn, &ask.turn, &ask.call, &a)
                        .await?;
                    self.put_next();
                }
                Some(Reply::No) => {
                    self.asking.push_front(Waiting::Reason(ask));
                    self.put_next();
                }
                Some(Reply::View) => {
                    let shown = all
                        .clone()
                        .unwrap_or_else(|| "(everything is shown above)".into());
                    self.printer.note(&shown);
                    self.asking.push_front(Waiting::Approval { ask, all });
                    self.reprompt(None);
                }
                None => {
                    self.asking.push_front(Waiting::Approval { ask, all });
                    self.reprompt(None);
                }
            },
            Waiting::Reason(ask) => {
                let a = approve::reason_of(line);
                self.conv
                    .confirm(self.conn, &ask.turn, &ask.call, &a)
                    .await?;
                self.put_next();
            }
            Waiting::Question(mut a) => match a.take(line) {
                Step::Next(_) => {
                    self.asking.push_front(Waiting::Question(a));
                    self.put_next();
                }
                Step::Again(why) => {
                    self.asking.push_front(Waiting::Question(a));
                    self.reprompt(Some(&why));
                }
                Step::Done(answers) => {
                    let (chat, request) = (a.quest.chat.clone(), a.quest.request.clone());
                    self.conv
                        .answer_input(self.conn, &chat, &request, Some(answers))
                        .await?;
                    self.put_next();
                }
            },
        }
        Ok(())
    }

    /// Handles one typed line; `false` ends the loop.
    async fn line(&mut self, line: &str) -> Result<bool, CommandError> {
        // A command wins over a pending question, so `/stop` works while one is asked.
        if !self.asking.is_empty() && !line.starts_with('/') {
            self.answer(line).await?;
            return Ok(true);
        }
        if let Some(rows) = self.picking.take()
            && !line.starts_with('/')
        {
            match line.parse::<usize>() {
                Ok(n) if (1..=rows.len()).contains(&n) => {
                    let uri = rows[n - 1].clone();
                    self.resume(&uri).await;
                    return Ok(true);
                }
                _ if line.is_empty() => return Ok(true),
                _ => {}
            }
        }
        if line.is_empty() {
            return Ok(true);
        }
        if let Some(cmd) = line.strip_prefix('/') {
            return self.command(cmd).await;
        }
        match &self.turn {
            Some(_) => {
                // The host's echo of the message is what shows it.
                self.conv.steer(self.conn, line).await?;
            }
            None => {
                let attachments = match attach::mentions(line, &self.dir()) {
                    Ok(a) => a,
                    Err(e) => {
                        self.printer.note(&self.style.yellow(&e.to_string()));
                        return Ok(true);
                    }
                };
                self.printer.reset();
                let turn = self
                    .conv
                    .send(self.conn, line, self.model.as_deref(), attachments)
                    .await?;
                if let Some(c) = self.created.iter_mut().find(|c| c.0 == self.conv.session) {
                    c.1 = true;
                }
                self.turn = Some(turn);
                self.stopping = false;
                self.shared.running.store(true, Ordering::SeqCst);
                self.spinning = Some(0);
            }
        }
        Ok(true)
    }

    async fn resume(&mut self, uri: &str) {
        match Conversation::open(self.conn, uri).await {
            Ok(conv) => {
                self.conv = conv;
                self.header();
                self.recap();
            }
            Err(e) => self.printer.note(&format!(
                "cannot resume {}: {}",
                clean_line(uri),
                clean_line(&e.to_string())
            )),
        }
    }

    async fn command(&mut self, cmd: &str) -> Result<bool, CommandError> {
        let (name, arg) = match cmd.split_once(char::is_whitespace) {
            Some((n, a)) => (n, a.trim()),
            None => (cmd, ""),
        };
        match name {
            "quit" | "exit" | "q" => return Ok(false),
            "help" | "?" => self.printer.note(&help()),
            "stop" => match self.turn.clone() {
                Some(turn) => self.conv.stop(self.conn, &turn).await?,
                None => self.printer.note("no turn is running"),
            },
            "model" if arg.is_empty() => {
                let model = self.conv.setting("model").unwrap_or_else(|| "-".into());
                self.printer.note(&format!("model {}", clean_line(&model)));
            }
            "model" => {
                self.conv.configure(self.conn, "model", arg).await?;
                self.model = Some(arg.to_owned());
                self.printer.note(&format!("model set to {arg}"));
            }
            "mode" if arg.is_empty() => {
                let mode = self
                    .conv
                    .setting("permissionMode")
                    .unwrap_or_else(|| "auto".into());
                self.printer.note(&format!("mode {}", clean_line(&mode)));
            }
            "mode" if MODES.contains(&arg) => {
                self.conv
                    .configure(self.conn, "permissionMode", arg)
                    .await?;
                self.printer.note(&format!("mode set to {arg}"));
            }
            "mode" => self.printer.note(&format!(
                "{} is not a mode: one of {}",
                clean_line(arg),
                MODES.join(", ")
            )),
            "mcp" => self.mcp(),
            "cost" => self.cost(),
            "diff" => {
                if self.printer.changes.is_empty() {
                    self.printer
                        .note("no edit approved here has run in this chat yet");
                } else {
                    let all = self
                        .printer
                        .changes
                        .iter()
                        .map(|d| screen::colored(d.trim_end(), self.style))
                        .collect::<Vec<_>>()
                        .join("\n");
                    self.printer.note(&all);
                }
            }
            "compact" => self.printer.note(
                "/compact is not offered: this host has no command to compact a session (it compacts on its own as the context fills)",
            ),
            "sessions" => {
                let rows = self.recent(20).await?;
                let lines: Vec<String> = rows
                    .iter()
                    .map(|(uri, when, title)| {
                        let mark = if *uri == self.conv.session { "*" } else { " " };
                        format!("{mark} {when}  {}  {title}", clean_line(uri))
                    })
                    .collect();
                self.printer.note(&lines.join("\n"));
            }
            "resume" if self.turn.is_some() => {
                self.printer
                    .note("a turn is running: /stop it before switching sessions");
            }
            "resume" if arg.is_empty() => {
                let rows = self.recent(10).await?;
                if rows.is_empty() {
                    self.printer.note("no stored sessions");
                } else {
                    let mut text = String::from("recent sessions (type a number, Enter to keep this one):");
                    for (i, (uri, when, title)) in rows.iter().enumerate() {
                        text.push_str(&format!("\n  {}. {when}  {title}  {}", i + 1, clean_line(uri)));
                    }
                    self.printer.note(&text);
                    self.picking = Some(rows.into_iter().map(|r| r.0).collect());
                }
            }
            "resume" => {
                let uri = arg.to_owned();
                self.resume(&uri).await;
            }
            "new" if self.turn.is_some() => {
                self.printer
                    .note("a turn is running: /stop it before starting a session");
            }
            "new" => {
                let mode = self.conv.setting("permissionMode");
                let new = new_session(
                    self.model.as_deref(),
                    mode.as_deref(),
                    self.machine.as_deref(),
                );
                self.conv = Conversation::create(self.conn, &self.fallback_dir, &new).await?;
                self.created.push((self.conv.session.clone(), false));
                self.header();
            }
            // The workspace commands live in `crate::undo`; this is only their hook.
            "status" => {
                for line in crate::undo::status_lines(&self.conv.session, &self.conv.session_state)
                {
                    self.printer.note(&line);
                }
            }
            "undo" | "redo" => {
                for line in
                    crate::undo::in_chat(self.conn, &self.conv.session, name == "redo", arg).await
                {
                    self.printer.note(&line);
                }
            }
            other => self.printer.note(&format!(
                "/{} is not a command (/help lists them)",
                clean_line(other)
            )),
        }
        Ok(true)
    }

    /// The stored sessions, most recent first: URI, last activity, title (cleaned).
    async fn recent(&self, n: usize) -> Result<Vec<(String, String, String)>, CommandError> {
        let mut rows = super::sessions::listed(self.conn).await?;
        rows.sort_by(|a, b| b.modified_at.cmp(&a.modified_at));
        Ok(rows
            .into_iter()
            .filter(|r| {
                // A session this chat made and never used is not worth offering.
                !self.created.iter().any(|c| c.0 == r.resource && !c.1)
                    || r.resource == self.conv.session
            })
            .take(n)
            .map(|r| (r.resource, clean_line(&r.modified_at), clean_line(&r.title)))
            .collect())
    }

    /// `/mcp`: the session's MCP servers, as its state lists them.
    fn mcp(&mut self) {
        let state = serde_json::to_value(&self.conv.session_state).unwrap_or_default();
        let servers: Vec<String> = state["customizations"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["type"] == "mcpServer")
            .map(|c| {
                let name = c["name"].as_str().unwrap_or("?");
                let status = c["state"]["status"].as_str().unwrap_or("unknown");
                let why = c["state"]["error"]["message"]
                    .as_str()
                    .map(|m| format!(": {}", clean_line(m)))
                    .unwrap_or_default();
                format!("  {}  {}{why}", clean_line(name), clean_line(status))
            })
            .collect();
        if servers.is_empty() {
            self.printer.note("this session has no MCP servers");
        } else {
            self.printer
                .note(&format!("MCP servers:\n{}", servers.join("\n")));
        }
    }

    /// `/cost`: the tokens and cost of the session's turns, as the host reported them.
    fn cost(&mut self) {
        let (mut input, mut output, mut cost, mut priced) = (0i64, 0i64, 0.0, true);
        let mut turns = 0;
        for t in &self.conv.chat_state.turns {
            let Some(u) = &t.usage else { continue };
            turns += 1;
            input += u.input_tokens.unwrap_or(0);
            output += u.output_tokens.unwrap_or(0);
            match cost_of(u) {
                Some(c) => cost += c,
                None => priced = false,
            }
        }
        let money = if priced {
            format!("${cost:.4}")
        } else {
            "cost unknown for some turns".into()
        };
        let last = self
            .printer
            .usage()
            .and_then(usage_line)
            .map(|l| format!("\nlast turn: {l}"))
            .unwrap_or_default();
        self.printer.note(&format!(
            "{turns} turns: {input} tokens in, {output} out · {money}{last}"
        ));
    }

    /// The last exchange of a resumed session, so the person sees where it stands.
    fn recap(&mut self) {
        if let Some(last) = self.conv.chat_state.turns.last() {
            let line = format!("last: {}", super::render::one_line(&last.message.text));
            self.printer.note(&self.style.dim(&line));
        }
    }

    async fn action(
        &mut self,
        env: ahp_types::actions::ActionEnvelope,
    ) -> Result<(), CommandError> {
        use ahp_types::actions::StateAction as A;
        let shows = matches!(
            env.action,
            A::ChatDelta(_)
                | A::ChatResponsePart(_)
                | A::ChatToolCallComplete(_)
                | A::ChatToolCallConfirmed(_)
                | A::ChatError(_)
                | A::SessionInputNeededSet(_)
                | A::SessionMcpServerStateChanged(_)
        );
        if shows {
            self.unspin();
        }
        self.printer.show(&env);
        if env.rejection_reason.is_none() {
            if let Some(mut ask) = approve::ask_of(&env.action, &self.conv.chat) {
                let dir = self.dir();
                approve::load_previews(self.conn, &self.conv.session, &mut ask, &dir).await;
                self.printer.previewed(&ask.call, &ask.previews);
                let (_, all) = approve::describe(&ask, self.style);
                self.asking.push_back(Waiting::Approval { ask, all });
                if self.asking.len() == 1 {
                    self.put_next();
                }
            } else if let Some(quest) = questions::quest_of(&env.action, &self.conv.chat) {
                self.asking
                    .push_back(Waiting::Question(Answering::new(quest)));
                if self.asking.len() == 1 {
                    self.put_next();
                }
            } else if let Some(what) = unanswerable(&env.action, &self.conv.chat)
                && let Some(turn) = self.turn.clone()
            {
                self.printer
                    .note(&self.style.yellow(&format!("{what}; stopping the turn")));
                self.conv.stop(self.conn, &turn).await?;
            }
        }
        if let Some(id) = approve::settled(&env.action)
            && let Some(at) = self.asking.iter().position(|w| w.entry() == id)
        {
            self.asking.remove(at);
            if at == 0 {
                self.put_next();
            }
        }
        let Some(turn) = self.turn.clone() else {
            return Ok(());
        };
        if let Some(end) = end_of(&env.action, &turn) {
            self.unspin();
            self.printer.break_line();
            match end {
                End::Complete => {
                    if let Some(line) = self.printer.usage_line() {
                        self.printer.note(&self.style.dim(&line));
                    }
                }
                End::Cancelled => self.printer.note(&self.style.dim("(stopped)")),
                End::Failed => {}
            }
            self.turn = None;
            self.asking.clear();
            self.stopping = false;
            self.shared.running.store(false, Ordering::SeqCst);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustyline::completion::Completer;

    #[test]
    fn tab_completes_commands_and_paths() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("notes.txt"), "x").expect("write");
        std::fs::create_dir(dir.path().join("nested")).expect("mkdir");
        let c = Completion {
            dir: dir.path().to_path_buf(),
        };
        let history = rustyline::history::MemHistory::new();
        let ctx = rustyline::Context::new(&history);
        let (at, found) = c.complete("/res", 4, &ctx).expect("complete");
        assert_eq!(at, 0);
        assert_eq!(found[0].replacement, "/resume ");
        let (_, found) = c.complete("/re", 3, &ctx).expect("complete");
        let offered: Vec<&str> = found.iter().map(|p| p.replacement.as_str()).collect();
        assert_eq!(offered, ["/redo ", "/resume "]);
        let (at, found) = c.complete("read @no", 8, &ctx).expect("complete");
        assert_eq!(at, 5);
        assert_eq!(found[0].replacement, "@notes.txt");
        let (_, found) = c.complete("@ne", 3, &ctx).expect("complete");
        assert_eq!(found[0].replacement, "@nested/");
    }
}
