//! TLS on the wire port (`--tls-mode`, docs/TLS.md): the server's
//! certificate and the client-certificate policy, read from PEM files
//! and read again on SIGHUP, and how a connection's first bytes tell a
//! TLS handshake from a MongoDB message.
//!
//! The connection task ([`super::connection`]) looks at the first bytes,
//! then either speaks plain MongoDB or hands the socket to the acceptor
//! held here. New handshakes take whatever certificate is current;
//! connections already open keep the one they began with.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::{Config, TlsMode};

/// The TLS settings of a server whose `--tls-mode` is not `disabled`.
pub struct TlsSetup {
    pub mode: TlsMode,
    files: TlsFiles,
    acceptor: RwLock<TlsAcceptor>,
}

/// Where the certificate, key and CA come from, to read them again.
#[derive(Debug, Clone)]
struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    ca: Option<PathBuf>,
    allow_without_certificates: bool,
}

impl TlsSetup {
    /// The TLS settings `config` asks for: `None` with `--tls-mode
    /// disabled`, an error naming what is wrong when a file cannot be
    /// used.
    pub fn from_config(config: &Config) -> Result<Option<Arc<TlsSetup>>, String> {
        if config.tls_mode == TlsMode::Disabled {
            if config.tls_cert_file.is_some() || config.tls_ca_file.is_some() {
                return Err(
                    "--tls-cert-file and --tls-ca-file need --tls-mode allowTLS, preferTLS \
                     or requireTLS"
                        .into(),
                );
            }
            return Ok(None);
        }
        let Some(cert) = config.tls_cert_file.clone() else {
            return Err(format!(
                "--tls-mode {:?} needs --tls-cert-file (a PEM file with the certificate chain \
                 and, unless --tls-key-file is given, the private key)",
                config.tls_mode
            ));
        };
        let files = TlsFiles {
            key: config.tls_key_file.clone().unwrap_or_else(|| cert.clone()),
            cert,
            ca: config.tls_ca_file.clone(),
            allow_without_certificates: config.tls_allow_connections_without_certificates,
        };
        let acceptor = files.acceptor()?;
        Ok(Some(Arc::new(TlsSetup {
            mode: config.tls_mode,
            files,
            acceptor: RwLock::new(acceptor),
        })))
    }

    /// The acceptor for the next handshake.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.read().clone()
    }

    /// Reads the files again; on success new handshakes use what they
    /// hold, on failure the current certificate stays.
    pub fn reload(&self) -> Result<(), String> {
        let acceptor = self.files.acceptor()?;
        *self.acceptor.write() = acceptor;
        Ok(())
    }

    /// Reloads on every SIGHUP, for ever; each outcome is logged.
    pub async fn reload_on_hangup(self: Arc<Self>) {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let mut hangups = match signal(SignalKind::hangup()) {
                Ok(hangups) => hangups,
                Err(e) => {
                    tracing::warn!("TLS certificates will not reload on SIGHUP: {e}");
                    return;
                }
            };
            while hangups.recv().await.is_some() {
                match self.reload() {
                    Ok(()) => tracing::info!(
                        cert = %self.files.cert.display(),
                        "SIGHUP: TLS certificate reloaded; new connections use it"
                    ),
                    Err(e) => tracing::warn!(
                        "SIGHUP: TLS certificate not reloaded, keeping the current one: {e}"
                    ),
                }
            }
        }
    }
}

