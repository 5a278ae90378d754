//! The host's sustained benchmarks, each against a raw axum WebSocket server that
//! sends the same frames in the same run:
//!
//! - `fanout_50`: one session streams `chat/delta` at 2,000 actions/s to 50 loopback clients,
//!   each rebuilding the chat with the official reducers. Reported: disconnects, the deepest
//!   outbound queue against half its capacity, mirrors equal to the host's snapshot at the
//!   end, delivery rate, CPU and the drain time after the last emit.
//! - `throughput_one_connection`: as many deltas as one client decoding every frame takes,
//!   with at most `WINDOW` frames in flight so a client that keeps up is never closed.
//!
//! Each phase lasts `AHPD_BENCH_SECS` seconds (default 30, the spec's figure).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ahp::reducers::apply_action_to_chat;
use ahp_types::actions::{ActionEnvelope, StateAction};
use ahp_types::state::{ChatState, SnapshotState};
use tokio::sync::{Notify, broadcast};

use crate::{RawClient, delta, host_setup, raw_server};

/// One token-sized delta, as a model streams them.
const CONTENT: &str = "token-8b";
/// Frames in flight in the throughput run: a quarter of the host's default outbound queue.
const WINDOW: u64 = 1_024;
/// The raw server's broadcast buffer, matching the host's default outbound queue.
const RAW_BUFFER: usize = 4_096;

/// Seconds each sustained phase runs.
pub fn phase_secs() -> f64 {
    std::env::var("AHPD_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(30.0)
}

/// CPU seconds (user + system) this process has used, read from `/proc`; `None` elsewhere.
fn cpu_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name start at field 3; utime and stime are 14, 15.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    let hz = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or(100.0);
    Some(ticks / hz)
}

fn cpu_since(start: Option<f64>) -> f64 {
    match (start, cpu_secs()) {
        (Some(a), Some(b)) => b - a,
        _ => f64::NAN,
    }
}

/// The frame the host sends for delta number `seq`, serialised per message as the host does.
fn raw_frame(chat: &str, turn: &str, seq: u64) -> Arc<str> {
    let action = serde_json::to_string(&delta(turn, CONTENT)).unwrap();
    let chat = serde_json::to_string(chat).unwrap();
    Arc::from(format!(
        r#"{{"jsonrpc":"2.0","method":"action","params":{{"channel":{chat},"action":{action},"serverSeq":{seq}}}}}"#
    ))
}

#[derive(serde::Deserialize)]
struct Note {
    method: String,
    params: ActionEnvelope,
}

/// The envelope in an `action` notification; anything else (replies) is `None`.
fn envelope(text: &str) -> Option<ActionEnvelope> {
    let note: Note = serde_json::from_str(text).ok()?;
    (note.method == "action").then_some(note.params)
}

