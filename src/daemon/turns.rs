//! What each turn of a session changed in its workspace (`docs/protocol.md` § 18): a snapshot at
//! the turn's start and at its end (by the engine of `changes`, on a blocking thread, never on the
//! agent's reader), the change set between them published as `turn_changes` just before the turn
//! event and recorded in the store, every changed file that no permission request approved in the
//! turn marked `unapproved` (an `unapproved_change` event, an audit entry, a notification), and
//! the rewind that puts files back as they were before a turn.
//!
//! A turn and a rewind never overlap: each holds the session's one [`Turns::gate`] permit.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::bus::PromptTag;
use crate::changes::{
    Approval, ChangeSet, Changes, Restore, RewindError as EngineRewindError, Snapshot, covered, differing,
};
use crate::event::EventKind;
use crate::store::{AuditOutcome, AuditRecord, Store, TurnRecord};
use crate::sync::lock;

/// Turn records a live session keeps in memory (the store keeps them all, within retention): a
/// rewind reaches back this far.
pub(crate) const MAX_TURN_RECORDS: usize = 1024;
/// Permission requests of one turn remembered until they are decided (the mediator holds at
/// most 64 pending; decided ones leave at once).
const MAX_ASKED: usize = 256;
/// Approved requests of one turn matched against its changes.
const MAX_APPROVALS: usize = 1024;
/// Files a `turn_changes` or `unapproved_change` event names; the record keeps more
/// ([`crate::changes::MAX_LISTED_FILES`]).
pub(crate) const MAX_EVENT_FILES: usize = 200;

/// Files a reviewer is told the session's ended turns changed, at most, and the turns it looks
/// back over (`docs/operations.md#reviewers`): the newest changes, bounded whatever the history.
const MAX_REVIEW_FILES: usize = 50;
const MAX_REVIEW_TURNS: usize = 16;

/// What the change sets need of their session. The session implements it (and owns its
/// [`Turns`]): this file does not import the session, so the two do not import each other.
pub(crate) trait Host: Sync {
    fn id(&self) -> &str;
    fn workspace(&self) -> &Path;
    /// Publishes an event tied to `tag`'s turn (whether or not it runs now), and offers it to the
    /// notification targets.
    fn publish(&self, kind: EventKind, data: &Value, tag: &PromptTag);
    /// Where the session's records go.
    fn store(&self) -> &dyn Store;
    /// Whether a turn runs or is queued.
    fn busy(&self) -> bool;
}

/// A request asked during the turn: what it names, and which of its options allow.
#[derive(Debug)]
struct Asked {
    approval: Approval,
    allowing: Vec<String>,
}

#[derive(Debug, Default)]
struct Book {
    /// The newest [`MAX_TURN_RECORDS`] records, oldest first.
    records: VecDeque<TurnRecord>,
    next_seq: u64,
    /// Turn records so far (rewinds not counted): the next turn's `turnIndex`.
    turns: u64,
    asked: HashMap<String, Asked>,
    approved: Vec<Approval>,
}

/// A session's change sets: its records, the running turn's approvals, and the gate a turn and a
/// rewind share.
#[derive(Debug)]
pub(crate) struct Turns {
    /// `None` with `--no-snapshots` (or when the snapshot store could not be opened).
    engine: Option<Arc<Changes>>,
    /// Await-free critical sections only.
    book: Mutex<Book>,
    /// One permit: a turn or a rewind at a time.
    gate: Arc<Semaphore>,
}

/// A turn's start, kept until its end.
pub(crate) struct Begun {
    _permit: OwnedSemaphorePermit,
    before: Result<Snapshot, String>,
    started_at: u64,
}

/// Who asked for a rewind, as the audit names them.
#[derive(Debug, Clone, Default)]
pub struct Actor {
    pub client_id: Option<String>,
    /// A paired device's name, when a device asked.
    pub device_name: Option<String>,
}

