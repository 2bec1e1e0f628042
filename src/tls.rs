//! TLS, both ways, with rustls (and *ring* as its cryptography):
//!
//! - the listener's certificate ([`ServerCert`], `--tls-cert`/`--tls-key`): loaded and checked at
//!   boot (a bad or mismatched pair, or a key others may read, refuses the boot), then handed to
//!   every new handshake through a resolver whose pair [`ServerCert::reload`] swaps on SIGHUP, so
//!   connections already open keep the session they negotiated and new ones get the new
//!   certificate;
//! - the trust of the notification client ([`client_trust`]): the system's roots as OpenSSL finds
//!   them, `SSL_CERT_FILE` and `SSL_CERT_DIR` included, for receivers behind a private CA;
//! - the command line's trust in the local daemon ([`pinned_client`]): exactly the certificate it
//!   advertised by fingerprint.
//!
//! A leaf: it knows rustls and the file system, nothing of the crate.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};

/// The listener's certificate files, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM: the leaf first, then any intermediates.
    pub cert: PathBuf,
    /// PEM: PKCS#8, PKCS#1 (RSA) or SEC1 (EC).
    pub key: PathBuf,
}

/// Why a certificate pair cannot be used. The message names the file, never its contents.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the TLS certificate {path}: {reason}")]
    Cert { path: PathBuf, reason: String },
    #[error("cannot read the TLS key {path}: {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("the TLS key {key} does not belong to the certificate {cert}")]
    Mismatch { cert: PathBuf, key: PathBuf },
    #[error(
        "the TLS key {path} has mode {mode:04o}: {} may {}; run `chmod 600 {path}` (or 640, for a \
         group only the daemon's user is in)",
        if mode & 0o007 != 0 { "others" } else { "its group" },
        if mode & 0o022 != 0 { "change it" } else { "read it" }
    )]
    KeyExposed { path: PathBuf, mode: u32 },
    #[error("cannot build the TLS settings: {0}")]
    Settings(String),
}

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reloaded {
    /// A different certificate now answers new handshakes.
    Changed { fingerprint: String },
    /// The files hold the certificate already in use.
    Unchanged,
}

/// A pair read from disk and checked, with its fingerprint.
struct Loaded {
    key: Arc<CertifiedKey>,
    fingerprint: String,
}

/// The listener's certificate: the pair every new handshake gets, replaceable while serving.
pub struct ServerCert {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    /// Read by every handshake, written by a reload; no critical section awaits.
    current: RwLock<Arc<Loaded>>,
}

impl fmt::Debug for ServerCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerCert")
            .field("files", &self.files)
            .field("fingerprint", &self.fingerprint())
            .finish()
    }
}

/// The one cryptography rustls uses here (the crate is built with *ring* only).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl ServerCert {
    /// Reads and checks the pair: at least one certificate, a key rustls can sign with, and the
    /// key's public half the certificate's.
    pub fn load(files: &TlsFiles) -> Result<Arc<ServerCert>, TlsError> {
        let provider = provider();
        let loaded = read_pair(files, &provider)?;
        Ok(Arc::new(ServerCert { files: files.clone(), provider, current: RwLock::new(Arc::new(loaded)) }))
    }

    /// Reads the files again. A pair that fails any check of [`ServerCert::load`] leaves the one
    /// in use in place (a half-written renewal must not take the listener down).
    pub fn reload(&self) -> Result<Reloaded, TlsError> {
        let loaded = read_pair(&self.files, &self.provider)?;
        let mut current = self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.fingerprint == loaded.fingerprint {
            return Ok(Reloaded::Unchanged);
        }
        let fingerprint = loaded.fingerprint.clone();
        *current = Arc::new(loaded);
        Ok(Reloaded::Changed { fingerprint })
    }

    /// SHA-256 of the leaf certificate (DER), colon-separated upper-case hex, as browsers and
    /// `openssl x509 -fingerprint -sha256` show it.
    pub fn fingerprint(&self) -> String {
        self.loaded().fingerprint.clone()
    }

    fn loaded(&self) -> Arc<Loaded> {
        self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The rustls settings of the listener: HTTP/1.1 only (the server speaks nothing else),
    /// TLS 1.2 and 1.3, the certificate from this resolver.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Settings(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        // HTTP/2 first (a browser then holds its event streams on one connection), HTTP/1.1 for
        // everyone else, and for WebSocket upgrades.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for ServerCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.loaded().key.clone())
    }
}

