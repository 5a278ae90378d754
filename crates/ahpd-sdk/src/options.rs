//! The host's options and their defaults.

use std::path::PathBuf;
use std::time::Duration;

use ahp_types::commands::Implementation;
use ahp_types::common::JsonObject;

/// Every option of a host, with the defaults documented on each field.
#[derive(Clone)]
pub struct HostOptions {
    /// Folders the host serves; the first is advertised as `defaultDirectory`. Default: none.
    pub paths: Vec<PathBuf>,
    /// `InitializeResult.serverInfo`. Default: `{name: "ahpd-sdk", version: <crate version>}`.
    pub server_info: Implementation,
    /// Delta coalescing window; zero disables. Default: 75 ms.
    pub delta_window: Duration,
    /// Envelopes kept for `reconnect` replay. Default: 10,000.
    pub replay_capacity: usize,
    /// Bytes the replay ring may hold (envelope texts plus 64 bytes each); the oldest go
    /// first when either bound is passed. Default: 16 MiB.
    pub replay_bytes: usize,
    /// Frames queued per connection before it is closed as stalled. Default: 4,096.
    pub outbound_queue: usize,
    /// Bytes of frames one connection may have held back while a reply that subscribes it is
    /// built (and of frames it sends before its handshake is answered); past it the
    /// connection is closed as stalled (1013), as for a full outbound queue. Held frames also
    /// count against `outbound_queue`, since they go to it at once when released.
    /// Default: 16 MiB.
    pub held_bytes: usize,
    /// Requests one connection may have in flight at once (answered or not yet started behind
    /// earlier work), `dispatchAction`s and `unsubscribe`s that wait their turn included; one
    /// more request is answered at once with an error naming the cap. Default: 256.
    pub in_flight_cap: usize,
    /// Largest inbound frame or line in bytes. Default: 16 MiB.
    pub max_frame_bytes: usize,
    /// How long one frame may take to reach the socket. Default: 10 s.
    pub write_timeout: Duration,
    /// Turns loaded per page for a chat read from a transcript. Default: 50.
    pub turns_page: usize,
    /// Most rows one `listSessions` reply carries. Default: 1,000.
    pub list_cap: usize,
    /// How long a dropped client stays in `activeClients`. Default: 30 s.
    pub active_client_grace: Duration,
    /// How long a disconnected client id is remembered for `reconnect`, with the tokens it
    /// pushed; expired ones are dropped at the next handshake. Default: 10 min.
    pub known_client_ttl: Duration,
    /// How long a client-run tool call may take; zero waits forever. Default: 10 min.
    pub client_tool_timeout: Duration,
    /// How long a request that waits on an agent or a port (`createSession`, opening a stored
    /// session, `listSessions`, `resourceRead`, ...) may take before it is answered with an
    /// error; an agent's opening of a backend is given up after it too. Default: 60 s.
    pub request_timeout: Duration,
    /// Most unused sessions kept open (nobody subscribed, no active client, nothing running;
    /// a session created in this run counts once the agent's store has it); past it the least
    /// recently used are unloaded. Default: 64.
    pub loaded_cap: usize,
    /// How long such a session may stay unused before it is unloaded. Default: 10 min.
    pub idle_unload: Duration,
    /// `RootState._meta`. Default: none.
    pub root_meta: Option<JsonObject>,
    /// `InitializeResult._meta`. Default: none.
    pub initialize_meta: Option<JsonObject>,
    /// Whether a past session opened for a subscription has its backend opened at once when
    /// its agent says the conversation holds unfinished work ([`crate::Agent::unfinished`]), so
    /// that work is settled or asked again. A host started only to read a conversation turns it
    /// off: the reading host ends soon after, and a run it had reattached would end with it.
    /// Default: true.
    pub take_up_unfinished: bool,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            paths: Vec::new(),
            server_info: Implementation {
                name: "ahpd-sdk".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
                title: None,
            },
            delta_window: Duration::from_millis(75),
            replay_capacity: 10_000,
            replay_bytes: 16 * 1024 * 1024,
            outbound_queue: 4_096,
            held_bytes: 16 * 1024 * 1024,
            in_flight_cap: 256,
            max_frame_bytes: 16 * 1024 * 1024,
            write_timeout: Duration::from_secs(10),
            turns_page: 50,
            list_cap: 1_000,
            active_client_grace: Duration::from_secs(30),
            known_client_ttl: Duration::from_secs(600),
            client_tool_timeout: Duration::from_secs(600),
            request_timeout: Duration::from_secs(60),
            loaded_cap: 64,
            idle_unload: Duration::from_secs(600),
            root_meta: None,
            initialize_meta: None,
            take_up_unfinished: true,
        }
    }
}
