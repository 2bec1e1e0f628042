//! The fleet (`docs/operations.md#a-fleet`): several daemons sharing one PostgreSQL store. This
//! room keeps this daemon's membership — its lease, renewed while it lives, and the marking of
//! dead daemons' sessions — and reads again what a notice says changed (devices paired or
//! revoked, workspace rules), so this daemon's tables follow the store at once.
//!
//! A notice is a hint and nothing more (`store::Notice`): any role that may connect to the
//! database can send one, so what takes effect is what the read finds. A burst of notices is
//! coalesced into one read of each kind, so a flood costs a read per kind at a time.
//!
//! The directory itself (who holds which live session, whose lease holds) is in the store
//! (`store::Fleet::owner`), and requests for another daemon's session are relayed at the HTTP edge
//! (`http/relay.rs`); this room and the relay never import each other.
//!
//! On the floor above `daemon`, beside `http`; only `server` imports it.

use std::sync::Arc;
use std::time::Duration;

use crate::daemon::Daemon;
use crate::store::{Fleet, Notice};

/// Renewals per lease: a daemon is dead only after this many renewals in a row failed (or
/// were never made), so one slow round trip never costs a live daemon its sessions.
const RENEWALS_PER_LEASE: u32 = 3;

/// Joins `daemon`'s fleet as `node_url`, then renews the lease every third of `lease` and
/// applies the other daemons' notices until the process ends. `Ok(false)` when the daemon is in
/// no fleet (its store is not shared: nothing to do).
pub async fn start(daemon: Arc<Daemon>, node_url: String, lease: Duration) -> Result<bool, String> {
    let Some(fleet) = daemon.fleet.clone() else { return Ok(false) };
    let lease_ms = lease.as_millis() as u64;
    let joined = {
        let (fleet, url) = (fleet.clone(), node_url.clone());
        tokio::task::spawn_blocking(move || fleet.join(&url, lease_ms)).await
    };
    joined.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
    tracing::info!(node = %node_url, lease_ms, "joined the fleet");
    tokio::spawn(renew(fleet.clone(), lease));
    if let Some(notices) = fleet.take_notices() {
        tokio::spawn(apply_notices(daemon, notices));
    }
    Ok(true)
}

/// Renews the lease; each renewal also marks the sessions of daemons whose lease ran out.
async fn renew(fleet: Arc<dyn Fleet>, lease: Duration) {
    let lease_ms = lease.as_millis() as u64;
    let mut every = tokio::time::interval(lease / RENEWALS_PER_LEASE);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let fleet = fleet.clone();
        match tokio::task::spawn_blocking(move || fleet.renew_lease(lease_ms)).await {
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

/// What the notices heard so far ask to be read again.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Reads {
    devices: bool,
    rules: bool,
}

impl Reads {
    fn add(&mut self, notice: Notice) {
        match notice {
            Notice::Devices => self.devices = true,
            Notice::Rules => self.rules = true,
            Notice::Resync => *self = Reads { devices: true, rules: true },
        }
    }
}

/// Reads again what the notices ask, every notice already queued taken into one read of each
/// kind: each read begins after every notice it answers was committed.
async fn apply_notices(daemon: Arc<Daemon>, mut notices: tokio::sync::mpsc::Receiver<Notice>) {
    while let Some(first) = notices.recv().await {
        let mut reads = Reads::default();
        reads.add(first);
        while let Ok(next) = notices.try_recv() {
            reads.add(next);
        }
        if reads.devices {
            reload_devices(&daemon).await;
        }
        if reads.rules {
            reload_rules(&daemon).await;
        }
    }
}

/// Reads the devices again; one revoked elsewhere loses its streams and its votes here.
async fn reload_devices(daemon: &Arc<Daemon>) {
    let devices = daemon.devices.clone();
    match tokio::task::spawn_blocking(move || devices.reload()).await {
        Ok(Ok(revoked)) => daemon.forget_devices(&revoked),
        Ok(Err(e)) => tracing::error!(error = %e, "cannot read the fleet's paired devices"),
        Err(_) => {}
    }
}

/// Reads every workspace's rules again.
async fn reload_rules(daemon: &Arc<Daemon>) {
    // Before the read: a local change applied after this mark may be missing from the read.
    let mark = daemon.workspace_rules_mark();
    let store = daemon.store.clone();
    match tokio::task::spawn_blocking(move || store.workspace_rules()).await {
        Ok(Ok(rules)) => daemon.workspace_rules_read(rules, &mark),
        Ok(Err(e)) => tracing::error!(error = %e, "cannot read the fleet's workspace rules"),
        Err(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst of notices asks for one read of each kind it names, and a resync for both.
    #[test]
    fn notices_ask_for_one_read_of_each_kind_they_name() {
        let reads = |notices: &[Notice]| {
            let mut r = Reads::default();
            for n in notices {
                r.add(*n);
            }
            (r.devices, r.rules)
        };
        assert_eq!(reads(&[Notice::Devices, Notice::Devices]), (true, false));
        assert_eq!(reads(&[Notice::Rules]), (false, true));
        assert_eq!(reads(&[Notice::Rules, Notice::Devices]), (true, true));
        assert_eq!(reads(&[Notice::Resync]), (true, true));
        assert_eq!(reads(&[]), (false, false));
    }
}
