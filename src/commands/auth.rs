//! Logging in and what a login may do: `saslStart`, `saslContinue`
//! (SCRAM-SHA-1 and SCRAM-SHA-256), `authenticate` (MONGODB-X509: the
//! verified client certificate's subject names a user of `$external`),
//! `logout`,
//! `connectionStatus`, the `hello` fields drivers log in with
//! (`saslSupportedMechs`, `speculativeAuthenticate`), and the check the
//! dispatch makes before every command under `--auth` ([`authorize`]).
//!
//! A connection's privileges are resolved once, from its user's roles,
//! and kept on the connection until a user or role changes on this
//! gateway ([`super::state::Security::generation`]), or for at most
//! [`HELD_FOR`] (a change made through another gateway of a fleet), so a
//! command pays only for comparing what it needs with what is held.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, spec::BinarySubtype, Binary, Bson, Document};

use super::args;
use super::request::Request;
use super::roles;
use super::state::{
    ConnectionInfo, HeldPrivileges, Resolved, SaslConversation, SaslStep, ServerState, UserName,
};
use super::users;
use crate::auth::privileges::{self, Action, Privilege, Resource};
use crate::auth::scram::{self, Conversation, Mechanism};
use crate::bail;
use crate::base::EXTERNAL_DB;
use crate::error::{ErrorCode, Result};

/// Commands a client may run before it logs in: those whose
/// `requiresAuth()` is false in mongod. Sorted.
const WITHOUT_LOGIN: &[&str] = &[
    "authenticate",
    "buildInfo",
    "buildinfo",
    "connectionStatus",
    "hello",
    "isMaster",
    "ismaster",
    "logout",
    "ping",
    "saslContinue",
    "saslStart",
];

/// Commands the localhost exception allows: creating the first user (or a
/// role for it) in `admin`.
const LOCALHOST_EXCEPTION: &[&str] = &["createRole", "createUser"];

/// Checks that the connection may run `name` on `db`: the dispatch calls
/// it under `--auth` before anything else of the command runs.
pub async fn authorize(
    state: &ServerState,
    conn: &ConnectionInfo,
    name: &str,
    db: &str,
    body: &Document,
) -> Result<()> {
    if WITHOUT_LOGIN.binary_search(&name).is_ok() {
        return Ok(());
    }
    let Some(held) = held_privileges(state, conn).await? else {
        if LOCALHOST_EXCEPTION.contains(&name)
            && db == "admin"
            && conn.peer.ip().is_loopback()
            && !users::any_user(&state.router).await?
        {
            return Ok(());
        }
        bail!(Unauthorized, "command {name} requires authentication");
    };
    let needed = privileges::required(db, body);
    if privileges::authorized(&held.privileges, &needed)
        || own_account(conn, &held.privileges, name, db, body)
    {
        return Ok(());
    }
    bail!(
        Unauthorized,
        "not authorized on {db} to execute command {}",
        redacted(body)
    )
}

/// What a user may do to its own account without the privileges the
/// command needs for others, as mongod allows: `usersInfo` about
/// itself, and `updateUser` of its own password or custom data with
/// `changeOwnPassword` / `changeOwnCustomData`.
fn own_account(
    conn: &ConnectionInfo,
    held: &[Privilege],
    name: &str,
    db: &str,
    body: &Document,
) -> bool {
    let Some(me) = conn.auth.lock().user.clone() else {
        return false;
    };
    match name {
        "usersInfo" => asks_only_about(&me, db, body.get("usersInfo")),
        "updateUser" => {
            let mine = body.get_str("updateUser").ok() == Some(me.name.as_str()) && db == me.db;
            if !mine || body.contains_key("roles") {
                return false;
            }
            let on = Resource::database(db);
            let mut needed = Vec::new();
            if body.contains_key("pwd") || body.contains_key("mechanisms") {
                needed.push((on.clone(), Action::ChangeOwnPassword));
            }
            if body.contains_key("customData") {
                needed.push((on, Action::ChangeOwnCustomData));
            }
            privileges::authorized(held, &needed)
        }
        _ => false,
    }
}

/// Whether `usersInfo`'s argument names `me` and no one else.
fn asks_only_about(me: &UserName, db: &str, asked: Option<&Bson>) -> bool {
    let is_me = |item: &Bson| match item {
        Bson::String(user) => *user == me.name && db == me.db,
        Bson::Document(d) => {
            d.get_str("user").ok() == Some(me.name.as_str())
                && d.get_str("db").ok() == Some(me.db.as_str())
        }
        _ => false,
    };
    match asked {
        Some(Bson::Array(items)) => !items.is_empty() && items.iter().all(is_me),
        Some(item) => is_me(item),
        None => false,
    }
}

