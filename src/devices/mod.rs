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
//!
//! On the `permission` floor, persisting through `store` like workspace rules; only `http` turns
//! a header or a cookie into a [`Device`].

mod pairing;
pub mod qr;
mod role;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use self::pairing::{CODE_BYTES, Codes, Grant};
pub use self::pairing::{CodeError, FAILURE_WINDOW as PAIRING_FAILURE_WINDOW};
pub use self::role::Role;
use crate::clock::now_ms;
use crate::store::{Store, StoredDevice};
use crate::sync::lock;

/// Devices paired at once. qwen serve caps its paired devices too; 256 is far beyond a team's
/// phones and browsers and keeps `GET /devices` one small page.
pub const MAX_DEVICES: usize = 256;
/// Longest device name, in characters.
pub const MAX_NAME_CHARS: usize = 64;
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
    /// Fired when the device is revoked: its event streams end on it.
    revoked: CancellationToken,
}

impl Device {
    /// Fires when this device is revoked.
    pub fn revoked(&self) -> CancellationToken {
        self.revoked.clone()
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
    #[error("A device name is 1 to {MAX_NAME_CHARS} characters, without control characters")]
    InvalidName,
    #[error("the operating system's random number generator failed")]
    NoRandomness,
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

#[derive(Default)]
struct Table {
    devices: HashMap<Arc<str>, Entry>,
    codes: Codes,
}

/// The paired devices and the pairing codes. One table behind a `std::sync::Mutex`: every
/// critical section is a lookup or an insert, with nothing awaited under it.
pub struct Devices {
    store: Arc<dyn Store>,
    code_ttl: Duration,
    table: Mutex<Table>,
}

impl std::fmt::Debug for Devices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Devices").field("paired", &lock(&self.table).devices.len()).finish_non_exhaustive()
    }
}

/// `n` random bytes in hex; `None` when the OS's generator fails (nothing weaker is substituted).
fn random_hex(n: usize) -> Option<String> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// A name as given, trimmed; `Err` when empty, too long or holding control characters.
pub fn valid_name(name: &str) -> Result<String, PairError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS || name.chars().any(char::is_control) {
        return Err(PairError::InvalidName);
    }
    Ok(name.to_owned())
}

/// Whether `credential` has a device credential's shape (so an `Authorization` header carrying
/// one is judged as a device, never as the operator's token).
pub fn is_device_credential(credential: &str) -> bool {
    credential.starts_with(ID_PREFIX) && credential.contains('.')
}

