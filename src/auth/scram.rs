//! SCRAM-SHA-1 and SCRAM-SHA-256 (RFC 5802, RFC 7677) as mongod speaks
//! them: the credentials a user document keeps, and the server's side of
//! one conversation. Pure computation; the commands layer carries the
//! messages (`saslStart`, `saslContinue`) and keeps the conversation
//! between them.
//!
//! Only salted keys are stored, never a password, in mongod's shape:
//! `{iterationCount, salt, storedKey, serverKey}`, all but the count
//! base64. As in mongod, SCRAM-SHA-1 derives its keys from the hex MD5
//! digest of `user:mongo:password` (what drivers send for SHA-1), and
//! SCRAM-SHA-256 from the SASLprep'd password.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use bson::{doc, Document};
use hmac::{KeyInit, Mac};
use md5::Digest as _;
use sha2::Digest as _;
use subtle::ConstantTimeEq;

use crate::error::{Error, ErrorCode, Result};

/// The SCRAM mechanisms, by the name clients give.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mechanism {
    Sha1,
    Sha256,
}

impl Mechanism {
    /// Both, in the order `saslSupportedMechs` lists them.
    pub const ALL: [Mechanism; 2] = [Mechanism::Sha1, Mechanism::Sha256];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha1 => "SCRAM-SHA-1",
            Mechanism::Sha256 => "SCRAM-SHA-256",
        }
    }

    pub fn parse(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// mongod's `scramIterationCount` and `scramSHA256IterationCount`.
    pub fn default_iterations(self) -> u32 {
        match self {
            Mechanism::Sha1 => 10_000,
            Mechanism::Sha256 => 15_000,
        }
    }

    /// mongod's salt length: the hash's length less four bytes.
    fn salt_len(self) -> usize {
        match self {
            Mechanism::Sha1 => 16,
            Mechanism::Sha256 => 28,
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha1 => sha1::Sha1::digest(data).to_vec(),
            Mechanism::Sha256 => sha2::Sha256::digest(data).to_vec(),
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        fn run<M: Mac + KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
            // HMAC pads or hashes any key to its block size, so a key of
            // any length is accepted and this cannot fail.
            let mut mac = <M as KeyInit>::new_from_slice(key).expect("HMAC takes any key length"); // ok: any key length
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            Mechanism::Sha1 => run::<hmac::Hmac<sha1::Sha1>>(key, data),
            Mechanism::Sha256 => run::<hmac::Hmac<sha2::Sha256>>(key, data),
        }
    }

    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Mechanism::Sha1 => {
                let mut out = [0u8; 20];
                pbkdf2::pbkdf2_hmac::<sha1::Sha1>(password, salt, iterations, &mut out);
                out.to_vec()
            }
            Mechanism::Sha256 => {
                let mut out = [0u8; 32];
                pbkdf2::pbkdf2_hmac::<sha2::Sha256>(password, salt, iterations, &mut out);
                out.to_vec()
            }
        }
    }

    /// The password as this mechanism feeds it to PBKDF2.
    fn prepared_password(self, user: &str, password: &str) -> Result<Vec<u8>> {
        match self {
            Mechanism::Sha1 => Ok(sha1_password_digest(user, password).into_bytes()),
            Mechanism::Sha256 => stringprep::saslprep(password)
                .map(|p| p.as_bytes().to_vec())
                .map_err(|e| {
                    Error::new(
                        ErrorCode::BadValue,
                        format!("Could not SASLprep the password: {e}"),
                    )
                }),
        }
    }
}

