//! What a connection and its lanes share: who the client is, what it asked for at `initialize`,
//! and the JSON-RPC ids each side owes the other.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::failure::{Failure, Render};
use crate::acp::{RequestId, RpcError};
use crate::sync::lock;

/// Permission requests one connection may have asked and not had answered, over all its sessions
/// (each session has at most 64 pending); past it the connection is not asked (it can still vote
/// with `session/permission`).
const MAX_ASKED: usize = 256;

/// Who opened a connection, as the perimeter resolved the credential of its first request.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The operator, or the device whose credential it presented (its id). A Streamable HTTP
    /// connection answers only requests from the same caller.
    pub owner: Owner,
    /// The client id it acts as: a device's id, or the `X-Qwen-Client-Id` it sent. `None` lets the
    /// first `session/new` name one (`_meta.clientId`), or the door mints one.
    pub client_id: Option<String>,
    /// A device's name, for the audit of its votes.
    pub device_name: Option<Arc<str>>,
    /// An observer device: it may read (`session/load`, `session/list`) but not prompt, vote or
    /// change anything.
    pub observer: bool,
}

/// The credential a connection was opened with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    Operator,
    Device(Arc<str>),
}

/// What a connection's lanes share with it: who it is, what it asked, and the JSON-RPC ids each
/// side owes the other. Await-free critical sections only.
pub(super) struct Shared {
    pub(super) id: String,
    /// The client id the connection acts as, once known.
    pub(super) client: OnceLock<String>,
    /// The door minted `client` (the client named none): it leaves its sessions with the
    /// connection.
    pub(super) minted: AtomicBool,
    pub(super) observer: bool,
    pub(super) device_name: Option<Arc<str>>,
    /// The peer of the latest request (Streamable HTTP requests may come from another socket).
    pub(super) loopback: AtomicBool,
    /// Sent the echo of its own prompts (`_meta["mediatord/echoOwnPrompts"]`, or the qwen dialect).
    pub(super) echo_own: AtomicBool,
    /// Every event-born message wrapped with its event id (`_meta["mediatord/eventIds"]`).
    pub(super) envelope: AtomicBool,
    pub(super) render: Render,
    pub(super) book: Mutex<Book>,
}

/// The JSON-RPC ids in flight between the connection and the daemon.
#[derive(Default)]
pub(super) struct Book {
    /// `session/prompt` requests to answer at their turn's end: (session, prompt id) → request id.
    prompts: HashMap<(String, String), RequestId>,
    /// `session/request_permission` requests the client has not answered: our id → (session,
    /// mediator request id).
    asked: HashMap<String, (String, String)>,
    next: u64,
}

impl Shared {
    pub(super) fn render(&self, f: &Failure) -> RpcError {
        (self.render)(f)
    }

    pub(super) fn echo_own(&self) -> bool {
        self.echo_own.load(Ordering::Relaxed)
    }

    pub(super) fn envelope(&self) -> bool {
        self.envelope.load(Ordering::Relaxed)
    }

    pub(super) fn loopback(&self) -> bool {
        self.loopback.load(Ordering::Relaxed)
    }

    /// The client id this connection acts as, once known.
    pub(super) fn client_id(&self) -> Option<&str> {
        self.client.get().map(String::as_str)
    }

    /// The client id to ask permission requests of: none for an observer, or before one is known.
    pub(super) fn voter(&self) -> Option<String> {
        if self.observer { None } else { self.client.get().cloned() }
    }

    /// Records a request about to be sent; its id, or `None` past [`MAX_ASKED`].
    pub(super) fn issue(&self, session_id: &str, request_id: &str) -> Option<String> {
        let mut book = lock(&self.book);
        if book.asked.len() >= MAX_ASKED {
            return None;
        }
        book.next += 1;
        let ours = format!("perm-{}", book.next);
        book.asked.insert(ours.clone(), (session_id.to_owned(), request_id.to_owned()));
        Some(ours)
    }

    /// Forgets the requests asked about `request_id` (decided); returns their ids.
    pub(super) fn withdraw(&self, session_id: &str, request_id: &str) -> Vec<String> {
        let mut book = lock(&self.book);
        let ours: Vec<String> = book
            .asked
            .iter()
            .filter(|(_, (s, r))| s == session_id && r == request_id)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &ours {
            book.asked.remove(k);
        }
        ours
    }

    pub(super) fn take_asked(&self, ours: &str) -> Option<(String, String)> {
        lock(&self.book).asked.remove(ours)
    }