/// The command as an error message shows it, without passwords.
fn redacted(body: &Document) -> Document {
    let mut shown = body.clone();
    for field in ["pwd", "payload"] {
        if shown.contains_key(field) {
            shown.insert(field, "###");
        }
    }
    shown
}

/// How long a connection keeps its resolved privileges when nothing
/// changed on this gateway: how late it sees a change made through
/// another gateway of the fleet.
pub const HELD_FOR: Duration = Duration::from_secs(10);

/// The logged-in user's privileges, resolved again when users or roles
/// changed since; `None` when no one is logged in.
async fn held_privileges(
    state: &ServerState,
    conn: &ConnectionInfo,
) -> Result<Option<Arc<Resolved>>> {
    let generation = state.security.generation();
    let user = {
        let auth = conn.auth.lock();
        let Some(user) = auth.user.clone() else {
            return Ok(None);
        };
        if let Some(held) = &auth.privileges {
            if held.generation == generation && held.resolved_at.elapsed() < HELD_FOR {
                return Ok(Some(held.resolved.clone()));
            }
        }
        user
    };
    let direct = match users::find_user(&state.router, &user).await? {
        Some(stored) => users::roles_of(&stored),
        // Dropped since it logged in: it holds nothing.
        None => Vec::new(),
    };
    let resolved = Arc::new(roles::resolve(&state.router, &direct).await?);
    let mut auth = conn.auth.lock();
    if auth.user.as_ref() == Some(&user) {
        auth.privileges = Some(HeldPrivileges {
            generation,
            resolved_at: Instant::now(),
            resolved: resolved.clone(),
        });
    }
    Ok(Some(resolved))
}

fn payload_bytes(cmd: &str, body: &Document) -> Result<Vec<u8>> {
    match body.get("payload") {
        Some(Bson::Binary(b)) => Ok(b.bytes.clone()),
        Some(Bson::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(other) => bail!(
            TypeMismatch,
            "BSON field '{cmd}.payload' is the wrong type '{}', expected types '[string, binData]'",
            args::type_name(other)
        ),
        None => bail!(
            MissingField,
            "BSON field '{cmd}.payload' is missing but a required field"
        ),
    }
}

fn binary(bytes: Vec<u8>) -> Binary {
    Binary {
        subtype: BinarySubtype::Generic,
        bytes,
    }
}

/// The first step of a login: `body` is a `saslStart` command, or a
/// `hello`'s `speculativeAuthenticate` document, run against `db`.
async fn sasl_start(
    state: &ServerState,
    conn: &ConnectionInfo,
    db: &str,
    body: &Document,
    speculative: bool,
) -> Result<Document> {
    let mechanism = match body.get("mechanism") {
        Some(Bson::String(m)) => m.as_str(),
        Some(other) => bail!(
            TypeMismatch,
            "BSON field 'saslStart.mechanism' is the wrong type '{}', expected type 'string'",
            args::type_name(other)
        ),
        None => bail!(
            MissingField,
            "BSON field 'saslStart.mechanism' is missing but a required field"
        ),
    };
    let Some(mech) = Mechanism::parse(mechanism) else {
        bail!(
            MechanismUnavailable,
            "Received authentication for mechanism {mechanism} which is unknown or not enabled"
        );
    };
    let payload = payload_bytes("saslStart", body)?;
    let skip_empty = body
        .get_document("options")
        .ok()
        .and_then(|o| o.get_bool("skipEmptyExchange").ok())
        .unwrap_or(false);
    let addr = conn.peer.ip();
    if state.security.throttled(addr) {
        bail!(
            AuthenticationFailed,
            "Authentication failed: too many failed attempts from {addr}; try again in a second."
        );
    }
    let first = scram::parse_client_first(&payload)?;
    let user = UserName::new(&first.user, db);
    let creds = users::find_user(&state.router, &user)
        .await?
        .and_then(|stored| users::credentials(&stored, mech));
    let Some(creds) = creds else {
        // A speculative first step that fails is tried again with
        // `saslStart`: one attempt, counted once.
        if !speculative {
            state.security.failed(addr);
        }
        tracing::info!(conn = conn.id, user = %user, mechanism, "authentication failed: no such user or no credentials for the mechanism");
        return Err(scram::authentication_failed());
    };
    let (conversation, reply) = Conversation::start(mech, creds, &first);
    let id = 1;
    conn.auth.lock().conversation = Some(SaslConversation {
        id,
        user,
        step: SaslStep::Proof(conversation),
        skip_empty,
    });
    Ok(doc! {"conversationId": id, "done": false, "payload": binary(reply)})
}

pub async fn sasl_start_command(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, &["mechanism", "payload", "autoAuthorize", "options"])?;
    sasl_start(req.state, req.conn, &req.db, &req.body, false).await
}

