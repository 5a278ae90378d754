//! The context view, request assembly under a token budget, and the arithmetic of compaction.
//!
//! Everything here is pure: it looks at a transcript and decides. The run loop does the writing
//! (the summary's model step, its message and its event).

use std::ops::Range;

use crate::message::{Message, MessageSource, Part, Role};

/// The ask a summary request ends with, and the input of a `compact` run.
pub const COMPACT_ASK: &str = "Summarize the conversation so far.";

/// The rules appended to the instructions of a summary request, under `## summary`.
pub const SUMMARY_RULES: &str = "Write a summary of the conversation above that lets the work continue without it: the goal and constraints, decisions and their reasons, the files, commands and names that matter, what is done and what remains. Reply with the summary only.";

/// What a summary message's text starts with, before a blank line and the summary itself.
pub const SUMMARY_PREFIX: &str = "Summary of the conversation so far:";

/// The context window assumed when the catalogue does not know the model's.
pub const DEFAULT_CONTEXT_TOKENS: u64 = 32000;

/// The default share of the window at which a session compacts.
pub const DEFAULT_AUTO_COMPACT_AT: f64 = 0.8;

/// A token estimator over text, such as the agent's `estimateTokens`.
pub type Estimator<'a> = &'a (dyn Fn(&str) -> u64 + Send + Sync);

/// The default estimate: one token per four characters, rounded up.
pub fn default_estimate(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// The estimated tokens of one message: 4 for framing plus its text, tool-call names and raw
/// arguments, tool-result contents, 1000 per image; reasoning counts nothing.
pub fn estimate_message(message: &Message, estimate: Estimator<'_>) -> u64 {
    let mut total = 4;
    for part in &message.parts {
        total += match part {
            Part::Text { text } => estimate(text),
            Part::Image { .. } => 1000,
            Part::Reasoning { .. } => 0,
            Part::ToolCall(call) => estimate(&call.name) + estimate(&call.raw),
            Part::ToolResult(result) => estimate(&result.content),
        };
    }
    total
}

/// The sum of the message estimates.
pub fn estimate_messages<'m>(
    messages: impl IntoIterator<Item = &'m Message>,
    estimate: Estimator<'_>,
) -> u64 {
    messages
        .into_iter()
        .map(|m| estimate_message(m, estimate))
        .sum()
}

fn is_summary(message: &Message) -> bool {
    message.source == MessageSource::Summary
}

fn covered_ids(history: &[Message]) -> std::collections::HashSet<&str> {
    history
        .iter()
        .filter(|m| is_summary(m))
        .flat_map(|m| m.summarizes.iter().flatten().map(String::as_str))
        .collect()
}

/// The messages a model sees of `history`: all of it when nothing was summarized; otherwise the
/// newest summary first, then every non-summary message no summary covers, in transcript order.
pub fn context_of(history: &[Message]) -> Vec<Message> {
    let Some(newest) = history.iter().rev().find(|m| is_summary(m)) else {
        return history.to_vec();
    };
    let covered = covered_ids(history);
    let mut view = vec![newest.clone()];
    view.extend(
        history
            .iter()
            .filter(|m| !is_summary(m) && !covered.contains(m.id.as_str()))
            .cloned(),
    );
    view
}

fn has_tool_calls(message: &Message) -> bool {
    message.role == Role::Assistant && message.parts.iter().any(|p| matches!(p, Part::ToolCall(_)))
}

/// Splits messages into units: an assistant message with tool calls together with the tool
/// messages right after it, or any other message alone. Units are never split by a budget.
pub fn units_of(messages: &[Message]) -> Vec<Range<usize>> {
    let mut units = Vec::new();
    let mut i = 0;
    while i < messages.len() {
        let start = i;
        i += 1;
        if has_tool_calls(&messages[start]) {
            while i < messages.len() && messages[i].role == Role::Tool {
                i += 1;
            }
        }
        units.push(start..i);
    }
    units
}

