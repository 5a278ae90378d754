//! What the router and its handlers share: JSON replies, query parameters, and lookups in the
//! fake engine's state.

use std::collections::BTreeMap;

use axum::body::Body;
use hyper::Response;
use serde_json::{Value, json};

use super::{FailOn, FakeContainer, State, Upload};

pub(crate) fn reply(status: u16, v: Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(v.to_string()))
        .unwrap_or_default()
}

pub(crate) fn error(status: u16, message: impl Into<String>) -> Response<Body> {
    reply(status, json!({ "message": message.into() }))
}

pub(crate) fn no_content() -> Response<Body> {
    Response::builder()
        .status(204)
        .body(Body::empty())
        .unwrap_or_default()
}

pub(crate) fn take_failure(st: &mut State, on: FailOn) -> Option<(u16, String)> {
    let i = st.failures.iter().position(|(o, _, _)| *o == on)?;
    st.failures.remove(i).map(|(_, s, m)| (s, m))
}

pub(crate) fn param<'a>(q: &'a [(String, String)], k: &str) -> Option<&'a str> {
    q.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str())
}

/// Label filters of a list: `k=v` or `k`.
pub(crate) fn label_filters(q: &[(String, String)]) -> Vec<String> {
    param(q, "filters")
        .and_then(|f| serde_json::from_str::<Value>(f).ok())
        .and_then(|v| {
            let l = &v["label"];
            match l {
                Value::Array(a) => Some(
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect(),
                ),
                Value::Object(o) => Some(o.keys().cloned().collect()),
                _ => None,
            }
        })
        .unwrap_or_default()
}

pub(crate) fn matches(labels: &BTreeMap<String, String>, filters: &[String]) -> bool {
    filters.iter().all(|f| match f.split_once('=') {
        Some((k, v)) => labels.get(k).map(String::as_str) == Some(v),
        None => labels.contains_key(f),
    })
}

pub(crate) fn find<'a>(st: &'a State, id: &str) -> Option<&'a FakeContainer> {
    st.containers.get(id).or_else(|| {
        st.containers
            .values()
            .find(|c| c.id.starts_with(id) && id.len() >= 12)
    })
}

pub(crate) fn push_upload(st: &mut State, u: Upload) {
    st.uploads.push(u);
}
