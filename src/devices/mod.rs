//! Paired devices (`docs/operations.md#devices`): who may use the daemon besides the operator's
//! token, each with a credential of its own that can be revoked alone.
//!
//! - A device is paired with a one-time code (`pairing`: 128 random bits, single use, short-lived,
//!   kept hashed, exchanges limited per peer) and receives a credential `<device id>.<secret>`:
//!   the id is public (it is the device's client id), the secret is 256 random bits, and the
//!   daemon keeps only its SHA-256, in memory and in the store, compared in constant time.
//! - Each device has a [`Role`]: a voter acts like any client; an observer reads and subscribes.
//! - Revoking a device removes it from the table (its next request is refused) and fires its
//!   [`Device::revoked`] token, which ends its open event streams at once.
//! - Pairing and revoking are security decisions: each is on disk (its store [`Ack`]) before it
//!   takes effect in memory, and a write the store refuses leaves both as they were (the code
//!   unused, the device paired) and says so (`PairError::Store`, `RevokeError::Store`).
//! - A device's event streams are bounded (`streams`): per device, per device and session, and
//!   for all devices together, which leaves the rest of the connections to the operator.
//! - Device names are checked (`names`): no controls, bidi overrides, invisible characters or
//!   stacks of combining marks, so a name cannot pass for another or paint over its neighbours.
//!
//! On the `permission` floor, persisting through `store` like workspace rules; only `http` turns
//! a header or a cookie into a [`Device`].

mod names;
mod pairing;
mod person;
pub mod qr;
mod role;
mod streams;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

pub use self::names::{MAX_COMBINING_MARKS, MAX_NAME_CHARS, neutralised};
use self::pairing::{CODE_BYTES, Codes, Grant};
pub use self::pairing::{CodeError, FAILURE_WINDOW as PAIRING_FAILURE_WINDOW};
pub use self::person::{MAX_CLAIM_CHARS, MAX_GROUPS, PERSON_PREFIX, Person, SignIn};
pub use self::role::Role;
use self::streams::Streams;
pub use self::streams::{
    MAX_STREAMS_PER_DEVICE, MAX_STREAMS_PER_DEVICE_AND_SESSION, StreamLimit, StreamLimits, StreamPermit,
};
use crate::clock::now_ms;
use crate::store::{Fleet, Store, StoredDevice, WriteError};
use crate::sync::lock;

/// Devices paired at once. qwen serve caps its paired devices too; 256 is far beyond a team's
/// phones and browsers and keeps `GET /devices` one small page.
pub const MAX_DEVICES: usize = 256;
/// A device's last-seen time is written to the store at most this often (it is kept exactly in
/// memory): a request per second from a phone must not be a write per second.
const SEEN_WRITE_INTERVAL_MS: u64 = 60_000;
/// Random bytes in a device secret: 256 bits.
const SECRET_BYTES: usize = 32;
/// Random bytes in a device id after its `dev-` prefix: unique, not secret.
const ID_BYTES: usize = 8;
const ID_PREFIX: &str = "dev-";

/// A paired device, as the rest of the daemon sees it (never its secret).
#[derive(Debug, Clone)]
pub struct Device {
    /// `dev-` and 16 hex digits: also its client id.
    pub id: Arc<str>,
    pub name: Arc<str>,
    pub role: Role,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    pub last_seen_at: Option<u64>,
    /// The person it belongs to: a sign-in with an OpenID provider (`crate::oidc`).
    pub person: Option<Arc<Person>>,
    /// When a sign-in ends unless its provider renews it (milliseconds since the Unix epoch);
    /// `None` for a paired device, which lasts until it is revoked.
    pub expires_at: Option<u64>,
    /// Fired when the device is revoked: its event streams end on it.
    revoked: CancellationToken,
}

impl Device {
    /// Fires when this device is revoked.
    pub fn revoked(&self) -> CancellationToken {
        self.revoked.clone()
    }

    /// The client id it acts as: its person's (`person:<subject>`: a person is one client on
    /// whatever device), else its own id.
    pub fn client_id(&self) -> Arc<str> {
        self.person.as_ref().map_or_else(|| self.id.clone(), |p| p.client_id())
    }

    /// The name everyone is shown for what it does: its person's, else its own.
    pub fn shown_name(&self) -> &str {
        self.person.as_deref().map_or(&*self.name, |p| &p.name)
    }
}

/// Why pairing failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PairError {
    #[error("Invalid or expired pairing code")]
    InvalidCode,
    #[error("Too many failed pairing attempts from this address; retry later")]
    Throttled,
    #[error("Too many pairing codes are waiting to be used; use or let some expire first")]
    TooManyCodes,
    #[error("{MAX_DEVICES} devices are paired already: revoke one first")]
    TooManyDevices,
    #[error(
        "A device name is 1 to {MAX_NAME_CHARS} characters, without control, formatting or invisible \
         characters (such as right-to-left overrides and zero-width spaces), spaces other than the \
         plain one, more than {MAX_COMBINING_MARKS} combining marks on one character, or letters of \
         two scripts (such as a Cyrillic 'а' among Latin letters; Latin beside Chinese, Japanese or \
         Korean is fine)"
    )]
    InvalidName,
    #[error("the operating system's random number generator failed")]
    NoRandomness,
    /// The store did not take the new device: nothing was paired, and the code still works.
    #[error("{0}")]
    Store(WriteError),
}

/// Why a revocation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RevokeError {
    #[error("no paired device has this id")]
    NotFound,
    /// The store did not take the revocation: the device is still paired.
    #[error("{0}")]
    Store(WriteError),
}

/// A pairing code just issued.
#[derive(Debug, Clone)]
pub struct Issued {
    /// 32 hex digits; shown once, never kept.
    pub code: String,
    /// When it stops working, milliseconds since the Unix epoch.
    pub expires_at: u64,
}

struct Entry {
    device: Device,
    secret_hash: [u8; 32],
    /// The last-seen time last written to the store.
    seen_written: u64,
}

impl Entry {
    /// A device as the store keeps it, keyed by its id; `None` for a role this version does not
    /// know. A name recorded before names were checked as they are now is shown neutralised,
    /// never as it was.
    fn from_stored(d: &StoredDevice) -> Option<(Arc<str>, Entry)> {
        let role = Role::parse_stored(&d.role)?;
        // A person whose row cannot be read is no device at all: it must not vote as itself.
        let person = match &d.person {
            Some(json) => Some(Arc::new(serde_json::from_str::<Person>(json).ok()?)),
            None => None,
        };
        if role == Role::Operator && person.is_none() {
            return None;
        }
        let id: Arc<str> = Arc::from(d.device_id.as_str());
        let device = Device {
            id: id.clone(),
            name: Arc::from(neutralised(&d.name).as_str()),
            role,
            created_at: d.created_at,
            last_seen_at: d.last_seen_at,
            person,
            expires_at: d.expires_at,
            revoked: CancellationToken::new(),
        };
        let entry = Entry { device, secret_hash: d.secret_hash, seen_written: d.last_seen_at.unwrap_or(0) };
        Some((id, entry))
    }
}