impl Devices {
    /// The table, loaded from `store` (an unreadable store starts with none, and says so); codes
    /// live `code_ttl` (`--pairing-code-ttl-ms`).
    pub fn new(store: Arc<dyn Store>, code_ttl: Duration) -> Devices {
        let mut table = Table::default();
        match store.devices() {
            Ok(devices) => {
                for d in devices {
                    let Some(role) = Role::parse(&d.role) else { continue };
                    let id: Arc<str> = Arc::from(d.device_id.as_str());
                    let device = Device {
                        id: id.clone(),
                        name: Arc::from(d.name.as_str()),
                        role,
                        created_at: d.created_at,
                        last_seen_at: d.last_seen_at,
                        revoked: CancellationToken::new(),
                    };
                    let seen_written = d.last_seen_at.unwrap_or(0);
                    table.devices.insert(id, Entry { device, secret_hash: d.secret_hash, seen_written });
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot read the paired devices; none is signed in"),
        }
        Devices { store, code_ttl, table: Mutex::new(table) }
    }

    /// A one-time code for a device to be called `name` (or what it calls itself) with `role`.
    pub fn issue_code(&self, name: Option<&str>, role: Role) -> Result<Issued, PairError> {
        let name = name.map(valid_name).transpose()?;
        let code = random_hex(CODE_BYTES).ok_or(PairError::NoRandomness)?;
        let now = Instant::now();
        if !lock(&self.table).codes.issue(&code, Grant { name, role }, now, self.code_ttl) {
            return Err(PairError::TooManyCodes);
        }
        Ok(Issued { code, expires_at: now_ms() + self.code_ttl.as_millis() as u64 })
    }

    /// Exchanges `code` from `peer` for a new device and its credential (returned once, never
    /// kept). The operator's name for it wins over the one it gives itself. The store write is
    /// queued; the caller flushes it before answering, so an answered pairing survives a restart.
    pub fn pair(&self, code: &str, name: Option<&str>, peer: IpAddr) -> Result<(Device, String), PairError> {
        let own_name = name.map(valid_name).transpose()?;
        let mut table = lock(&self.table);
        let grant = table.codes.take(code, peer, Instant::now()).map_err(|e| match e {
            CodeError::Invalid => PairError::InvalidCode,
            CodeError::Throttled => PairError::Throttled,
        })?;
        if table.devices.len() >= MAX_DEVICES {
            return Err(PairError::TooManyDevices);
        }
        let (Some(id), Some(secret)) = (random_hex(ID_BYTES), random_hex(SECRET_BYTES)) else {
            return Err(PairError::NoRandomness);
        };
        let id: Arc<str> = Arc::from(format!("{ID_PREFIX}{id}"));
        let name =
            grant.name.or(own_name).unwrap_or_else(|| format!("device {}", &id[ID_PREFIX.len()..][..4]));
        let now = now_ms();
        let device = Device {
            id: id.clone(),
            name: Arc::from(name.as_str()),
            role: grant.role,
            created_at: now,
            last_seen_at: Some(now),
            revoked: CancellationToken::new(),
        };
        let secret_hash = hash(&secret);
        self.store.put_device(&StoredDevice {
            device_id: id.to_string(),
            name,
            role: grant.role.as_str().to_owned(),
            secret_hash,
            created_at: now,
            last_seen_at: Some(now),
        });
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

    /// Revokes `id`: refused from its next request on, its streams ended now. `None` when no
    /// such device is paired.
    pub fn revoke(&self, id: &str) -> Option<Device> {
        let entry = lock(&self.table).devices.remove(id)?;
        entry.device.revoked.cancel();
        self.store.revoke_device(id, now_ms());
        Some(entry.device)
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::store::MemoryStore;

    fn devices() -> Devices {
        Devices::new(Arc::new(MemoryStore::default()), Duration::from_secs(120))
    }

    const PEER: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    #[test]
    fn a_code_pairs_one_device_whose_credential_is_256_bits_and_stored_hashed() {
        let d = devices();
        let issued = d.issue_code(Some("phone"), Role::Observer).expect("code");
        assert_eq!(issued.code.len(), CODE_BYTES * 2);
        let (device, credential) = d.pair(&issued.code, Some("ignored"), PEER).expect("paired");
        assert_eq!((&*device.name, device.role), ("phone", Role::Observer));
        let (id, secret) = credential.split_once('.').expect("id.secret");
        assert_eq!((id, secret.len()), (&*device.id, SECRET_BYTES * 2));
        assert!(is_device_credential(&credential));
        assert_eq!(lock(&d.table).devices[id].secret_hash, hash(secret));
        assert_eq!(d.authenticate(&credential).map(|x| x.id), Some(device.id.clone()));
        assert!(d.authenticate(&format!("{id}.{}", "0".repeat(64))).is_none(), "wrong secret");
        assert!(d.authenticate(secret).is_none(), "no id");
        assert_eq!(d.pair(&issued.code, None, PEER).err(), Some(PairError::InvalidCode), "single use");
    }

    #[test]
    fn a_device_names_itself_only_when_the_operator_did_not() {
        let d = devices();
        let code = d.issue_code(None, Role::Voter).expect("code").code;
        assert_eq!(&*d.pair(&code, Some("  laptop "), PEER).expect("paired").0.name, "laptop");
        let code = d.issue_code(None, Role::Voter).expect("code").code;
        assert!(d.pair(&code, None, PEER).expect("paired").0.name.starts_with("device "));
        assert_eq!(d.issue_code(Some(""), Role::Voter).err(), Some(PairError::InvalidName));
        assert_eq!(d.issue_code(Some("a\nb"), Role::Voter).err(), Some(PairError::InvalidName));
        assert_eq!(d.issue_code(Some(&"x".repeat(65)), Role::Voter).err(), Some(PairError::InvalidName));
    }

    #[test]
    fn revoking_refuses_the_credential_and_fires_the_streams_token() {
        let d = devices();
        let code = d.issue_code(None, Role::Voter).expect("code").code;
        let (device, credential) = d.pair(&code, None, PEER).expect("paired");
        let ended = device.revoked();
        assert!(!ended.is_cancelled());
        assert!(d.revoke(&device.id).is_some());
        assert!(ended.is_cancelled());
        assert!(d.authenticate(&credential).is_none());
        assert!(d.revoke(&device.id).is_none(), "already gone");
        assert!(d.list().is_empty());
    }
}