    pub(super) fn await_prompt(&self, session_id: &str, prompt_id: &str, id: RequestId) {
        lock(&self.book).prompts.insert((session_id.to_owned(), prompt_id.to_owned()), id);
    }

    /// The request a prompt's answer is owed to, if this connection sent it (and is still owed).
    pub(super) fn owed_prompt(&self, session_id: &str, prompt_id: &str) -> Option<RequestId> {
        lock(&self.book).prompts.get(&(session_id.to_owned(), prompt_id.to_owned())).cloned()
    }

    pub(super) fn take_prompt(&self, session_id: &str, prompt_id: &str) -> Option<RequestId> {
        lock(&self.book).prompts.remove(&(session_id.to_owned(), prompt_id.to_owned()))
    }

    /// The prompts still unanswered on `session_id` (its lane ended first).
    pub(super) fn drop_prompts(&self, session_id: &str) -> Vec<RequestId> {
        let mut book = lock(&self.book);
        let keys: Vec<(String, String)> =
            book.prompts.keys().filter(|(s, _)| s == session_id).cloned().collect();
        keys.into_iter().filter_map(|k| book.prompts.remove(&k)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(observer: bool) -> Shared {
        Shared {
            id: "c".into(),
            client: OnceLock::new(),
            minted: AtomicBool::new(false),
            observer,
            device_name: None,
            loopback: AtomicBool::new(true),
            echo_own: AtomicBool::new(false),
            envelope: AtomicBool::new(false),
            render: |_| RpcError::new(-32603, "x"),
            book: Mutex::new(Book::default()),
        }
    }

    #[test]
    fn a_voter_is_known_and_not_an_observer() {
        let s = shared(false);
        assert_eq!((s.voter(), s.client_id()), (None, None), "no client id yet");
        s.client.set("alice".into()).expect("set once");
        assert_eq!((s.voter(), s.client_id()), (Some("alice".into()), Some("alice")));
        let o = shared(true);
        o.client.set("dev-1".into()).expect("set once");
        assert_eq!(o.voter(), None, "an observer is never asked");
    }

    #[test]
    fn asked_requests_are_numbered_bounded_and_withdrawn_per_session_and_request() {
        let s = shared(false);
        let a = s.issue("s1", "r1").expect("asked");
        let b = s.issue("s1", "r1").expect("asked again (another lane)");
        let c = s.issue("s2", "r1").expect("another session's r1");
        let d = s.issue("s1", "r2").expect("another request");
        assert_eq!([&a, &b, &c, &d], ["perm-1", "perm-2", "perm-3", "perm-4"]);
        let mut gone = s.withdraw("s1", "r1");
        gone.sort();
        assert_eq!(gone, vec![a.clone(), b]);
        assert_eq!(s.withdraw("s1", "r1"), Vec::<String>::new(), "withdrawn once");
        assert_eq!(s.take_asked(&c), Some(("s2".into(), "r1".into())));
        assert_eq!(s.take_asked(&c), None);
        assert_eq!(s.take_asked(&a), None);
        for _ in 1..MAX_ASKED {
            assert!(s.issue("s3", "r").is_some());
        }
        assert_eq!(s.issue("s3", "r"), None, "at most MAX_ASKED unanswered");
        s.take_asked(&d);
        assert!(s.issue("s3", "r").is_some(), "an answer frees a place");
    }

    #[test]
    fn prompts_are_owed_until_taken_and_dropped_with_their_session() {
        let s = shared(false);
        s.await_prompt("s1", "p1", RequestId::Number(1));
        s.await_prompt("s1", "p2", RequestId::Number(2));
        s.await_prompt("s2", "p1", RequestId::Number(3));
        assert_eq!(s.owed_prompt("s1", "p1"), Some(RequestId::Number(1)));
        assert_eq!(s.owed_prompt("s1", "p1"), Some(RequestId::Number(1)), "looking does not take it");
        assert_eq!(s.owed_prompt("s1", "p3"), None);
        assert_eq!(s.take_prompt("s1", "p1"), Some(RequestId::Number(1)));
        assert_eq!(s.owed_prompt("s1", "p1"), None);
        assert_eq!(s.drop_prompts("s1"), vec![RequestId::Number(2)]);
        assert_eq!(s.owed_prompt("s2", "p1"), Some(RequestId::Number(3)), "another session's stays");
    }
}