pub async fn sasl_continue(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, &["conversationId", "payload"])?;
    let payload = payload_bytes("saslContinue", &req.body)?;
    let id = req.body.get("conversationId").and_then(args::number_as_i64);
    let conn = req.conn;
    let addr = conn.peer.ip();
    let mut auth = conn.auth.lock();
    let Some(conversation) = auth.conversation.take() else {
        bail!(ProtocolError, "No SASL session state found");
    };
    if id != Some(i64::from(conversation.id)) {
        bail!(ProtocolError, "Invalid conversation id");
    }
    let done = match &conversation.step {
        SaslStep::Proof(scram) => {
            let verified = match scram.finish(&payload) {
                Ok(v) => v,
                Err(e) => {
                    drop(auth);
                    if e.code == ErrorCode::AuthenticationFailed {
                        req.state.security.failed(addr);
                        tracing::info!(conn = conn.id, user = %conversation.user, "authentication failed: wrong password");
                    }
                    return Err(e);
                }
            };
            if !conversation.skip_empty {
                auth.conversation = Some(SaslConversation {
                    step: SaslStep::Verified,
                    ..conversation
                });
                return Ok(
                    doc! {"conversationId": id.unwrap_or(1) as i32, "done": false, "payload": binary(verified)},
                );
            }
            (conversation.user, verified)
        }
        SaslStep::Verified => {
            if !payload.is_empty() {
                bail!(BadValue, "SCRAM's last client message must be empty");
            }
            (conversation.user, Vec::new())
        }
    };
    let (user, last) = done;
    tracing::info!(conn = conn.id, user = %user, "authenticated");
    auth.user = Some(user);
    auth.privileges = None;
    Ok(doc! {"conversationId": id.unwrap_or(1) as i32, "done": true, "payload": binary(last)})
}

/// The mechanism `authenticate` serves; SCRAM runs through `saslStart`.
const X509: &str = "MONGODB-X509";

/// `authenticate`: a login without a conversation, by MONGODB-X509.
/// Other fields are ignored, as mongod ignores them (one official
/// driver sends the user as `username`).
pub async fn authenticate(req: &Request<'_>) -> Result<Document> {
    let mechanism = args::opt_str(&req.name, &req.body, "mechanism")?.unwrap_or("");
    let asked = args::opt_str(&req.name, &req.body, "user")?;
    let user = x509_login(req.state, req.conn, &req.db, mechanism, asked, false).await?;
    Ok(doc! {"dbname": &user.db, "user": &user.name})
}

/// Logs the connection in as the `$external` user its verified client
/// certificate's subject (RFC 2253, as mongod writes it) names. A
/// client may name the user too, and then it must be that subject.
/// Failures are 18 with mongod's one message; the reason goes to the
/// log.
async fn x509_login(
    state: &ServerState,
    conn: &ConnectionInfo,
    db: &str,
    mechanism: &str,
    asked: Option<&str>,
    speculative: bool,
) -> Result<UserName> {
    if mechanism != X509 {
        bail!(
            MechanismUnavailable,
            "Unsupported mechanism '{mechanism}' on authenticate command; use {X509}, or saslStart for SCRAM-SHA-256 and SCRAM-SHA-1"
        );
    }
    if db != EXTERNAL_DB {
        bail!(
            ProtocolError,
            "X.509 authentication must always use the $external database."
        );
    }
    let addr = conn.peer.ip();
    if state.security.throttled(addr) {
        bail!(
            AuthenticationFailed,
            "Authentication failed: too many failed attempts from {addr}; try again in a second."
        );
    }
    let refused = |why: &str| {
        // A speculative attempt that fails is made again with
        // `authenticate`: one attempt, counted once.
        if !speculative {
            state.security.failed(addr);
        }
        tracing::info!(
            conn = conn.id,
            mechanism = X509,
            "authentication failed: {why}"
        );
        Err(scram::authentication_failed())
    };
    let Some(subject) = conn.tls_peer_subject.as_deref() else {
        return refused("no verified client certificate on this connection");
    };
    if asked.is_some_and(|asked| asked != subject) {
        return refused("the user named is not the client certificate's subject");
    }
    let user = UserName::new(subject, EXTERNAL_DB);
    if users::find_user(&state.router, &user).await?.is_none() {
        return refused(&format!("no user {user}"));
    }
    tracing::info!(conn = conn.id, user = %user, mechanism = X509, "authenticated");
    let mut auth = conn.auth.lock();
    auth.user = Some(user.clone());
    auth.privileges = None;
    auth.conversation = None;
    Ok(user)
}

