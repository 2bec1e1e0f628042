//! Where a browser brings a terminal's sign-in back (`mediatord login --browser`): a listener on
//! this machine's loopback at an address nobody can guess (a random path), which takes the one
//! request carrying the sign-in's outcome (`?code=` or `?error=`) and answers the browser a page
//! once the terminal knows what became of it.
//!
//! Anything else that reaches the port (a scanner, a wrong path, a second outcome) gets a page
//! saying so and changes nothing. Bounded: [`MAX_CONNECTIONS`] connections over a sign-in, each
//! answered within [`CONNECTION_DEADLINE`], and the caller's wait.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

/// Connections taken over one sign-in at most: a browser makes one or two (a favicon); past
/// this, whoever else is knocking makes the terminal give up rather than serve them forever.
pub const MAX_CONNECTIONS: usize = 64;
/// How long one connection may take, from its first byte to the page answered (the terminal
/// pairs its device meanwhile).
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(60);
/// How long [`Loopback::finish`] waits for the last pages to be written.
const FINISH_WAIT: Duration = Duration::from_secs(5);
/// Random bytes in the listener's path: 128 bits.
const PATH_BYTES: usize = 16;
/// The longest query taken: a one-time code and a few names.
const MAX_QUERY_CHARS: usize = 4096;

/// What the browser brought.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The one-time code to exchange at `POST /devices/pair`.
    Code(String),
    /// The sign-in's error code (`not_allowed`, `provider_refused`, ...).
    Error(String),
}

/// The browser's request carrying an outcome, waiting for its page.
#[derive(Debug)]
pub struct Arrival {
    pub outcome: Outcome,
    reply: oneshot::Sender<Response<Full<Bytes>>>,
}

impl Arrival {
    /// Answers the browser a page: `title` and `text`, escaped; `ok` says which way it went.
    pub fn answer(self, ok: bool, title: &str, text: &str) {
        let status = if ok { StatusCode::OK } else { StatusCode::FORBIDDEN };
        let _ = self.reply.send(page(status, title, text));
    }
}

/// The listener, until the sign-in's outcome came.
#[derive(Debug)]
pub struct Loopback {
    listener: TcpListener,
    path: String,
    port: u16,
    arrivals: mpsc::Receiver<Arrival>,
    sender: mpsc::Sender<Arrival>,
    connections: JoinSet<()>,
    accepted: usize,
}

impl Loopback {
    /// Listens on `127.0.0.1` at a port the system picks.
    pub async fn bind() -> Result<Loopback, String> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|e| format!("cannot listen on this machine's loopback for the browser's answer: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let mut bytes = [0u8; PATH_BYTES];
        getrandom::fill(&mut bytes).map_err(|_| "the operating system's random number generator failed")?;
        let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        // One outcome is taken: a second waits for no one.
        let (sender, arrivals) = mpsc::channel(1);
        Ok(Loopback {
            listener,
            path: format!("/{secret}"),
            port,
            arrivals,
            sender,
            connections: JoinSet::new(),
            accepted: 0,
        })
    }

    /// The address the daemon sends the browser to (`/auth/login?terminal=`).
    pub fn address(&self) -> String {
        format!("http://127.0.0.1:{}{}", self.port, self.path)
    }

    /// The browser's request carrying the outcome, or why none came within `within`.
    pub async fn wait(&mut self, within: Duration) -> Result<Arrival, String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            tokio::select! {
                arrival = self.arrivals.recv() => {
                    // The loop holds a sender: the channel never closes under it.
                    if let Some(arrival) = arrival { return Ok(arrival) }
                }
                accepted = self.listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    self.accepted += 1;
                    if self.accepted > MAX_CONNECTIONS {
                        return Err(format!(
                            "more than {MAX_CONNECTIONS} connections reached the sign-in's address on this machine; run mediatord login again"
                        ));
                    }
                    self.serve(stream);
                }
                () = tokio::time::sleep_until(deadline) => {
                    return Err(format!(
                        "no browser came back within {} min; run mediatord login again",
                        within.as_secs().div_ceil(60)
                    ));
                }
            }
        }
    }

    /// Stops listening and waits (briefly) for the pages already answered to be written.
    pub async fn finish(mut self) {
        drop(self.listener);
        let _ = tokio::time::timeout(FINISH_WAIT, async {
            while self.connections.join_next().await.is_some() {}
        })
        .await;
    }

    fn serve(&mut self, stream: tokio::net::TcpStream) {
        let path = self.path.clone();
        let sender = self.sender.clone();
        self.connections.spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let (path, sender) = (path.clone(), sender.clone());
                async move { Ok::<_, Infallible>(respond(&req, &path, &sender).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_DEADLINE, conn).await;
        });
    }
}

/// The answer to one request at the listener.
async fn respond(
    req: &Request<hyper::body::Incoming>,
    path: &str,
    sender: &mpsc::Sender<Arrival>,
) -> Response<Full<Bytes>> {
    if req.uri().path() != path {
        return page(StatusCode::NOT_FOUND, "Not found", "This is not the address of a sign-in.");
    }
    if req.method() != hyper::Method::GET {
        return page(StatusCode::METHOD_NOT_ALLOWED, "Not allowed", "A sign-in comes back with GET.");
    }
    let Some(outcome) = outcome_of(req.uri().query().unwrap_or("")) else {
        return page(StatusCode::BAD_REQUEST, "No sign-in", "This request carries no sign-in's outcome.");
    };
    let (reply, page_ready) = oneshot::channel();
    if sender.try_send(Arrival { outcome, reply }).is_err() {
        return page(StatusCode::CONFLICT, "Already answered", "This sign-in has its answer already.");
    }
    page_ready.await.unwrap_or_else(|_| {
        page(StatusCode::INTERNAL_SERVER_ERROR, "Stopped", "The terminal stopped before it finished.")
    })
}

