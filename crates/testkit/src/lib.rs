//! Test support shared by the workspace's crates.
//!
//! A scripted OpenAI-compatible endpoint that listens on `127.0.0.1:0`, streams real SSE from a
//! script and records every request it received. [`FakeEngine`] serves the part of the Docker
//! Engine API that `@ahpd/computer` uses, in process on a unix socket, so machines can be tested
//! where no container engine runs.
//! [`tidy`] checks the house rules over the repository's own files; `.ci/modgraph` prints each
//! crate's module graph with it.
//! It depends on no project crate, so any crate can use it as a dev-dependency.
//!
//! ```no_run
//! use testkit::{Endpoint, Frame, Reply, chunk};
//!
//! # async fn demo() -> std::io::Result<()> {
//! let endpoint = Endpoint::builder()
//!     .reply(Reply::stream([chunk::text("Hel"), chunk::text("lo"), chunk::finish("stop")]))
//!     .reply(Reply::status(429, "slow down"))
//!     .models(["m1", "m2"])
//!     .start()?;
//! let base = endpoint.base_url(); // http://127.0.0.1:<port>/v1
//! // … point the client under test at `base` …
//! let seen = endpoint.wait_for_requests(1).await;
//! assert_eq!(seen[0].path, "/v1/chat/completions");
//! # Ok(()) }
//! ```

pub mod chunk;
pub mod dialect;
mod endpoint;
pub mod fake_acp;
mod fake_engine;
pub mod images;
pub mod mcp_server;
mod pairing;
mod recorder;
mod reply;
pub mod tidy;

pub use endpoint::{Endpoint, EndpointBuilder, RecordedRequest, Responder};
pub use fake_engine::{
    EngineRequest, FailOn, FakeContainer, FakeEngine, FakeExec, FakeImage, FakeMount, NO_LOADER,
    Upload,
};
pub use mcp_server::McpServer;
pub use pairing::tool_pairing_fault;
pub use recorder::{Recorder, Seen};
pub use reply::{Frame, Gate, Reply};
