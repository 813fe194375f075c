//! The connection to the statsd server: made when a flush needs it, dropped when it fails,
//! made again by the next flush.

use std::io;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket, lookup_host};

use super::Protocol;

/// Largest datagram sent: whole lines up to a size that crosses common networks unsplit
/// (what statsd clients use for Ethernet's 1500-byte MTU).
const MAX_DATAGRAM: usize = 1432;

/// The statsd server, and the connection to it once made.
#[derive(Debug)]
pub(super) struct Sink {
    /// `host:port`, resolved at each connection (a server that moved is found again).
    addr: String,
    /// TCP or UDP.
    protocol: Protocol,
    /// The TCP connection, if one is up.
    tcp: Option<TcpStream>,
    /// The UDP socket, connected to the server, if made.
    udp: Option<UdpSocket>,
}

impl Sink {
    pub(super) fn new(addr: String, protocol: Protocol) -> Self {
        Self {
            addr,
            protocol,
            tcp: None,
            udp: None,
        }
    }

    /// Forgets the connection: the next flush makes a new one.
    pub(super) fn disconnect(&mut self) {
        self.tcp = None;
        self.udp = None;
    }

    /// Sends one flush's lines, connecting first if needed.
    ///
    /// # Errors
    /// No connection could be made, or writing failed (the connection is then dropped).
    pub(super) async fn send(&mut self, lines: &[u8]) -> io::Result<()> {
        let sent = match self.protocol {
            Protocol::Tcp => self.send_tcp(lines).await,
            Protocol::Udp => self.send_udp(lines).await,
        };
        if sent.is_err() {
            self.disconnect();
        }
        sent
    }

    async fn send_tcp(&mut self, lines: &[u8]) -> io::Result<()> {
        if self.tcp.as_ref().is_some_and(|c| !alive(c)) {
            self.tcp = None;
        }
        let conn = match &mut self.tcp {
            Some(conn) => conn,
            None => self
                .tcp
                .insert(TcpStream::connect(self.addr.as_str()).await?),
        };
        conn.write_all(lines).await?;
        conn.flush().await
    }

    async fn send_udp(&mut self, lines: &[u8]) -> io::Result<()> {
        let socket = match &self.udp {
            Some(socket) => socket,
            None => {
                let server = lookup_host(self.addr.as_str())
                    .await?
                    .next()
                    .ok_or_else(|| io::Error::other("the host has no address"))?;
                let local = if server.is_ipv4() {
                    "0.0.0.0:0"
                } else {
                    "[::]:0"
                };
                let socket = UdpSocket::bind(local).await?;
                socket.connect(server).await?;
                self.udp.insert(socket)
            }
        };
        for datagram in datagrams(lines) {
            socket.send(datagram).await?;
        }
        Ok(())
    }
}

/// Whether a connection the server never writes to is still open: readable means it was
/// closed (end of stream) or reset, which a write alone would not show until the write
/// after (the first lands in the kernel's buffer and is lost).
fn alive(conn: &TcpStream) -> bool {
    let mut byte = [0u8; 64];
    match conn.try_read(&mut byte) {
        Ok(0) => false,
        Ok(_) => true, // the server said something: still there
        Err(e) => e.kind() == io::ErrorKind::WouldBlock,
    }
}

/// `lines` cut into datagrams of whole lines, each at most [`MAX_DATAGRAM`] bytes (a
/// longer line alone).
fn datagrams(lines: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = lines;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = 0;
        for (at, &byte) in rest.iter().enumerate() {
            if byte == b'\n' {
                if at + 1 > MAX_DATAGRAM && end > 0 {
                    break;
                }
                end = at + 1;
                if end >= MAX_DATAGRAM {
                    break;
                }
            }
        }
        if end == 0 {
            end = rest.len();
        }
        let (datagram, tail) = rest.split_at(end);
        rest = tail;
        Some(datagram)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagrams_hold_whole_lines_within_the_size() {
        let line = format!("{}\n", "x".repeat(99));
        let lines = line.repeat(30); // 3000 bytes
        let parts: Vec<&[u8]> = datagrams(lines.as_bytes()).collect();
        assert_eq!(parts.len(), 3, "14 + 14 + 2 lines");
        assert!(
            parts
                .iter()
                .all(|p| p.len() <= MAX_DATAGRAM && p.ends_with(b"\n"))
        );
        assert_eq!(parts.concat(), lines.as_bytes());
        let long = format!("{}\nab\n", "y".repeat(2000));
        let parts: Vec<&[u8]> = datagrams(long.as_bytes()).collect();
        assert_eq!(parts, [&long.as_bytes()[..2001], b"ab\n"]);
    }
}