/// The outcome a query carries: exactly one `code` or exactly one `error`, and nothing too long.
fn outcome_of(query: &str) -> Option<Outcome> {
    if query.len() > MAX_QUERY_CHARS {
        return None;
    }
    let mut found = None;
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        let this = match &*key {
            "code" => Outcome::Code(value.into_owned()),
            "error" => Outcome::Error(value.into_owned()),
            _ => continue,
        };
        if found.replace(this).is_some() {
            return None;
        }
    }
    found.filter(|o| !matches!(o, Outcome::Code(c) | Outcome::Error(c) if c.is_empty()))
}

/// A small page, nothing in it but `title` and `text` (escaped), not stored, not framed.
fn page(status: StatusCode, title: &str, text: &str) -> Response<Full<Bytes>> {
    let body = format!(
        "<!doctype html><meta charset=\"utf-8\"><title>{title}</title><h1 id=\"title\">{title}</h1><p id=\"text\">{text}</p>\n",
        title = crate::text::html(title),
        text = crate::text::html(text)
    );
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(hyper::header::CACHE_CONTROL, hyper::header::HeaderValue::from_static("no-store"));
    h.insert(hyper::header::REFERRER_POLICY, hyper::header::HeaderValue::from_static("no-referrer"));
    h.insert(
        hyper::header::CONTENT_SECURITY_POLICY,
        hyper::header::HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_carries_one_code_or_one_error() {
        assert_eq!(outcome_of("code=ab%26c&iss=x"), Some(Outcome::Code("ab&c".into())));
        assert_eq!(outcome_of("error=not_allowed"), Some(Outcome::Error("not_allowed".into())));
        for none in ["", "iss=x", "code=", "error=", "code=a&code=b", "code=a&error=b"] {
            assert_eq!(outcome_of(none), None, "{none}");
        }
        let long = format!("code={}", "a".repeat(MAX_QUERY_CHARS - 5));
        assert!(outcome_of(&long).is_some());
        assert_eq!(outcome_of(&format!("{long}a")), None);
    }

    /// The listener as `login` runs it: its own runtime on a thread, shut down (as the command's is)
    /// right after [`Loopback::finish`]. A stranger's knocks (another path, another method, no
    /// outcome) get their pages and change nothing; the browser's outcome is taken, and its
    /// page reaches the browser though the runtime ends right after.
    #[tokio::test]
    async fn the_outcome_is_taken_at_its_path_and_its_page_written_before_the_end() {
        let (address_tx, address_rx) = std::sync::mpsc::channel();
        let terminal = std::thread::spawn(move || {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            let outcome = runtime.block_on(async {
                let mut loopback = Loopback::bind().await.expect("bind");
                address_tx.send(loopback.address()).expect("the test waits");
                let arrival = loopback.wait(Duration::from_secs(60)).await.expect("an outcome");
                let outcome = arrival.outcome.clone();
                arrival.answer(true, "Signed in", "as Ada");
                loopback.finish().await;
                outcome
            });
            runtime.shutdown_background();
            outcome
        });
        let address = address_rx.recv_timeout(Duration::from_secs(60)).expect("an address");
        let (root, path) =
            address.split_at("http://127.0.0.1:".len() + address[17..].find('/').expect("a path"));
        assert!(path.len() > 30, "a random path: {path}");
        let http = reqwest::Client::builder().no_proxy().build().expect("client");
        let get = |url: String| {
            let http = http.clone();
            async move {
                let res = http.get(url).send().await.expect("answered");
                (res.status().as_u16(), res.text().await.expect("a page"))
            }
        };
        assert_eq!(get(format!("{root}/")).await.0, 404);
        assert_eq!(get(format!("{root}/{}", &path[2..])).await.0, 404, "a path near it");
        assert_eq!(http.post(&address).send().await.expect("answered").status().as_u16(), 405);
        assert_eq!(get(format!("{address}?iss=x")).await.0, 400);
        let (status, page) = get(format!("{address}?code=c0de")).await;
        assert_eq!(status, 200, "{page}");
        assert!(page.contains("Signed in") && page.contains("as Ada"), "{page}");
        assert_eq!(terminal.join().expect("the terminal"), Outcome::Code("c0de".into()));
    }

    #[tokio::test]
    async fn a_wait_ends_when_nobody_comes_back() {
        let mut loopback = Loopback::bind().await.expect("bind");
        let waited =
            tokio::time::timeout(Duration::from_secs(60), loopback.wait(Duration::from_millis(50))).await;
        let why = waited.expect("the wait ends by itself").expect_err("nobody came");
        assert!(why.contains("run mediatord login again"), "{why}");
    }

    #[tokio::test]
    async fn a_page_is_escaped() {
        use http_body_util::BodyExt;
        let p = page(StatusCode::OK, "A <b>", "Ada's \"terminal\" & co");
        let body = p.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let text = String::from_utf8_lossy(&body);
        assert!(
            text.contains("A &lt;b&gt;") && text.contains("Ada&#39;s &quot;terminal&quot; &amp; co"),
            "{text}"
        );
    }
}