pub async fn logout(req: &Request<'_>) -> Result<Document> {
    let mut auth = req.conn.auth.lock();
    auth.user = None;
    auth.privileges = None;
    auth.conversation = None;
    Ok(Document::new())
}

pub async fn connection_status(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, &["showPrivileges"])?;
    let show = args::bool_or(&req.name, &req.body, "showPrivileges", false)?;
    let user = req.conn.auth.lock().user.clone();
    let mut info = Document::new();
    match user {
        None => {
            info.insert("authenticatedUsers", Vec::<Bson>::new());
            info.insert("authenticatedUserRoles", Vec::<Bson>::new());
            if show {
                info.insert("authenticatedUserPrivileges", Vec::<Bson>::new());
            }
        }
        Some(user) => {
            let direct = users::find_user(&req.state.router, &user)
                .await?
                .map(|s| users::roles_of(&s))
                .unwrap_or_default();
            let resolved = roles::resolve(&req.state.router, &direct).await?;
            info.insert(
                "authenticatedUsers",
                vec![Bson::Document(doc! {"user": &user.name, "db": &user.db})],
            );
            info.insert(
                "authenticatedUserRoles",
                roles::role_names_to_bson(&resolved.roles),
            );
            if show {
                info.insert(
                    "authenticatedUserPrivileges",
                    roles::privileges_to_bson(&resolved.privileges),
                );
            }
        }
    }
    Ok(doc! {"authInfo": info})
}

/// `hello`'s `saslSupportedMechs: "db.user"`: the mechanisms that user
/// has credentials for; `None` (the field left out) for no such user.
pub async fn supported_mechanisms(state: &ServerState, asked: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::String(asked) = asked else {
        bail!(
            TypeMismatch,
            "BSON field 'hello.saslSupportedMechs' is the wrong type '{}', expected type 'string'",
            args::type_name(asked)
        );
    };
    let Some((db, user)) = asked.split_once('.') else {
        bail!(
            BadValue,
            "UserName must contain a '.' separated database.user pair"
        );
    };
    let stored = users::find_user(&state.router, &UserName::new(user, db)).await?;
    Ok(stored.map(|s| users::mechanisms(&s).into_iter().map(Bson::from).collect()))
}

/// `hello`'s `speculativeAuthenticate`: the first step of SCRAM, or the
/// whole of MONGODB-X509, in the handshake. A failure leaves the field
/// out of the reply, as in mongod: the driver then logs in with
/// `saslStart` or `authenticate` and sees the error there.
pub async fn speculative(
    state: &ServerState,
    conn: &ConnectionInfo,
    spec: &Bson,
) -> Option<Document> {
    let Bson::Document(spec) = spec else {
        return None;
    };
    let db = spec.get_str("db").unwrap_or("admin");
    if spec.contains_key("saslStart") {
        return sasl_start(state, conn, db, spec, true).await.ok();
    }
    if spec.contains_key("authenticate") {
        let mechanism = spec.get_str("mechanism").unwrap_or("");
        let asked = spec.get_str("user").ok();
        let user = x509_login(state, conn, db, mechanism, asked, true)
            .await
            .ok()?;
        return Some(doc! {"dbname": &user.db, "user": &user.name});
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commands_without_login_are_sorted_for_the_search() {
        assert!(WITHOUT_LOGIN.windows(2).all(|w| w[0] < w[1]));
        for name in ["hello", "isMaster", "saslStart", "ping"] {
            assert!(WITHOUT_LOGIN.binary_search(&name).is_ok(), "{name}");
        }
        assert!(WITHOUT_LOGIN.binary_search(&"find").is_err());
    }

    #[test]
    fn passwords_never_reach_an_error_message() {
        let shown = redacted(&doc! {"createUser": "a", "pwd": "secret", "roles": []});
        assert!(!format!("{shown}").contains("secret"));
    }
}
