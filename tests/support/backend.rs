//! A stand-in upstream for the Envoy tests that need requests in flight: an HTTP/1.1
//! server on a loopback port that holds every response for a while (and, while its gate
//! is closed, until the test opens it), counts the requests in flight and the most it
//! ever saw at once, and answers 200 with `x-tokens-used` set to the request's
//! `x-llm-tokens` (none without it), as an LLM reports the tokens an answer cost.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::sync::watch;

/// How long every response is held at least.
pub const HOLD: Duration = Duration::from_millis(300);

/// A running backend; stops serving when dropped (its gate opened first, so that the
/// requests it holds end).
pub struct Backend {
    pub addr: SocketAddr,
    counts: Arc<Counts>,
    gate: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Counts {
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    received: AtomicUsize,
}

/// Counts a request in flight until dropped (also when Envoy goes away mid-request and
/// the connection's future with it).
struct InFlight(Arc<Counts>);

impl InFlight {
    fn new(counts: &Arc<Counts>) -> InFlight {
        counts.received.fetch_add(1, Ordering::SeqCst);
        let now = counts.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        counts.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(counts.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Backend {
    /// Starts a backend on a free loopback port, its gate open.
    pub async fn start() -> Backend {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the backend");
        let addr = listener.local_addr().expect("the backend's address");
        let counts = Arc::new(Counts::default());
        let (gate, open) = watch::channel(true);
        let shared = counts.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (counts, open) = (shared.clone(), open.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        answer(request, InFlight::new(&counts), open.clone())
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Backend {
            addr,
            counts,
            gate,
            task,
        }
    }

    /// Holds every response, beyond [`HOLD`], until [`Backend::open`].
    pub fn close(&self) {
        self.gate.send_replace(false);
    }

    /// Lets the responses held by [`Backend::close`] go.
    pub fn open(&self) {
        self.gate.send_replace(true);
    }

    /// Requests being answered now.
    pub fn in_flight(&self) -> usize {
        self.counts.in_flight.load(Ordering::SeqCst)
    }

    /// The most requests ever in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.counts.max_in_flight.load(Ordering::SeqCst)
    }

    /// Requests received so far.
    pub fn received(&self) -> usize {
        self.counts.received.load(Ordering::SeqCst)
    }

    /// Forgets the most seen in flight (down to those in flight now).
    pub fn reset_max(&self) {
        self.counts
            .max_in_flight
            .store(self.in_flight(), Ordering::SeqCst);
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.open();
        self.task.abort();
    }
}

async fn answer(
    request: Request<Incoming>,
    in_flight: InFlight,
    mut open: watch::Receiver<bool>,
) -> Result<Response<String>, Infallible> {
    tokio::time::sleep(HOLD).await;
    // A closed sender (the backend dropped) ends the wait too.
    let _ = open.wait_for(|open| *open).await;
    let mut response = Response::new("a completion\n".to_string());
    if let Some(tokens) = request.headers().get("x-llm-tokens") {
        response
            .headers_mut()
            .insert("x-tokens-used", tokens.clone());
    }
    drop(in_flight);
    Ok(response)
}