/// The largest key file read: an RSA key of 16384 bits is about 12 KiB of PEM.
const MAX_KEY_BYTES: u64 = 1024 * 1024;

/// What a key file's mode lets others do with the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyAccess {
    /// Only its owner (and root).
    Owner,
    /// Its group may read it: a deliberate grant (Debian's `ssl-cert` group, mode 0640), said at
    /// every load.
    GroupReads,
    /// Others may read or change it, or its group change it: refused.
    Exposed,
}

/// What `mode` (a key file's permission bits) lets others do. Anyone who may read the key can
/// pose as this daemon to every client that trusts its certificate (the command line pins it);
/// anyone who may write it can swap in a pair of their own at the next reload.
fn key_access(mode: u32) -> KeyAccess {
    if mode & 0o027 != 0 {
        KeyAccess::Exposed
    } else if mode & 0o040 != 0 {
        KeyAccess::GroupReads
    } else {
        KeyAccess::Owner
    }
}

/// The key file's bytes, once its mode is checked on the file opened (symlinks followed: certbot's
/// `live/` links to its `archive/`).
fn read_key(path: &Path) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let key_error = |e: std::io::Error| TlsError::Key { path: path.to_path_buf(), reason: e.to_string() };
    let mut file = std::fs::File::open(path).map_err(key_error)?;
    let mode = file.metadata().map_err(key_error)?.mode() & 0o7777;
    match key_access(mode) {
        KeyAccess::Exposed => return Err(TlsError::KeyExposed { path: path.to_path_buf(), mode }),
        KeyAccess::GroupReads => tracing::warn!(
            key = %path.display(),
            mode = format_args!("{mode:04o}"),
            "the TLS key is readable by its group: every member can pose as this daemon; make sure only the daemon's user is in it"
        ),
        KeyAccess::Owner => {}
    }
    let mut bytes = Vec::new();
    Read::take(&mut file, MAX_KEY_BYTES + 1).read_to_end(&mut bytes).map_err(key_error)?;
    if bytes.len() as u64 > MAX_KEY_BYTES {
        return Err(TlsError::Key {
            path: path.to_path_buf(),
            reason: "larger than 1 MiB: no key is".into(),
        });
    }
    Ok(bytes)
}

fn read_pair(files: &TlsFiles, provider: &CryptoProvider) -> Result<Loaded, TlsError> {
    let cert_error = |reason: String| TlsError::Cert { path: files.cert.clone(), reason };
    let key_error = |reason: String| TlsError::Key { path: files.key.clone(), reason };
    let certs = read_certs(&files.cert).map_err(cert_error)?;
    let key = PrivateKeyDer::from_pem_slice(&read_key(&files.key)?)
        .map_err(|e| key_error(pem_reason(&e, "PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY")))?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| key_error(format!("not a key this server can sign with ({e})")))?;
    let fingerprint = fingerprint_of(&certs[0]);
    let key = CertifiedKey::new(certs, signing);
    if key.keys_match().is_err() {
        return Err(TlsError::Mismatch { cert: files.cert.clone(), key: files.key.clone() });
    }
    Ok(Loaded { key: Arc::new(key), fingerprint })
}

/// Every `CERTIFICATE` block of a PEM file, the leaf first; none is an error.
fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_reason(&e, "CERTIFICATE"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_reason(&e, "CERTIFICATE"))?;
    if certs.is_empty() {
        return Err("no PEM CERTIFICATE block in it".to_owned());
    }
    Ok(certs)
}

fn pem_reason(e: &rustls::pki_types::pem::Error, wanted: &str) -> String {
    use rustls::pki_types::pem::Error;
    match e {
        Error::Io(io) => io.to_string(),
        Error::NoItemsFound => format!("no PEM {wanted} block in it"),
        other => format!("not PEM ({other:?})"),
    }
}

/// What the notification client trusts: the roots it found, and what it could not read.
#[derive(Debug)]
pub struct ClientTrust {
    pub config: Arc<rustls::ClientConfig>,
    /// Root certificates in the store; 0 means every https target will be refused.
    pub roots: usize,
    /// Files or certificates that could not be used (each logged once at boot by the caller).
    pub problems: Vec<String>,
}

