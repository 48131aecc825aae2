//! Users: `createUser`, `updateUser`, `dropUser`,
//! `dropAllUsersFromDatabase`, `usersInfo`, `grantRolesToUser`,
//! `revokeRolesFromUser`.
//!
//! As in MongoDB, users are documents of `admin.system.users` in mongod's
//! shape, `{_id: "db.user", userId, user, db, credentials, roles}`, kept
//! through the router: they survive restarts and every gateway of a
//! fleet sees the same ones. `credentials` holds only SCRAM's salted keys
//! ([`crate::auth::scram::Credentials`]), never a password.

use bson::{doc, Bson, Document};

use super::args;
use super::request::Request;
use super::roles::{self, stored_id, users_ns};
use super::state::UserName;
use crate::auth::privileges::Action;
use crate::auth::scram::{Credentials, Mechanism};
use crate::bail;
use crate::base::EXTERNAL_DB;
use crate::error::{Error, ErrorCode, Result};
use crate::router::Router;

/// The stored document of user `name`.
pub async fn find_user(router: &Router, name: &UserName) -> Result<Option<Document>> {
    roles::find_one(router, &users_ns()?, &stored_id(name)).await
}

/// Whether any user exists (the localhost exception ends with the first).
pub async fn any_user(router: &Router) -> Result<bool> {
    let ns = users_ns()?;
    if router.collection(&ns).is_none() {
        return Ok(false);
    }
    Ok(router.count(&ns, None).await? > 0)
}

/// The stored credentials of one mechanism.
pub fn credentials(stored: &Document, mech: Mechanism) -> Option<Credentials> {
    Credentials::from_bson(
        stored
            .get_document("credentials")
            .ok()?
            .get_document(mech.name())
            .ok()?,
    )
}

/// The mechanisms a stored user has credentials for; `external` for a
/// user of `$external`, as mongod lists it.
pub fn mechanisms(stored: &Document) -> Vec<&'static str> {
    let external = stored
        .get_document("credentials")
        .is_ok_and(|c| c.get_bool("external").ok() == Some(true));
    if external {
        return vec!["external"];
    }
    Mechanism::ALL
        .into_iter()
        .filter(|m| credentials(stored, *m).is_some())
        .map(Mechanism::name)
        .collect()
}

/// The roles granted to a stored user.
pub fn roles_of(stored: &Document) -> Vec<UserName> {
    stored
        .get("roles")
        .and_then(|r| roles::parse_role_names("", "roles", r, "").ok())
        .unwrap_or_default()
}

fn user_name_arg(req: &Request<'_>) -> Result<UserName> {
    match req.body.get(&req.name) {
        Some(Bson::String(s)) if !s.is_empty() && !s.contains('\0') => {
            Ok(UserName::new(s, &req.db))
        }
        Some(Bson::String(_)) => {
            bail!(BadValue, "User name must be a non-empty string without NUL")
        }
        Some(other) => bail!(
            TypeMismatch,
            "BSON field '{}' is the wrong type '{}', expected type 'string'",
            req.name,
            args::type_name(other)
        ),
        None => bail!(BadValue, "Must provide a user name"),
    }
}

fn refuse_external_password(name: &UserName, req: &Request<'_>) -> Result<()> {
    if name.db == EXTERNAL_DB
        && (req.body.contains_key("pwd") || req.body.contains_key("mechanisms"))
    {
        bail!(
            BadValue,
            "Cannot set the password or mechanisms of users defined on the '$external' database"
        );
    }
    Ok(())
}