impl TlsFiles {
    fn acceptor(&self) -> Result<TlsAcceptor, String> {
        let chain = read_certificates(&self.cert)?;
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .map_err(|e| format!("no private key read from {}: {e}", self.key.display()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = match &self.ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for cert in read_certificates(ca)? {
                    roots
                        .add(cert)
                        .map_err(|e| format!("{}: {e}", ca.display()))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                let verifier = if self.allow_without_certificates {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                let verifier = verifier
                    .build()
                    .map_err(|e| format!("{}: {e}", ca.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder
            .with_single_cert(chain, key)
            .map_err(|e| format!("{}: {e}", self.cert.display()))?;
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read certificates from {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("no certificate in {}", path.display()));
    }
    Ok(certs)
}

/// What a connection's first bytes are, as far as they tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// A TLS record carrying a handshake: content type 22, version 3.x.
    Tls,
    /// Anything else: a MongoDB message.
    Plain,
    /// Too few bytes to tell.
    Unknown,
}

/// Tells a TLS ClientHello from a MongoDB message by its first three
/// bytes: `16 03 01..=03`. Read as a MongoDB message's length, those
/// bytes say at least 66,326 bytes, which no client's first message
/// (a `hello`) comes near.
pub fn opening(first: &[u8]) -> Opening {
    match first {
        [] => Opening::Unknown,
        [0x16] | [0x16, 0x03] => Opening::Unknown,
        [0x16, 0x03, 0x01..=0x03, ..] => Opening::Tls,
        _ => Opening::Plain,
    }
}

/// The subject of a DER certificate as an RFC 2253 string (the last
/// relative name first, `CN=client,OU=eng,O=Example,C=US`), as mongod
/// writes a client certificate's subject; `None` when the certificate
/// cannot be read that far.
pub fn subject_rfc2253(cert: &[u8]) -> Option<String> {
    let (cert, _) = expect_tag(cert, SEQUENCE)?;
    let (mut tbs, _) = expect_tag(cert, SEQUENCE)?;
    // version [0] EXPLICIT, optional
    if tbs.first() == Some(&0xa0) {
        tbs = der_value(tbs)?.2;
    }
    // serialNumber, signature, issuer, validity, then subject.
    for _ in 0..4 {
        tbs = der_value(tbs)?.2;
    }
    let (mut name, _) = expect_tag(tbs, SEQUENCE)?;
    let mut rdns = Vec::new();
    while !name.is_empty() {
        let (mut set, rest) = expect_tag(name, SET)?;
        name = rest;
        let mut parts = Vec::new();
        while !set.is_empty() {
            let (atv, rest) = expect_tag(set, SEQUENCE)?;
            set = rest;
            let (oid, value) = expect_tag(atv, OID)?;
            let (tag, content, after) = der_value(value)?;
            let whole = &value[..value.len() - after.len()];
            let kind = oid_name(oid);
            let text = match string_value(tag, content) {
                Some(text) if !kind.starts_with(|c: char| c.is_ascii_digit()) => {
                    escape_rfc2253(&text)
                }
                _ => format!("#{}", hex(whole)),
            };
            parts.push(format!("{kind}={text}"));
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;

/// The content of a DER value with tag `tag`, and what follows it.
fn expect_tag(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (found, content, rest) = der_value(input)?;
    (found == tag).then_some((content, rest))
}

/// Tag, content and the rest, for single-byte tags and definite lengths.
fn der_value(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, input) = input.split_first()?;
    let (&first, mut input) = input.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 {
            return None;
        }
        let (bytes, rest) = input.split_at_checked(count)?;
        input = rest;
        bytes
            .iter()
            .fold(0usize, |len, &b| (len << 8) | usize::from(b))
    };
    let (content, rest) = input.split_at_checked(len)?;
    Some((tag, content, rest))
}

/// The short names RFC 2253 (and RFC 4519) give attribute types; any
/// other is written as its dotted OID.
fn oid_name(oid: &[u8]) -> String {
    let dotted = dotted_oid(oid);
    let short = match dotted.as_str() {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.1" => "UID",
        "0.9.2342.19200300.100.1.25" => "DC",
        _ => return dotted,
    };
    short.to_string()
}

fn dotted_oid(oid: &[u8]) -> String {
    let mut arcs: Vec<u64> = Vec::new();
    let mut value: u64 = 0;
    for &b in oid {
        value = (value << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (value / 40).min(2);
                arcs.push(first);
                arcs.push(value - first * 40);
            } else {
                arcs.push(value);
            }
            value = 0;
        }
    }
    arcs.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".")
}

/// The text of a DER string value; `None` for other types.
fn string_value(tag: u8, content: &[u8]) -> Option<String> {
    match tag {
        // UTF8String, PrintableString, IA5String
        0x0c | 0x13 | 0x16 => std::str::from_utf8(content).ok().map(str::to_string),
        // TeletexString, read as Latin-1 as OpenSSL does
        0x14 => Some(content.iter().map(|&b| char::from(b)).collect()),
        // BMPString: UTF-16 big-endian
        0x1e if content.len().is_multiple_of(2) => {
            let units: Vec<u16> = content
                .chunks_exact(2)
                .map(|pair| u16::from_be_bytes([pair[0], pair[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

/// RFC 2253 §2.4: `,+"\<>;` are escaped, and a leading `#` or space
/// and a trailing space.
fn escape_rfc2253(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let escape = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if escape {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DER of a value with a short length.
    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        if content.len() < 0x80 {
            out.push(content.len() as u8);
        } else {
            out.push(0x82);
            out.extend_from_slice(&(content.len() as u16).to_be_bytes());
        }
        out.extend_from_slice(content);
        out
    }

    fn atv(oid: &[u8], tag: u8, value: &[u8]) -> Vec<u8> {
        tlv(SEQUENCE, &[tlv(OID, oid), tlv(tag, value)].concat())
    }

    fn certificate(subject: &[u8]) -> Vec<u8> {
        let tbs = [
            tlv(0xa0, &tlv(0x02, &[2])),
            tlv(0x02, &[1, 2, 3]),
            tlv(SEQUENCE, &tlv(OID, &[0x2a, 0x86, 0x48])),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, subject),
        ]
        .concat();
        tlv(
            SEQUENCE,
            &[tlv(SEQUENCE, &tbs), tlv(SEQUENCE, &[])].concat(),
        )
    }

    #[test]
    fn the_subject_is_written_last_name_first_as_rfc_2253_says() {
        const CN: &[u8] = &[0x55, 4, 3];
        const O: &[u8] = &[0x55, 4, 10];
        const OU: &[u8] = &[0x55, 4, 11];
        const C: &[u8] = &[0x55, 4, 6];
        let subject = [
            tlv(SET, &atv(C, 0x13, b"US")),
            tlv(SET, &atv(O, 0x0c, b"Acme, Inc.")),
            tlv(
                SET,
                &[atv(OU, 0x0c, b"eng"), atv(OU, 0x0c, b" ops")].concat(),
            ),
            tlv(SET, &atv(CN, 0x0c, b"client")),
            // An unknown type with a non-string value: dotted OID and hex.
            tlv(SET, &atv(&[0x2b, 6, 1], 0x02, &[5])),
        ]
        .concat();
        assert_eq!(
            subject_rfc2253(&certificate(&subject)).as_deref(),
            Some("1.3.6.1=#020105,CN=client,OU=eng+OU=\\ ops,O=Acme\\, Inc.,C=US")
        );
    }

    #[test]
    fn a_truncated_or_odd_certificate_has_no_subject_and_no_panic() {
        let cert = certificate(&tlv(SET, &atv(&[0x55, 4, 3], 0x0c, b"x")));
        for end in 0..cert.len() {
            let _ = subject_rfc2253(&cert[..end]);
        }
        assert_eq!(subject_rfc2253(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(subject_rfc2253(&[0x30, 0x80]), None);
    }

    #[test]
    fn a_client_hello_is_told_from_a_mongodb_message() {
        assert_eq!(opening(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]), Opening::Tls);
        assert_eq!(opening(&[0x16, 0x03, 0x03]), Opening::Tls);
        assert_eq!(opening(&[0x16, 0x03]), Opening::Unknown);
        assert_eq!(opening(&[]), Opening::Unknown);
        // A 790-byte message: 16 03 00 00.
        assert_eq!(opening(&[0x16, 0x03, 0x00, 0x00]), Opening::Plain);
        // A 300-byte hello: 2c 01 00 00.
        assert_eq!(opening(&[0x2c, 0x01, 0x00, 0x00]), Opening::Plain);
    }
}
