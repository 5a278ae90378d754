//! `ahpd chat`: a conversation at the terminal. A line sent while no turn runs starts one; a
//! line typed while one runs steers it (or answers the approval it asks); `/` lines are
//! commands. Between turns the line is edited with history on the arrows; during a turn the
//! terminal stays in its ordinary mode, so Ctrl-C stops the turn and typing shows as typed.

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use super::approve::{self, Ask};
use super::conversation::Conversation;
use super::render::{Printer, Style};
use super::run::{End, end_of, new_session, session_dir};
use super::{ChatOpts, Conn, MODES, Target, connect, runtime, work_dir};
use crate::commands::CommandError;
use crate::locations::Locations;

/// The prompt between turns.
pub const PROMPT: &str = "you> ";

const HELP: &str = "\
  a line sends a message; typed while a turn runs, it steers that turn
  /stop             stop the running turn (Ctrl-C does the same)
  /model [M]        show or set the session's model
  /mode [MODE]      show or set the permission mode (auto, default, acceptEdits, plan, bypassPermissions, dontAsk)
  /status           the session, its instruction files (AGENTS.md) and its recorded changes
  /undo [N|FILE]    undo the last turn's changes (or turn N's, or one file's)
  /redo [N|FILE]    put undone changes back
  /sessions         list the stored sessions
  /resume URI       continue another session
  /new              start a new session
  /quit             leave (Ctrl-D too)";

