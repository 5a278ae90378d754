//! P4: the SSE parser and the chunk decoder over a recorded-shape stream of about 10 MB.
//!
//! Baseline: splitting the same bytes into lines with `memchr`, the least any parser must do.
//! Fed in 1 KiB and 16 KiB reads. Prints MB/s, CPU per chunk (nanoseconds per SSE event), the
//! share of one core a 1 MB/s stream costs, and the ratio to the baseline.

use std::hint::black_box;
use std::time::{Duration, Instant};

use cofold_openai::StreamDecoder;
use cofold_openai::sse::SseParser;
use criterion::{Criterion, Throughput};
use serde_json::json;

/// Typical chunks: short text deltas, tool-call fragments, a usage chunk at the end.
fn recorded_stream(target: usize) -> (Vec<u8>, usize) {
    let mut out = Vec::with_capacity(target + 4096);
    let mut events = 0;
    let mut i = 0u64;
    while out.len() < target {
        let chunk = if i % 10 == 9 {
            json!({ "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1_741_570_283u64,
                "model": "gpt-4o", "choices": [{ "index": 0, "delta": { "tool_calls": [{ "index": 0,
                "function": { "arguments": "{\"path\":\"src/" } }] }, "finish_reason": null }] })
        } else {
            json!({ "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1_741_570_283u64,
                "model": "gpt-4o", "choices": [{ "index": 0, "delta": { "content": format!(" word{}", i % 97) },
                "finish_reason": null }] })
        };
        out.extend_from_slice(format!("data: {chunk}\n\n").as_bytes());
        events += 1;
        i += 1;
    }
    let usage = json!({ "choices": [], "usage": { "prompt_tokens": 100, "completion_tokens": i } });
    out.extend_from_slice(format!("data: {usage}\n\ndata: [DONE]\n\n").as_bytes());
    (out, events + 2)
}

fn baseline(bytes: &[u8], read: usize) -> usize {
    let mut lines = 0;
    for r in bytes.chunks(read) {
        lines += memchr::memchr_iter(b'\n', r).count();
    }
    lines
}

fn parse(bytes: &[u8], read: usize) -> usize {
    let mut p = SseParser::new();
    let mut n = 0;
    for r in bytes.chunks(read) {
        p.push(r, &mut |e| {
            n += e.data.len();
            black_box(e);
        });
    }
    p.finish(&mut |e| n += e.data.len());
    n
}

fn decode(bytes: &[u8], read: usize) -> usize {
    let mut p = SseParser::new();
    let mut d = StreamDecoder::new("http://bench/v1/chat/completions");
    let mut n = 0;
    let mut events = Vec::new();
    for r in bytes.chunks(read) {
        p.push(r, &mut |e| events.push(e));
        for e in events.drain(..) {
            let _ = d.event(&e, &mut |m| {
                n += 1;
                black_box(m);
            });
        }
    }
    p.finish(&mut |e| events.push(e));
    for e in events.drain(..) {
        let _ = d.event(&e, &mut |_| n += 1);
    }
    black_box(d.finish(&mut |_| n += 1));
    n
}

type Case = (&'static str, fn(&[u8], usize) -> usize);
const CASES: [Case; 3] = [
    ("memchr_lines", baseline),
    ("sse_parse", parse),
    ("sse_decode", decode),
];

fn criterion_benches(c: &mut Criterion, bytes: &[u8]) {
    let mut g = c.benchmark_group("sse");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.sample_size(10);
    for read in [1024usize, 16 * 1024] {
        for (name, f) in CASES {
            g.bench_function(format!("{name}/{}KiB", read / 1024), |b| {
                b.iter(|| f(black_box(bytes), read))
            });
        }
    }
    g.finish();
}

/// The median of `runs` timed calls. The baseline takes well under a millisecond, so it gets many
/// more runs than the parsers: on a loaded machine a few samples of it are mostly noise.
fn median_time(f: fn(&[u8], usize) -> usize, bytes: &[u8], read: usize, runs: usize) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            black_box(f(black_box(bytes), read));
            t.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let (bytes, events) = recorded_stream(10 * 1024 * 1024);
    let mut c = Criterion::default().configure_from_args();
    criterion_benches(&mut c, &bytes);
    c.final_summary();

    let mb = bytes.len() as f64 / 1e6;
    println!(
        "\nP4 summary: {mb:.1} MB, {events} SSE events (avg {} bytes)",
        bytes.len() / events
    );
    println!(
        "{:<12} {:>6} {:>10} {:>12} {:>14} {:>16}",
        "case", "read", "MB/s", "ns/event", "core@1MB/s", "x baseline time"
    );
    for read in [1024usize, 16 * 1024] {
        let base = median_time(baseline, &bytes, read, 201);
        for (name, f) in CASES {
            let runs = if name == "memchr_lines" { 201 } else { 9 };
            let t = median_time(f, &bytes, read, runs);
            let secs = t.as_secs_f64();
            println!(
                "{name:<12} {:>4}KiB {:>10.1} {:>12.1} {:>13.3}% {:>16.2}",
                read / 1024,
                mb / secs,
                secs * 1e9 / events as f64,
                100.0 * (1.0 / (mb / secs)),
                secs / base.as_secs_f64()
            );
        }
    }
}
