//! Pieces of a turn the event mapping shows: usage tallies and call titles.

use std::path::Path;

use ahp_types::state::UsageInfo;
use cofold_agents::model::Usage;
use serde_json::json;

use crate::actions as act;

pub(crate) fn add_usage(total: &mut Usage, more: &Usage) {
    total.input_tokens += more.input_tokens;
    total.output_tokens += more.output_tokens;
    let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    total.cache_read_tokens = add(total.cache_read_tokens, more.cache_read_tokens);
    total.cache_write_tokens = add(total.cache_write_tokens, more.cache_write_tokens);
    total.reasoning_tokens = add(total.reasoning_tokens, more.reasoning_tokens);
}

/// The AHP usage of cofold counts, with the cost when the model has a price.
pub(crate) fn usage_info(usage: &Usage, model: Option<&str>, cost: Option<f64>) -> UsageInfo {
    let mut meta = Vec::new();
    if let Some(w) = usage.cache_write_tokens {
        meta.push(("ahpd.cacheWriteTokens", json!(w)));
    }
    if let Some(r) = usage.reasoning_tokens {
        meta.push(("ahpd.reasoningTokens", json!(r)));
    }
    if let Some(c) = cost {
        meta.push(("ahpd.cost", json!({ "amount": c, "currency": "USD" })));
    }
    UsageInfo {
        input_tokens: Some(usage.input_tokens as i64),
        output_tokens: Some(usage.output_tokens as i64),
        model: model.map(str::to_owned),
        cache_read_tokens: usage.cache_read_tokens.map(|c| c as i64),
        meta: act::meta(meta),
    }
}

/// The title of a call: the subject, paths relative to W when inside.
pub(crate) fn call_title(
    name: &str,
    subject: Option<&str>,
    workspace: &Path,
    memory_dir: Option<&Path>,
) -> String {
    let subject = subject.map(str::trim).filter(|s| !s.is_empty());
    match name {
        "read_file" | "write_file" | "edit_file" => match subject {
            Some(s) => relative_to(Path::new(s), workspace),
            None => name.to_owned(),
        },
        "memory_read" | "memory_write" => match subject {
            Some(s) => match memory_dir {
                Some(dir) => relative_to(Path::new(s), dir),
                None => s.to_owned(),
            },
            None => "MEMORY.md".to_owned(),
        },
        _ => subject
            .map(str::to_owned)
            .unwrap_or_else(|| name.to_owned()),
    }
}

fn relative_to(path: &Path, base: &Path) -> String {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    };
    match absolute.strip_prefix(base) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/"),
        _ => absolute.display().to_string(),
    }
}
