//! A certificate authority made for one run (rcgen) and a leaf it signs for `127.0.0.1`, written
//! where the daemon reads them (`--tls-cert`/`--tls-key`); the bench's clients trust that CA and
//! nothing else. For the scale scenario's row over TLS.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};

use crate::Res;

/// A CA's certificate (PEM, for the clients) and the leaf's two files (for the daemon).
pub struct Pki {
    pub ca_pem: String,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pki {
    /// Makes a CA and a leaf for `127.0.0.1` and `localhost` signed by it, written to `dir` (the
    /// key 0600).
    pub fn new(dir: &Path) -> Res<Pki> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "mediatord-bench CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate()?;
        let ca = params.self_signed(&ca_key)?;
        let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
        let key = KeyPair::generate()?;
        let signed = leaf.signed_by(&key, &ca, &ca_key)?;
        let (cert_file, key_file) = (dir.join("daemon.crt"), dir.join("daemon.key"));
        std::fs::write(&cert_file, signed.pem())?;
        std::fs::write(&key_file, key.serialize_pem())?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600))?;
        Ok(Pki { ca_pem: ca.pem(), cert: cert_file, key: key_file })
    }
}