/// mongod's "password digest" of SCRAM-SHA-1: hex MD5 of
/// `user:mongo:password`.
pub fn sha1_password_digest(user: &str, password: &str) -> String {
    let digest = md5::Md5::digest(format!("{user}:mongo:{password}").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// One mechanism's stored credentials.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Credentials {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl Credentials {
    /// New credentials with a random salt and the default iteration count.
    pub fn new(mech: Mechanism, user: &str, password: &str) -> Result<Credentials> {
        let mut salt = vec![0u8; mech.salt_len()];
        rand::Rng::fill(&mut rand::rng(), salt.as_mut_slice());
        Credentials::derive(mech, user, password, &salt, mech.default_iterations())
    }

    /// The credentials `password` gives with this salt and count.
    pub fn derive(
        mech: Mechanism,
        user: &str,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> Result<Credentials> {
        let prepared = mech.prepared_password(user, password)?;
        let salted = mech.salted_password(&prepared, salt, iterations);
        let client_key = mech.hmac(&salted, b"Client Key");
        Ok(Credentials {
            iterations,
            salt: salt.to_vec(),
            stored_key: mech.hash(&client_key),
            server_key: mech.hmac(&salted, b"Server Key"),
        })
    }

    /// mongod's shape: `{iterationCount, salt, storedKey, serverKey}`.
    pub fn to_bson(&self) -> Document {
        doc! {
            "iterationCount": i32::try_from(self.iterations).unwrap_or(i32::MAX),
            "salt": BASE64.encode(&self.salt),
            "storedKey": BASE64.encode(&self.stored_key),
            "serverKey": BASE64.encode(&self.server_key),
        }
    }

    /// Reads what [`Credentials::to_bson`] wrote; `None` if it is not
    /// that shape.
    pub fn from_bson(d: &Document) -> Option<Credentials> {
        let field = |name: &str| BASE64.decode(d.get_str(name).ok()?).ok();
        Some(Credentials {
            iterations: u32::try_from(d.get_i32("iterationCount").ok()?).ok()?,
            salt: field("salt")?,
            stored_key: field("storedKey")?,
            server_key: field("serverKey")?,
        })
    }
}

/// What the client's first message says.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ClientFirst {
    /// The user name, unescaped.
    pub user: String,
    nonce: String,
    /// `n=user,r=nonce`: part of the signed auth message.
    bare: String,
}

fn failed(message: &str) -> Error {
    Error::new(ErrorCode::BadValue, message.to_string())
}

/// Parses `n,,n=user,r=nonce` (a GS2 header without channel binding).
pub fn parse_client_first(payload: &[u8]) -> Result<ClientFirst> {
    let text = std::str::from_utf8(payload)
        .map_err(|_| failed("SCRAM client-first message is not UTF-8"))?;
    let mut parts = text.splitn(3, ',');
    let binding = parts.next().unwrap_or_default();
    let authzid = parts.next().unwrap_or_default();
    let bare = parts
        .next()
        .ok_or_else(|| failed("Incorrect number of arguments for first SCRAM client message"))?;
    match binding {
        "n" | "y" => {}
        b if b.starts_with("p=") => {
            return Err(failed("Server does not support channel binding"));
        }
        _ => return Err(failed("Incorrect SCRAM client message prefix")),
    }
    if !authzid.is_empty() && !authzid.starts_with("a=") {
        return Err(failed("Incorrect SCRAM authzid"));
    }
    let mut user = None;
    let mut nonce = None;
    for attr in bare.split(',') {
        if let Some(v) = attr.strip_prefix("n=") {
            user = Some(unescape_name(v)?);
        } else if let Some(v) = attr.strip_prefix("r=") {
            nonce = Some(v.to_string());
        } else if attr.starts_with("m=") {
            return Err(failed("SCRAM mandatory extensions are not supported"));
        }
    }
    let user = user.ok_or_else(|| failed("Invalid SCRAM user name"))?;
    let nonce = nonce
        .filter(|n| !n.is_empty())
        .ok_or_else(|| failed("Invalid SCRAM client nonce"))?;
    Ok(ClientFirst {
        user,
        nonce,
        bare: bare.to_string(),
    })
}

/// `=2C` is `,` and `=3D` is `=`; any other `=` is an error.
fn unescape_name(name: &str) -> Result<String> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if tail.starts_with("=2C") {
            out.push(',');
        } else if tail.starts_with("=3D") {
            out.push('=');
        } else {
            return Err(failed("Invalid SCRAM user name escape"));
        }
        rest = &tail[3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The server's side of one conversation between its first and last
/// message.
#[derive(Clone, Debug)]
pub struct Conversation {
    pub mechanism: Mechanism,
    credentials: Credentials,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

impl Conversation {
    /// Answers the client's first message: `r=nonce,s=salt,i=count`.
    pub fn start(
        mechanism: Mechanism,
        credentials: Credentials,
        first: &ClientFirst,
    ) -> (Conversation, Vec<u8>) {
        let mut ours = [0u8; 24];
        rand::Rng::fill(&mut rand::rng(), &mut ours);
        let nonce = format!("{}{}", first.nonce, BASE64.encode(ours));
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credentials.salt),
            credentials.iterations
        );
        let reply = server_first.clone().into_bytes();
        (
            Conversation {
                mechanism,
                credentials,
                client_first_bare: first.bare.clone(),
                server_first,
                nonce,
            },
            reply,
        )
    }

    /// Checks the client's proof (`c=biws,r=nonce,p=proof`) and answers
    /// with the server's signature (`v=...`). A wrong proof is 18
    /// `AuthenticationFailed`.
    pub fn finish(&self, payload: &[u8]) -> Result<Vec<u8>> {
        let text = std::str::from_utf8(payload)
            .map_err(|_| failed("SCRAM client-final message is not UTF-8"))?;
        let (without_proof, proof) = text.rsplit_once(",p=").ok_or_else(|| {
            failed("Incorrect number of arguments for final SCRAM client message")
        })?;
        let mut binding = None;
        let mut nonce = None;
        for attr in without_proof.split(',') {
            if let Some(v) = attr.strip_prefix("c=") {
                binding = Some(v);
            } else if let Some(v) = attr.strip_prefix("r=") {
                nonce = Some(v);
            }
        }
        // base64 of the GS2 headers "n,," and "y,,".
        if !matches!(binding, Some("biws" | "eSws")) {
            return Err(failed("Incorrect SCRAM channel binding"));
        }
        if nonce != Some(self.nonce.as_str()) {
            return Err(failed("Unmatched SCRAM nonce received from client"));
        }
        let proof = BASE64
            .decode(proof)
            .map_err(|_| failed("SCRAM proof is not base64"))?;
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        let mech = self.mechanism;
        let signature = mech.hmac(&self.credentials.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err(authentication_failed());
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        let stored = mech.hash(&client_key);
        if !bool::from(stored.ct_eq(&self.credentials.stored_key)) {
            return Err(authentication_failed());
        }
        let server_signature = mech.hmac(&self.credentials.server_key, auth_message.as_bytes());
        Ok(format!("v={}", BASE64.encode(server_signature)).into_bytes())
    }
}

/// mongod's answer to a wrong password or an unknown user alike.
pub fn authentication_failed() -> Error {
    Error::new(ErrorCode::AuthenticationFailed, "Authentication failed.")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client's side, as RFC 5802 and the drivers compute it.
    fn client_final(
        mech: Mechanism,
        user: &str,
        password: &str,
        client_first_bare: &str,
        server_first: &str,
    ) -> (String, Vec<u8>) {
        let fields: Vec<&str> = server_first.split(',').collect();
        let nonce = &fields[0][2..];
        let salt = BASE64.decode(&fields[1][2..]).unwrap();
        let iterations: u32 = fields[2][2..].parse().unwrap();
        let prepared = mech.prepared_password(user, password).unwrap();
        let salted = mech.salted_password(&prepared, &salt, iterations);
        let client_key = mech.hmac(&salted, b"Client Key");
        let stored = mech.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{client_first_bare},{server_first},{without_proof}");
        let signature = mech.hmac(&stored, auth.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = mech.hmac(&salted, b"Server Key");
        let expected = mech.hmac(&server_key, auth.as_bytes());
        (
            format!("{without_proof},p={}", BASE64.encode(proof)),
            expected,
        )
    }

    #[test]
    fn rfc_7677_example_keys() {
        // RFC 7677's example: user "user", password "pencil", salt
        // W22ZaJ0SNY7soEsUEjb6gQ==, 4096 iterations; its proof checks.
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let creds = Credentials::derive(Mechanism::Sha256, "user", "pencil", &salt, 4096).unwrap();
        let first = parse_client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        let conv = Conversation {
            mechanism: Mechanism::Sha256,
            credentials: creds,
            client_first_bare: first.bare,
            server_first: "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".into(),
            nonce: "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".into(),
        };
        let reply = conv
            .finish(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
            .unwrap();
        assert_eq!(
            reply,
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".to_vec()
        );
    }

    #[test]
    fn a_conversation_accepts_the_password_and_refuses_another() {
        for mech in Mechanism::ALL {
            let creds =
                Credentials::derive(mech, "ann", "sécret", b"0123456789abcdef", 64).unwrap();
            let first = parse_client_first(b"n,,n=ann,r=clientnonce").unwrap();
            assert_eq!(first.user, "ann");
            let (conv, server_first) = Conversation::start(mech, creds, &first);
            let server_first = String::from_utf8(server_first).unwrap();
            assert!(server_first.starts_with("r=clientnonce"));
            let (good, signature) = client_final(mech, "ann", "sécret", &first.bare, &server_first);
            let reply = conv.finish(good.as_bytes()).unwrap();
            assert_eq!(
                reply,
                format!("v={}", BASE64.encode(signature)).into_bytes()
            );
            let (bad, _) = client_final(mech, "ann", "wrong", &first.bare, &server_first);
            let e = conv.finish(bad.as_bytes()).unwrap_err();
            assert_eq!(e.code, ErrorCode::AuthenticationFailed);
        }
    }

    #[test]
    fn credentials_round_trip_in_mongods_shape() {
        let creds = Credentials::new(Mechanism::Sha256, "ann", "pw").unwrap();
        assert_eq!(creds.iterations, 15_000);
        assert_eq!(creds.salt.len(), 28);
        let stored = creds.to_bson();
        assert_eq!(stored.get_i32("iterationCount").unwrap(), 15_000);
        assert_eq!(Credentials::from_bson(&stored), Some(creds));
        assert_eq!(Credentials::from_bson(&doc! {"salt": 1}), None);
    }

    #[test]
    fn sha1_keys_come_from_mongods_password_digest() {
        assert_eq!(
            sha1_password_digest("user", "pencil"),
            "1c33006ec1ffd90f9cadcbcc0e118200"
        );
    }

    #[test]
    fn bad_first_messages_are_refused_without_panicking() {
        for bad in [
            &b""[..],
            b"n,,",
            b"x,,n=a,r=b",
            b"p=tls-unique,,n=a,r=b",
            b"n,,n=a",
            b"n,,n=a=zz,r=b",
            b"\xff\xfe",
        ] {
            assert!(parse_client_first(bad).is_err(), "{bad:?}");
        }
        let first = parse_client_first(b"n,,n=a=2Cb=3Dc,r=x").unwrap();
        assert_eq!(first.user, "a,b=c");
    }
}
