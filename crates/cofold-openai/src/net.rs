//! The HTTP client a provider sends through: the connect limit, the proxy (the provider's own,
//! else `HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY` with `NO_PROXY`, in either case), and the
//! certificates it trusts (the bundled roots, the system's, and an optional extra PEM file).
//!
//! Anything else that fetches on the agent's behalf can build its client from the same
//! [`Network`] with [`client_builder`], so one setting reaches every request.

use std::collections::HashMap;

use cofold_agents::error::AgentError;

use crate::failure::error_chain;
use crate::settings::{Network, TimeLimits};

/// A variable of `env`, upper-case name first, then lower-case; empty counts as unset.
fn var<'a>(env: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    [name.to_owned(), name.to_ascii_lowercase()]
        .iter()
        .find_map(|n| env.get(n))
        .map(String::as_str)
        .filter(|v| !v.trim().is_empty())
}

fn bad_proxy(which: &str, e: &reqwest::Error) -> AgentError {
    AgentError::invalid_options(format!(
        "the proxy {which} is not usable: {}",
        error_chain(e)
    ))
}

/// A client builder with the network settings applied: proxies and certificates. The caller
/// adds its own limits and options before building.
pub fn client_builder(network: &Network) -> Result<reqwest::ClientBuilder, AgentError> {
    // reqwest would read the process's variables on its own; they are read here instead so an
    // injected environment (and the provider's explicit proxy) decide.
    let mut b = reqwest::Client::builder().no_proxy();
    if let Some(url) = &network.proxy {
        let p = reqwest::Proxy::all(url.as_str()).map_err(|e| bad_proxy("proxy", &e))?;
        b = b.proxy(p);
    } else {
        let process;
        let env = match &network.env {
            Some(env) => env,
            None => {
                process = std::env::vars().collect::<HashMap<_, _>>();
                &process
            }
        };
        let no_proxy = var(env, "NO_PROXY").and_then(reqwest::NoProxy::from_string);
        for name in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"] {
            if let Some(url) = var(env, name) {
                let made = match name {
                    "HTTPS_PROXY" => reqwest::Proxy::https(url),
                    "HTTP_PROXY" => reqwest::Proxy::http(url),
                    _ => reqwest::Proxy::all(url),
                };
                let p = made.map_err(|e| bad_proxy(&format!("in {name}"), &e))?;
                b = b.proxy(p.no_proxy(no_proxy.clone()));
            }
        }
    }
    if let Some(path) = &network.extra_ca_certs {
        let pem = std::fs::read(path).map_err(|e| {
            AgentError::invalid_options(format!(
                "extraCaCerts {} cannot be read: {e}",
                path.display()
            ))
        })?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
            AgentError::invalid_options(format!(
                "extraCaCerts {} holds no usable PEM certificate: {}",
                path.display(),
                error_chain(&e)
            ))
        })?;
        if certs.is_empty() {
            return Err(AgentError::invalid_options(format!(
                "extraCaCerts {} holds no PEM certificate",
                path.display()
            )));
        }
        for c in certs {
            b = b.add_root_certificate(c);
        }
    }
    Ok(b)
}

/// Idle connections a provider's client keeps per host for later requests.
///
/// A kept connection saves the next request a connect and TLS handshake, but it also keeps the
/// read buffer its last stream grew (a fast stream grows it to a few hundred kilobytes). After
/// a burst of sessions streaming at once, keeping every connection held about 0.3 MiB a session
/// for the client's idle time (90 s); a handful serves the sessions one person runs.
const IDLE_CONNECTIONS_PER_HOST: usize = 8;

/// The provider's client: [`client_builder`] with the connect limit and the idle connections
/// it keeps ([`IDLE_CONNECTIONS_PER_HOST`]).
pub(crate) fn build_client(
    limits: &TimeLimits,
    network: &Network,
) -> Result<reqwest::Client, AgentError> {
    let mut b = client_builder(network)?.pool_max_idle_per_host(IDLE_CONNECTIONS_PER_HOST);
    if let Some(c) = limits.connect {
        b = b.connect_timeout(c);
    }
    b.build().map_err(|e| {
        AgentError::internal(format!("cannot build the HTTP client: {}", error_chain(&e)))
    })
}