/// `mechanisms` as `createUser` and `updateUser` take it; both SCRAM
/// mechanisms when absent.
fn parse_mechanisms(req: &Request<'_>) -> Result<Vec<Mechanism>> {
    let Some(value) = args::opt_array(&req.name, &req.body, "mechanisms")? else {
        return Ok(Mechanism::ALL.to_vec());
    };
    if value.is_empty() {
        bail!(BadValue, "mechanisms field must not be empty");
    }
    value
        .iter()
        .map(|m| match m {
            Bson::String(name) => Mechanism::parse(name).ok_or_else(|| {
                Error::new(
                    ErrorCode::BadValue,
                    format!("Unknown auth mechanism '{name}'"),
                )
            }),
            other => bail!(
                BadValue,
                "mechanisms must be strings, not {}",
                args::type_name(other)
            ),
        })
        .collect()
}

/// `pwd`, checked; `digestPassword: false` is refused, as mongod
/// refuses it for SCRAM-SHA-256, since the server must see the password.
fn parse_password<'a>(req: &'a Request<'_>) -> Result<Option<&'a str>> {
    let pwd = args::opt_str(&req.name, &req.body, "pwd")?;
    if pwd == Some("") {
        bail!(BadValue, "Password cannot be empty");
    }
    if !args::bool_or(&req.name, &req.body, "digestPassword", true)? {
        bail!(
            BadValue,
            "Use of SCRAM-SHA-256 requires undigested passwords"
        );
    }
    Ok(pwd)
}

fn make_credentials(name: &UserName, pwd: &str, mechs: &[Mechanism]) -> Result<Document> {
    let mut creds = Document::new();
    for mech in mechs {
        creds.insert(
            mech.name(),
            Credentials::new(*mech, &name.name, pwd)?.to_bson(),
        );
    }
    Ok(creds)
}

fn custom_data(req: &Request<'_>) -> Result<Option<Document>> {
    Ok(args::opt_document(&req.name, &req.body, "customData")?.cloned())
}

const USER_FIELDS: &[&str] = &[
    "pwd",
    "roles",
    "customData",
    "mechanisms",
    "digestPassword",
    "authenticationRestrictions",
];

pub async fn create_user(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, USER_FIELDS)?;
    let name = user_name_arg(req)?;
    refuse_external_password(&name, req)?;
    let pwd = parse_password(req)?;
    if pwd.is_none() && name.db != EXTERNAL_DB {
        bail!(BadValue, "Must provide a 'pwd' field for all user documents, except those with '$external' as the user's source db");
    }
    let roles_value = req.body.get("roles").ok_or_else(|| {
        Error::new(
            ErrorCode::MissingField,
            "BSON field 'createUser.roles' is missing but a required field",
        )
    })?;
    let roles = roles::parse_role_names(&req.name, "roles", roles_value, &req.db)?;
    let credentials = match pwd {
        Some(pwd) => make_credentials(&name, pwd, &parse_mechanisms(req)?)?,
        None => doc! {"external": true},
    };
    let custom = custom_data(req)?;
    roles::check_may_grant(req, &roles, Action::GrantRole)?;
    let router = &req.state.router;
    roles::check_roles_exist(router, &roles).await?;
    let mut stored = doc! {
        "_id": stored_id(&name),
        "userId": bson::Binary::from_uuid(bson::Uuid::new()),
        "user": &name.name,
        "db": &name.db,
        "credentials": credentials,
        "roles": roles::role_names_to_bson(&roles),
    };
    if let Some(custom) = custom {
        stored.insert("customData", custom);
    }
    if !roles::insert_new(router, &users_ns()?, &stored).await? {
        bail!(UserAlreadyExists, "User \"{name}\" already exists");
    }
    req.state.security.users_changed();
    Ok(Document::new())
}

fn user_not_found(name: &UserName) -> Error {
    Error::new(
        ErrorCode::UserNotFound,
        format!(
            "Could not find user \"{}\" for db \"{}\"",
            name.name, name.db
        ),
    )
}

async fn stored_user(router: &Router, name: &UserName) -> Result<Document> {
    find_user(router, name)
        .await?
        .ok_or_else(|| user_not_found(name))
}

