//! A statsd server for tests: listens on loopback (TCP or UDP), parses every line it
//! receives (a line it cannot parse fails the test), and can be stopped and started
//! again on the same port.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;

/// One statsd line: `name:value|type[|@rate][|#tag,…]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub name: String,
    pub value: f64,
    /// `c`, `ms` or `g`.
    pub kind: String,
    /// The sample rate, 1 when absent.
    pub rate: f64,
    /// DogStatsD tags, as sent (`k:v`).
    pub tags: Vec<String>,
}

impl Line {
    /// The samples this line stands for: its value over its rate for a counter, 1 / rate
    /// for a timer.
    pub fn count(&self) -> f64 {
        match self.kind.as_str() {
            "ms" => 1.0 / self.rate,
            _ => self.value / self.rate,
        }
    }
}

/// Parses one line; panics on anything that is not statsd.
pub fn parse(text: &str) -> Line {
    try_parse(text).unwrap_or_else(|| panic!("not a statsd line: {text:?}"))
}

fn try_parse(text: &str) -> Option<Line> {
    // The name ends at the last `:` before the first `|` (DogStatsD tags hold `:` too).
    let bar = text.find('|')?;
    let colon = text[..bar].rfind(':')?;
    let (name, rest) = (&text[..colon], &text[colon + 1..]);
    let mut parts = rest.split('|');
    let value: f64 = parts.next()?.parse().ok()?;
    let kind = parts.next()?.to_string();
    if !["c", "ms", "g"].contains(&kind.as_str()) {
        return None;
    }
    let (mut rate, mut tags) = (1.0, Vec::new());
    for part in parts {
        if let Some(r) = part.strip_prefix('@') {
            rate = r.parse().ok().filter(|r: &f64| *r > 0.0 && *r <= 1.0)?;
        } else if let Some(t) = part.strip_prefix('#') {
            tags = t.split(',').map(str::to_string).collect();
            if !tags.iter().all(|t| t.contains(':')) {
                return None;
            }
        } else {
            return None;
        }
    }
    if name.is_empty() || name.contains([' ', '|', ':']) {
        return None;
    }
    Some(Line {
        name: name.to_string(),
        value,
        kind,
        rate,
        tags,
    })
}

/// What the server received, shared with its tasks.
type Received = Arc<Mutex<Vec<Line>>>;

/// A statsd server on a loopback port.
pub struct StatsdServer {
    pub addr: SocketAddr,
    udp: bool,
    received: Received,
    task: Option<JoinHandle<()>>,
}

impl StatsdServer {
    /// Listens on a free loopback port, TCP or UDP.
    pub async fn start(udp: bool) -> StatsdServer {
        let mut server = StatsdServer {
            addr: "127.0.0.1:0".parse().unwrap(),
            udp,
            received: Received::default(),
            task: None,
        };
        server.listen().await;
        server
    }

    async fn listen(&mut self) {
        let received = self.received.clone();
        let task = if self.udp {
            let socket = UdpSocket::bind(self.addr).await.expect("binding UDP");
            self.addr = socket.local_addr().unwrap();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Ok(n) = socket.recv(&mut buf).await {
                    let text = String::from_utf8(buf[..n].to_vec()).expect("UTF-8 datagram");
                    let lines = text.lines().filter(|l| !l.is_empty()).map(parse);
                    received.lock().unwrap().extend(lines);
                }
            })
        } else {
            let listener = TcpListener::bind(self.addr).await.expect("binding TCP");
            self.addr = listener.local_addr().unwrap();
            tokio::spawn(async move {
                // Connections are read inside this task: aborting it closes them all.
                let mut readers = tokio::task::JoinSet::new();
                loop {
                    let (conn, _) = tokio::select! {
                        accepted = listener.accept() => accepted.expect("accepting"),
                        Some(_) = readers.join_next() => continue,
                    };
                    let received = received.clone();
                    readers.spawn(async move {
                        let mut lines = BufReader::new(conn).lines();
                        while let Ok(Some(line)) = lines.next_line().await {
                            received.lock().unwrap().push(parse(&line));
                        }
                    });
                }
            })
        };
        self.task = Some(task);
    }

    /// Stops listening and closes every connection (the port is free until `restart`).
    pub async fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Listens again on the same port.
    pub async fn restart(&mut self) {
        self.listen().await;
    }

    /// Every line received so far.
    pub fn lines(&self) -> Vec<Line> {
        self.received.lock().unwrap().clone()
    }

    /// Forgets the lines received so far.
    pub fn clear(&self) {
        self.received.lock().unwrap().clear();
    }

    /// The sum of each counter's values received so far, by name.
    pub fn counters(&self) -> BTreeMap<String, f64> {
        let mut sums = BTreeMap::new();
        for line in self.lines().iter().filter(|l| l.kind == "c") {
            *sums.entry(line.name.clone()).or_default() += line.count();
        }
        sums
    }
}
