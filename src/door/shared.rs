//! What a connection and its lanes share: who the client is, what it asked for at `initialize`,
//! and the JSON-RPC ids each side owes the other.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio_util::sync::CancellationToken;

use crate::acp::RequestId;
use crate::desk::{Caller, Desk, Who};
use crate::permission::Via;
use crate::sync::lock;

/// Permission requests one connection may have asked and not had answered, over all its sessions
/// (each session has at most 64 pending); past it the connection is not asked (it can still vote
/// with `session/permission`).
const MAX_ASKED: usize = 256;
/// URL elicitations one connection remembers having asked as `elicitation/create`, newest kept,
/// for the agent's `elicitation/complete` that may follow the answer (a URL is completed soon
/// after it is opened, or never: the oldest are forgotten).
pub(super) const MAX_URL_ELICITATIONS: usize = 64;

/// The credential a connection was opened with: a Streamable HTTP connection answers only
/// requests from the same one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    Operator,
    Device(Arc<str>),
}

impl Owner {
    /// Whose credential `caller` presented.
    pub fn of(caller: &Caller) -> Owner {
        caller.device().map_or(Owner::Operator, |d| Owner::Device(d.id.clone()))
    }
}

/// What a connection's lanes share with it: who it is, what it asked, and the JSON-RPC ids each
/// side owes the other. Await-free critical sections only.
pub(super) struct Shared {
    /// The front desk every registration, subscription and vote of the connection goes through.
    pub(super) desk: Arc<Desk>,
    pub(super) id: String,
    /// The client id the connection acts as, once known.
    pub(super) client: OnceLock<String>,
    /// The door minted `client` (the client named none): it leaves its sessions with the
    /// connection.
    pub(super) minted: AtomicBool,
    /// The credential the connection was opened with (its role, a device's name).
    pub(super) who: Who,
    /// The latest request came from this host's loopback (Streamable HTTP requests may come
    /// from another socket), as the desk's caller said.
    pub(super) local: AtomicBool,
    /// Sent the echo of its own prompts (`_meta["mediatord/echoOwnPrompts"]`, or the qwen dialect).
    pub(super) echo_own: AtomicBool,
    /// Every event-born message wrapped with its event id (`_meta["mediatord/eventIds"]`).
    pub(super) envelope: AtomicBool,
    /// The elicitation modes the client advertised at `initialize`
    /// (`clientCapabilities.elicitation.form` / `.url`): a question it can take in one is asked
    /// as `elicitation/create`, any other as `session/request_permission` (`docs/protocol.md#196-over-acp`).
    pub(super) elicit_form: AtomicBool,
    pub(super) elicit_url: AtomicBool,
    /// Also sent a decided request as the multi-client attach proposal's `permission_resolved`
    /// session update (`_meta["mediatord/permissionResolvedUpdates"]`).
    pub(super) resolved_updates: AtomicBool,
    pub(super) book: Mutex<Book>,
}

impl Shared {
    /// A connection's shared part as it opens, with id `id` (and the client id the caller named,
    /// if any): nothing negotiated yet (no echo, no envelope, no elicitation mode), no id minted,
    /// nothing in flight.
    pub(super) fn opening(
        desk: Arc<Desk>,
        id: String,
        client: Option<String>,
        who: Who,
        local: bool,
    ) -> Shared {
        let known = OnceLock::new();
        if let Some(client) = client {
            let _ = known.set(client);
        }
        Shared {
            desk,
            id,
            client: known,
            minted: AtomicBool::new(false),
            who,
            local: AtomicBool::new(local),
            echo_own: AtomicBool::new(false),
            envelope: AtomicBool::new(false),
            elicit_form: AtomicBool::new(false),
            elicit_url: AtomicBool::new(false),
            resolved_updates: AtomicBool::new(false),
            book: Mutex::new(Book::default()),
        }
    }
}

/// The JSON-RPC ids in flight between the connection and the daemon.
#[derive(Default)]
pub(super) struct Book {
    /// `session/prompt` requests to answer at their turn's end: (session, prompt id) → request id,
    /// and what cancels the prompt (`$/cancel_request`).
    prompts: HashMap<(String, String), (RequestId, CancellationToken)>,
    /// The requests being served now (at most `MAX_CALLS_IN_FLIGHT`), and what cancels each.
    serving: HashMap<RequestId, CancellationToken>,
    /// `session/request_permission` and `elicitation/create` requests the client has not
    /// answered, by our id.
    asked: HashMap<String, Asked>,
    /// The URL elicitations asked as `elicitation/create`: (session, mediator request id, the
    /// client's `elicitationId`), oldest first, at most [`MAX_URL_ELICITATIONS`].
    urls: VecDeque<(String, String)>,
    next: u64,
}

/// One of the daemon's requests to the client, unanswered: about which session's request, and
/// in which form (its answer is read as that form's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Asked {
    pub(super) session_id: String,
    /// The mediator's request id.
    pub(super) request_id: String,
    /// Sent as `elicitation/create` (answered `{action, content?}`), else as
    /// `session/request_permission` (answered `{outcome, answers?}`).
    pub(super) elicitation: bool,
}

