//! A loopback TCP proxy a test can cut: every connection it accepts is relayed to the daemon it
//! points at now; [`Proxy::cut`] drops every relayed connection at once (a network drop), and
//! [`Proxy::point_at`] sends new connections to another daemon (the same address across a restart,
//! with no fixed port). With no target, a connection is closed at once (the daemon is down).

use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// A relay between `127.0.0.1:<port>` and a daemon.
pub(crate) struct Proxy {
    pub(crate) port: u16,
    target: Arc<Mutex<Option<u16>>>,
    relays: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl Proxy {
    /// A proxy on a free loopback port, relaying to `target`.
    pub(crate) async fn start(target: Option<u16>) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let target = Arc::new(Mutex::new(target));
        let relays: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (t, r) = (target.clone(), relays.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let to = *t.lock().expect("lock");
                let relay = tokio::spawn(async move {
                    let Some(to) = to else { return };
                    let Ok(mut upstream) = TcpStream::connect(("127.0.0.1", to)).await else { return };
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
                let mut held = r.lock().expect("lock");
                held.retain(|h| !h.is_finished());
                held.push(relay.abort_handle());
            }
        })
        .abort_handle();
        Proxy { port, target, relays, accept }
    }

    /// Drops every connection relayed so far, both ends, at once.
    pub(crate) fn cut(&self) {
        for relay in self.relays.lock().expect("lock").drain(..) {
            relay.abort();
        }
    }

    /// Sends new connections to `target` (`None`: refuses them).
    pub(crate) fn point_at(&self, target: Option<u16>) {
        *self.target.lock().expect("lock") = target;
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