impl Entry {
    /// The device as the store keeps it.
    fn stored(&self) -> StoredDevice {
        let d = &self.device;
        StoredDevice {
            device_id: d.id.to_string(),
            name: d.name.to_string(),
            role: d.role.as_str().to_owned(),
            secret_hash: self.secret_hash,
            created_at: d.created_at,
            last_seen_at: d.last_seen_at,
            person: d.person.as_deref().and_then(|p| serde_json::to_string(p).ok()),
            expires_at: d.expires_at,
        }
    }
}

#[derive(Default)]
struct Table {
    devices: HashMap<Arc<str>, Entry>,
    /// Pairings whose device is being written: they hold a place under [`MAX_DEVICES`].
    pairing: usize,
    codes: Codes,
}

/// The paired devices and the pairing codes. One table behind a `std::sync::Mutex`: every
/// critical section is a lookup or an insert, with nothing awaited under it (a store write is
/// awaited between two of them).
pub struct Devices {
    store: Arc<dyn Store>,
    /// In a fleet: where a code issued here is kept for the other daemons, and one they issued is
    /// read and claimed; `None` alone, where a code lives in this table only.
    fleet: Option<Arc<dyn Fleet>>,
    code_ttl: Duration,
    table: Mutex<Table>,
    /// The devices' open event streams (their own lock: counted on every stream's open and end).
    streams: Arc<Streams>,
    /// When an unknown credential last made the table be read again ([`Devices::reload_for_unknown`]).
    last_miss_reload: Mutex<Option<Instant>>,
}

/// The least time between two reads of the devices for unknown credentials: a device just paired
/// elsewhere is found within it, and wrong credentials cost at most ten reads a second.
pub const MISS_RELOAD_GAP: Duration = Duration::from_millis(100);

impl std::fmt::Debug for Devices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Devices").field("paired", &lock(&self.table).devices.len()).finish_non_exhaustive()
    }
}

/// `n` random bytes in hex; `None` when the OS's generator fails (nothing weaker is substituted).
/// Also a sign-in's browser binding (`crate::oidc`).
pub fn random_hex(n: usize) -> Option<String> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A name as given, trimmed, or `InvalidName` (`names`).
pub fn valid_name(name: &str) -> Result<String, PairError> {
    names::valid_name(name).map_err(|names::InvalidName| PairError::InvalidName)
}

fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Whether `credential` has exactly a device credential's shape, `dev-<16 hex>.<64 hex>` (so an
/// `Authorization` header carrying one is judged as a device first; the perimeter still tries the
/// operator's token when no device has it, so an operator token of any shape works).
pub fn is_device_credential(credential: &str) -> bool {
    let hex =
        |s: &str, len: usize| s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    credential
        .strip_prefix(ID_PREFIX)
        .and_then(|rest| rest.split_once('.'))
        .is_some_and(|(id, secret)| hex(id, ID_BYTES * 2) && hex(secret, SECRET_BYTES * 2))
}