/// A rewind's answer (qwen serve's `DaemonRewindResult`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewindOutcome {
    pub rewound: bool,
    pub target_turn_index: u64,
    pub files_changed: Vec<String>,
    pub files_failed: Vec<String>,
}

/// Why a rewind did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewindError {
    #[error("A turn is running or queued: rewind once the session is idle")]
    Busy { session_id: String },
    #[error("No turn of this session has promptId {0}")]
    UnknownPrompt(String),
    #[error("Files were changed since the agent changed them: {}", .0.join(", "))]
    Conflict(Vec<String>),
    #[error("{0}")]
    Unavailable(String),
}

fn tag(prompt_id: &str, originator: Option<&str>) -> PromptTag {
    PromptTag { prompt_id: Some(prompt_id.to_owned()), originator: originator.map(str::to_owned) }
}

impl Turns {
    /// `prior`: the records the store kept of this session (a resumed one).
    pub(crate) fn new(engine: Option<Arc<Changes>>, prior: Vec<TurnRecord>) -> Turns {
        let mut book = Book::default();
        for r in prior {
            book.next_seq = book.next_seq.max(r.seq);
            if r.entry.get("kind").and_then(Value::as_str) != Some("rewind") {
                book.turns += 1;
            }
            if book.records.len() >= MAX_TURN_RECORDS {
                book.records.pop_front();
            }
            book.records.push_back(r);
        }
        Turns { engine, book: Mutex::new(book), gate: Arc::new(Semaphore::new(1)) }
    }

    /// Holds the gate a turn and a rewind share, as a rewind under way does.
    #[cfg(test)]
    pub(crate) fn hold(&self) -> OwnedSemaphorePermit {
        self.gate.clone().try_acquire_owned().expect("the gate is free")
    }

