//! Resource requests for the URI schemes registered providers serve (`computer:` machines,
//! say): which provider a request goes to, which requests nothing serves, and the answer.

use std::sync::Arc;

use ahp_types::commands::ContentEncoding;
use base64::Engine as _;

use crate::error::RpcError;
use crate::resource_port::ResourceProvider;

/// The scheme of a resource request's `uri`.
fn scheme_of(params: &serde_json::Value) -> Option<&str> {
    let uri = params.get("uri")?.as_str()?;
    uri.split_once(':').map(|(s, _)| s)
}

/// The provider serving a request's scheme, when one was registered.
pub(crate) fn routed(
    providers: &[(String, Arc<dyn ResourceProvider>)],
    params: &serde_json::Value,
) -> Option<Arc<dyn ResourceProvider>> {
    let scheme = scheme_of(params)?;
    providers
        .iter()
        .find(|(s, _)| s == scheme)
        .map(|(_, p)| p.clone())
}

/// The scheme of a request nothing serves: a write or delete outside every provider, or a
/// read of a scheme other than `file:` (providers were tried first).
pub(crate) fn unserved(params: &serde_json::Value, method: &str) -> Option<String> {
    let scheme = scheme_of(params).unwrap_or("");
    let writes = matches!(method, "resourceWrite" | "resourceDelete");
    (writes || scheme != "file").then(|| scheme.to_owned())
}

/// A `resourceRead` of a `data:` URI, answered from the URI itself: a client that reads every
/// `ContentRef` through the host gets a preview's bytes like any other content. `None` for
/// other schemes.
pub(crate) fn read_data_uri(
    params: &serde_json::Value,
) -> Option<Result<serde_json::Value, RpcError>> {
    if scheme_of(params) != Some("data") {
        return None;
    }
    let uri = params.get("uri")?.as_str()?;
    let Some(bytes) = crate::util::data_uri_bytes(uri) else {
        return Some(Err(RpcError::invalid_params("that data: URI is malformed")));
    };
    let head = uri
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(','))
        .map(|(head, _)| head.trim_end_matches(";base64"))
        .filter(|t| !t.is_empty())
        .unwrap_or("text/plain;charset=US-ASCII");
    let wants_text = params.get("encoding").and_then(serde_json::Value::as_str) == Some("utf-8");
    let (data, encoding) = match String::from_utf8(bytes) {
        Ok(text) if wants_text => (text, ContentEncoding::Utf8),
        Ok(text) => (
            base64::engine::general_purpose::STANDARD.encode(text.as_bytes()),
            ContentEncoding::Base64,
        ),
        Err(e) => (
            base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
            ContentEncoding::Base64,
        ),
    };
    let result = ahp_types::commands::ResourceReadResult {
        data,
        encoding,
        content_type: Some(head.to_owned()),
    };
    Some(serde_json::to_value(result).map_err(|e| RpcError::internal(e.to_string())))
}

/// Answers a resource request through the provider of its scheme.
pub(crate) async fn provided(
    providers: &[(String, Arc<dyn ResourceProvider>)],
    method: &str,
    params: serde_json::Value,
) -> Result<serde_json::Value, RpcError> {
    let Some(p) = routed(providers, &params) else {
        return Err(RpcError::method_not_found(method));
    };
    let uri = params
        .get("uri")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("")
        .to_owned();
    let to_json = |v: Result<serde_json::Value, serde_json::Error>| {
        v.map_err(|e| RpcError::internal(e.to_string()))
    };
    match method {
        "resourceRead" => to_json(serde_json::to_value(p.read(&uri).await?)),
        "resourceList" => to_json(serde_json::to_value(p.list(&uri).await?)),
        "resourceResolve" => to_json(serde_json::to_value(p.resolve(&uri).await?)),
        "resourceWrite" => {
            let w: ahp_types::commands::ResourceWriteParams = serde_json::from_value(params)
                .map_err(|e| RpcError::invalid_params(e.to_string()))?;
            let data = match w.encoding {
                ContentEncoding::Base64 => {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(w.data.as_bytes())
                        .map_err(|e| RpcError::invalid_params(format!("data: {e}")))?;
                    String::from_utf8(bytes)
                        .map_err(|_| RpcError::invalid_params("data is not UTF-8 text"))?
                }
                _ => w.data,
            };
            p.write(&uri, &data, w.create_only.unwrap_or(false)).await?;
            Ok(serde_json::json!({}))
        }
        _ => {
            p.delete(&uri).await?;
            Ok(serde_json::json!({}))
        }
    }
}