/// The newest whole units of `messages` whose estimate fits in `budget`, as the index where the
/// kept part starts. With `always_one`, the newest unit is kept even when it alone is over.
fn keep_from(
    messages: &[Message],
    budget: u64,
    always_one: bool,
    estimate: Estimator<'_>,
) -> usize {
    let mut used = 0u64;
    let mut start = messages.len();
    for (n, unit) in units_of(messages).into_iter().rev().enumerate() {
        let cost = estimate_messages(&messages[unit.clone()], estimate);
        if used + cost > budget && !(always_one && n == 0) {
            break;
        }
        used += cost;
        start = unit.start;
    }
    start
}

/// The messages of a request: the newest units of `view` that fit in `max_tokens` less the
/// instructions' estimate, with reasoning parts stripped from the messages before the running
/// tool loop (see [`strip_settled_reasoning`]). The newest unit is always taken; when
/// it alone is over the budget (one huge batch of tool results, one huge paste), its longest
/// texts and results are cut to fit, each saying how much was left out, so that one oversized
/// batch cannot wedge a session.
pub fn select_for_request(
    view: &[Message],
    instructions: &str,
    max_tokens: u64,
    estimate: Estimator<'_>,
) -> Vec<Message> {
    let budget = max_tokens.saturating_sub(estimate(instructions));
    let start = keep_from(view, budget, true, estimate);
    let picked = strip_settled_reasoning(&view[start..]);
    if estimate_messages(&picked, estimate) > budget {
        cut_to_fit(&picked, budget, estimate)
    } else {
        picked
    }
}

/// The messages with reasoning parts kept only in the running tool loop: the messages after the
/// last one with the person's role (all of them when there is none). Some providers (DeepSeek's
/// thinking mode, Kimi K2 thinking) refuse a tool-loop request whose assistant messages lack
/// their reasoning, while reasoning of finished turns is dead weight to every provider. Whether
/// the kept reasoning is actually sent is the model adapter's decision.
pub fn strip_settled_reasoning(messages: &[Message]) -> Vec<Message> {
    let loop_start = messages
        .iter()
        .rposition(|m| m.role == Role::User)
        .map_or(0, |i| i + 1);
    let (settled, running) = messages.split_at(loop_start);
    let mut out = strip_reasoning(settled);
    out.extend_from_slice(running);
    out
}

/// The messages without their reasoning parts (the store keeps them).
pub fn strip_reasoning(messages: &[Message]) -> Vec<Message> {
    messages
        .iter()
        .map(|m| {
            let mut m = m.clone();
            m.parts.retain(|p| !matches!(p, Part::Reasoning { .. }));
            m
        })
        .collect()
}

/// How many leading messages of `messages` form whole units that fit in `budget` together; at
/// least the first unit, however large.
pub fn leading_units_within(messages: &[Message], budget: u64, estimate: Estimator<'_>) -> usize {
    let mut used = 0u64;
    let mut end = 0;
    for unit in units_of(messages) {
        let cost = estimate_messages(&messages[unit.clone()], estimate);
        if end > 0 && used + cost > budget {
            break;
        }
        used += cost;
        end = unit.end;
    }
    end
}

