//! (h) Boot with a big database: a state directory filled to a given size through mediatord's own
//! store (`mediatord::store::SqliteStore`: its schema, its writer, its encoding, so the database
//! cannot drift from what the daemon writes), with live sessions and pending permission requests
//! for the boot to recover, then timed from spawning `mediatord serve --state-dir` to its
//! listening line.
//!
//! The frames are 1 000 bytes of pseudo-random letters: the store keeps a run LZ4-compressed only
//! when that is smaller, and random letters do not shrink, so the database's size is its events'
//! size (JSON agent output shrinks about tenfold: the same number of bytes would take ten times as
//! many events to write).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mediatord::store::{
    AuditOutcome, AuditRecord, SessionRecord, SessionState, SqliteStore, Store, StoreConfig, Writes,
};

use crate::Res;

/// Bytes of each recorded frame.
const FRAME_BYTES: usize = 1000;
/// Sessions the events are spread over.
pub const SESSIONS: usize = 100;
/// Events handed to the store per call (one agent burst).
const BURST: u64 = 100;
/// Decided audit entries in the database.
pub const AUDIT_DECIDED: usize = 20_000;
/// What each boot finds unfinished: sessions still live, requests still pending.
pub const LIVE_SESSIONS: usize = 10;
pub const PENDING_REQUESTS: usize = 200;
/// Audit and session writes between two flushes: the store's queue keeps 4096 slots for them.
const CONTROL_PER_FLUSH: usize = 1000;
/// Bound on filling (a slow disk).
const FILL_TIMEOUT: Duration = Duration::from_secs(600);

/// What was filled.
#[derive(Debug, Clone)]
pub struct Filled {
    pub db_bytes: u64,
    pub events: u64,
    pub sessions: usize,
    pub audit: usize,
    pub fill_s: f64,
}

fn config(dir: &Path) -> StoreConfig {
    // Retention off while filling: every event stays.
    StoreConfig {
        state_dir: Some(dir.to_path_buf()),
        events_per_session: u64::MAX,
        max_age_days: 0,
        url: None,
    }
}

fn flush(store: &SqliteStore) -> Res<()> {
    store.flush().wait_blocking().map_err(|e| format!("the store's writer failed while filling: {e}").into())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn session(id: &str) -> SessionRecord {
    SessionRecord {
        session_id: id.to_owned(),
        workspace: "/bench/bigdb".into(),
        agent: "demo".into(),
        created_at: now_ms(),
        ended_at: None,
        state: SessionState::Live,
        end_reason: None,
        last_event_id: 0,
    }
}

fn audit(request_id: &str, session_id: &str, outcome: Option<AuditOutcome>) -> AuditRecord {
    let status = outcome.map_or("pending", AuditOutcome::as_str);
    AuditRecord {
        request_id: request_id.to_owned(),
        session_id: session_id.to_owned(),
        workspace: "/bench/bigdb".into(),
        requested_at: now_ms(),
        outcome,
        entry: serde_json::json!({
            "requestId": request_id, "sessionId": session_id, "workspace": "/bench/bigdb",
            "toolCall": {"toolCallId": request_id, "title": "write notes/a.txt", "kind": "edit"},
            "policy": "first-responder", "status": status,
        }),
    }
}

/// A frame as the bus builds it, with a payload of pseudo-random letters (xorshift64).
fn frame(id: u64, rng: &mut u64) -> Bytes {
    let mut f = format!("id: {id}\nevent: session_update\ndata: {{\"text\":\"").into_bytes();
    while f.len() < FRAME_BYTES - 4 {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        f.push(b'a' + (*rng % 26) as u8);
    }
    f.extend_from_slice(b"\"}\n\n");
    Bytes::from(f)
}

/// Fills `dir` (a fresh state directory) to at least `target_bytes`. Blocking.
pub fn fill(dir: &Path, target_bytes: u64) -> Res<Filled> {
    let started = Instant::now();
    let store = SqliteStore::open(dir, &config(dir))?;
    let ids: Vec<Arc<str>> = (0..SESSIONS).map(|i| Arc::from(format!("bench-bigdb-{i:04}"))).collect();
    for id in &ids {
        store.session_started(&session(id), 0, false);
    }
    let mut next = vec![1u64; SESSIONS];
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut events = 0u64;
    while store.stats().db_bytes < target_bytes {
        if started.elapsed() > FILL_TIMEOUT {
            return Err(format!("filling the database took over {FILL_TIMEOUT:?}").into());
        }
        for (id, next) in ids.iter().zip(&mut next) {
            let frames = (*next..*next + BURST).map(|i| frame(i, &mut rng)).collect();
            store.append_events(id, *next, frames);
            *next += BURST;
            events += BURST;
        }
        // The writer's queue drops what it has no room for: wait for it before the next round.
        flush(&store)?;
    }
    for (id, next) in ids.iter().zip(&next) {
        store.session_ended(id, SessionState::Dormant, "daemon_shutdown", next - 1, now_ms());
    }
    for i in 0..AUDIT_DECIDED {
        store.audit(audit(&format!("bench-decided-{i}"), &ids[i % SESSIONS], Some(AuditOutcome::Selected)));
        if i % CONTROL_PER_FLUSH == 0 {
            flush(&store)?;
        }
    }
    flush(&store)?;
    let stats = store.stats();
    if stats.events_dropped > 0 {
        return Err(format!("the store dropped {} events while filling", stats.events_dropped).into());
    }
    drop(store);
    Ok(Filled {
        db_bytes: std::fs::metadata(dir.join("state.db"))?.len(),
        events,
        sessions: SESSIONS,
        audit: AUDIT_DECIDED,
        fill_s: started.elapsed().as_secs_f64(),
    })
}

/// Leaves what a daemon that died would: `LIVE_SESSIONS` sessions live, `PENDING_REQUESTS`
/// requests pending (the previous boot recovered the last ones). Blocking.
pub fn leave_unfinished(dir: &Path, boot: usize) -> Res<()> {
    let store = SqliteStore::open(dir, &config(dir))?;
    let live: Vec<String> = (0..LIVE_SESSIONS).map(|i| format!("bench-live-{boot}-{i}")).collect();
    for id in &live {
        store.session_started(&session(id), 0, false);
    }
    for i in 0..PENDING_REQUESTS {
        store.audit(audit(&format!("bench-pending-{boot}-{i}"), &live[i % LIVE_SESSIONS], None));
    }
    flush(&store)
}
