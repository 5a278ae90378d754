//! The network settings: `HTTPS_PROXY` (and an explicit proxy) send requests through a CONNECT
//! proxy, `NO_PROXY` bypasses it, and an unusable `extraCaCerts` file is a clear sentence. The
//! proxy is a loopback listener written here that records what it is asked and refuses it.

use std::collections::HashMap;
use std::time::Duration;

use cofold_agents::error::ErrorCode;
use cofold_agents::model::{ModelAdapter, ModelSpec};
use cofold_openai::{Network, OpenAiProvider, ProviderOptions};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::support::ask;

const PATIENCE: Duration = Duration::from_secs(30);

/// A CONNECT proxy on loopback that refuses every request: the first line of each, in order.
async fn proxy() -> (String, testkit::Seen) {
    let r =
        testkit::Recorder::start(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n".to_vec())
            .await
            .unwrap();
    (format!("http://{}", r.addr), r.seen)
}

/// A listener standing for the server itself; counts the connections it accepts.
async fn target() -> (u16, watch::Receiver<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = watch::channel(0usize);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tx.send_modify(|n| *n += 1);
            drop(socket);
        }
    });
    (port, rx)
}

async fn ask_through(port: u16, network: Network) -> cofold_agents::error::AgentError {
    OpenAiProvider::new(ProviderOptions {
        network,
        retries: Some(0),
        ..ProviderOptions::new(format!("https://127.0.0.1:{port}/v1"))
    })
    .unwrap()
    .adapter(ModelSpec::new("m"))
    .complete(ask("x"))
    .await
    .unwrap_err()
}

fn env(pairs: &[(&str, &str)]) -> Option<HashMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

#[tokio::test]
async fn https_proxy_is_used_unless_no_proxy_matches() {
    let (proxy_url, seen) = proxy().await;
    let (port, mut accepted) = target().await;

    let e = ask_through(
        port,
        Network {
            env: env(&[("HTTPS_PROXY", &proxy_url)]),
            ..Network::default()
        },
    )
    .await;
    assert_eq!(e.code, ErrorCode::Network);
    assert_eq!(
        *seen.lock().unwrap(),
        [format!("CONNECT 127.0.0.1:{port} HTTP/1.1")]
    );
    assert_eq!(*accepted.borrow(), 0, "nothing went around the proxy");

    // Lower-case names are read too, and NO_PROXY sends the request straight to the server.
    ask_through(
        port,
        Network {
            env: env(&[
                ("https_proxy", &proxy_url),
                ("no_proxy", "localhost,127.0.0.1"),
            ]),
            ..Network::default()
        },
    )
    .await;
    tokio::time::timeout(PATIENCE, accepted.wait_for(|n| *n >= 1))
        .await
        .expect("the server is reached directly")
        .unwrap();
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "the proxy was not asked again"
    );
}

#[tokio::test]
async fn an_explicit_proxy_wins_over_the_environment() {
    let (proxy_url, seen) = proxy().await;
    let (port, accepted) = target().await;
    ask_through(
        port,
        Network {
            proxy: Some(proxy_url),
            env: env(&[("NO_PROXY", "*")]),
            ..Network::default()
        },
    )
    .await;
    assert_eq!(
        *seen.lock().unwrap(),
        [format!("CONNECT 127.0.0.1:{port} HTTP/1.1")]
    );
    assert_eq!(*accepted.borrow(), 0);
}

#[tokio::test]
async fn an_unusable_extra_ca_file_is_a_sentence() {
    let dir = std::env::temp_dir().join(format!("cofold-openai-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("missing.pem");
    let e = OpenAiProvider::new(ProviderOptions {
        network: Network {
            extra_ca_certs: Some(missing.clone()),
            ..Network::default()
        },
        ..ProviderOptions::new("https://api.example.invalid/v1")
    })
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidOptions);
    assert!(
        e.message.starts_with(&format!(
            "extraCaCerts {} cannot be read",
            missing.display()
        )),
        "{}",
        e.message
    );
    let not_pem = dir.join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let e = OpenAiProvider::new(ProviderOptions {
        network: Network {
            extra_ca_certs: Some(not_pem.clone()),
            ..Network::default()
        },
        ..ProviderOptions::new("https://api.example.invalid/v1")
    })
    .unwrap_err();
    assert!(e.message.contains("holds no"), "{}", e.message);
    std::fs::remove_dir_all(&dir).unwrap();
}