/// The messages with their text parts and tool results cut, the longest first, until the
/// estimate fits in `budget` (or nothing more can be cut: framing, calls and images stay). Each
/// cut piece ends by saying how many characters were left out.
pub fn cut_to_fit(messages: &[Message], budget: u64, estimate: Estimator<'_>) -> Vec<Message> {
    if estimate_messages(messages, estimate) <= budget {
        return messages.to_vec();
    }
    let longest = messages
        .iter()
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| match p {
            Part::Text { text } => Some(text.chars().count()),
            Part::ToolResult(result) => Some(result.content.chars().count()),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    // The largest per-piece length that fits: every piece keeps at most that many characters.
    let (mut low, mut high) = (0usize, longest);
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if estimate_messages(&capped(messages, mid), estimate) <= budget {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    capped(messages, low)
}

/// Every text and tool result kept to at most `cap` characters, a cut one saying so.
fn capped(messages: &[Message], cap: usize) -> Vec<Message> {
    let cut = |text: &str| -> Option<String> {
        let total = text.chars().count();
        if total <= cap {
            return None;
        }
        let end = text
            .char_indices()
            .nth(cap)
            .map_or(text.len(), |(at, _)| at);
        Some(format!(
            "{}\n…[cut to fit the model's context: {} of {total} characters left out]",
            &text[..end],
            total - cap
        ))
    };
    messages
        .iter()
        .map(|m| {
            let mut m = m.clone();
            for part in &mut m.parts {
                match part {
                    Part::Text { text } => {
                        if let Some(shorter) = cut(text) {
                            *text = shorter;
                        }
                    }
                    Part::ToolResult(result) => {
                        if let Some(shorter) = cut(&result.content) {
                            result.content = shorter;
                        }
                    }
                    _ => {}
                }
            }
            m
        })
        .collect()
}

/// How a summary divides the uncovered history.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryPlan {
    /// The messages the summary will stand for, oldest first.
    pub covered: Vec<Message>,
    /// The recent messages kept verbatim, oldest first.
    pub tail: Vec<Message>,
}

/// Chooses what a summary covers: the history messages no summary covers yet, except
/// `input_id` (the run's own input), minus the newest whole units that fit in `keep_tokens`.
pub fn plan_summary(
    history: &[Message],
    input_id: &str,
    keep_tokens: u64,
    estimate: Estimator<'_>,
) -> SummaryPlan {
    let covered_before = covered_ids(history);
    let candidates: Vec<Message> = history
        .iter()
        .filter(|m| !is_summary(m) && m.id != input_id && !covered_before.contains(m.id.as_str()))
        .cloned()
        .collect();
    let start = keep_from(&candidates, keep_tokens, false, estimate);
    let mut covered = candidates;
    let tail = covered.split_off(start);
    SummaryPlan { covered, tail }
}

/// The instructions of a summary request.
pub fn summary_instructions(resolved: &str) -> String {
    format!("{resolved}\n\n## summary\n{SUMMARY_RULES}")
}

/// The text of a summary message made from the model's reply.
pub fn summary_text(reply_text: &str) -> String {
    format!("{SUMMARY_PREFIX}\n\n{}", reply_text.trim())
}

/// The shared sizing of automatic compaction: `(max_tokens, auto_compact_tokens)` for a window
/// (the catalogue's context size, when positive) and a configured point.
pub fn auto_compact_point(
    window: Option<u64>,
    auto_compact_tokens: Option<u64>,
    auto_compact_at: f64,
) -> (u64, u64) {
    let window = window.filter(|w| *w > 0).unwrap_or(DEFAULT_CONTEXT_TOKENS);
    let cap = (window as f64 * auto_compact_at).floor().max(0.0) as u64;
    let point = auto_compact_tokens.map_or(cap, |configured| configured.min(cap));
    (window, point)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::id::Timestamp;
    use crate::message::{ToolCall, ToolResult};

    fn msg(id: &str, role: Role, source: MessageSource, parts: Vec<Part>) -> Message {
        Message {
            id: id.into(),
            role,
            parts,
            source,
            created_at: Timestamp::now(),
            summarizes: None,
        }
    }
    fn text(id: &str, role: Role, t: &str) -> Message {
        let source = if role == Role::User {
            MessageSource::Input
        } else {
            MessageSource::Model
        };
        msg(id, role, source, vec![Part::Text { text: t.into() }])
    }
    fn call(id: &str, call_id: &str) -> Message {
        msg(
            id,
            Role::Assistant,
            MessageSource::Model,
            vec![Part::ToolCall(ToolCall {
                call_id: call_id.into(),
                name: "echo".into(),
                input: None,
                raw: "{}".into(),
            })],
        )
    }
    fn result(id: &str, call_id: &str) -> Message {
        msg(
            id,
            Role::Tool,
            MessageSource::Tool,
            vec![Part::ToolResult(ToolResult {
                call_id: call_id.into(),
                name: "echo".into(),
                content: "hello".into(),
                is_error: false,
            })],
        )
    }
    fn summary(id: &str, covers: &[&str]) -> Message {
        let mut m = msg(
            id,
            Role::User,
            MessageSource::Summary,
            vec![Part::Text { text: "s".into() }],
        );
        m.summarizes = Some(covers.iter().map(|s| s.to_string()).collect());
        m
    }
    fn chars(text: &str) -> u64 {
        text.chars().count() as u64
    }

    #[test]
    fn estimates_follow_the_spec() {
        let est: Estimator<'_> = &default_estimate;
        assert_eq!(estimate_message(&text("a", Role::User, "abc"), est), 5);
        assert_eq!(estimate_message(&call("c", "1"), est), 6);
        assert_eq!(estimate_message(&result("r", "1"), est), 6);
        let chars: Estimator<'_> = &chars;
        assert_eq!(estimate_message(&text("a", Role::User, "abc"), chars), 7);
        assert_eq!(estimate_message(&call("c", "1"), chars), 10);
        assert_eq!(estimate_message(&result("r", "1"), chars), 9);
        let image = msg(
            "i",
            Role::User,
            MessageSource::Input,
            vec![Part::Image {
                mime_type: "image/png".into(),
                data: Some("AA==".into()),
                url: None,
            }],
        );
        assert_eq!(estimate_message(&image, chars), 1004);
        let reasoning = msg(
            "r",
            Role::Assistant,
            MessageSource::Model,
            vec![Part::Reasoning {
                text: "long".into(),
            }],
        );
        assert_eq!(estimate_message(&reasoning, chars), 4);
    }

    #[test]
    fn context_view_puts_the_newest_summary_first_and_drops_covered_messages() {
        let history = vec![
            text("m1", Role::User, "a"),
            text("m2", Role::Assistant, "b"),
            summary("s1", &["m1", "m2"]),
            text("m3", Role::User, "c"),
            text("m4", Role::Assistant, "d"),
            summary("s2", &["m1", "m2", "s1", "m3"]),
            text("m5", Role::User, "e"),
        ];
        let ids: Vec<_> = context_of(&history).into_iter().map(|m| m.id).collect();
        assert_eq!(ids, ["s2", "m4", "m5"]);
        let plain = vec![text("m1", Role::User, "a")];
        assert_eq!(context_of(&plain), plain);
    }

    #[test]
    fn a_call_and_its_results_form_one_unit() {
        let messages = vec![
            result("orphan", "0"),
            call("c", "1"),
            result("r1", "1"),
            result("r2", "1"),
            text("t", Role::Assistant, "done"),
        ];
        assert_eq!(units_of(&messages), vec![0..1, 1..4, 4..5]);
    }

    #[test]
    fn request_selection_keeps_newest_whole_units() {
        let est: Estimator<'_> = &chars;
        let mut answer = text("t", Role::Assistant, "done");
        answer.parts.insert(
            0,
            Part::Reasoning {
                text: "thinking".into(),
            },
        );
        let view = vec![
            text("u", Role::User, "hello"),
            call("c", "1"),
            result("r", "1"),
            answer,
        ];
        // "done" = 8, call + result = 10 + 9: a budget of 27 takes all three, 26 only the text.
        let picked = select_for_request(&view, "", 27, est);
        assert_eq!(
            picked.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
            ["c", "r", "t"]
        );
        assert_eq!(
            picked[2].parts.len(),
            2,
            "the running loop keeps its reasoning"
        );
        let picked = select_for_request(&view, "", 26, est);
        assert_eq!(picked.len(), 1);
        // The instructions come out of the budget; the newest unit is kept even when over.
        let picked = select_for_request(&view, "xxxxxxxxxxxxxxxxxxxx", 21, est);
        assert_eq!(picked.len(), 1);
        assert_eq!(
            view[3].parts.len(),
            2,
            "the stored message keeps its reasoning"
        );
    }

    #[test]
    fn requests_keep_reasoning_only_in_the_running_tool_loop() {
        let est: Estimator<'_> = &chars;
        let thinking = |mut m: Message, text: &str| {
            m.parts.insert(0, Part::reasoning(text));
            m
        };
        let view = vec![
            text("u1", Role::User, "first"),
            thinking(call("c1", "1"), "earlier plan"),
            result("r1", "1"),
            thinking(text("a1", Role::Assistant, "done"), "earlier answer"),
            text("u2", Role::User, "second"),
            thinking(call("c2", "2"), "current plan"),
            result("r2", "2"),
            thinking(call("c3", "3"), "next step"),
        ];
        let picked = select_for_request(&view, "", 10_000, est);
        let reasoning: Vec<(&str, Vec<&str>)> = picked
            .iter()
            .map(|m| {
                let texts = m
                    .parts
                    .iter()
                    .filter_map(|p| match p {
                        Part::Reasoning { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                (m.id.as_str(), texts)
            })
            .collect();
        assert_eq!(
            reasoning,
            [
                ("u1", vec![]),
                ("c1", vec![]),
                ("r1", vec![]),
                ("a1", vec![]),
                ("u2", vec![]),
                ("c2", vec!["current plan"]),
                ("r2", vec![]),
                ("c3", vec!["next step"]),
            ]
        );
    }

    #[test]
    fn summary_plan_keeps_the_tail_and_skips_the_input() {
        let est: Estimator<'_> = &chars;
        let history = vec![
            text("m1", Role::User, "first"),
            text("m2", Role::Assistant, "answer"),
            call("c", "1"),
            result("r", "1"),
            text("t", Role::Assistant, "ok"),
            text("in", Role::User, "new"),
        ];
        let plan = plan_summary(&history, "in", 0, est);
        assert_eq!(plan.covered.len(), 5);
        assert!(plan.tail.is_empty());
        // "ok" = 6 fits 6, not the call unit.
        let plan = plan_summary(&history, "in", 6, est);
        assert_eq!((plan.covered.len(), plan.tail.len()), (4, 1));
        let plan = plan_summary(&history, "in", 25, est);
        assert_eq!((plan.covered.len(), plan.tail.len()), (2, 3));
    }

    #[test]
    fn cutting_to_fit_trims_the_longest_pieces_and_says_so() {
        let est: Estimator<'_> = &default_estimate;
        let mut big = result("r", "1");
        if let Part::ToolResult(r) = &mut big.parts[0] {
            r.content = "z".repeat(4000);
        }
        let messages = vec![call("c", "1"), big, text("t", Role::Assistant, "short")];
        let cut = cut_to_fit(&messages, 300, est);
        assert!(estimate_messages(&cut, est) <= 300);
        let Part::ToolResult(r) = &cut[1].parts[0] else {
            panic!("a result")
        };
        assert!(r.content.contains("cut to fit the model's context"));
        assert_eq!(text_of_first(&cut[2]), "short", "short pieces stay whole");
        // Something that fits is left as it is.
        assert_eq!(cut_to_fit(&messages, 10_000, est), messages);
    }

    fn text_of_first(message: &Message) -> &str {
        match &message.parts[0] {
            Part::Text { text } => text,
            _ => "",
        }
    }

    #[test]
    fn auto_compact_point_examples() {
        assert_eq!(auto_compact_point(Some(10000), None, 0.8), (10000, 8000));
        assert_eq!(
            auto_compact_point(Some(10000), Some(5000), 0.8),
            (10000, 5000)
        );
        assert_eq!(
            auto_compact_point(Some(10000), Some(9000), 0.8),
            (10000, 8000)
        );
        assert_eq!(auto_compact_point(None, None, 0.8), (32000, 25600));
        assert_eq!(auto_compact_point(Some(0), None, 0.8), (32000, 25600));
    }
}
