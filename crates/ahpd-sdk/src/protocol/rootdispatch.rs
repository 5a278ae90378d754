//! Client dispatches on the root channel: only `root/configChanged` is accepted.

use ahp_types::actions::{ActionOrigin, StateAction};
use serde_json::Value;

use crate::channels::root::{self, ROOT};
use crate::inner::HostInner;

pub(crate) fn dispatch(inner: &HostInner, conn: u64, client_id: &str, client_seq: i64, raw: Value) {
    let origin = ActionOrigin {
        client_id: client_id.to_owned(),
        client_seq,
    };
    let text = raw.to_string();
    match serde_json::from_value::<StateAction>(raw) {
        Ok(action @ StateAction::RootConfigChanged(_)) => {
            root::apply(inner, &action, Some(&origin));
        }
        Ok(StateAction::Unknown(_)) | Err(_) => {
            inner.hub.reject(
                conn,
                ROOT,
                &text,
                &origin,
                "unknown action: the host could not read it as a protocol action",
            );
        }
        Ok(other) => {
            let reason = format!(
                "{} cannot be dispatched by a client",
                crate::protocol::dispatch::type_name(&other)
            );
            inner.hub.reject(conn, ROOT, &text, &origin, &reason);
        }
    }
}
