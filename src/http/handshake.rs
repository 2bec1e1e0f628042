//! The TLS side of one accepted connection (`--tls-cert`): the first byte decides. A TLS client
//! opens with a handshake record (content type 22); anything else is a client speaking plain http
//! to the https port, and it gets a plain `400 https_required` saying so (what nginx's 497 does)
//! instead of a handshake error it cannot read. The handshake runs on the connection's own task,
//! under `--header-timeout-ms`, so a client that stalls it holds only its own connection.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::error::ApiError;
use super::listener::LimitedStream;

/// The TLS record content type of a handshake: every ClientHello starts with it.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// What the first byte says the client is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Opening {
    Tls,
    PlainHttp,
}

/// A connection opening with `first` speaks TLS only if it is a handshake record.
pub(super) fn opening(first: u8) -> Opening {
    if first == TLS_HANDSHAKE_RECORD { Opening::Tls } else { Opening::PlainHttp }
}

/// The https listener's acceptor: one rustls configuration, whose certificate resolver a reload
/// swaps underneath it.
#[derive(Clone)]
pub(super) struct Https {
    acceptor: TlsAcceptor,
    deadline: Duration,
}

impl std::fmt::Debug for Https {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Https").field("deadline", &self.deadline).finish_non_exhaustive()
    }
}

impl Https {
    pub(super) fn new(config: Arc<rustls::ServerConfig>, deadline: Duration) -> Https {
        Https { acceptor: TlsAcceptor::from(config), deadline }
    }

    /// The TLS stream, or `None` when the client spoke plain http (answered), failed the handshake
    /// or did neither within the deadline.
    pub(super) async fn accept(&self, mut io: LimitedStream) -> Option<TlsStream<LimitedStream>> {
        let handshake = async {
            let mut first = [0u8; 1];
            match io.peek(&mut first).await {
                Ok(1) => {}
                _ => return None,
            }
            if opening(first[0]) == Opening::PlainHttp {
                let _ = io.write_all(&ApiError::HttpsRequired.raw_response()).await;
                // The answer is whole: shut the write side, then linger (`super::conn`).
                if io.shutdown().await.is_ok() {
                    super::conn::linger(&mut io).await;
                }
                return None;
            }
            match self.acceptor.accept(io).await {
                Ok(tls) => Some(tls),
                Err(e) => {
                    tracing::debug!(error = %e, "TLS handshake failed");
                    None
                }
            }
        };
        tokio::time::timeout(self.deadline, handshake).await.ok().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_handshake_record_opens_tls() {
        assert_eq!(opening(0x16), Opening::Tls);
        for plain in [b'G', b'P', b'H', b'D', b'O', 0x15, 0x17, 0] {
            assert_eq!(opening(plain), Opening::PlainHttp, "{plain:#x}");
        }
    }
}
