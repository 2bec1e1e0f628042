//! A certificate authority a test makes (rcgen), and leaves it signs: for the https listener and
//! https notification receivers, trusted by the test's clients and nothing else.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};

/// A certificate authority made for one test.
pub(crate) struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl TestCa {
    pub(crate) fn new() -> TestCa {
        TestCa::named("mediatord test CA")
    }

    /// A CA whose subject is `name`: two CAs of one test need two names, or a verifier looking
    /// for the issuer by name finds the wrong one (and says `BadSignature`, not `UnknownIssuer`).
    pub(crate) fn named(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA cert");
        TestCa { cert, key }
    }

    pub(crate) fn pem(&self) -> String {
        self.cert.pem()
    }

    pub(crate) fn der(&self) -> rustls::pki_types::CertificateDer<'static> {
        self.cert.der().clone()
    }

    /// `pem()` written to `dir/ca.pem`, for `SSL_CERT_FILE`.
    pub(crate) fn pem_file(&self, dir: &Path) -> PathBuf {
        let path = dir.join("ca.pem");
        std::fs::write(&path, self.pem()).expect("write CA");
        path
    }

    /// A leaf for `localhost` and 127.0.0.1 signed by this CA, written to `dir` as
    /// `name.crt`/`name.key` (the key 0600, as mkcert, certbot and `tailscale cert` write one);
    /// returns the two paths.
    pub(crate) fn leaf(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("leaf params");
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.cert, &self.key).expect("leaf cert");
        let (crt, pem_key) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
        std::fs::write(&crt, cert.pem()).expect("write cert");
        std::fs::write(&pem_key, key.serialize_pem()).expect("write key");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pem_key, std::fs::Permissions::from_mode(0o600)).expect("chmod key");
        (crt, pem_key)
    }
}