/// The notification client's trust, as OpenSSL finds it: `SSL_CERT_FILE` and `SSL_CERT_DIR` when
/// either is set (then only they), else the system's store (`/etc/ssl/certs` and its kin).
pub fn client_trust() -> Result<ClientTrust, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut problems: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
    let mut roots = rustls::RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(found.certs);
    if ignored > 0 {
        problems.push(format!("{ignored} root certificates could not be parsed and are not trusted"));
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Settings(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(ClientTrust { config: Arc::new(config), roots: added, problems })
}

/// Trusts exactly the certificate whose SHA-256 is `fingerprint` (and checks the handshake's
/// signatures as usual): what the command line uses for the daemon that advertised it in its own
/// state directory (`crate::discovery`), whatever name or CA the certificate has.
#[derive(Debug)]
struct Pinned {
    fingerprint: String,
    provider: Arc<CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if fingerprint_of(end_entity).eq_ignore_ascii_case(&self.fingerprint) {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::ApplicationVerificationFailure))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// A client that trusts only the certificate with this SHA-256 fingerprint ([`Pinned`]).
pub fn pinned_client(fingerprint: &str) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let provider = provider();
    let verifier = Pinned { fingerprint: fingerprint.to_owned(), provider: provider.clone() };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Settings(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Why a TLS client refused a server's certificate, in words a person acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateProblem {
    /// What is wrong with the certificate ("it is a CA certificate (CA:TRUE) …").
    pub why: String,
    /// Whether trusting another CA (`SSL_CERT_FILE`, `SSL_CERT_DIR`) can make it trusted: not for a
    /// CA certificate used as the server's own, an expired one, one for another name…
    pub a_ca_helps: bool,
}

impl fmt::Display for CertificateProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.why)
    }
}

/// Why a TLS connection failed, if the reason is the server's certificate (unknown issuer, wrong
/// name, expired…): retrying cannot change it, and the person must act.
pub fn certificate_problem(e: &std::io::Error) -> Option<CertificateProblem> {
    match e.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::InvalidCertificate(why) => Some(certificate_words(why)),
        _ => None,
    }
}

/// A refused certificate said in words (rustls' own `Debug` is a type's name, and its `Other`
/// wraps webpki's: `Other(OtherError(CaUsedAsEndEntity))`).
fn certificate_words(error: &rustls::CertificateError) -> CertificateProblem {
    use rustls::CertificateError as E;
    let (why, a_ca_helps) = match error {
        E::UnknownIssuer => (
            "it was issued by a CA this machine does not trust (a self-signed certificate, or a private CA's)"
                .to_owned(),
            true,
        ),
        E::NotValidForName | E::NotValidForNameContext { .. } => {
            (format!("it is not valid for the host name the URL names ({error})"), false)
        }
        E::Expired | E::ExpiredContext { .. } => ("it has expired".to_owned(), false),
        E::NotValidYet | E::NotValidYetContext { .. } => {
            ("it is not valid yet (is a clock wrong?)".to_owned(), false)
        }
        E::Revoked => ("it was revoked".to_owned(), false),
        E::BadSignature => ("its signature does not verify against its issuer's key".to_owned(), true),
        E::BadEncoding => ("it cannot be parsed".to_owned(), false),
        E::InvalidPurpose | E::InvalidPurposeContext { .. } => {
            ("its extended key usage does not allow a TLS server".to_owned(), false)
        }
        E::ApplicationVerificationFailure => {
            ("it is not the certificate that was pinned (its fingerprint differs)".to_owned(), false)
        }
        E::Other(other) => match other.0.downcast_ref::<webpki::Error>() {
            Some(webpki::Error::CaUsedAsEndEntity) => (
                "it is a CA certificate (CA:TRUE, what a bare `openssl req -x509` makes) used as the \
                 server's own, which no trust store can make acceptable"
                    .to_owned(),
                false,
            ),
            Some(webpki::Error::EndEntityUsedAsCa) => (
                "its chain uses a certificate that is not a CA (CA:FALSE) as the issuer".to_owned(),
                false,
            ),
            _ => (format!("the TLS library refused it ({other})"), false),
        },
        other => (format!("the TLS library refused it ({other})"), false),
    };
    CertificateProblem { why, a_ca_helps }
}