    /// A permission request was published during the turn (its tool call laid over what the agent
    /// announced).
    pub(crate) fn asked(&self, data: &Value) {
        let Some(id) = data.get("requestId").and_then(Value::as_str) else { return };
        let allowing = data
            .get("options")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|o| o.get("kind").and_then(Value::as_str).is_some_and(|k| k.starts_with("allow")))
            .filter_map(|o| o.get("optionId").and_then(Value::as_str).map(str::to_owned))
            .collect();
        let approval = Approval::of(data.get("toolCall").unwrap_or(&Value::Null));
        let mut book = lock(&self.book);
        if book.asked.len() < MAX_ASKED {
            book.asked.insert(id.to_owned(), Asked { approval, allowing });
        }
    }

    /// A permission request was decided: an allowing option makes it an approval of the turn.
    pub(crate) fn resolved(&self, data: &Value) {
        let Some(id) = data.get("requestId").and_then(Value::as_str) else { return };
        let chosen = data.pointer("/outcome/optionId").and_then(Value::as_str);
        let mut book = lock(&self.book);
        let Some(asked) = book.asked.remove(id) else { return };
        if chosen.is_some_and(|c| asked.allowing.iter().any(|a| a == c))
            && book.approved.len() < MAX_APPROVALS
        {
            book.approved.push(asked.approval);
        }
    }

    /// A turn starts: waits for a rewind under way, forgets the last turn's approvals, and takes
    /// the snapshot its change set starts from. `None` without snapshots.
    pub(crate) async fn begin(&self, workspace: &Path) -> Option<Begun> {
        let engine = self.engine.clone()?;
        let permit = self.gate.clone().acquire_owned().await.ok()?;
        {
            let mut book = lock(&self.book);
            book.asked.clear();
            book.approved.clear();
        }
        let started_at = crate::clock::now_ms();
        let before = snapshot(engine, workspace).await;
        Some(Begun { _permit: permit, before, started_at })
    }

    /// A turn ended: the snapshot of its end, its change set recorded, published when it changed
    /// something (`turn_changes`, and `unapproved_change` when it has unapproved files), and
    /// audited. Before the turn
    /// event, so a client that sees the turn end can read its change set. Returns the change
    /// set's stats (`turn_changes`' data without its files) when the turn changed a file: what
    /// the turn's notification says.
    pub(crate) async fn end(
        &self,
        session: &dyn Host,
        begun: Begun,
        prompt_id: &str,
        originator: Option<&str>,
    ) -> Option<Value> {
        let engine = self.engine.clone()?;
        let tag = tag(prompt_id, originator);
        let turn_index = lock(&self.book).turns;
        let after = snapshot(engine.clone(), session.workspace()).await;
        let (before, after) = match (begun.before, after) {
            (Ok(b), Ok(a)) => (b, a),
            (Err(e), _) | (_, Err(e)) => {
                let data = json!({
                    "sessionId": session.id(), "promptId": prompt_id, "turnIndex": turn_index,
                    "available": false, "message": e,
                });
                session.publish(EventKind::TurnChanges, &data, &tag);
                let at = crate::clock::now_ms();
                self.record(session, data, None, None, at, true);
                return None;
            }
        };
        let approvals = std::mem::take(&mut lock(&self.book).approved);
        let workspace = session.workspace().to_path_buf();
        let (b, a) = (before.manifest.clone(), after.manifest.clone());
        let set = tokio::task::spawn_blocking(move || {
            let mut set = engine.change_set(&b, &a);
            for f in &mut set.files {
                f.unapproved = !covered(&approvals, &workspace, &f.path);
            }
            set
        })
        .await
        .unwrap_or_default();
        let ended_at = crate::clock::now_ms();
        let unapproved: Vec<String> =
            set.files.iter().filter(|f| f.unapproved).map(|f| f.path.clone()).collect();
        let data = turn_changes(session.id(), prompt_id, turn_index, &set, unapproved.len());
        // A turn that changed nothing is recorded, not announced: most turns only talk, and every
        // client would get one more event per turn for nothing.
        if set.files_changed > 0 {
            session.publish(EventKind::TurnChanges, &data, &tag);
        }
        let mut entry = data.clone();
        entry["files"] = serde_json::to_value(&set.files).unwrap_or(Value::Null);
        entry["startedAt"] = json!(begun.started_at);
        entry["endedAt"] = json!(ended_at);
        if let Some(o) = originator {
            entry["originatorClientId"] = json!(o);
        }
        self.record(session, entry, Some(before.id), Some(after.id), ended_at, true);
        if !unapproved.is_empty() {
            let shown: Vec<&String> = unapproved.iter().take(MAX_EVENT_FILES).collect();
            let data = json!({
                "sessionId": session.id(), "promptId": prompt_id, "turnIndex": turn_index,
                "paths": shown, "count": unapproved.len(),
            });
            session.publish(EventKind::UnapprovedChange, &data, &tag);
            let workspace = session.workspace().to_string_lossy().into_owned();
            session.store().audit(AuditRecord {
                request_id: format!("unapproved-{prompt_id}"),
                session_id: session.id().to_owned(),
                workspace: workspace.clone(),
                requested_at: ended_at,
                outcome: Some(AuditOutcome::Unapproved),
                entry: json!({
                    "requestId": format!("unapproved-{prompt_id}"),
                    "sessionId": session.id(),
                    "workspace": workspace,
                    "promptId": prompt_id,
                    "toolCall": {"kind": "edit", "title": "Changes nobody approved", "paths": unapproved},
                    "originatorClientId": originator,
                    "issuedAt": ended_at,
                    "status": AuditOutcome::Unapproved.as_str(),
                    "resolvedAt": ended_at,
                    "resolvedBy": "daemon",
                }),
            });
        }
        (set.files_changed > 0).then(|| {
            let mut stats = data;
            if let Some(fields) = stats.as_object_mut() {
                fields.remove("files");
            }
            stats
        })
    }

    /// Keeps a record (in memory and in the store).
    fn record(
        &self,
        session: &dyn Host,
        entry: Value,
        before: Option<String>,
        after: Option<String>,
        at: u64,
        turn: bool,
    ) {
        let record = {
            let mut book = lock(&self.book);
            book.next_seq += 1;
            if turn {
                book.turns += 1;
            }
            let record = TurnRecord {
                session_id: session.id().to_owned(),
                workspace: session.workspace().to_string_lossy().into_owned(),
                seq: book.next_seq,
                at,
                before,
                after,
                entry,
            };
            if book.records.len() >= MAX_TURN_RECORDS {
                book.records.pop_front();
            }
            book.records.push_back(record.clone());
            record
        };
        session.store().record_turn(record);
    }

    /// What the session changed so far, as a reviewer is told it: the files its last
    /// [`MAX_REVIEW_TURNS`] ended turns changed, newest first, each once with its newest status
    /// (at most [`MAX_REVIEW_FILES`]; `more` says some were left out), and the paths the requests
    /// approved so far in the running turn name (what it was allowed to touch).
    pub(crate) fn so_far(&self) -> Value {
        let book = lock(&self.book);
        let mut named = std::collections::HashSet::new();
        let mut files = Vec::new();
        let mut more = false;
        let recent = book.records.iter().rev().take(MAX_REVIEW_TURNS);
        for record in recent {
            let changed = record.entry.get("files").and_then(Value::as_array).into_iter().flatten();
            for file in changed {
                let Some(path) = file.get("path").and_then(Value::as_str) else { continue };
                if !named.insert(path) {
                    continue;
                }
                if files.len() == MAX_REVIEW_FILES {
                    more = true;
                    break;
                }
                files.push(json!({
                    "path": path,
                    "status": file.get("status"),
                    "turnIndex": record.entry.get("turnIndex"),
                }));
            }
        }
        let approved: Vec<&String> =
            book.approved.iter().flat_map(|a| &a.names).take(MAX_REVIEW_FILES).collect();
        json!({"turns": book.turns, "files": files, "more": more, "approvedThisTurn": approved})
    }

    /// The records kept, oldest first.
    pub(crate) fn records(&self) -> Vec<TurnRecord> {
        lock(&self.book).records.iter().cloned().collect()
    }

    /// Every snapshot the records name (what the snapshot store must keep).
    pub(crate) fn snapshot_ids(&self) -> Vec<String> {
        let book = lock(&self.book);
        book.records.iter().flat_map(|r| [r.before.clone(), r.after.clone()]).flatten().collect()
    }

    /// Puts the files the turns from `prompt_id`'s on changed back as they were before it, unless a
    /// turn runs or is queued, or (without `force`) someone changed one of them since the agent did.
    pub(crate) async fn rewind(
        &self,
        session: &dyn Host,
        prompt_id: &str,
        force: bool,
        actor: &Actor,
    ) -> Result<RewindOutcome, RewindError> {
        let engine = self.engine.clone().ok_or_else(|| {
            RewindError::Unavailable("this daemon takes no snapshots (--no-snapshots)".into())
        })?;
        let busy = || RewindError::Busy { session_id: session.id().to_owned() };
        if session.busy() {
            return Err(busy());
        }
        let _permit = self.gate.clone().try_acquire_owned().map_err(|_| busy())?;
        let records = self.records();
        let start = records
            .iter()
            .position(|r| {
                r.entry.get("kind").is_none()
                    && r.entry.get("promptId").and_then(Value::as_str) == Some(prompt_id)
            })
            .ok_or_else(|| RewindError::UnknownPrompt(prompt_id.to_owned()))?;
        let target_turn_index = records[start].entry.get("turnIndex").and_then(Value::as_u64).unwrap_or(0);
        let Some(first_before) = records[start].before.clone() else {
            return Err(RewindError::Unavailable("that turn has no snapshot of its start".into()));
        };
        let later: Vec<(Option<String>, Option<String>)> =
            records[start..].iter().map(|r| (r.before.clone(), r.after.clone())).collect();
        let workspace = session.workspace().to_path_buf();
        let work = tokio::task::spawn_blocking(move || {
            let missing = |id: &str, e: std::io::Error| {
                RewindError::Unavailable(format!("snapshot {id} is not in the snapshot store: {e}"))
            };
            let target = engine.manifest(&first_before).map_err(|e| missing(&first_before, e))?;
            let mut plan: BTreeMap<String, Restore> = BTreeMap::new();
            for (before, after) in later {
                let (Some(before), Some(after)) = (before, after) else { continue };
                let b = engine.manifest(&before).map_err(|e| missing(&before, e))?;
                let a = engine.manifest(&after).map_err(|e| missing(&after, e))?;
                for (path, _, now) in differing(&b, &a) {
                    let restore = plan.entry(path.to_owned()).or_insert_with(|| Restore {
                        target: target.entries.get(path).copied(),
                        expected: None,
                    });
                    restore.expected = now.copied();
                }
            }
            engine.rewind(&workspace, &plan, force).map_err(|e| match e {
                EngineRewindError::Conflict(paths) => RewindError::Conflict(paths),
                other @ EngineRewindError::Snapshot(_) => RewindError::Unavailable(other.to_string()),
            })
        });
        let rewound = work.await.map_err(|e| RewindError::Unavailable(e.to_string()))??;
        let files_failed: Vec<String> = rewound.failed.iter().map(|(p, why)| format!("{p}: {why}")).collect();
        let now = crate::clock::now_ms();
        let data = json!({
            "sessionId": session.id(), "promptId": prompt_id, "targetTurnIndex": target_turn_index,
            "filesChanged": rewound.changed, "filesFailed": files_failed, "clientId": actor.client_id,
            "deviceName": actor.device_name, "force": force,
        });
        session.publish(EventKind::SessionRewound, &data, &PromptTag::default());
        let mut entry = data.clone();
        entry["kind"] = json!("rewind");
        entry["at"] = json!(now);
        self.record(
            session,
            entry,
            Some(rewound.before.id.clone()),
            rewound.after.as_ref().map(|s| s.id.clone()),
            now,
            false,
        );
        let workspace = session.workspace().to_string_lossy().into_owned();
        let request_id = format!("rewind-{}", uuid::Uuid::new_v4());
        session.store().audit(AuditRecord {
            request_id: request_id.clone(),
            session_id: session.id().to_owned(),
            workspace: workspace.clone(),
            requested_at: now,
            outcome: Some(AuditOutcome::Rewound),
            entry: json!({
                "requestId": request_id,
                "sessionId": session.id(),
                "workspace": workspace,
                "promptId": prompt_id,
                "targetTurnIndex": target_turn_index,
                "toolCall": {"kind": "edit", "title": format!("Rewind to before turn {target_turn_index}"), "paths": rewound.changed},
                "filesFailed": files_failed,
                "force": force,
                "issuedAt": now,
                "status": AuditOutcome::Rewound.as_str(),
                "resolvedAt": now,
                "resolvedBy": "rewind",
                "voterClientId": actor.client_id,
                "voterDeviceName": actor.device_name,
            }),
        });
        Ok(RewindOutcome {
            rewound: files_failed.is_empty(),
            target_turn_index,
            files_changed: rewound.changed,
            files_failed,
        })
    }
}