async fn set_fields(router: &Router, name: &UserName, set: Document) -> Result<()> {
    roles::update_where(
        router,
        &users_ns()?,
        doc! {"_id": stored_id(name)},
        doc! {"$set": set},
        false,
    )
    .await?;
    Ok(())
}

pub async fn update_user(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, USER_FIELDS)?;
    let name = user_name_arg(req)?;
    refuse_external_password(&name, req)?;
    let pwd = parse_password(req)?;
    let roles = match req.body.get("roles") {
        Some(v) => Some(roles::parse_role_names(&req.name, "roles", v, &req.db)?),
        None => None,
    };
    let custom = custom_data(req)?;
    if pwd.is_none() && roles.is_none() && custom.is_none() && !req.body.contains_key("mechanisms")
    {
        bail!(
            BadValue,
            "Must specify at least one field to update in updateUser"
        );
    }
    let router = &req.state.router;
    let stored = stored_user(router, &name).await?;
    let mut set = Document::new();
    match (pwd, req.body.contains_key("mechanisms")) {
        (Some(pwd), _) => {
            set.insert(
                "credentials",
                make_credentials(&name, pwd, &parse_mechanisms(req)?)?,
            );
        }
        (None, true) => {
            // Fewer mechanisms without a new password: keep those asked.
            let keep = parse_mechanisms(req)?;
            let mut creds = Document::new();
            for mech in keep {
                match credentials(&stored, mech) {
                    Some(c) => {
                        creds.insert(mech.name(), c.to_bson());
                    }
                    None => bail!(
                        BadValue,
                        "mechanisms field must be a subset of previously set mechanisms"
                    ),
                }
            }
            set.insert("credentials", creds);
        }
        (None, false) => {}
    }
    if let Some(roles) = roles {
        roles::check_may_grant(req, &roles, Action::GrantRole)?;
        roles::check_roles_exist(router, &roles).await?;
        set.insert("roles", roles::role_names_to_bson(&roles));
    }
    if let Some(custom) = custom {
        set.insert("customData", custom);
    }
    set_fields(router, &name, set).await?;
    req.state.security.users_changed();
    Ok(Document::new())
}

pub async fn drop_user(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, &[])?;
    let name = user_name_arg(req)?;
    let router = &req.state.router;
    let n = roles::delete_where(router, &users_ns()?, doc! {"_id": stored_id(&name)}).await?;
    if n == 0 {
        return Err(user_not_found(&name));
    }
    req.state.security.users_changed();
    Ok(Document::new())
}

pub async fn drop_all_users_from_database(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, &[])?;
    let n = roles::delete_where(&req.state.router, &users_ns()?, doc! {"db": &req.db}).await?;
    req.state.security.users_changed();
    Ok(doc! {"n": args::int_or_long(n)})
}

/// `grantRolesToUser` and `revokeRolesFromUser`.
pub async fn change_roles(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, &["roles"])?;
    let name = user_name_arg(req)?;
    let value = req.body.get("roles").ok_or_else(|| {
        Error::new(
            ErrorCode::MissingField,
            format!(
                "BSON field '{}.roles' is missing but a required field",
                req.name
            ),
        )
    })?;
    let changes = roles::parse_role_names(&req.name, "roles", value, &req.db)?;
    let router = &req.state.router;
    let stored = stored_user(router, &name).await?;
    let action = if req.name == "grantRolesToUser" {
        Action::GrantRole
    } else {
        Action::RevokeRole
    };
    roles::check_may_grant(req, &changes, action)?;
    roles::check_roles_exist(router, &changes).await?;
    let mut held = roles_of(&stored);
    if req.name == "grantRolesToUser" {
        for c in changes {
            if !held.contains(&c) {
                held.push(c);
            }
        }
    } else {
        held.retain(|r| !changes.contains(r));
    }
    set_fields(
        router,
        &name,
        doc! {"roles": roles::role_names_to_bson(&held)},
    )
    .await?;
    req.state.security.users_changed();
    Ok(Document::new())
}

