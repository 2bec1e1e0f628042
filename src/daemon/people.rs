//! People (`docs/people.md`): the sign-in with an OpenID provider started with the daemon, each
//! signed-in person renewed at the provider every `--oidc-renew-ms`, and signed out everywhere the
//! moment the provider no longer vouches for them (disabled, removed, or no longer in an allowed
//! domain or group): every device of theirs revoked, in the store (so on every daemon of a fleet)
//! and here, their streams ended and their votes withdrawn.

use std::sync::{Arc, Weak};

use super::Daemon;
use crate::clock::now_ms;
use crate::config::PersonRole;
use crate::devices::{Issued, PairError, Role, SignIn};
use crate::oidc::{Oidc, Renewal, Verified};

impl Daemon {
    /// Starts the sign-in (when `--oidc-issuer` is set) for a daemon reached at `base`
    /// (`--public-url`, else the listening URL), and its renewals; they end with the daemon.
    pub fn start_people(self: &Arc<Self>, base: &str) -> Result<(), String> {
        let Some(settings) = self.config.oidc.clone() else { return Ok(()) };
        let oidc = Arc::new(Oidc::new(settings, base)?);
        tracing::info!(
            issuer = %oidc.settings().issuer,
            redirect_uri = %oidc.redirect_uri(),
            "sign-in with an OpenID provider (register this redirect URI at the provider)"
        );
        if self.oidc.set(oidc).is_err() {
            return Err("the sign-in was started twice".into());
        }
        tokio::spawn(renew_people(Arc::downgrade(self)));
        Ok(())
    }

    /// The sign-in, when `--oidc-issuer` is set.
    pub fn oidc(&self) -> Option<&Arc<Oidc>> {
        self.oidc.get()
    }

    /// A one-time code for a device of the person `verified` names (`name`: what the device is,
    /// e.g. "web sign-in"), which the browser or terminal that signed in exchanges for its
    /// credential (`POST /devices/pair`).
    pub fn sign_in_code(&self, verified: &Verified, name: &str) -> Result<Issued, PairError> {
        let Some(oidc) = self.oidc() else { return Err(PairError::InvalidCode) };
        let sign_in = SignIn { person: verified.person.clone(), lasts: oidc.settings().lifetime() };
        self.devices.issue_sign_in(sign_in, name, device_role(verified.role))
    }

    /// Signs the person `subject` out everywhere: every device of theirs revoked (on disk first,
    /// so on every daemon of a fleet), their streams ended, their votes withdrawn.
    pub async fn sign_out_person(&self, subject: &str, why: &str) {
        match self.revoke_person(subject).await {
            Ok(gone) => tracing::info!(subject, why, devices = gone.len(), "a person was signed out"),
            Err(e) => {
                tracing::error!(subject, why, error = %e, "cannot sign a person out; retried at the next renewal")
            }
        }
    }
}

/// The devices' role for what `--oidc-role` gives a person.
fn device_role(role: PersonRole) -> Role {
    match role {
        PersonRole::Operator => Role::Operator,
        PersonRole::Voter => Role::Voter,
        PersonRole::Observer => Role::Observer,
    }
}

/// Every renewal period: each person whose refresh token this daemon keeps is renewed at the
/// provider (or signed out), and every sign-in past its end (its renewing daemon gone, its
/// provider unreachable for too long) is revoked.
async fn renew_people(daemon: Weak<Daemon>) {
    let Some(period) = daemon.upgrade().and_then(|d| d.oidc().map(|o| o.settings().renew)) else { return };
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let draining = match daemon.upgrade() {
            Some(d) => d.draining.clone(),
            None => return,
        };
        tokio::select! {
            _ = ticks.tick() => {}
            () = draining.cancelled() => return,
        }
        let Some(daemon) = daemon.upgrade() else { return };
        renew_once(&daemon).await;
    }
}

/// One round of renewals and expiries.
pub(super) async fn renew_once(daemon: &Arc<Daemon>) {
    let Some(oidc) = daemon.oidc().cloned() else { return };
    let lifetime = oidc.settings().lifetime();
    for subject in oidc.renewing() {
        let Some(known) = daemon.devices.of_person(&subject).into_iter().find_map(|d| d.person) else {
            // Every device of theirs was revoked (or signed out elsewhere): nothing to renew.
            oidc.forget(&subject);
            continue;
        };
        match oidc.renew(&subject, &known).await {
            Some(Renewal::Vouched(verified)) => {
                let until = now_ms() + lifetime.as_millis() as u64;
                // What the provider says now: a person out of the admins' group is an operator no
                // more from this renewal on.
                let role = device_role(verified.role);
                if let Err(e) = daemon.devices.renew(&verified.person, role, until).await {
                    tracing::warn!(subject, error = %e, "cannot record a person's renewed sign-in");
                }
            }
            Some(Renewal::Refused(why)) => daemon.sign_out_person(&subject, &why).await,
            Some(Renewal::Unreachable(why)) => {
                tracing::warn!(subject, error = %why, "cannot renew a sign-in: the provider is unreachable; it ends if this lasts")
            }
            None => {}
        }
    }
    for device in daemon.devices.expired(now_ms()) {
        if let Ok(gone) = daemon.revoke_device(&device.id).await {
            tracing::info!(device = %gone.id, "a sign-in ended: nobody renewed it in time");
        }
    }
}
