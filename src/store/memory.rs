//! [`MemoryStore`], for `--ephemeral`: today's in-memory behaviour. Sessions and events are not
//! recorded (a session's replay is its ring, and it ends with the session); the audit keeps the
//! newest [`AUDIT_ENTRIES`] decisions so `GET /audit` answers the same way; rules live in the
//! daemon's tables only, and so do paired devices. Nothing survives the process.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde_json::Value;

use super::api::{
    Ack, AuditPage, AuditRecord, ReadError, SessionRecord, SessionState, Store, StoreStats, StoredDevice,
    StoredEvent, StoredRule, TurnRecord, Writes,
};
use super::decide::{AuditQuery, Cursor, audit_selects};
use crate::sync::lock;

/// Audit entries kept: qwen serve keeps 512 in its ring; a daemon without a disk keeps a few more.
const AUDIT_ENTRIES: usize = 4096;

#[derive(Debug, Default)]
struct Audit {
    /// (position, record), oldest first; positions grow by one per new request.
    entries: VecDeque<(u64, AuditRecord)>,
    next_seq: u64,
}

#[derive(Debug, Default)]
pub struct MemoryStore {
    /// Await-free critical sections only.
    audit: Mutex<Audit>,
}

impl Writes for MemoryStore {
    fn session_started(&self, _: &SessionRecord, _: u64, _: bool) {}

    fn append_events(&self, _: &Arc<str>, _: u64, _: Vec<Bytes>) {}

    fn session_ended(&self, _: &str, _: SessionState, _: &str, _: u64, _: u64) {}

    fn audit(&self, record: AuditRecord) {
        let mut audit = lock(&self.audit);
        if let Some((_, r)) = audit.entries.iter_mut().rev().find(|(_, r)| r.request_id == record.request_id)
        {
            *r = record;
            return;
        }
        if audit.entries.len() >= AUDIT_ENTRIES {
            audit.entries.pop_front();
        }
        audit.next_seq += 1;
        let seq = audit.next_seq;
        audit.entries.push_back((seq, record));
    }

    // Sessions are not recorded, so neither are their turns: a live session holds its own.
    fn record_turn(&self, _: TurnRecord) {}

    // Nothing is promised to survive the process: every acknowledged write is done at once (the
    // caller's own table is the only copy).
    fn put_workspace_rule(&self, _: &str, _: &str, _: &Value) -> Ack {
        Ack::ready(Ok(()))
    }

    fn delete_workspace_rule(&self, _: &str, _: &str) -> Ack {
        Ack::ready(Ok(()))
    }

    // Nothing recorded: nothing to delete.
    fn delete_session(&self, _: &str) -> Ack {
        Ack::ready(Ok(()))
    }

    // Devices live in the daemon's table only (`crate::devices`): none survives the process.
    fn put_device(&self, _: &StoredDevice) -> Ack {
        Ack::ready(Ok(()))
    }

    fn device_seen(&self, _: &str, _: u64) {}

    fn revoke_device(&self, _: &str, _: u64) -> Ack {
        Ack::ready(Ok(()))
    }

    fn flush(&self) -> Ack {
        Ack::ready(Ok(()))
    }
}

impl Store for MemoryStore {
    fn durable(&self) -> bool {
        false
    }

    fn query_audit(&self, q: &AuditQuery) -> Result<AuditPage, ReadError> {
        let limit = q.limit.max(1);
        let audit = lock(&self.audit);
        let mut page = AuditPage::default();
        let selected = audit.entries.iter().rev().filter(|(seq, r)| {
            audit_selects(q, *seq, &r.workspace, &r.session_id, r.requested_at, r.outcome)
        });
        for (seq, r) in selected {
            if page.entries.len() == limit {
                page.next_cursor = Some(Cursor(seq + 1));
                break;
            }
            page.entries.push(r.entry.clone());
        }
        Ok(page)
    }

    fn workspace_rules(&self) -> Result<Vec<StoredRule>, ReadError> {
        Ok(Vec::new())
    }

    fn devices(&self) -> Result<Vec<StoredDevice>, ReadError> {
        Ok(Vec::new())
    }

    fn sessions(&self, _: Option<&str>) -> Result<Vec<SessionRecord>, ReadError> {
        Ok(Vec::new())
    }

    fn session(&self, _: &str) -> Result<Option<SessionRecord>, ReadError> {
        Ok(None)
    }

    fn events(&self, _: &str, _: u64, _: usize) -> Result<Vec<StoredEvent>, ReadError> {
        Ok(Vec::new())
    }

    fn first_event_id(&self, _: &str) -> Result<Option<u64>, ReadError> {
        Ok(None)
    }

    fn turns(&self, _: &str) -> Result<Vec<TurnRecord>, ReadError> {
        Ok(Vec::new())
    }

    fn snapshot_refs(&self) -> Result<Vec<String>, ReadError> {
        Ok(Vec::new())
    }

    fn stats(&self) -> StoreStats {
        StoreStats::default()
    }
}