/// Which users `usersInfo` asks for.
enum Asked {
    AllOn(String),
    AllDbs,
    Named(Vec<UserName>),
}

fn parse_user_name(item: &Bson, db: &str) -> Result<UserName> {
    match item {
        Bson::String(user) => Ok(UserName::new(user, db)),
        Bson::Document(d) => match (d.get_str("user"), d.get_str("db")) {
            (Ok(user), Ok(db)) => Ok(UserName::new(user, db)),
            _ => bail!(
                BadValue,
                "A user is a string, or a document with string fields 'user' and 'db'"
            ),
        },
        other => bail!(
            BadValue,
            "User names must be either strings or objects, not {}",
            args::type_name(other)
        ),
    }
}

fn parse_asked(req: &Request<'_>) -> Result<Asked> {
    let value = req.body.get(&req.name).cloned().unwrap_or(Bson::Null);
    if args::number_as_i64(&value) == Some(1) {
        return Ok(Asked::AllOn(req.db.clone()));
    }
    match &value {
        Bson::Document(d) if d.contains_key("forAllDBs") => {
            if req.db != "admin" {
                bail!(
                    BadValue,
                    "Can only get user information for all databases from the admin database"
                );
            }
            Ok(Asked::AllDbs)
        }
        Bson::Array(items) => items
            .iter()
            .map(|i| parse_user_name(i, &req.db))
            .collect::<Result<Vec<_>>>()
            .map(Asked::Named),
        other => Ok(Asked::Named(vec![parse_user_name(other, &req.db)?])),
    }
}

pub async fn users_info(req: &Request<'_>) -> Result<Document> {
    args::check_fields(
        req,
        &[
            "showCredentials",
            "showPrivileges",
            "showAuthenticationRestrictions",
            "showCustomData",
        ],
    )?;
    let show_credentials = args::bool_or(&req.name, &req.body, "showCredentials", false)?;
    let show_privileges = args::bool_or(&req.name, &req.body, "showPrivileges", false)?;
    let show_custom = args::bool_or(&req.name, &req.body, "showCustomData", true)?;
    let router = &req.state.router;
    let ns = users_ns()?;
    let found = match parse_asked(req)? {
        Asked::AllOn(db) => roles::find_all(router, &ns, doc! {"db": db}).await?,
        Asked::AllDbs => roles::find_all(router, &ns, Document::new()).await?,
        Asked::Named(names) => {
            let ids: Vec<String> = names.iter().map(stored_id).collect();
            roles::find_all(router, &ns, doc! {"_id": {"$in": ids}}).await?
        }
    };
    let mut users = Vec::with_capacity(found.len());
    for stored in found {
        let mut info = doc! {
            "_id": stored.get("_id").cloned().unwrap_or(Bson::Null),
            "userId": stored.get("userId").cloned().unwrap_or(Bson::Null),
            "user": stored.get("user").cloned().unwrap_or(Bson::Null),
            "db": stored.get("db").cloned().unwrap_or(Bson::Null),
        };
        if show_custom {
            if let Some(c) = stored.get("customData") {
                info.insert("customData", c.clone());
            }
        }
        info.insert(
            "roles",
            stored.get("roles").cloned().unwrap_or(Bson::Array(vec![])),
        );
        if show_credentials {
            if let Some(c) = stored.get("credentials") {
                info.insert("credentials", c.clone());
            }
        }
        if show_privileges {
            let resolved = roles::resolve(router, &roles_of(&stored)).await?;
            info.insert("inheritedRoles", roles::role_names_to_bson(&resolved.roles));
            info.insert(
                "inheritedPrivileges",
                roles::privileges_to_bson(&resolved.privileges),
            );
        }
        info.insert("mechanisms", mechanisms(&stored));
        users.push(Bson::Document(info));
    }
    Ok(doc! {"users": users})
}
