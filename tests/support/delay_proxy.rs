//! A TCP proxy on loopback that holds every byte it forwards for a fixed time each way, so
//! that a test can put a server a round trip away. It runs on a runtime of its own, so the
//! test's runtime (often a single thread) does not pace it; stopped when dropped.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// A running proxy to one target.
pub struct DelayProxy {
    port: u16,
    runtime: Option<tokio::runtime::Runtime>,
}

impl DelayProxy {
    /// A proxy on a free 127.0.0.1 port to `target`, holding what it forwards `one_way`
    /// in each direction (a round trip of twice that, and more).
    pub fn start(target: SocketAddr, one_way: Duration) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("the proxy's runtime");
        // Bound here, not in the runtime: a test's own runtime may be this thread's.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
        listener.set_nonblocking(true).expect("non-blocking");
        let port = listener.local_addr().expect("bound").port();
        runtime.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("a Tokio listener");
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = (client.set_nodelay(true), server.set_nodelay(true));
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::spawn(forward(client_read, server_write, one_way));
                    tokio::spawn(forward(server_read, client_write, one_way));
                });
            }
        });
        DelayProxy {
            port,
            runtime: Some(runtime),
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Copies `from` to `to`, each chunk `delay` after it was read, in order.
async fn forward(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
    let (held, mut due) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    tokio::spawn(async move {
        while let Some((at, bytes)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n @ 1..) = from.read(&mut buf).await {
        if held
            .send((Instant::now() + delay, buf[..n].to_vec()))
            .is_err()
        {
            return;
        }
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