impl Shared {
    pub(super) fn echo_own(&self) -> bool {
        self.echo_own.load(Ordering::Relaxed)
    }

    pub(super) fn envelope(&self) -> bool {
        self.envelope.load(Ordering::Relaxed)
    }

    /// The connection as the desk's caller: who opened it, the client id it acts as, from where
    /// its latest request came, through `/acp`.
    pub(super) fn caller(&self) -> Caller {
        Caller {
            client: self.client.get().cloned(),
            minted: self.minted.load(Ordering::Relaxed),
            who: self.who.clone(),
            local: self.local.load(Ordering::Relaxed),
            via: Via::Acp,
        }
    }

    /// The client id this connection acts as, once known.
    pub(super) fn client_id(&self) -> Option<&str> {
        self.client.get().map(String::as_str)
    }

    /// The elicitation modes the client advertised: (form, url).
    pub(super) fn elicitation_modes(&self) -> (bool, bool) {
        (self.elicit_form.load(Ordering::Relaxed), self.elicit_url.load(Ordering::Relaxed))
    }

    /// Records a request about to be sent (`elicitation`: as `elicitation/create`); its id, or
    /// `None` past [`MAX_ASKED`].
    pub(super) fn issue(&self, session_id: &str, request_id: &str, elicitation: bool) -> Option<String> {
        let mut book = lock(&self.book);
        if book.asked.len() >= MAX_ASKED {
            return None;
        }
        book.next += 1;
        let ours = format!("{}-{}", if elicitation { "elicit" } else { "perm" }, book.next);
        let asked =
            Asked { session_id: session_id.to_owned(), request_id: request_id.to_owned(), elicitation };
        book.asked.insert(ours.clone(), asked);
        Some(ours)
    }

    /// Forgets the requests asked about `request_id` (decided); returns their ids.
    pub(super) fn withdraw(&self, session_id: &str, request_id: &str) -> Vec<String> {
        let mut book = lock(&self.book);
        let ours: Vec<String> = book
            .asked
            .iter()
            .filter(|(_, a)| a.session_id == session_id && a.request_id == request_id)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &ours {
            book.asked.remove(k);
        }
        ours
    }

    /// Remembers that the URL elicitation `request_id` was asked as `elicitation/create`.
    pub(super) fn remember_url(&self, session_id: &str, request_id: &str) {
        let mut book = lock(&self.book);
        if book.urls.len() >= MAX_URL_ELICITATIONS {
            book.urls.pop_front();
        }
        book.urls.push_back((session_id.to_owned(), request_id.to_owned()));
    }

    /// Whether the URL elicitation `request_id` was asked here (once: it is forgotten).
    pub(super) fn take_url(&self, session_id: &str, request_id: &str) -> bool {
        let mut book = lock(&self.book);
        match book.urls.iter().position(|(s, r)| s == session_id && r == request_id) {
            Some(at) => book.urls.remove(at).is_some(),
            None => false,
        }
    }

    pub(super) fn take_asked(&self, ours: &str) -> Option<Asked> {
        lock(&self.book).asked.remove(ours)
    }

    /// Records a prompt whose answer is owed to request `id`; what cancels it: a child of the
    /// request's serving token, so a `$/cancel_request` read while the request was being served
    /// (before this prompt was known) still cancels the prompt.
    pub(super) fn await_prompt(&self, session_id: &str, prompt_id: &str, id: RequestId) -> CancellationToken {
        let mut book = lock(&self.book);
        let cancel =
            book.serving.get(&id).map_or_else(CancellationToken::new, CancellationToken::child_token);
        book.prompts.insert((session_id.to_owned(), prompt_id.to_owned()), (id, cancel.clone()));
        cancel
    }

    /// The request a prompt's answer is owed to, if this connection sent it (and is still owed).
    pub(super) fn owed_prompt(&self, session_id: &str, prompt_id: &str) -> Option<RequestId> {
        lock(&self.book).prompts.get(&(session_id.to_owned(), prompt_id.to_owned())).map(|(id, _)| id.clone())
    }

    pub(super) fn take_prompt(&self, session_id: &str, prompt_id: &str) -> Option<RequestId> {
        lock(&self.book).prompts.remove(&(session_id.to_owned(), prompt_id.to_owned())).map(|(id, _)| id)
    }

    /// The prompt request `id` is, if it is owed: (session, prompt id, what cancels it).
    pub(super) fn prompt_of(&self, id: &RequestId) -> Option<(String, String, CancellationToken)> {
        let book = lock(&self.book);
        book.prompts
            .iter()
            .find(|(_, (r, _))| r == id)
            .map(|((s, p), (_, c))| (s.clone(), p.clone(), c.clone()))
    }