/// A snapshot of `workspace` on a blocking thread; `Err` says why there is none.
async fn snapshot(engine: Arc<Changes>, workspace: &Path) -> Result<Snapshot, String> {
    let workspace = workspace.to_path_buf();
    match tokio::task::spawn_blocking(move || engine.snapshot(&workspace)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(format!("the snapshot failed: {e}")),
    }
}

/// `turn_changes`'s data: the totals and the first [`MAX_EVENT_FILES`] files with their stats.
fn turn_changes(
    session_id: &str,
    prompt_id: &str,
    turn_index: u64,
    set: &ChangeSet,
    unapproved: usize,
) -> Value {
    let files: Vec<&crate::changes::FileChange> = set.files.iter().take(MAX_EVENT_FILES).collect();
    json!({
        "sessionId": session_id,
        "promptId": prompt_id,
        "turnIndex": turn_index,
        "available": true,
        "filesChanged": set.files_changed,
        "insertions": set.insertions,
        "deletions": set.deletions,
        "unapprovedCount": unapproved,
        "files": files,
        "hiddenCount": set.files_changed.saturating_sub(files.len()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64, kind: Option<&str>) -> TurnRecord {
        let entry = match kind {
            Some(kind) => json!({"kind": kind}),
            None => json!({"promptId": format!("p{seq}")}),
        };
        TurnRecord {
            session_id: "s".into(),
            workspace: "/w".into(),
            seq,
            at: seq,
            before: None,
            after: None,
            entry,
        }
    }

    /// A permission request as the session publishes it: `yes` allows, `no` does not.
    fn request(n: usize) -> Value {
        json!({
            "requestId": format!("r{n}"),
            "toolCall": {"kind": "edit", "locations": [{"path": format!("/w/f{n}")}]},
            "options": [
                {"optionId": "yes", "kind": "allow_once"},
                {"optionId": "always", "kind": "allow_always"},
                {"optionId": "no", "kind": "reject_once"},
            ],
        })
    }

    fn decided(n: usize, option: &str) -> Value {
        json!({"requestId": format!("r{n}"), "outcome": {"outcome": "selected", "optionId": option}})
    }

    /// A reviewer is told the newest changes, each file once with its newest status, bounded in
    /// files and in turns looked at, and what the running turn's approved requests name.
    #[test]
    fn so_far_names_the_newest_changes_once_bounded_and_the_running_turns_approvals() {
        let turn = |seq: u64, files: &[(&str, &str)]| {
            let files: Vec<Value> = files.iter().map(|(p, s)| json!({"path": p, "status": s})).collect();
            TurnRecord { entry: json!({"turnIndex": seq - 1, "files": files}), ..record(seq, None) }
        };
        let mut prior = vec![turn(1, &[("a", "added"), ("b", "added")]), turn(2, &[("a", "modified")])];
        prior.push(record(3, Some("rewind")));
        let turns = Turns::new(None, prior);
        turns.asked(&request(1));
        turns.resolved(&decided(1, "yes"));
        let so_far = turns.so_far();
        assert_eq!(
            so_far,
            json!({"turns": 2, "more": false, "approvedThisTurn": ["/w/f1"], "files": [
                {"path": "a", "status": "modified", "turnIndex": 1},
                {"path": "b", "status": "added", "turnIndex": 0},
            ]})
        );

        let many: Vec<String> = (0..MAX_REVIEW_FILES + 1).map(|i| format!("f{i}")).collect();
        let wide: Vec<(&str, &str)> = many.iter().map(|p| (p.as_str(), "added")).collect();
        let turns = Turns::new(None, vec![turn(1, &[("old", "added")]), turn(2, &wide)]);
        let so_far = turns.so_far();
        assert_eq!(so_far["files"].as_array().map(Vec::len), Some(MAX_REVIEW_FILES));
        assert_eq!((&so_far["more"], &so_far["files"][0]["path"]), (&json!(true), &json!("f0")));

        // Only the newest turns are looked at: a file changed before them is not named.
        let mut prior = vec![turn(1, &[("oldest", "added")])];
        prior.extend((2..=MAX_REVIEW_TURNS as u64 + 1).map(|seq| turn(seq, &[])));
        let so_far = Turns::new(None, prior).so_far();
        assert_eq!(
            (so_far["files"].clone(), so_far["turns"].clone()),
            (json!([]), json!(MAX_REVIEW_TURNS + 1))
        );
        let mut prior = vec![turn(1, &[("oldest", "added")])];
        prior.extend((2..=MAX_REVIEW_TURNS as u64).map(|seq| turn(seq, &[])));
        assert_eq!(Turns::new(None, prior).so_far()["files"][0]["path"], "oldest");
    }

    #[test]
    fn a_resumed_session_keeps_its_newest_records_and_counts_its_turns_but_not_its_rewinds() {
        let newest = MAX_TURN_RECORDS as u64 + 2;
        let mut prior: Vec<TurnRecord> = (1..newest).map(|seq| record(seq, None)).collect();
        prior.push(record(newest, Some("rewind")));
        let turns = Turns::new(None, prior);
        let book = lock(&turns.book);
        assert_eq!(book.records.len(), MAX_TURN_RECORDS);
        assert_eq!(book.records.front().map(|r| r.seq), Some(3), "the oldest two went");
        assert_eq!(book.records.back().map(|r| r.seq), Some(newest));
        assert_eq!(book.next_seq, newest);
        assert_eq!(book.turns, newest - 1, "the rewind is no turn");
    }

    #[test]
    fn the_snapshots_to_keep_are_every_one_a_kept_record_names() {
        let mut turn = record(1, None);
        (turn.before, turn.after) = (Some("b1".into()), Some("a1".into()));
        let mut failed = record(2, None);
        failed.before = Some("b2".into()); // a turn whose end had no snapshot
        let mut rewind = record(3, Some("rewind"));
        (rewind.before, rewind.after) = (Some("b3".into()), Some("a3".into()));
        let turns = Turns::new(None, vec![turn, failed, rewind, record(4, None)]);
        assert_eq!(turns.snapshot_ids(), ["b1", "a1", "b2", "b3", "a3"]);
    }

    #[test]
    fn the_next_record_follows_the_highest_seq_kept_whatever_the_order() {
        let turns = Turns::new(None, vec![record(7, None), record(2, None)]);
        assert_eq!(lock(&turns.book).next_seq, 7);
        assert_eq!(lock(&turns.book).turns, 2);
    }

    #[test]
    fn only_an_allowing_option_of_a_request_asked_in_the_turn_approves() {
        let turns = Turns::new(None, Vec::new());
        for n in 0..4 {
            turns.asked(&request(n));
        }
        turns.asked(&json!({"toolCall": {"kind": "edit"}})); // no request id: ignored
        turns.resolved(&decided(0, "yes"));
        turns.resolved(&decided(1, "always"));
        turns.resolved(&decided(2, "no"));
        turns.resolved(&json!({"requestId": "r3", "outcome": {"outcome": "cancelled"}}));
        turns.resolved(&decided(9, "yes")); // never asked
        let book = lock(&turns.book);
        assert_eq!(book.asked.len(), 0, "each decided request is forgotten, allowed or not");
        let approved: Vec<&Approval> = book.approved.iter().collect();
        assert_eq!(
            approved,
            [&Approval::of(&request(0)["toolCall"]), &Approval::of(&request(1)["toolCall"])]
        );
    }

    #[test]
    fn a_turn_remembers_at_most_max_asked_requests_and_max_approvals() {
        let turns = Turns::new(None, Vec::new());
        for n in 0..=MAX_ASKED {
            turns.asked(&request(n));
        }
        assert_eq!(lock(&turns.book).asked.len(), MAX_ASKED);
        // The one past the bound was never remembered: its decision approves nothing.
        turns.resolved(&decided(MAX_ASKED, "yes"));
        assert_eq!(lock(&turns.book).approved.len(), 0);

        let turns = Turns::new(None, Vec::new());
        for n in 0..=MAX_APPROVALS {
            turns.asked(&request(n));
            turns.resolved(&decided(n, "yes"));
        }
        assert_eq!(lock(&turns.book).approved.len(), MAX_APPROVALS);
    }
}