impl Devices {
    /// The table, loaded from `store` (an unreadable store starts with none, and says so); codes
    /// live `code_ttl` (`--pairing-code-ttl-ms`), shared through `fleet` when there is one;
    /// devices' event streams are bounded by `limits`.
    pub fn new(
        store: Arc<dyn Store>,
        fleet: Option<Arc<dyn Fleet>>,
        code_ttl: Duration,
        limits: StreamLimits,
    ) -> Devices {
        let mut table = Table::default();
        match store.devices() {
            Ok(devices) => {
                for (id, entry) in devices.iter().filter_map(Entry::from_stored) {
                    table.devices.insert(id, entry);
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot read the paired devices; none is signed in"),
        }
        Devices {
            store,
            fleet,
            code_ttl,
            table: Mutex::new(table),
            streams: Arc::new(Streams::new(limits)),
            last_miss_reload: Mutex::new(None),
        }
    }

    /// A one-time code for a device to be called `name` (or what it calls itself) with `role`. In
    /// a fleet it is returned once the store keeps it for the other daemons (alone, at once: it
    /// lives in this table only); when the store refuses it, it works nowhere.
    pub async fn issue_code(&self, name: Option<&str>, role: Role) -> Result<Issued, PairError> {
        let name = name.map(valid_name).transpose()?;
        let code = random_hex(CODE_BYTES).ok_or(PairError::NoRandomness)?;
        let now = Instant::now();
        let grant = Grant { name: name.clone(), role, sign_in: None };
        if !lock(&self.table).codes.issue(&code, grant, now, self.code_ttl) {
            return Err(PairError::TooManyCodes);
        }
        let expires_at = now_ms() + self.code_ttl.as_millis() as u64;
        let digest = pairing::digest(&code);
        let ttl_ms = self.code_ttl.as_millis() as u64;
        if let Some(fleet) = &self.fleet
            && let Err(e) = fleet.put_pairing_code(&digest, name.as_deref(), role.as_str(), ttl_ms).await
        {
            lock(&self.table).codes.forget(&digest);
            return Err(PairError::Store(e));
        }
        Ok(Issued { code, expires_at })
    }

    /// A one-time code for a device of `sign_in`'s person (a browser or a terminal that just signed
    /// in with the provider), called `name`, with `role`. Kept on this daemon only: the sign-in
    /// that asks for it is exchanged by the same browser or terminal a moment later.
    pub fn issue_sign_in(&self, sign_in: SignIn, name: &str, role: Role) -> Result<Issued, PairError> {
        self.issue_granted(Grant { name: Some(name.to_owned()), role, sign_in: Some(sign_in) })
    }

    /// A one-time code for `grant`, kept on this daemon only.
    fn issue_granted(&self, grant: Grant) -> Result<Issued, PairError> {
        let code = random_hex(CODE_BYTES).ok_or(PairError::NoRandomness)?;
        let now = Instant::now();
        if !lock(&self.table).codes.issue(&code, grant, now, self.code_ttl) {
            return Err(PairError::TooManyCodes);
        }
        Ok(Issued { code, expires_at: now_ms() + self.code_ttl.as_millis() as u64 })
    }

    /// A one-time code for another device of `by`'s person, which a signed-in person asks for
    /// (`POST /devices/pairing` with their device's credential): it has `by`'s role and ends with
    /// `by`'s sign-in unless renewed, as every device of theirs is (renewed, signed out, its role
    /// moved together). Kept on this daemon only, as a sign-in's code. `None`: `by` is nobody's
    /// sign-in (a device paired by the operator pairs nothing).
    pub fn issue_for_person(&self, by: &Device, name: Option<&str>) -> Option<Result<Issued, PairError>> {
        let (person, end) = (by.person.as_ref()?, by.expires_at?);
        let name = match name.map(valid_name).transpose() {
            Ok(name) => name,
            Err(e) => return Some(Err(e)),
        };
        let lasts = Duration::from_millis(end.saturating_sub(now_ms()));
        let sign_in = SignIn { person: (**person).clone(), lasts };
        Some(self.issue_granted(Grant { name, role: by.role, sign_in: Some(sign_in) }))
    }

    /// Every device of the person `subject`.
    pub fn of_person(&self, subject: &str) -> Vec<Device> {
        let table = lock(&self.table);
        let mut out: Vec<Device> = table
            .devices
            .values()
            .filter(|e| e.device.person.as_ref().is_some_and(|p| p.subject == subject))
            .map(|e| e.device.clone())
            .collect();
        out.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        out
    }

    /// The sign-ins whose end passed at `now` (milliseconds since the Unix epoch).
    pub fn expired(&self, now: u64) -> Vec<Device> {
        let table = lock(&self.table);
        table
            .devices
            .values()
            .filter(|e| e.device.expires_at.is_some_and(|end| end <= now))
            .map(|e| e.device.clone())
            .collect()
    }

    /// Renews every sign-in of `person` (its provider vouched for them again) until `until`, with
    /// what the provider says of them now (name, groups) and the role that gives them. Each is on
    /// disk before it is renewed here; returns how many were renewed, or the store's refusal (those
    /// not yet written keep their old end).
    pub async fn renew(&self, person: &Person, role: Role, until: u64) -> Result<usize, WriteError> {
        let signed_in: Vec<StoredDevice> = {
            let table = lock(&self.table);
            table
                .devices
                .values()
                .filter(|e| e.device.person.as_ref().is_some_and(|p| p.subject == person.subject))
                .filter(|e| e.device.expires_at.is_some())
                .map(|e| e.stored())
                .collect()
        };
        let json = serde_json::to_string(person).ok();
        let shared = Arc::new(person.clone());
        for mut row in signed_in.iter().cloned() {
            row.expires_at = Some(until);
            row.person = json.clone();
            row.role = role.as_str().to_owned();
            self.store.put_device(&row).await?;
            if let Some(entry) = lock(&self.table).devices.get_mut(row.device_id.as_str()) {
                entry.device.expires_at = Some(until);
                entry.device.person = Some(shared.clone());
                entry.device.role = role;
            }
        }
        Ok(signed_in.len())
    }

    /// Revokes every device of the person `subject` (disabled, or no longer vouched for by their
    /// provider): each as [`Devices::revoke`] does. Returns those revoked; the first refusal of
    /// the store stops it (the rest stay, and the caller says so).
    pub async fn revoke_person(&self, subject: &str) -> Result<Vec<Device>, RevokeError> {
        let mut revoked = Vec::new();
        for device in self.of_person(subject) {
            match self.revoke(&device.id).await {
                Ok(d) => revoked.push(d),
                Err(RevokeError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(revoked)
    }

    /// A code another daemon of the fleet issued, as the store keeps it, learnt here so it can be
    /// taken; `false` when there is none (wrong, used or expired), or it cannot be read. Read only
    /// for a client whose next wrong code would not be refused anyway, so guesses cost no more
    /// reads than the throttle allows.
    async fn learn_from_store(&self, fleet: &Arc<dyn Fleet>, code: &str, peer: IpAddr) -> bool {
        let digest = pairing::digest(code);
        if lock(&self.table).codes.throttled(peer, Instant::now()) {
            return false;
        }
        let fleet = fleet.clone();
        let found = match tokio::task::spawn_blocking(move || fleet.pairing_code(&digest)).await {
            Ok(Ok(found)) => found,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot read the fleet's pairing codes");
                return false;
            }
            Err(_) => return false,
        };
        let Some(stored) = found else { return false };
        // The row was written by a daemon of the fleet, but a name or a role this version does not
        // accept is refused as it would be from a client.
        let Some(role) = Role::parse(&stored.role) else { return false };
        let Ok(name) = stored.name.as_deref().map(valid_name).transpose() else { return false };
        let now = Instant::now();
        let left = Duration::from_millis(stored.expires_in_ms).min(self.code_ttl);
        lock(&self.table).codes.learn(digest, Grant { name, role, sign_in: None }, now, now + left)
    }

    /// Exchanges `code` from `peer` for a new device and its credential (returned once, never
    /// kept). The operator's name for it wins over the one it gives itself. The device is on disk
    /// before it exists in memory and before this returns; when there is no room for it, or the
    /// store refuses it, the code is given back unused.
    pub async fn pair(
        &self,
        code: &str,
        name: Option<&str>,
        peer: IpAddr,
    ) -> Result<(Device, String), PairError> {
        let own_name = name.map(valid_name).transpose()?;
        let (Some(id), Some(secret)) = (random_hex(ID_BYTES), random_hex(SECRET_BYTES)) else {
            return Err(PairError::NoRandomness);
        };
        // A code issued on another daemon of the fleet is read from the row its issuer committed
        // before showing it.
        if let Some(fleet) = &self.fleet {
            // Asked under the table's lock, released before the read is awaited.
            let known = lock(&self.table).codes.knows(code, Instant::now());
            if !known {
                self.learn_from_store(fleet, code, peer).await;
            }
        }
        let taken = {
            let mut table = lock(&self.table);
            let taken = table.codes.take(code, peer, Instant::now()).map_err(|e| match e {
                CodeError::Invalid => PairError::InvalidCode,
                CodeError::Throttled => PairError::Throttled,
            })?;
            if table.devices.len() + table.pairing >= MAX_DEVICES {
                table.codes.give_back(taken);
                return Err(PairError::TooManyDevices);
            }
            table.pairing += 1;
            taken
        };
        let id: Arc<str> = Arc::from(format!("{ID_PREFIX}{id}"));
        let name = taken
            .grant
            .name
            .clone()
            .or(own_name)
            .unwrap_or_else(|| format!("device {}", &id[ID_PREFIX.len()..][..4]));
        let now = now_ms();
        let role = taken.grant.role;
        let secret_hash = hash(&secret);
        // Used once in the whole fleet: a daemon that claimed it first wins, and for this one
        // the code is used (alone, taking it from the table was the whole claim).
        if let Some(fleet) = &self.fleet
            && let Err(e) = fleet.claim_pairing_code(&taken.digest).await
        {
            let mut table = lock(&self.table);
            table.pairing -= 1;
            if e.is_claimed_already() {
                return Err(PairError::InvalidCode);
            }
            table.codes.give_back(taken);
            return Err(PairError::Store(e));
        }
        let person = taken.grant.sign_in.as_ref().map(|s| Arc::new(s.person.clone()));
        let expires_at = taken.grant.sign_in.as_ref().map(|s| now + s.lasts.as_millis() as u64);
        let written = self
            .store
            .put_device(&StoredDevice {
                device_id: id.to_string(),
                name: name.clone(),
                role: role.as_str().to_owned(),
                secret_hash,
                created_at: now,
                last_seen_at: Some(now),
                person: person.as_deref().and_then(|p| serde_json::to_string(p).ok()),
                expires_at,
            })
            .await;
        let mut table = lock(&self.table);
        table.pairing -= 1;
        if let Err(e) = written {
            table.codes.give_back(taken);
            return Err(PairError::Store(e));
        }
        let device = Device {
            id: id.clone(),
            name: Arc::from(name.as_str()),
            role,
            created_at: now,
            last_seen_at: Some(now),
            person,
            expires_at,
            revoked: CancellationToken::new(),
        };
        table.devices.insert(id.clone(), Entry { device: device.clone(), secret_hash, seen_written: now });
        Ok((device, format!("{id}.{secret}")))
    }

    /// The device `credential` belongs to, if it is paired and not revoked. The secret's digest is
    /// compared in constant time; the id (public) is what finds the entry.
    pub fn authenticate(&self, credential: &str) -> Option<Device> {
        let (id, secret) = credential.split_once('.')?;
        let presented = hash(secret);
        let now = now_ms();
        let mut table = lock(&self.table);
        let entry = table.devices.get_mut(id)?;
        if !bool::from(presented.ct_eq(&entry.secret_hash)) {
            return None;
        }
        // A sign-in its provider did not renew in time is over, as if revoked (the renewal that
        // failed, or the daemon that renewed it being gone, ends it; `crate::oidc`).
        if entry.device.expires_at.is_some_and(|end| end <= now) {
            return None;
        }
        entry.device.last_seen_at = Some(now);
        if now.saturating_sub(entry.seen_written) >= SEEN_WRITE_INTERVAL_MS {
            entry.seen_written = now;
            self.store.device_seen(id, now);
        }
        Some(entry.device.clone())
    }

    /// Every paired device, oldest first.
    pub fn list(&self) -> Vec<Device> {
        let mut out: Vec<Device> = lock(&self.table).devices.values().map(|e| e.device.clone()).collect();
        out.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        out
    }

    /// Revokes `id` once the store has it: refused from its next request on, its streams ended
    /// now. Until the store answers, the device works as before; when the store refuses, it stays
    /// paired.
    pub async fn revoke(&self, id: &str) -> Result<Device, RevokeError> {
        let device =
            lock(&self.table).devices.get(id).map(|e| e.device.clone()).ok_or(RevokeError::NotFound)?;
        self.store.revoke_device(id, now_ms()).await.map_err(RevokeError::Store)?;
        // It may be gone from the table already: a read of the devices that found the revocation
        // (in a fleet, its own notice's), or a second revocation written at the same time. It is
        // revoked either way.
        lock(&self.table).devices.remove(id);
        device.revoked.cancel();
        Ok(device)
    }

    /// Reads the paired devices again (another daemon of the fleet paired or revoked one): a new
    /// one signs in from now on, and one no longer there is revoked here as it was there (its
    /// streams end). Returns those. Blocking: call it off the async runtime.
    pub fn reload(&self) -> Result<Vec<Device>, crate::store::ReadError> {
        self.read_again(true)
    }

    /// Reads the paired devices again for a credential this daemon does not know, which a device
    /// paired on another daemon of the fleet a moment ago may present before its notice arrives.
    /// Only adds (a revocation is the notice's to apply, with its votes). At most once per
    /// [`MISS_RELOAD_GAP`], so wrong credentials cannot make every request a database read.
    /// `false` when it did not read. Blocking: call it off the async runtime.
    pub fn reload_for_unknown(&self) -> bool {
        {
            let mut last = lock(&self.last_miss_reload);
            if last.is_some_and(|at| at.elapsed() < MISS_RELOAD_GAP) {
                return false;
            }
            *last = Some(Instant::now());
        }
        self.read_again(false).is_ok()
    }

    fn read_again(&self, remove_gone: bool) -> Result<Vec<Device>, crate::store::ReadError> {
        // Only a device paired before the read began can be missing from it because it was
        // revoked: one paired here meanwhile is on disk, but maybe after the read's snapshot.
        let mut gone: Vec<Arc<str>> = lock(&self.table).devices.keys().cloned().collect();
        let stored = self.store.devices()?;
        let mut table = lock(&self.table);
        for d in stored {
            gone.retain(|id| **id != *d.device_id);
            if let Some(known) = table.devices.get_mut(d.device_id.as_str()) {
                // A sign-in another daemon renewed: its new end, and its person and role as the
                // provider now vouches for them.
                if let Some((_, fresh)) = Entry::from_stored(&d)
                    && fresh.device.expires_at > known.device.expires_at
                {
                    known.device.expires_at = fresh.device.expires_at;
                    known.device.person = fresh.device.person;
                    known.device.role = fresh.device.role;
                }
                continue;
            }
            if let Some((id, entry)) = Entry::from_stored(&d) {
                table.devices.insert(id, entry);
            }
        }
        let mut revoked = Vec::new();
        if !remove_gone {
            gone.clear();
        }
        for id in gone {
            if let Some(entry) = table.devices.remove(&id) {
                entry.device.revoked.cancel();
                revoked.push(entry.device);
            }
        }
        Ok(revoked)
    }

    /// A place for one more event stream of `device` on `session_id`, held until the permit is
    /// dropped (the stream ends), or the limit it would pass.
    pub fn open_stream(&self, device: &Device, session_id: &str) -> Result<StreamPermit, StreamLimit> {
        self.streams.open(&device.id, session_id)
    }

    /// A place for one more connection of `device` that reads no session by itself (an ACP
    /// WebSocket, a Streamable HTTP connection's own stream), held until the permit is dropped.
    pub fn open_connection(&self, device: &Device) -> Result<StreamPermit, StreamLimit> {
        self.streams.open_connection(&device.id)
    }

    /// A place for one more reader of `session_id` by device `device_id` over a connection already
    /// counted (a session an ACP WebSocket attached), held until the permit is dropped.
    pub fn attach_session(
        &self,
        device_id: &Arc<str>,
        session_id: &str,
    ) -> Result<StreamPermit, StreamLimit> {
        self.streams.attach(device_id, session_id)
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::sync::atomic::{AtomicBool, Ordering};

    use serde_json::Value;

    use super::*;
    use crate::store::{
        Ack, AuditPage, AuditQuery, AuditRecord, MemoryStore, ReadError, SessionRecord, SessionState,
        StoreStats, StoredEvent, StoredRule, Writes,
    };

    const LIMITS: StreamLimits = StreamLimits { all_devices: 192, per_session: 48 };

    fn devices() -> Devices {
        Devices::new(Arc::new(MemoryStore::default()), None, Duration::from_secs(120), LIMITS)
    }

    const PEER: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    /// A store whose acknowledged writes fail while `failing` is set (a busy or full disk), and
    /// that remembers the devices it took.
    #[derive(Debug, Default)]
    struct Disk {
        failing: AtomicBool,
        devices: Mutex<Vec<String>>,
        revoked: Mutex<Vec<String>>,
        /// What `devices()` reads back.
        stored: Mutex<Vec<StoredDevice>>,
        /// Last-seen writes.
        seen: Mutex<Vec<String>>,
        /// As the fleet it is handed as (`Devices::new`'s `fleet`): the codes other daemons issued,
        /// by digest.
        fleet_codes: Mutex<HashMap<[u8; 32], crate::store::StoredCode>>,
        /// Reads of `fleet_codes`.
        code_reads: std::sync::atomic::AtomicUsize,
        /// When set, `devices()` says it is reading, then waits to be let go.
        gate: Mutex<Option<Gate>>,
        /// When set, `revoke_device()` says it is writing, then waits to be let go.
        revoke_gate: Mutex<Option<Gate>>,
    }

    type Gate = (std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>);

    /// Says it got here, then waits to be let go, when `gate` is set.
    fn pass(gate: &Mutex<Option<Gate>>) {
        if let Some((here, go)) = lock(gate).take() {
            here.send(()).expect("the test waits");
            go.recv_timeout(Duration::from_secs(10)).expect("let go");
        }
    }

    impl Disk {
        fn answer(&self) -> Ack {
            Ack::ready(if self.failing.load(Ordering::Relaxed) {
                Err(WriteError("database is locked".into()))
            } else {
                Ok(())
            })
        }
    }

    impl Writes for Disk {
        fn session_started(&self, _: &SessionRecord, _: u64, _: bool) {}
        fn append_events(&self, _: &Arc<str>, _: u64, _: Vec<bytes::Bytes>) {}
        fn session_ended(&self, _: &str, _: SessionState, _: &str, _: u64, _: u64) {}
        fn audit(&self, _: AuditRecord) {}
        fn put_workspace_rule(&self, _: &str, _: &str, _: &Value) -> Ack {
            self.answer()
        }
        fn delete_workspace_rule(&self, _: &str, _: &str) -> Ack {
            self.answer()
        }
        fn delete_session(&self, _: &str) -> Ack {
            self.answer()
        }
        fn put_device(&self, device: &StoredDevice) -> Ack {
            let ack = self.answer();
            if !self.failing.load(Ordering::Relaxed) {
                lock(&self.devices).push(device.device_id.clone());
            }
            ack
        }
        fn device_seen(&self, id: &str, _: u64) {
            lock(&self.seen).push(id.to_owned());
        }
        fn revoke_device(&self, id: &str, _: u64) -> Ack {
            pass(&self.revoke_gate);
            let ack = self.answer();
            if !self.failing.load(Ordering::Relaxed) {
                lock(&self.revoked).push(id.to_owned());
            }
            ack
        }
        fn flush(&self) -> Ack {
            self.answer()
        }
        fn record_turn(&self, _: crate::store::TurnRecord) {}
    }

    impl Store for Disk {
        fn durable(&self) -> bool {
            true
        }
        fn query_audit(&self, _: &AuditQuery) -> Result<AuditPage, ReadError> {
            Ok(AuditPage::default())
        }
        fn workspace_rules(&self) -> Result<Vec<StoredRule>, ReadError> {
            Ok(Vec::new())
        }
        fn devices(&self) -> Result<Vec<StoredDevice>, ReadError> {
            let read = lock(&self.stored).clone();
            pass(&self.gate);
            Ok(read)
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
        fn turns(&self, _: &str) -> Result<Vec<crate::store::TurnRecord>, ReadError> {
            Ok(Vec::new())
        }
        fn snapshot_refs(&self) -> Result<Vec<String>, ReadError> {
            Ok(Vec::new())
        }
        fn stats(&self) -> StoreStats {
            StoreStats::default()
        }
    }

    /// The fleet's half of a shared store, as the devices use it: its pairing codes (kept and
    /// claimed at once, read from `fleet_codes`). The devices ask a fleet nothing else.
    impl Fleet for Disk {
        fn put_pairing_code(&self, _: &[u8; 32], _: Option<&str>, _: &str, _: u64) -> Ack {
            Ack::ready(Ok(()))
        }
        fn pairing_code(&self, digest: &[u8; 32]) -> Result<Option<crate::store::StoredCode>, ReadError> {
            self.code_reads.fetch_add(1, Ordering::Relaxed);
            Ok(lock(&self.fleet_codes).get(digest).cloned())
        }
        fn claim_pairing_code(&self, _: &[u8; 32]) -> Ack {
            Ack::ready(Ok(()))
        }
        fn join(&self, _: &str, _: u64) -> Result<(), ReadError> {
            unreachable!("the devices ask a fleet for its pairing codes only")
        }
        fn renew_lease(&self, _: u64) -> Result<Vec<String>, ReadError> {
            unreachable!("the devices ask a fleet for its pairing codes only")
        }
        fn owner(&self, _: &str) -> Result<Option<String>, ReadError> {
            unreachable!("the devices ask a fleet for its pairing codes only")
        }
        fn claim_session(&self, _: &str) -> Result<crate::store::SessionClaim, ReadError> {
            unreachable!("the devices ask a fleet for its pairing codes only")
        }
        fn release_session(&self, _: &SessionRecord) -> Result<(), ReadError> {
            unreachable!("the devices ask a fleet for its pairing codes only")
        }
        fn node_url(&self) -> Option<String> {
            unreachable!("the devices ask a fleet for its pairing codes only")
        }
        fn live_node(&self, _: &str) -> Result<bool, ReadError> {
            unreachable!("the devices ask a fleet for its pairing codes only")
        }
        fn fleet_secret(&self) -> [u8; 32] {
            unreachable!("the devices ask a fleet for its pairing codes only")
        }
        fn take_notices(&self) -> Option<tokio::sync::mpsc::Receiver<crate::store::Notice>> {
            unreachable!("the devices ask a fleet for its pairing codes only")
        }
    }

    #[tokio::test]
    async fn a_code_pairs_one_device_whose_credential_is_256_bits_and_stored_hashed() {
        let d = devices();
        let issued = d.issue_code(Some("phone"), Role::Observer).await.expect("code");
        assert_eq!(issued.code.len(), CODE_BYTES * 2);
        let (device, credential) = d.pair(&issued.code, Some("ignored"), PEER).await.expect("paired");
        assert_eq!((&*device.name, device.role), ("phone", Role::Observer));
        let (id, secret) = credential.split_once('.').expect("id.secret");
        assert_eq!((id, secret.len()), (&*device.id, SECRET_BYTES * 2));
        assert!(is_device_credential(&credential));
        assert_eq!(lock(&d.table).devices[id].secret_hash, hash(secret));
        assert_eq!(d.authenticate(&credential).map(|x| x.id), Some(device.id.clone()));
        assert!(d.authenticate(&format!("{id}.{}", "0".repeat(64))).is_none(), "wrong secret");
        assert!(d.authenticate(secret).is_none(), "no id");
        assert_eq!(d.pair(&issued.code, None, PEER).await.err(), Some(PairError::InvalidCode), "single use");
    }

    fn ada() -> Person {
        Person::new("ada".into(), Some("Ada Lovelace"), Some("ada@example.test".into()), vec!["staff".into()])
    }

    /// A sign-in's code pays for a device of its person, acting as the person's client id, which
    /// lasts until its end and no longer; a renewal moves the end of every sign-in of theirs (and
    /// of no one else's), and signing the person out revokes every device of theirs.
    /// A person pairs another device of theirs: it is theirs, with their role, ending when the
    /// sign-in that paired it ends; a device that is nobody's pairs nothing; a bad name is refused.
    #[tokio::test]
    async fn a_person_pairs_a_device_of_theirs_that_ends_with_their_sign_in() {
        let d = devices();
        let code = d
            .issue_sign_in(
                SignIn { person: ada(), lasts: Duration::from_secs(60) },
                "web sign-in",
                Role::Voter,
            )
            .expect("code")
            .code;
        let (laptop, _) = d.pair(&code, None, PEER).await.expect("paired");
        let code = d.issue_for_person(&laptop, Some("ada's phone")).expect("hers").expect("code").code;
        let (phone, _) = d.pair(&code, Some("ignored"), PEER).await.expect("paired");
        assert_eq!(
            (&*phone.name, phone.role, &*phone.client_id(), phone.person.as_deref()),
            ("ada's phone", Role::Voter, "person:ada", Some(&ada()))
        );
        let (end, phone_end) = (laptop.expires_at.expect("end"), phone.expires_at.expect("ends too"));
        assert!(phone_end <= end + 1_000 && phone_end + 1_000 >= end, "{phone_end} vs {end}");
        assert!(matches!(d.issue_for_person(&laptop, Some("\u{202e}x")), Some(Err(PairError::InvalidName))));
        let issued = d.issue_code(Some("wall"), Role::Observer).await.expect("code");
        let (wall, _) = d.pair(&issued.code, None, PEER).await.expect("paired");
        assert!(d.issue_for_person(&wall, None).is_none(), "nobody's device pairs nothing");
    }

    #[tokio::test]
    async fn a_sign_in_is_a_device_of_its_person_until_its_end() {
        let d = devices();
        let lasts = Duration::from_secs(60);
        let sign_in = || SignIn { person: ada(), lasts };
        let before = now_ms();
        let code = d.issue_sign_in(sign_in(), "web sign-in", Role::Voter).expect("code").code;
        let (laptop, credential) = d.pair(&code, Some("ignored"), PEER).await.expect("paired");
        assert_eq!(
            (&*laptop.name, laptop.role, &*laptop.client_id()),
            ("web sign-in", Role::Voter, "person:ada")
        );
        assert_eq!(laptop.shown_name(), "Ada Lovelace");
        let end = laptop.expires_at.expect("a sign-in ends");
        assert!(end >= before + 60_000 && end <= now_ms() + 60_000, "{end}");
        assert_eq!(d.authenticate(&credential).map(|x| x.id), Some(laptop.id.clone()));
        let code = d.issue_sign_in(sign_in(), "web sign-in", Role::Voter).expect("code").code;
        let (phone, _) = d.pair(&code, None, PEER).await.expect("paired");
        let issued = d.issue_code(Some("wall"), Role::Observer).await.expect("code");
        let (wall, _) = d.pair(&issued.code, None, PEER).await.expect("paired");
        assert_eq!((wall.person.clone(), wall.expires_at, &*wall.client_id()), (None, None, &*wall.id));
        assert_eq!(wall.shown_name(), "wall");
        // Both paired within one millisecond, as often as not: their order is then their random
        // ids', so the two are compared sorted.
        let ids = |v: Vec<Device>| {
            let mut ids = v.into_iter().map(|x| x.id).collect::<Vec<_>>();
            ids.sort();
            ids
        };
        let mut both = vec![laptop.id.clone(), phone.id.clone()];
        both.sort();
        assert_eq!(ids(d.of_person("ada")), both);

        // Renewed: both of hers move, with what the provider says of her now; the wall does not.
        let renamed = Person { name: "Ada King".into(), ..ada() };
        assert_eq!(d.renew(&renamed, Role::Observer, end + 5_000).await, Ok(2));
        let now = d.authenticate(&credential).expect("still signed in");
        assert_eq!(
            (now.expires_at, now.shown_name(), now.role),
            (Some(end + 5_000), "Ada King", Role::Observer)
        );
        assert!(d.expired(end + 4_999).is_empty());
        assert_eq!(ids(d.expired(end + 5_000)), both, "ended at its end");

        // Past its end it is refused, as if revoked.
        lock(&d.table).devices.get_mut(&*laptop.id).expect("entry").device.expires_at = Some(now_ms() - 1);
        assert!(d.authenticate(&credential).is_none(), "a sign-in past its end is refused");

        let gone = d.revoke_person("ada").await.expect("signed out");
        assert_eq!(ids(gone), both);
        assert!(d.of_person("ada").is_empty());
        assert_eq!(ids(d.list()), std::slice::from_ref(&wall.id), "nobody else's device");
        assert_eq!(d.renew(&ada(), Role::Voter, end).await, Ok(0), "nothing left to renew");
    }

    /// A person's device read back from the store is theirs, with its end; an operator-role row
    /// without a person (which no pairing code makes) or with a person the store garbled is no
    /// device at all.
    #[test]
    fn a_persons_device_is_read_back_and_a_bad_row_is_no_device() {
        let row = |role: &str, person: Option<&str>| StoredDevice {
            device_id: "dev-0123456789abcdef".into(),
            name: "web sign-in".into(),
            role: role.into(),
            secret_hash: [1; 32],
            created_at: 1,
            last_seen_at: None,
            person: person.map(str::to_owned),
            expires_at: Some(9),
        };
        let json = serde_json::to_string(&ada()).expect("json");
        let (_, entry) =
            Entry::from_stored(&row("operator", Some(&json))).expect("a person's operator sign-in");
        assert_eq!((entry.device.role, entry.device.expires_at), (Role::Operator, Some(9)));
        assert_eq!(entry.device.person.as_deref(), Some(&ada()));
        assert_eq!(entry.stored(), row("operator", Some(&json)), "written back as read");
        assert!(Entry::from_stored(&row("operator", None)).is_none(), "an operator device is a person's");
        assert!(Entry::from_stored(&row("voter", Some("{not json"))).is_none());
        assert!(Entry::from_stored(&row("voter", None)).is_some());
    }

    #[test]
    fn only_the_exact_shape_of_a_device_credential_is_one() {
        let id = "dev-0123456789abcdef";
        let secret = "ab".repeat(SECRET_BYTES);
        assert!(is_device_credential(&format!("{id}.{secret}")));
        for not in [
            "dev-ops.2026-operator-token".to_owned(),
            format!("{id}.{}", &secret[1..]),
            format!("{id}.{secret}0"),
            format!("dev-0123456789abcde.{secret}"),
            format!("dev-0123456789ABCDEF.{secret}"),
            format!("{id}.{}", secret.replace('a', "g")),
            format!("{id}{secret}"),
            format!("xev-0123456789abcdef.{secret}"),
        ] {
            assert!(!is_device_credential(&not), "{not}");
        }
    }

    #[tokio::test]
    async fn a_device_names_itself_only_when_the_operator_did_not() {
        let d = devices();
        let code = d.issue_code(None, Role::Voter).await.expect("code").code;
        assert_eq!(&*d.pair(&code, Some("  laptop "), PEER).await.expect("paired").0.name, "laptop");
        let code = d.issue_code(None, Role::Voter).await.expect("code").code;
        assert!(d.pair(&code, None, PEER).await.expect("paired").0.name.starts_with("device "));
        assert_eq!(d.issue_code(Some(""), Role::Voter).await.err(), Some(PairError::InvalidName));
        assert_eq!(d.issue_code(Some("a\nb"), Role::Voter).await.err(), Some(PairError::InvalidName));
        assert_eq!(
            d.issue_code(Some(&"x".repeat(65)), Role::Voter).await.err(),
            Some(PairError::InvalidName)
        );
        let code = d.issue_code(None, Role::Voter).await.expect("code").code;
        assert_eq!(d.pair(&code, Some("op\u{202E}era"), PEER).await.err(), Some(PairError::InvalidName));
        assert!(d.pair(&code, Some("ok"), PEER).await.is_ok(), "a refused name does not use the code up");
    }

    #[tokio::test]
    async fn revoking_refuses_the_credential_and_fires_the_streams_token() {
        let d = devices();
        let code = d.issue_code(None, Role::Voter).await.expect("code").code;
        let (device, credential) = d.pair(&code, None, PEER).await.expect("paired");
        let ended = device.revoked();
        assert!(!ended.is_cancelled());
        assert!(d.revoke(&device.id).await.is_ok());
        assert!(ended.is_cancelled());
        assert!(d.authenticate(&credential).is_none());
        assert_eq!(d.revoke(&device.id).await.err(), Some(RevokeError::NotFound), "already gone");
        assert!(d.list().is_empty());
    }

    #[tokio::test]
    async fn the_last_seen_time_is_written_at_most_once_a_minute() {
        let disk = Arc::new(Disk::default());
        let d = Devices::new(disk.clone(), None, Duration::from_secs(120), LIMITS);
        let code = d.issue_code(None, Role::Voter).await.expect("code").code;
        let (device, credential) = d.pair(&code, None, PEER).await.expect("paired");
        for _ in 0..3 {
            assert!(d.authenticate(&credential).is_some());
        }
        assert!(lock(&disk.seen).is_empty(), "seen at pairing, a moment ago");
        lock(&d.table).devices.get_mut(&device.id).expect("entry").seen_written -= SEEN_WRITE_INTERVAL_MS;
        assert!(d.authenticate(&credential).is_some());
        assert!(d.authenticate(&credential).is_some());
        assert_eq!(*lock(&disk.seen), [device.id.to_string()], "once, then not again for a minute");
    }

    #[tokio::test]
    async fn a_code_expires_its_lifetime_after_it_is_issued() {
        let d = devices();
        let before = now_ms();
        let issued = d.issue_code(None, Role::Voter).await.expect("code");
        let after = now_ms();
        assert!((before + 120_000..=after + 120_000).contains(&issued.expires_at), "{}", issued.expires_at);
    }

    #[tokio::test]
    async fn a_pairing_in_flight_holds_its_place_under_the_cap() {
        let d = devices();
        for _ in 0..MAX_DEVICES - 1 {
            let code = d.issue_code(None, Role::Observer).await.expect("code").code;
            d.pair(&code, None, PEER).await.expect("paired");
        }
        // One more is being written (its store write not answered yet): no room is left.
        lock(&d.table).pairing = 1;
        let code = d.issue_code(None, Role::Voter).await.expect("code").code;
        assert_eq!(d.pair(&code, None, PEER).await.err(), Some(PairError::TooManyDevices));
        lock(&d.table).pairing = 0;
        assert!(d.pair(&code, None, PEER).await.is_ok(), "the last place, once it is free");
    }

    #[tokio::test]
    async fn a_pairing_refused_for_room_does_not_use_its_code_up() {
        let d = devices();
        for _ in 0..MAX_DEVICES {
            let code = d.issue_code(None, Role::Observer).await.expect("code").code;
            d.pair(&code, None, PEER).await.expect("paired");
        }
        let code = d.issue_code(Some("late"), Role::Voter).await.expect("code").code;
        assert_eq!(d.pair(&code, None, PEER).await.err(), Some(PairError::TooManyDevices));
        assert_eq!(d.pair(&code, None, PEER).await.err(), Some(PairError::TooManyDevices), "still unused");
        let first = d.list()[0].id.clone();
        d.revoke(&first).await.expect("revoked");
        let (device, _) = d.pair(&code, None, PEER).await.expect("the same code, once there is room");
        assert_eq!(&*device.name, "late");
        assert_eq!(d.list().len(), MAX_DEVICES);
    }

    #[tokio::test]
    async fn a_pairing_or_revocation_the_store_refuses_changes_nothing() {
        let disk = Arc::new(Disk::default());
        let d = Devices::new(disk.clone(), None, Duration::from_secs(120), LIMITS);
        let code = d.issue_code(Some("phone"), Role::Voter).await.expect("code").code;
        disk.failing.store(true, Ordering::Relaxed);
        let refused = d.pair(&code, None, PEER).await.err();
        assert_eq!(refused, Some(PairError::Store(WriteError("database is locked".into()))));
        assert!(d.list().is_empty(), "not paired in memory either");
        assert_eq!(lock(&d.table).pairing, 0);
        disk.failing.store(false, Ordering::Relaxed);
        let (device, credential) = d.pair(&code, None, PEER).await.expect("the code still works");
        assert_eq!(*lock(&disk.devices), [device.id.to_string()]);
        disk.failing.store(true, Ordering::Relaxed);
        let refused = d.revoke(&device.id).await.err();
        assert_eq!(refused, Some(RevokeError::Store(WriteError("database is locked".into()))));
        assert!(!device.revoked().is_cancelled(), "its streams go on");
        assert!(d.authenticate(&credential).is_some(), "still paired");
        disk.failing.store(false, Ordering::Relaxed);
        d.revoke(&device.id).await.expect("revoked");
        assert_eq!(*lock(&disk.revoked), [device.id.to_string()]);
        assert!(d.authenticate(&credential).is_none());
    }

    /// In a fleet, a code this daemon never issued is read from the store (the row its issuer
    /// committed), with the grant the row holds; a row this version would not accept grants
    /// nothing, and a client whose next wrong code would be refused costs no read.
    #[tokio::test]
    async fn a_code_another_daemon_issued_is_read_from_the_store_and_grants_what_its_row_says() {
        let code = |n: u8| format!("{n:032x}");
        let row = |name: Option<&str>, role: &str| crate::store::StoredCode {
            name: name.map(str::to_owned),
            role: role.into(),
            expires_in_ms: 60_000,
        };
        let rows = HashMap::from([
            (pairing::digest(&code(1)), row(Some("phone"), "observer")),
            (pairing::digest(&code(2)), row(None, "admin")),
            (pairing::digest(&code(3)), row(Some("a\u{202E}b"), "voter")),
        ]);
        let disk = Arc::new(Disk { fleet_codes: Mutex::new(rows), ..Disk::default() });
        let d = Devices::new(disk.clone(), Some(disk.clone()), Duration::from_secs(120), LIMITS);
        let (device, _) = d.pair(&code(1), Some("mine"), PEER).await.expect("paired from the row");
        assert_eq!((&*device.name, device.role), ("phone", Role::Observer));
        for wrong in [code(2), code(3), code(4)] {
            assert_eq!(d.pair(&wrong, None, PEER).await.err(), Some(PairError::InvalidCode), "{wrong}");
        }
        // A code this daemon issued is not looked up.
        let reads = disk.code_reads.load(Ordering::Relaxed);
        let own = d.issue_code(None, Role::Voter).await.expect("code").code;
        d.pair(&own, None, PEER).await.expect("paired");
        assert_eq!(disk.code_reads.load(Ordering::Relaxed), reads);
        // A throttled client's guesses cost no read.
        for _ in 0..pairing::MAX_FAILURES_PER_WINDOW {
            let _ = d.pair(&code(9), None, PEER).await;
        }
        let reads = disk.code_reads.load(Ordering::Relaxed);
        assert_eq!(d.pair(&code(9), None, PEER).await.err(), Some(PairError::Throttled));
        assert_eq!(disk.code_reads.load(Ordering::Relaxed), reads);
        // A store of one daemon is never asked.
        let alone = Arc::new(Disk::default());
        let d = Devices::new(alone.clone(), None, Duration::from_secs(120), LIMITS);
        assert_eq!(d.pair(&code(1), None, PEER).await.err(), Some(PairError::InvalidCode));
        assert_eq!(alone.code_reads.load(Ordering::Relaxed), 0);
    }

    /// A read of the devices (another daemon paired or revoked one) revokes here only a device it
    /// should have found: one paired here while it was reading is kept, though the read missed it.
    #[tokio::test]
    async fn a_device_paired_while_the_devices_are_read_again_is_not_revoked_by_that_read() {
        let disk = Arc::new(Disk::default());
        let d = Arc::new(Devices::new(disk.clone(), None, Duration::from_secs(120), LIMITS));
        let (reading_tx, reading) = std::sync::mpsc::channel();
        let (go, go_rx) = std::sync::mpsc::channel();
        *lock(&disk.gate) = Some((reading_tx, go_rx));
        let reload = std::thread::spawn({
            let d = d.clone();
            move || d.reload()
        });
        reading.recv_timeout(Duration::from_secs(10)).expect("the read began");
        let code = d.issue_code(None, Role::Voter).await.expect("code").code;
        let (device, credential) = d.pair(&code, None, PEER).await.expect("paired");
        go.send(()).expect("let the read go");
        let revoked = reload.join().expect("the reload").expect("read");
        assert!(revoked.is_empty(), "{revoked:?}");
        assert!(!device.revoked().is_cancelled());
        assert!(d.authenticate(&credential).is_some());
        // The next read, which should find it, and does not (revoked elsewhere), revokes it.
        let revoked = d.reload().expect("read");
        assert_eq!(revoked.iter().map(|r| r.id.to_string()).collect::<Vec<_>>(), [device.id.to_string()]);
        assert!(device.revoked().is_cancelled() && d.authenticate(&credential).is_none());
    }

    /// A revocation written while a read of the devices found it (in a fleet, its own notice's
    /// read) and removed the device first is still a revocation, answered as one.
    #[tokio::test]
    async fn a_revocation_a_read_of_the_devices_applied_first_is_still_answered_done() {
        let disk = Arc::new(Disk::default());
        let d = Arc::new(Devices::new(disk.clone(), None, Duration::from_secs(120), LIMITS));
        let code = d.issue_code(None, Role::Voter).await.expect("code").code;
        let (device, credential) = d.pair(&code, None, PEER).await.expect("paired");
        let (writing_tx, writing) = std::sync::mpsc::channel();
        let (go, go_rx) = std::sync::mpsc::channel();
        *lock(&disk.revoke_gate) = Some((writing_tx, go_rx));
        // The store holds no device: the read finds the revocation.
        let reader = std::thread::spawn({
            let d = d.clone();
            move || {
                writing.recv_timeout(Duration::from_secs(10)).expect("the revocation is being written");
                let revoked = d.reload();
                go.send(()).expect("let the revocation go");
                revoked
            }
        });
        let revoked = d.revoke(&device.id).await.expect("revoked");
        assert_eq!(revoked.id, device.id);
        let read = reader.join().expect("the read").expect("read");
        assert_eq!(read.iter().map(|r| r.id.to_string()).collect::<Vec<_>>(), [device.id.to_string()]);
        assert!(device.revoked().is_cancelled() && d.authenticate(&credential).is_none());
        assert_eq!(d.revoke(&device.id).await.err(), Some(RevokeError::NotFound), "gone now");
    }

    #[test]
    fn a_name_stored_before_the_checks_is_loaded_neutralised() {
        let disk = Arc::new(Disk::default());
        let secret = "ab".repeat(SECRET_BYTES);
        lock(&disk.stored).push(StoredDevice {
            device_id: "dev-0123456789abcdef".into(),
            name: "admin\u{202E}enohp".into(),
            role: "voter".into(),
            secret_hash: hash(&secret),
            created_at: 1,
            last_seen_at: None,
            person: None,
            expires_at: None,
        });
        let d = Devices::new(disk, None, Duration::from_secs(120), LIMITS);
        let device = d.authenticate(&format!("dev-0123456789abcdef.{secret}")).expect("loaded");
        assert_eq!(&*device.name, "admin\u{FFFD}enohp");
    }
}