    /// Records request `id` as being served; what cancels it (`None`: a request of the same id is
    /// being served already, and this one is not cancellable by id).
    pub(super) fn serving(&self, id: &RequestId) -> Option<CancellationToken> {
        let mut book = lock(&self.book);
        if book.serving.contains_key(id) {
            return None;
        }
        let cancel = CancellationToken::new();
        book.serving.insert(id.clone(), cancel.clone());
        Some(cancel)
    }

    /// Request `id` was answered (or cancelled).
    pub(super) fn served(&self, id: &RequestId) {
        lock(&self.book).serving.remove(id);
    }

    /// Cancels request `id` if it is being served; whether it was.
    pub(super) fn cancel_serving(&self, id: &RequestId) -> bool {
        lock(&self.book).serving.get(id).map(CancellationToken::cancel).is_some()
    }

    /// The prompts still unanswered on `session_id` (its lane ended first).
    pub(super) fn drop_prompts(&self, session_id: &str) -> Vec<RequestId> {
        let mut book = lock(&self.book);
        let keys: Vec<(String, String)> =
            book.prompts.keys().filter(|(s, _)| s == session_id).cloned().collect();
        keys.into_iter().filter_map(|k| book.prompts.remove(&k).map(|(id, _)| id)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Shared {
        let dir = std::env::temp_dir();
        let desk = Desk::new(crate::daemon::Daemon::new(crate::config::Config::for_tests(&dir)));
        Shared::opening(desk, "c".into(), None, Who::Operator, true)
    }

    #[test]
    fn the_caller_is_the_connections_as_it_stands_now() {
        let s = shared();
        let c = s.caller();
        assert_eq!((c.client, c.minted, c.local, c.via), (None, false, true, Via::Acp), "no client id yet");
        s.client.set("alice".into()).expect("set once");
        s.minted.store(true, Ordering::Relaxed);
        s.local.store(false, Ordering::Relaxed);
        let c = s.caller();
        assert_eq!((c.client.as_deref(), c.minted, c.local), (Some("alice"), true, false));
        assert_eq!(c.role(), crate::desk::Role::Operator);
    }

    #[test]
    fn asked_requests_are_numbered_bounded_and_withdrawn_per_session_and_request() {
        let s = shared();
        let a = s.issue("s1", "r1", false).expect("asked");
        let b = s.issue("s1", "r1", true).expect("asked again (another lane), as an elicitation");
        let c = s.issue("s2", "r1", false).expect("another session's r1");
        let d = s.issue("s1", "r2", false).expect("another request");
        assert_eq!([&a, &b, &c, &d], ["perm-1", "elicit-2", "perm-3", "perm-4"]);
        let mut gone = s.withdraw("s1", "r1");
        gone.sort();
        assert_eq!(gone, vec![b, a.clone()]);
        assert_eq!(s.withdraw("s1", "r1"), Vec::<String>::new(), "withdrawn once");
        let asked = Asked { session_id: "s2".into(), request_id: "r1".into(), elicitation: false };
        assert_eq!(s.take_asked(&c), Some(asked));
        assert_eq!(s.take_asked(&c), None);
        assert_eq!(s.take_asked(&a), None);
        for _ in 1..MAX_ASKED {
            assert!(s.issue("s3", "r", false).is_some());
        }
        assert_eq!(s.issue("s3", "r", true), None, "at most MAX_ASKED unanswered");
        s.take_asked(&d);
        assert!(s.issue("s3", "r", true).is_some(), "an answer frees a place");
    }

    #[test]
    fn url_elicitations_are_remembered_per_session_once_and_bounded() {
        let s = shared();
        s.remember_url("s1", "r1");
        assert!(!s.take_url("s2", "r1"), "another session's r1");
        assert!(s.take_url("s1", "r1"));
        assert!(!s.take_url("s1", "r1"), "told once");
        for i in 0..=MAX_URL_ELICITATIONS {
            s.remember_url("s1", &format!("r{i}"));
        }
        assert!(!s.take_url("s1", "r0"), "the oldest forgotten past the bound");
        assert!(s.take_url("s1", "r1") && s.take_url("s1", &format!("r{MAX_URL_ELICITATIONS}")));
    }

    #[test]
    fn a_prompt_cancelled_while_its_request_was_served_is_born_cancelled() {
        let s = shared();
        let (early, late) = (RequestId::Number(7), RequestId::Number(8));
        assert!(s.serving(&early).is_some() && s.serving(&late).is_some());
        assert!(s.cancel_serving(&early), "a request being served is cancellable by id");
        assert!(
            s.await_prompt("s1", "p1", early).is_cancelled(),
            "the cancel read before the prompt was known"
        );
        let token = s.await_prompt("s1", "p2", late.clone());
        assert!(!token.is_cancelled());
        s.served(&late);
        assert!(!s.cancel_serving(&late), "served: no longer cancellable as a request");
        assert!(!token.is_cancelled(), "the prompt is cancelled through prompt_of, not the served request");
        let unserved = s.await_prompt("s1", "p3", RequestId::Number(9));
        assert!(!unserved.is_cancelled());
    }

    #[test]
    fn prompts_are_owed_until_taken_and_dropped_with_their_session() {
        let s = shared();
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