/// Send `total` frames at `rate` per second; returns when the last was handed over.
async fn paced(rate: f64, total: u64, mut send: impl FnMut(u64)) {
    let t0 = Instant::now();
    let mut sent = 0;
    while sent < total {
        let due = ((t0.elapsed().as_secs_f64() * rate) as u64).min(total);
        while sent < due {
            sent += 1;
            send(sent);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

struct Mirrored {
    chat: ChatState,
    disconnected: bool,
    done: Instant,
}

/// A client that rebuilds the chat from `chat` onwards until it has `expect` deltas.
async fn mirror_client(
    mut c: RawClient,
    uri: String,
    mut chat: ChatState,
    expect: u64,
) -> Mirrored {
    let mut got = 0;
    while got < expect {
        let Some(text) = c.try_frame().await else {
            return Mirrored {
                chat,
                disconnected: true,
                done: Instant::now(),
            };
        };
        if let Some(env) = envelope(&text)
            && env.channel == uri
            && env.rejection_reason.is_none()
        {
            apply_action_to_chat(&mut chat, &env.action);
            if matches!(env.action, StateAction::ChatDelta(_)) {
                got += 1;
            }
        }
    }
    Mirrored {
        chat,
        disconnected: false,
        done: Instant::now(),
    }
}

struct Phase {
    rate: f64,
    cpu: f64,
    drain: Duration,
    disconnected: usize,
    equal: usize,
}

async fn join_all(tasks: Vec<tokio::task::JoinHandle<Mirrored>>) -> Vec<Mirrored> {
    let mut outs = Vec::new();
    for t in tasks {
        outs.push(t.await.unwrap());
    }
    outs
}

fn summarise(
    outs: &[Mirrored],
    t0: Instant,
    emitted_at: Instant,
    cpu: f64,
    messages: u64,
    want: &ChatState,
) -> Phase {
    let last = outs.iter().map(|o| o.done).max().unwrap_or(emitted_at);
    Phase {
        rate: (outs.len() as u64 * messages) as f64 / (last - t0).as_secs_f64(),
        cpu,
        drain: last.saturating_duration_since(emitted_at),
        disconnected: outs.iter().filter(|o| o.disconnected).count(),
        equal: outs.iter().filter(|o| &o.chat == want).count(),
    }
}

fn chat_of(state: &SnapshotState) -> ChatState {
    match state {
        SnapshotState::Chat(c) => (**c).clone(),
        _ => panic!("not a chat snapshot"),
    }
}

pub async fn fanout_50(secs: f64) {
    const CLIENTS: usize = 50;
    const RATE: f64 = 2_000.0;
    let messages = (RATE * secs) as u64;
    let (host, url, chat, slot, ctl) = host_setup().await;
    tokio::spawn(ctl.drain());
    let mut joined = Vec::new();
    for i in 0..CLIENTS {
        joined.push(RawClient::join_with_snapshot(&url, &format!("f{i}"), &chat).await);
    }
    let start_state = chat_of(&host.snapshot(&chat).await.unwrap().state);
    let (ctx, turn) = slot.lock().unwrap().clone().unwrap();
    let cpu0 = cpu_secs();
    let t0 = Instant::now();
    let tasks: Vec<_> = joined
        .into_iter()
        .map(|(c, snap)| tokio::spawn(mirror_client(c, chat.clone(), snap, messages)))
        .collect();
    paced(RATE, messages, |_| ctx.emit(delta(&turn, CONTENT))).await;
    let emitted_at = Instant::now();
    let outs = join_all(tasks).await;
    let cpu = cpu_since(cpu0);
    // Every client having every delta means the host published them all: it is quiescent.
    let snap = chat_of(&host.snapshot(&chat).await.unwrap().state);
    let h = summarise(&outs, t0, emitted_at, cpu, messages, &snap);
    drop(outs);
    let stats = host.handle().outbound_queue_stats();

    // The baseline: the same frames at the same rate through axum + broadcast.
    let (tx, _) = broadcast::channel::<Arc<str>>(RAW_BUFFER);
    let raw_url = raw_server(tx.clone()).await;
    let mut raws = Vec::new();
    for _ in 0..CLIENTS {
        raws.push(RawClient::connect(&raw_url).await);
    }
    while tx.receiver_count() < CLIENTS {
        tokio::task::yield_now().await;
    }
    let cpu0 = cpu_secs();
    let t0 = Instant::now();
    let tasks: Vec<_> = raws
        .into_iter()
        .map(|c| {
            tokio::spawn(mirror_client(
                c,
                chat.clone(),
                start_state.clone(),
                messages,
            ))
        })
        .collect();
    paced(RATE, messages, |seq| {
        let _ = tx.send(raw_frame(&chat, &turn, seq));
    })
    .await;
    let emitted_at = Instant::now();
    let outs = join_all(tasks).await;
    let r = summarise(&outs, t0, emitted_at, cpu_since(cpu0), messages, &snap);

    println!(
        "fanout_50 ({CLIENTS} clients, {messages} x chat/delta at {RATE:.0}/s for {secs:.0} s, every client mirrors the chat)"
    );
    println!(
        "  ahpd-sdk : {:>9.0} msg/s delivered, cpu {:>6.2} s, drain after last emit {:>7.1} ms, disconnected {}, mirrors equal to snapshot {}/{CLIENTS}",
        h.rate,
        h.cpu,
        h.drain.as_secs_f64() * 1e3,
        h.disconnected,
        h.equal
    );
    println!(
        "             outbound queue high water {} of {} (half {}): {}; closed for a full queue: {}",
        stats.high_water,
        stats.capacity,
        stats.capacity / 2,
        if stats.high_water <= stats.capacity / 2 {
            "ok"
        } else {
            "ABOVE HALF"
        },
        stats.closed_full
    );
    println!(
        "  raw axum + broadcast : {:>9.0} msg/s delivered, cpu {:>6.2} s, drain after last emit {:>7.1} ms, disconnected {}, mirrors equal to the host's {}/{CLIENTS}",
        r.rate,
        r.cpu,
        r.drain.as_secs_f64() * 1e3,
        r.disconnected,
        r.equal
    );
    println!(
        "  ratio host/raw: delivered {:.2}x  cpu {:.2}x  drain {:.2}x",
        h.rate / r.rate,
        h.cpu / r.cpu,
        h.drain.as_secs_f64() / r.drain.as_secs_f64().max(1e-9)
    );
}

/// Counts what one client decoded and wakes the sender after each frame.
#[derive(Default)]
struct Flow {
    received: AtomicU64,
    disconnected: AtomicBool,
    wake: Notify,
}

async fn decoding_client(mut c: RawClient, flow: Arc<Flow>) {
    while let Some(text) = c.try_frame().await {
        if let Some(env) = envelope(&text)
            && matches!(env.action, StateAction::ChatDelta(_))
        {
            flow.received.fetch_add(1, Ordering::Release);
            flow.wake.notify_one();
        }
    }
    flow.disconnected.store(true, Ordering::Release);
    flow.wake.notify_one();
}

/// Send for `secs` keeping at most `WINDOW` frames ahead of the client, then wait for it to
/// catch up. Returns frames per second and whether the client was cut off.
async fn windowed(secs: f64, flow: &Flow, mut send: impl FnMut(u64)) -> (f64, bool) {
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(secs);
    let mut sent = 0u64;
    while Instant::now() < deadline && !flow.disconnected.load(Ordering::Acquire) {
        while sent - flow.received.load(Ordering::Acquire) < WINDOW {
            sent += 1;
            send(sent);
        }
        flow.wake.notified().await;
    }
    while flow.received.load(Ordering::Acquire) < sent && !flow.disconnected.load(Ordering::Acquire)
    {
        flow.wake.notified().await;
    }
    let rate = flow.received.load(Ordering::Acquire) as f64 / t0.elapsed().as_secs_f64();
    (rate, flow.disconnected.load(Ordering::Acquire))
}

pub async fn throughput_one_connection(secs: f64) {
    let (_host, url, chat, slot, ctl) = host_setup().await;
    tokio::spawn(ctl.drain());
    let client = RawClient::join(&url, "tp", &chat).await;
    let (ctx, turn) = slot.lock().unwrap().clone().unwrap();
    let flow = Arc::new(Flow::default());
    let reader = tokio::spawn(decoding_client(client, flow.clone()));
    let cpu0 = cpu_secs();
    let (host_rate, host_cut) = windowed(secs, &flow, |_| ctx.emit(delta(&turn, CONTENT))).await;
    let host_cpu = cpu_since(cpu0);
    let host_total = flow.received.load(Ordering::Acquire);
    reader.abort();

    let (tx, _) = broadcast::channel::<Arc<str>>(RAW_BUFFER);
    let raw_url = raw_server(tx.clone()).await;
    let client = RawClient::connect(&raw_url).await;
    while tx.receiver_count() == 0 {
        tokio::task::yield_now().await;
    }
    let flow = Arc::new(Flow::default());
    let reader = tokio::spawn(decoding_client(client, flow.clone()));
    let cpu0 = cpu_secs();
    let (raw_rate, raw_cut) = windowed(secs, &flow, |seq| {
        let _ = tx.send(raw_frame(&chat, &turn, seq));
    })
    .await;
    let raw_cpu = cpu_since(cpu0);
    reader.abort();

    println!(
        "throughput_one_connection ({secs:.0} s, client decodes every frame, at most {WINDOW} in flight)"
    );
    println!(
        "  ahpd-sdk : {host_rate:>9.0} actions/s ({host_total} actions), cpu {host_cpu:>6.2} s, disconnected: {host_cut}"
    );
    println!(
        "  raw axum : {raw_rate:>9.0} actions/s, cpu {raw_cpu:>6.2} s, disconnected: {raw_cut}"
    );
    println!(
        "  ratio host/raw: {:.2}x actions/s, {:.2}x cpu per action; target 10,000 actions/s: {}",
        host_rate / raw_rate,
        (host_cpu / host_rate) / (raw_cpu / raw_rate),
        if host_rate >= 10_000.0 && !host_cut {
            "met"
        } else {
            "NOT met"
        }
    );
}
