//! The fleet (`docs/operations.md#a-fleet`): several daemons sharing one PostgreSQL store. This
//! room keeps this daemon's membership — its lease, renewed while it lives, and the marking of
//! dead daemons' sessions — and applies what the others announce (devices paired or revoked,
//! workspace rules changed, pairing codes issued or used) to this daemon's tables at once.
//!
//! The directory itself (who holds which live session, whose lease holds) is in the store
//! (`store::Store::owner`), and requests for another daemon's session are relayed at the HTTP edge
//! (`http/relay.rs`); this room and the relay never import each other.
//!
//! On the floor above `daemon`, beside `http`; only `server` imports it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::daemon::Daemon;
use crate::store::{Notice, Store};

/// Renewals per lease: a daemon is dead only after this many renewals in a row failed (or
/// were never made), so one slow round trip never costs a live daemon its sessions.
const RENEWALS_PER_LEASE: u32 = 3;

/// Joins the fleet of `daemon`'s store as `node_url`, then renews the lease every third of
/// `lease` and applies the other daemons' notices until the process ends. `Ok(false)` when the
/// store is not shared (nothing to do).
pub async fn start(daemon: Arc<Daemon>, node_url: String, lease: Duration) -> Result<bool, String> {
    let store = daemon.store.clone();
    if !store.shared() {
        return Ok(false);
    }
    let lease_ms = lease.as_millis() as u64;
    let joined = {
        let (store, url) = (store.clone(), node_url.clone());
        tokio::task::spawn_blocking(move || store.join(&url, lease_ms)).await
    };
    joined.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
    tracing::info!(node = %node_url, lease_ms, "joined the fleet");
    tokio::spawn(renew(store.clone(), lease));
    if let Some(notices) = store.take_notices() {
        tokio::spawn(apply_notices(daemon, notices));
    }
    Ok(true)
}

/// Renews the lease; each renewal also marks the sessions of daemons whose lease ran out.
async fn renew(store: Arc<dyn Store>, lease: Duration) {
    let lease_ms = lease.as_millis() as u64;
    let mut every = tokio::time::interval(lease / RENEWALS_PER_LEASE);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let store = store.clone();
        match tokio::task::spawn_blocking(move || store.renew_lease(lease_ms)).await {
            Ok(Ok(lost)) if !lost.is_empty() => {
                tracing::warn!(
                    sessions = lost.len(),
                    "a daemon of the fleet stopped renewing its lease: its sessions are marked node_lost"
                );
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot renew this daemon's lease in the fleet"),
            Err(_) => return,
        }
    }
}

/// Applies each notice in the order the store committed them.
async fn apply_notices(daemon: Arc<Daemon>, mut notices: tokio::sync::mpsc::Receiver<Notice>) {
    while let Some(notice) = notices.recv().await {
        match &notice {
            Notice::Devices => reload_devices(&daemon).await,
            Notice::Rules { workspace } => reload_rules(&daemon, Some(workspace.clone())).await,
            Notice::PairingCode { .. } | Notice::PairingCodeUsed { .. } => daemon.devices.heard(&notice),
            Notice::Resync => {
                reload_devices(&daemon).await;
                reload_rules(&daemon, None).await;
            }
        }
    }
}

/// Reads the devices again; one revoked elsewhere loses its streams and its votes here.
async fn reload_devices(daemon: &Arc<Daemon>) {
    let devices = daemon.devices.clone();
    match tokio::task::spawn_blocking(move || devices.reload()).await {
        Ok(Ok(revoked)) => {
            for device in revoked {
                for session in daemon.all_sessions() {
                    session.forget_voter(&device.id);
                }
            }
        }
        Ok(Err(e)) => tracing::error!(error = %e, "cannot read the fleet's paired devices"),
        Err(_) => {}
    }
}

/// Reads the rules of `workspace` (every workspace for `None`) again.
async fn reload_rules(daemon: &Arc<Daemon>, workspace: Option<String>) {
    let store = daemon.store.clone();
    let rules = match tokio::task::spawn_blocking(move || store.workspace_rules()).await {
        Ok(Ok(rules)) => rules,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "cannot read the fleet's workspace rules");
            return;
        }
        Err(_) => return,
    };
    let mut by_workspace: std::collections::BTreeMap<String, Vec<serde_json::Value>> = Default::default();
    if let Some(w) = &workspace {
        by_workspace.insert(w.clone(), Vec::new());
    }
    for r in rules {
        if workspace.as_ref().is_none_or(|w| *w == r.workspace) {
            by_workspace.entry(r.workspace).or_default().push(r.rule);
        }
    }
    for (workspace, rules) in by_workspace {
        daemon.replace_workspace_rules(&PathBuf::from(workspace), rules);
    }
}
