//! The socket a port accepts on: TCP, or a Unix socket (gRPC for a sidecar on the same
//! host, `--grpc-uds`, the Go server's `GRPC_UDS`).

use std::io;
use std::path::{Path, PathBuf};

use socket2::{SockRef, TcpKeepalive};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio_util::either::Either;

/// First probe after a minute of silence, then every 10 s (the kernel's count of probes).
const TCP_KEEPALIVE: TcpKeepalive = TcpKeepalive::new()
    .with_time(std::time::Duration::from_secs(60))
    .with_interval(std::time::Duration::from_secs(10));

/// An accepted connection.
pub(crate) type Stream = Either<TcpStream, UnixStream>;

/// A listening socket.
#[derive(Debug)]
pub enum Listener {
    /// A TCP port.
    Tcp(TcpListener),
    /// A Unix socket, and its path (the socket's own address may not say it).
    Unix(UnixListener, PathBuf),
}

impl From<TcpListener> for Listener {
    fn from(listener: TcpListener) -> Self {
        Listener::Tcp(listener)
    }
}

impl Listener {
    /// Listens on the Unix socket `path`. A socket file left there by a process that
    /// stopped without removing it (nobody accepts on it) is replaced; a live one, or any
    /// other kind of file, is an error.
    ///
    /// # Errors
    /// The socket cannot be created, or `path` is taken.
    pub fn bind_unix(path: &Path) -> io::Result<Listener> {
        match UnixListener::bind(path) {
            Ok(listener) => Ok(Listener::Unix(listener, path.to_path_buf())),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && is_stale_socket(path) => {
                std::fs::remove_file(path)?;
                Ok(Listener::Unix(
                    UnixListener::bind(path)?,
                    path.to_path_buf(),
                ))
            }
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("cannot listen on {}: {e}", path.display()),
            )),
        }
    }

    /// The next connection, tuned for small answers.
    pub(crate) async fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(listener) => {
                let (stream, _) = listener.accept().await?;
                // Answers are small and must not wait for the peer's delayed ACK (Nagle).
                let _ = stream.set_nodelay(true);
                // A request in flight keeps a connection from being idle; kernel keepalive
                // probes find the peer gone if its host vanished without closing (about
                // 2.5 min).
                let _ = SockRef::from(&stream).set_tcp_keepalive(&TCP_KEEPALIVE);
                Ok(Either::Left(stream))
            }
            Listener::Unix(listener, _) => Ok(Either::Right(listener.accept().await?.0)),
        }
    }

    /// Where it listens, for log lines: `host:port`, or `unix:<path>`.
    pub fn describe(&self) -> String {
        match self {
            Listener::Tcp(listener) => listener
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default(),
            Listener::Unix(_, path) => format!("unix:{}", path.display()),
        }
    }
}

/// Whether `path` is a Unix socket that nobody accepts on.
fn is_stale_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let socket = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
    socket
        && std::os::unix::net::UnixStream::connect(path)
            .is_err_and(|e| e.kind() == io::ErrorKind::ConnectionRefused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_a_live_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grpc.sock");
        let live = Listener::bind_unix(&path).unwrap();
        assert_eq!(live.describe(), format!("unix:{}", path.display()));
        let taken = Listener::bind_unix(&path).unwrap_err();
        assert_eq!(taken.kind(), io::ErrorKind::AddrInUse, "{taken}");
        assert!(taken.to_string().contains("grpc.sock"), "{taken}");
        // Dropped without removing its file, as a killed process leaves it.
        drop(live);
        assert!(path.exists());
        let again = Listener::bind_unix(&path).unwrap();
        let client = tokio::net::UnixStream::connect(&path);
        let (accepted, connected) = tokio::join!(again.accept(), client);
        assert!(matches!(accepted.unwrap(), Either::Right(_)));
        connected.unwrap();
        // Not a socket: never removed.
        let file = dir.path().join("file");
        std::fs::write(&file, "keep").unwrap();
        assert!(Listener::bind_unix(&file).is_err());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
    }
}