const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// Reads lines for the loop: edited lines between turns, plain lines while a turn runs (so
/// output can stream without a line editor redrawing over it). Standard input that is not a
/// terminal is read line by line throughout.
fn reader(
    tx: mpsc::UnboundedSender<String>,
    done: std::sync::mpsc::Receiver<()>,
    running: Arc<AtomicBool>,
) {
    let terminal = std::io::stdin().is_terminal();
    let mut editor = if terminal {
        rustyline::DefaultEditor::new().ok()
    } else {
        None
    };
    loop {
        let line = match editor.as_mut() {
            Some(ed) if !running.load(Ordering::SeqCst) => match ed.readline(PROMPT) {
                Ok(line) => {
                    if !line.trim().is_empty() {
                        let _ = ed.add_history_entry(line.as_str());
                    }
                    line
                }
                // Ctrl-C at the prompt empties the line, as in a shell.
                Err(rustyline::error::ReadlineError::Interrupted) => continue,
                Err(_) => return,
            },
            Some(_) => match plain_line_while(&running) {
                Plain::Line(l) => l,
                Plain::TurnOver => continue,
                Plain::End => return,
            },
            None => match plain_line() {
                Some(l) => l,
                None => return,
            },
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

struct Loop<'a> {
    conn: &'a Conn,
    conv: Conversation,
    printer: Printer,
    style: Style,
    fallback_dir: PathBuf,
    turn: Option<String>,
    /// Approvals asked in this turn, the first one on the screen; several calls of one
    /// model step may each ask.
    asking: VecDeque<Ask>,
    running: Arc<AtomicBool>,
    /// Whether the spinner is on screen.
    spinning: Option<usize>,
    model: Option<String>,
}

/// `ahpd chat`; returns the exit code.
pub fn chat(loc: &Locations, opts: &ChatOpts) -> Result<i32, CommandError> {
    let rt = runtime()?;
    let code = rt.block_on(async {
        let dir = work_dir(opts.path.as_deref())?;
        let target = Target {
            path: Some(dir.clone()),
            in_process: opts.in_process,
        };
        let conn = connect(loc, &target).await?;
        let result = talk(&conn, opts, &dir).await;
        conn.close().await;
        result
    });
    rt.shutdown_background();
    code
}

async fn talk(conn: &Conn, opts: &ChatOpts, dir: &Path) -> Result<i32, CommandError> {
    let conv = match &opts.session {
        Some(uri) => Conversation::open(conn, uri).await?,
        None => {
            let new = new_session(opts.model.as_deref(), opts.mode.as_deref());
            Conversation::create(conn, dir, &new).await?
        }
    };
    let running = Arc::new(AtomicBool::new(false));
    let (tx, mut lines) = mpsc::unbounded_channel();
    let (done, handled) = std::sync::mpsc::channel();
    {
        let running = running.clone();
        std::thread::spawn(move || reader(tx, handled, running));
    }
    let mut interrupts = signal(SignalKind::interrupt())
        .map_err(|e| CommandError::Failed(format!("cannot catch Ctrl-C: {e}")))?;
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    let style = Style::for_stderr();
    let mut lp = Loop {
        conn,
        conv,
        printer: Printer::new(false, opts.show_reasoning),
        style,
        fallback_dir: dir.to_path_buf(),
        turn: None,
        asking: VecDeque::new(),
        running,
        spinning: None,
        model: opts.model.clone(),
    };
    lp.header();
    let terminal = std::io::stdin().is_terminal();
    let mut owed = false;
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
                    return Err(CommandError::Failed("the connection to the host ended".into()));
                };
                lp.action(env).await?;
            }
            _ = interrupts.recv() => {
                lp.unspin();
                match lp.turn.clone() {
                    Some(turn) => {
                        lp.printer.note("stopping the turn");
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
    Ok(0)
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
            ""
        } else {
            self.conv.session_state.title.as_str()
        };
        eprintln!(
            "{}",
            self.style.dim(&format!(
                "{} · {} · model {model} · mode {mode} · /help for commands",
                self.conv.session,
                if title.is_empty() { "new" } else { title }
            ))
        );
    }

    fn spin(&mut self) {
        let Some(i) = self.spinning else { return };
        if std::io::stderr().is_terminal() {
            eprint!("\r{} thinking", SPINNER[i % SPINNER.len()]);
            let _ = std::io::stderr().flush();
        }
        self.spinning = Some(i + 1);
    }

    fn unspin(&mut self) {
        if self.spinning.take().is_some_and(|i| i > 0) && std::io::stderr().is_terminal() {
            eprint!("\r\x1b[K");
            let _ = std::io::stderr().flush();
        }
    }

    /// Shows the first waiting approval, if any.
    fn put_next_question(&mut self) {
        let Some(ask) = self.asking.front() else {
            return;
        };
        self.printer.break_line();
        eprintln!("{}", approve::describe(ask, &self.dir(), self.style));
        eprint!("{}", approve::QUESTION);
        let _ = std::io::stderr().flush();
    }

    fn dir(&self) -> PathBuf {
        session_dir(&self.conv, &self.fallback_dir)
    }

    /// Handles one typed line; `false` ends the loop.
    async fn line(&mut self, line: &str) -> Result<bool, CommandError> {
        // A command wins over a pending question, so `/stop` works while one is asked.
        if let Some(ask) = self.asking.front().cloned()
            && !line.starts_with('/')
        {
            match approve::parse_answer(line) {
                Some(answer) => {
                    self.asking.pop_front();
                    self.conv
                        .confirm(self.conn, &ask.turn, &ask.call, &answer)
                        .await?;
                    self.put_next_question();
                }
                None => {
                    eprint!("{}", approve::QUESTION);
                    let _ = std::io::stderr().flush();
                }
            }
            return Ok(true);
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
                self.printer.reset();
                let turn = self
                    .conv
                    .send(self.conn, line, self.model.as_deref())
                    .await?;
                self.turn = Some(turn);
                self.running.store(true, Ordering::SeqCst);
                self.spinning = Some(0);
            }
        }
        Ok(true)
    }

    async fn command(&mut self, cmd: &str) -> Result<bool, CommandError> {
        let (name, arg) = match cmd.split_once(char::is_whitespace) {
            Some((n, a)) => (n, a.trim()),
            None => (cmd, ""),
        };
        match name {
            "quit" | "exit" | "q" => return Ok(false),
            "help" | "?" => eprintln!("{HELP}"),
            "stop" => match self.turn.clone() {
                Some(turn) => self.conv.stop(self.conn, &turn).await?,
                None => self.printer.note("no turn is running"),
            },
            "model" if arg.is_empty() => {
                let model = self.conv.setting("model").unwrap_or_else(|| "-".into());
                self.printer.note(&format!("model {model}"));
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
                self.printer.note(&format!("mode {mode}"));
            }
            "mode" if MODES.contains(&arg) => {
                self.conv
                    .configure(self.conn, "permissionMode", arg)
                    .await?;
                self.printer.note(&format!("mode set to {arg}"));
            }
            "mode" => self
                .printer
                .note(&format!("{arg} is not a mode: one of {}", MODES.join(", "))),
            "sessions" => {
                let mut rows = super::sessions::listed(self.conn).await?;
                rows.sort_by(|a, b| b.modified_at.cmp(&a.modified_at));
                for r in rows.iter().take(20) {
                    let mark = if r.resource == self.conv.session {
                        "*"
                    } else {
                        " "
                    };
                    eprintln!("{mark} {}  {}  {}", r.modified_at, r.resource, r.title);
                }
            }
            "resume" if self.turn.is_some() => {
                self.printer
                    .note("a turn is running: /stop it before switching sessions");
            }
            "resume" if arg.is_empty() => self.printer.note("usage: /resume URI (see /sessions)"),
            "resume" => match Conversation::open(self.conn, arg).await {
                Ok(conv) => {
                    self.conv = conv;
                    self.header();
                    self.recap();
                }
                Err(e) => self.printer.note(&format!("cannot resume {arg}: {e}")),
            },
            "new" if self.turn.is_some() => {
                self.printer
                    .note("a turn is running: /stop it before starting a session");
            }
            "new" => {
                let mode = self.conv.setting("permissionMode");
                let new = new_session(self.model.as_deref(), mode.as_deref());
                self.conv = Conversation::create(self.conn, &self.fallback_dir, &new).await?;
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
            other => self
                .printer
                .note(&format!("/{other} is not a command (/help lists them)")),
        }
        Ok(true)
    }

    /// The last exchange of a resumed session, so the person sees where it stands.
    fn recap(&mut self) {
        if let Some(last) = self.conv.chat_state.turns.last() {
            eprintln!(
                "{}",
                self.style.dim(&format!(
                    "last: {}",
                    super::render::one_line(&last.message.text)
                ))
            );
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
        );
        if shows {
            self.unspin();
        }
        self.printer.show(&env);
        if env.rejection_reason.is_none()
            && let Some(ask) = approve::ask_of(&env.action, &self.conv.chat)
        {
            self.asking.push_back(ask);
            if self.asking.len() == 1 {
                self.put_next_question();
            }
        }
        if let Some(id) = approve::settled(&env.action)
            && let Some(at) = self.asking.iter().position(|a| id.ends_with(&a.call))
        {
            self.asking.remove(at);
            if at == 0 {
                self.put_next_question();
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
                        eprintln!("{}", self.style.dim(&line));
                    }
                }
                End::Cancelled => eprintln!("{}", self.style.dim("(stopped)")),
                End::Failed => {}
            }
            self.turn = None;
            self.asking.clear();
            self.running.store(false, Ordering::SeqCst);
        }
        Ok(())
    }
}