/// SHA-256 of `der` as `AB:CD:…`.
pub fn fingerprint_of(der: &[u8]) -> String {
    let digest = Sha256::digest(der);
    let hex: Vec<String> = digest.iter().map(|b| format!("{b:02X}")).collect();
    hex.join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed pair for `localhost`, written to `dir` as `name.crt` / `name.key` (0600).
    fn pair(dir: &Path, name: &str) -> TlsFiles {
        use std::os::unix::fs::PermissionsExt;
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("rcgen");
        let files = TlsFiles { cert: dir.join(format!("{name}.crt")), key: dir.join(format!("{name}.key")) };
        std::fs::write(&files.cert, made.cert.pem()).expect("write cert");
        std::fs::write(&files.key, made.key_pair.serialize_pem()).expect("write key");
        std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        files
    }

    /// Issue 41, finding 9: a key others may read (or anyone but its owner change) is refused at
    /// load and at reload (the pair in use stays); one its group may read is taken, and said.
    #[test]
    fn a_key_others_may_read_or_change_is_refused_and_a_reload_keeps_the_pair_in_use() {
        use std::os::unix::fs::PermissionsExt;
        for (mode, access) in [
            (0o600, KeyAccess::Owner),
            (0o400, KeyAccess::Owner),
            (0o640, KeyAccess::GroupReads),
            (0o440, KeyAccess::GroupReads),
            (0o644, KeyAccess::Exposed),
            (0o604, KeyAccess::Exposed),
            (0o602, KeyAccess::Exposed),
            (0o601, KeyAccess::Exposed),
            (0o660, KeyAccess::Exposed),
            (0o620, KeyAccess::Exposed),
            (0o610, KeyAccess::Owner),
            (0o666, KeyAccess::Exposed),
        ] {
            assert_eq!(key_access(mode), access, "{mode:o}");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let files = pair(dir.path(), "live");
        let chmod = |mode: u32| {
            std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(mode)).expect("chmod")
        };
        chmod(0o644);
        let e = ServerCert::load(&files).expect_err("world-readable").to_string();
        assert!(e.contains("mode 0644: others may read it") && e.contains("chmod 600"), "{e}");
        chmod(0o660);
        let e = ServerCert::load(&files).expect_err("group-writable").to_string();
        assert!(e.contains("mode 0660: its group may change it"), "{e}");
        chmod(0o606);
        let e = ServerCert::load(&files).expect_err("world-writable").to_string();
        assert!(e.contains("mode 0606: others may change it"), "{e}");
        chmod(0o640);
        let cert = ServerCert::load(&files).expect("a group's deliberate read");
        let first = cert.fingerprint();
        // A renewal written world-readable: refused, the pair in use stays.
        let renewed = pair(dir.path(), "renewed");
        std::fs::rename(&renewed.cert, &files.cert).expect("mv cert");
        std::fs::rename(&renewed.key, &files.key).expect("mv key");
        chmod(0o644);
        let e = cert.reload().expect_err("exposed").to_string();
        assert!(e.contains("others may read it"), "{e}");
        assert_eq!(cert.fingerprint(), first);
        chmod(0o600);
        assert!(matches!(cert.reload(), Ok(Reloaded::Changed { .. })));
    }

    #[test]
    fn a_good_pair_loads_with_the_leafs_fingerprint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = pair(dir.path(), "a");
        let cert = ServerCert::load(&files).expect("load");
        let der = CertificateDer::from_pem_file(&files.cert).expect("der");
        assert_eq!(cert.fingerprint(), fingerprint_of(&der));
        assert_eq!(cert.fingerprint().len(), 32 * 3 - 1);
        assert!(cert.server_config().is_ok());
    }

    #[test]
    fn a_key_of_another_certificate_is_a_mismatch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = pair(dir.path(), "a");
        let b = pair(dir.path(), "b");
        let crossed = TlsFiles { cert: a.cert.clone(), key: b.key.clone() };
        let e = ServerCert::load(&crossed).expect_err("mismatch");
        assert!(matches!(e, TlsError::Mismatch { .. }), "{e}");
        assert!(e.to_string().contains("does not belong to the certificate"), "{e}");
    }

    #[test]
    fn unreadable_or_empty_files_name_the_file_and_the_reason() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good = pair(dir.path(), "a");
        let missing = TlsFiles { cert: dir.path().join("nope.crt"), key: good.key.clone() };
        let e = ServerCert::load(&missing).expect_err("missing").to_string();
        assert!(e.contains("nope.crt") && e.contains("No such file"), "{e}");

        use std::os::unix::fs::PermissionsExt;
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "hello\n").expect("write");
        std::fs::set_permissions(&garbage, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let e = ServerCert::load(&TlsFiles { cert: garbage.clone(), key: good.key.clone() })
            .expect_err("no cert")
            .to_string();
        assert!(e.contains("no PEM CERTIFICATE block"), "{e}");
        let e = ServerCert::load(&TlsFiles { cert: good.cert.clone(), key: garbage })
            .expect_err("no key")
            .to_string();
        assert!(e.contains("cannot read the TLS key") && e.contains("no PEM PRIVATE KEY"), "{e}");
        // The certificate where the key should be: no key block.
        std::fs::set_permissions(&good.cert, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let e = ServerCert::load(&TlsFiles { cert: good.cert.clone(), key: good.cert.clone() })
            .expect_err("cert as key")
            .to_string();
        assert!(e.contains("cannot read the TLS key"), "{e}");
    }

    #[test]
    fn a_reload_swaps_a_new_pair_keeps_the_same_and_survives_a_bad_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = pair(dir.path(), "live");
        let cert = ServerCert::load(&files).expect("load");
        let first = cert.fingerprint();
        assert_eq!(cert.reload().expect("same files"), Reloaded::Unchanged);

        // A half-written renewal: the old pair stays.
        std::fs::write(&files.key, "-----BEGIN PRIVATE KEY-----\ntruncated").expect("write");
        assert!(cert.reload().is_err());
        assert_eq!(cert.fingerprint(), first);

        let renewed = pair(dir.path(), "renewed");
        std::fs::rename(&renewed.cert, &files.cert).expect("mv cert");
        std::fs::rename(&renewed.key, &files.key).expect("mv key");
        let Reloaded::Changed { fingerprint } = cert.reload().expect("renewed") else {
            panic!("a new certificate is a change");
        };
        assert_ne!(fingerprint, first);
        assert_eq!(cert.fingerprint(), fingerprint);
        let der = CertificateDer::from_pem_file(&files.cert).expect("der");
        assert_eq!(fingerprint, fingerprint_of(&der));
    }

    #[test]
    fn only_a_certificate_the_client_refused_is_a_certificate_problem() {
        let refused = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        let problem = certificate_problem(&refused).expect("a certificate problem");
        assert!(problem.why.contains("a CA this machine does not trust"), "{problem}");
        assert!(problem.a_ca_helps);
        let expired =
            std::io::Error::other(rustls::Error::InvalidCertificate(rustls::CertificateError::Expired));
        assert_eq!(
            certificate_problem(&expired),
            Some(CertificateProblem { why: "it has expired".to_owned(), a_ca_helps: false })
        );
        // A handshake that failed for another reason, or a network error, is worth a retry.
        let other = std::io::Error::other(rustls::Error::HandshakeNotComplete);
        assert_eq!(certificate_problem(&other), None);
        assert_eq!(certificate_problem(&std::io::Error::from(std::io::ErrorKind::ConnectionReset)), None);
    }

    #[test]
    fn a_ca_certificate_used_as_the_servers_own_is_said_in_words_that_no_ca_helps() {
        let webpki_said =
            rustls::CertificateError::Other(rustls::OtherError(Arc::new(webpki::Error::CaUsedAsEndEntity)));
        let problem = certificate_words(&webpki_said);
        assert!(problem.why.contains("a CA certificate (CA:TRUE"), "{problem}");
        assert!(problem.why.contains("openssl req -x509"), "{problem}");
        assert!(!problem.why.contains("OtherError"), "{problem}");
        assert!(!problem.a_ca_helps);
        let pinned = certificate_words(&rustls::CertificateError::ApplicationVerificationFailure);
        assert!(pinned.why.contains("not the certificate that was pinned"), "{pinned}");
        let issuer = certificate_words(&rustls::CertificateError::Other(rustls::OtherError(Arc::new(
            webpki::Error::EndEntityUsedAsCa,
        ))));
        assert!(issuer.why.starts_with("its chain uses a certificate that is not a CA"), "{issuer}");
        let other = certificate_words(&rustls::CertificateError::Other(rustls::OtherError(Arc::new(
            webpki::Error::PathLenConstraintViolated,
        ))));
        assert!(other.why.starts_with("the TLS library refused it ("), "{other}");
    }
}
