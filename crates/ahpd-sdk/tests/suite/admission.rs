//! What a connection may do before it shows the token: send its request head within the time
//! limit, and wait among a bounded number of others, the longest waiting making room for a
//! newcomer.

use std::sync::Arc;
use std::time::Duration;

use ahpd_sdk::host::HostBuilder;
use ahpd_sdk::testing::ScriptedAgent;
use ahpd_sdk::transport::ws::WsConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::support::*;

/// Waits until the listener closes `s`: end of file or a reset, after any answer it wrote.
async fn closed(s: &mut TcpStream) {
    let mut buf = [0u8; 512];
    let wait = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    };
    tokio::time::timeout(PATIENCE, wait)
        .await
        .expect("the connection stayed open");
}

async fn host_with(config: WsConfig) -> (ahpd_sdk::host::Host, ahpd_sdk::transport::ws::WsServer) {
    let host = HostBuilder::new()
        .agent(Arc::new(ScriptedAgent::new()))
        .build()
        .unwrap();
    let server = host.serve_ws(config).await.unwrap();
    (host, server)
}

#[tokio::test]
async fn a_request_head_not_finished_in_time_closes_the_connection() {
    let mut config = WsConfig::loopback(0).with_token("t0k");
    config.header_timeout = Duration::from_millis(300);
    config.max_pending = 1000;
    let (_host, server) = host_with(config).await;
    let addr = server.local_addr();
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"GET /?tk").await.unwrap();
    let mut headers = TcpStream::connect(addr).await.unwrap();
    headers
        .write_all(b"GET /?tkn=t0k HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n")
        .await
        .unwrap();
    closed(&mut silent).await;
    closed(&mut half).await;
    closed(&mut headers).await;
    // A client that sends its request at once is not affected.
    let c = client(&format!("ws://{addr}/?tkn=t0k")).await;
    c.ping().await.unwrap();
}

#[tokio::test]
async fn the_longest_waiting_connection_makes_room_and_the_token_holder_gets_in() {
    let mut config = WsConfig::loopback(0).with_token("t0k");
    config.max_pending = 4;
    let (_host, server) = host_with(config).await;
    let addr = server.local_addr();
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    // A fifth: the first is closed, long before any header limit.
    let _fifth = TcpStream::connect(addr).await.unwrap();
    closed(&mut idle[0]).await;
    let mut crowd = Vec::new();
    for _ in 0..200 {
        crowd.push(TcpStream::connect(addr).await.unwrap());
    }
    let c = client(&format!("ws://{addr}/?tkn=t0k")).await;
    c.ping().await.unwrap();
    // Admitted connections do not count among those waiting: a newcomer never closes them.
    for _ in 0..20 {
        crowd.push(TcpStream::connect(addr).await.unwrap());
    }
    c.ping().await.unwrap();
}
