//! The web config file of Prometheus's exporter-toolkit (the file
//! node_exporter's `--web.config.file` reads): who may scrape `/metrics`
//! (`basic_auth_users`, bcrypt hashes) and over what (`tls_server_config`).
//!
//! Of `tls_server_config`: `cert_file`, `key_file`, `client_ca_file`,
//! `client_auth_type` (`NoClientCert`, `VerifyClientCertIfGiven`,
//! `RequireAndVerifyClientCert`) and `min_version`/`max_version` (`TLS12`,
//! `TLS13`). The rest (cipher and curve lists, SAN allow-lists, the
//! client-auth types that verify nothing, `http_server_config`) is refused by
//! name rather than ignored. Relative file names are read from the config
//! file's directory, as exporter-toolkit reads them.

use super::basic_auth::Users;
use super::metrics_server::Access;
use rustls::server::WebPkiClientVerifier;
use rustls::version::{TLS12, TLS13};
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WebConfig {
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
    tls_server_config: Option<TlsServerConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsServerConfig {
    cert_file: PathBuf,
    key_file: PathBuf,
    #[serde(default)]
    client_auth_type: ClientAuthType,
    client_ca_file: Option<PathBuf>,
    min_version: Option<TlsVersion>,
    max_version: Option<TlsVersion>,
}

#[derive(Deserialize, Default, PartialEq)]
enum ClientAuthType {
    #[default]
    NoClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

#[derive(Deserialize, Clone, Copy, PartialEq, PartialOrd)]
enum TlsVersion {
    TLS12,
    TLS13,
}

/// Reads a web config: its users and TLS, each optional; an error names the
/// file and what in it is wrong.
pub fn load(path: &Path) -> Result<Access, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| at(&e))?;
    let config: WebConfig = serde_yaml::from_str(&text).map_err(|e| at(&e))?;
    let users = match config.basic_auth_users.is_empty() {
        true => None,
        false => Some(Users::new(config.basic_auth_users).map_err(|e| at(&e))?),
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let tls = config
        .tls_server_config
        .map(|tls| server_config(&tls, dir).map_err(|e| at(&format!("tls_server_config: {e}"))))
        .transpose()?;
    Ok(Access { users, tls })
}

fn server_config(tls: &TlsServerConfig, dir: &Path) -> Result<Arc<ServerConfig>, String> {
    let file = |name: &Path| dir.join(name);
    let cert_file = file(&tls.cert_file);
    let certs = CertificateDer::pem_file_iter(&cert_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cert_file {}: {e}", cert_file.display()))?;
    if certs.is_empty() {
        return Err(format!("cert_file {}: no certificate", cert_file.display()));
    }
    let key_file = file(&tls.key_file);
    let key = PrivateKeyDer::from_pem_file(&key_file)
        .map_err(|e| format!("key_file {}: {e}", key_file.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions(tls.min_version, tls.max_version)?)
        .map_err(|e| e.to_string())?;
    let builder = match (&tls.client_auth_type, &tls.client_ca_file) {
        (ClientAuthType::NoClientCert, None) => builder.with_no_client_auth(),
        (ClientAuthType::NoClientCert, Some(_)) => {
            return Err("client_ca_file without a client_auth_type that verifies \
                        (RequireAndVerifyClientCert)"
                .into())
        }
        (_, None) => return Err("client_auth_type verifies against client_ca_file: none".into()),
        (auth, Some(ca_file)) => {
            let ca_file = file(ca_file);
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(&ca_file)
                .map_err(|e| format!("client_ca_file {}: {e}", ca_file.display()))?
            {
                let cert =
                    cert.map_err(|e| format!("client_ca_file {}: {e}", ca_file.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("client_ca_file {}: {e}", ca_file.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match auth {
                ClientAuthType::VerifyClientCertIfGiven => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| e.to_string())?)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("cert_file and key_file: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The versions from `min` to `max` (TLS 1.2 to 1.3 by default).
fn versions(
    min: Option<TlsVersion>,
    max: Option<TlsVersion>,
) -> Result<Vec<&'static SupportedProtocolVersion>, String> {
    let (min, max) = (
        min.unwrap_or(TlsVersion::TLS12),
        max.unwrap_or(TlsVersion::TLS13),
    );
    if min > max {
        return Err("min_version is above max_version".into());
    }
    Ok([(TlsVersion::TLS12, &TLS12), (TlsVersion::TLS13, &TLS13)]
        .into_iter()
        .filter(|(v, _)| (min..=max).contains(v))
        .map(|(_, version)| version)
        .collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A private directory with a CA, a server certificate for 127.0.0.1
    /// and a client certificate, both signed by the CA (PEM files `ca.crt`,
    /// `server.crt`, `server.key`, `client.crt`, `client.key`).
    pub(crate) struct Pki {
        pub dir: PathBuf,
    }

    impl Pki {
        pub(crate) fn new(name: &str) -> Pki {
            use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
            let dir = std::env::temp_dir().join(format!("tt-pki-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let ca_key = KeyPair::generate().unwrap();
            let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
            ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let ca_cert = ca.self_signed(&ca_key).unwrap();
            std::fs::write(dir.join("ca.crt"), ca_cert.pem()).unwrap();
            let issuer = rcgen::Issuer::new(ca, ca_key);
            for (name, san) in [("server", "127.0.0.1"), ("client", "prometheus")] {
                let key = KeyPair::generate().unwrap();
                let cert = CertificateParams::new(vec![san.to_string()])
                    .unwrap()
                    .signed_by(&key, &issuer)
                    .unwrap();
                std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).unwrap();
                std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
            }
            Pki { dir }
        }

        pub(crate) fn config(&self, yaml: &str) -> Result<Access, String> {
            let file = self.dir.join("web.yml");
            std::fs::write(&file, yaml).unwrap();
            load(&file)
        }
    }

    impl Drop for Pki {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn error(result: Result<Access, String>) -> String {
        result.err().expect("refused")
    }

    #[test]
    fn users_tls_and_what_is_refused() {
        let pki = Pki::new("config");
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let users = pki
            .config(&format!("basic_auth_users:\n  prometheus: {hash}\n"))
            .unwrap();
        assert!(users.users.is_some() && users.tls.is_none());
        // Relative names are the config file's directory's.
        let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
        let access = pki.config(tls).unwrap();
        assert!(access.users.is_none() && access.tls.is_some());
        let mutual = format!(
            "{tls}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  min_version: TLS13\n"
        );
        assert!(pki.config(&mutual).is_ok());

        for (yaml, says) in [
            ("basic_auth_users:\n  u: plaintext\n", "not a bcrypt hash"),
            ("tls_server_config:\n  cert_file: server.crt\n", "key_file"),
            (
                &format!("{tls}  cipher_suites: [TLS_AES_128_GCM_SHA256]\n"),
                "cipher_suites",
            ),
            (
                &format!("{tls}  client_auth_type: RequireAnyClientCert\n"),
                "RequireAnyClientCert",
            ),
            (
                &format!("{tls}  client_ca_file: ca.crt\n"),
                "without a client_auth_type",
            ),
            (
                &format!("{tls}  client_auth_type: RequireAndVerifyClientCert\n"),
                "client_ca_file",
            ),
            (&format!("{tls}  min_version: TLS10\n"), "TLS10"),
            (
                &format!("{tls}  min_version: TLS13\n  max_version: TLS12\n"),
                "above",
            ),
            (
                "tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n",
                "no certificate",
            ),
            (
                "tls_server_config:\n  cert_file: server.crt\n  key_file: client.key\n",
                "cert_file and key_file",
            ),
            (
                "tls_server_config:\n  cert_file: absent.crt\n  key_file: server.key\n",
                "absent.crt",
            ),
            (
                "http_server_config:\n  http2: false\n",
                "http_server_config",
            ),
        ] {
            let err = error(pki.config(yaml));
            assert!(err.contains(says), "{yaml}: {err}");
            assert!(err.contains("web.yml"), "names the file: {err}");
        }
    }
}
