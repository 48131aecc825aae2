//! Roles: `createRole`, `updateRole`, `dropRole`,
//! `dropAllRolesFromDatabase`, `rolesInfo`, `grantPrivilegesToRole`,
//! `revokePrivilegesFromRole`, `grantRolesToRole`, `revokeRolesFromRole`;
//! and the resolution of a user's roles into the privileges they grant.
//!
//! As in MongoDB, custom roles are documents of `admin.system.roles`,
//! `{_id: "db.role", role, db, privileges, roles}`, kept through the
//! router like any data: they survive restarts and every gateway of a
//! fleet sees the same ones. Built-in roles (`read`, `readWrite`, `root`
//! …) are not stored; [`crate::auth::privileges::builtin_role`] defines
//! them.

use std::collections::{BTreeSet, HashMap};

use bson::{doc, Bson, Document};

use super::args;
use super::request::Request;
use super::state::{Resolved, UserName};
use crate::auth::privileges::{self, Action, Privilege, Resource};
use crate::bail;
use crate::error::{Error, ErrorCode, Result};
use crate::query::filter::Filter;
use crate::router::{DocumentValidation, FindSpec, Namespace, Router, UpdateStatement};

/// Where custom roles are kept.
pub fn roles_ns() -> Result<Namespace> {
    Namespace::new("admin", "system.roles")
}

/// Where users are kept.
pub fn users_ns() -> Result<Namespace> {
    Namespace::new("admin", "system.users")
}

/// The `_id` of a stored role or user: `db.name`.
pub fn stored_id(name: &UserName) -> String {
    format!("{}.{}", name.db, name.name)
}

/// Documents of `ns` that match `filter`, sorted by `_id`; none when the
/// collection does not exist.
pub async fn find_all(router: &Router, ns: &Namespace, filter: Document) -> Result<Vec<Document>> {
    if router.collection(ns).is_none() {
        return Ok(Vec::new());
    }
    let spec = FindSpec {
        filter: Some(Filter::parse(&filter)?),
        sort: Some(crate::query::sort::SortSpec::parse(&doc! {"_id": 1})?),
        ..FindSpec::default()
    };
    router
        .find(ns, spec, |found| found.documents().collect())
        .await
}

/// The document of `ns` with this `_id`.
pub async fn find_one(router: &Router, ns: &Namespace, id: &str) -> Result<Option<Document>> {
    Ok(find_all(router, ns, doc! {"_id": id})
        .await?
        .into_iter()
        .next())
}

/// Inserts `stored`; false when its `_id` is taken.
pub async fn insert_new(router: &Router, ns: &Namespace, stored: &Document) -> Result<bool> {
    let bytes = stored
        .to_vec()
        .map_err(|e| Error::internal(format!("cannot encode a stored document: {e}")))?;
    let outcome = router
        .insert(ns, vec![bytes], true, DocumentValidation::Bypass)
        .await?;
    match outcome.errors.into_iter().next() {
        Some((_, e)) if e.code == ErrorCode::DuplicateKey => Ok(false),
        Some((_, e)) => Err(e),
        None => Ok(true),
    }
}

/// Applies `update` to the documents `filter` matches; how many matched.
pub async fn update_where(
    router: &Router,
    ns: &Namespace,
    filter: Document,
    update: Document,
    multi: bool,
) -> Result<u64> {
    if router.collection(ns).is_none() {
        return Ok(0);
    }
    let stmt = UpdateStatement {
        filter: Filter::parse(&filter)?,
        update: crate::aggregate::parse_update(&Bson::Document(update), None)?,
        multi,
        upsert: false,
        sort: None,
        return_documents: false,
        validation: DocumentValidation::Bypass,
    };
    Ok(router.update(ns, &stmt).await?.matched)
}

/// Deletes the documents `filter` matches; how many.
pub async fn delete_where(router: &Router, ns: &Namespace, filter: Document) -> Result<u64> {
    if router.collection(ns).is_none() {
        return Ok(0);
    }
    let (n, _) = router
        .delete(ns, &Filter::parse(&filter)?, true, None)
        .await?;
    Ok(n)
}

/// A list of role names as commands take them: `"role"` (on
/// `default_db`) or `{role, db}`.
pub fn parse_role_names(
    cmd: &str,
    field: &str,
    value: &Bson,
    default_db: &str,
) -> Result<Vec<UserName>> {
    let Bson::Array(items) = value else {
        bail!(
            TypeMismatch,
            "BSON field '{cmd}.{field}' is the wrong type '{}', expected type 'array'",
            args::type_name(value)
        );
    };
    items
        .iter()
        .map(|item| parse_role_name(item, default_db))
        .collect()
}

fn parse_role_name(item: &Bson, default_db: &str) -> Result<UserName> {
    match item {
        Bson::String(role) => Ok(UserName::new(role, default_db)),
        Bson::Document(d) => match (d.get_str("role"), d.get_str("db")) {
            (Ok(role), Ok(db)) => Ok(UserName::new(role, db)),
            _ => bail!(
                BadValue,
                "A role is a string, or a document with string fields 'role' and 'db'"
            ),
        },
        _ => bail!(
            BadValue,
            "Role names must be either strings or objects, not {}",
            args::type_name(item)
        ),
    }
}

pub fn role_names_to_bson(names: &[UserName]) -> Vec<Bson> {
    names
        .iter()
        .map(|n| Bson::Document(doc! {"role": &n.name, "db": &n.db}))
        .collect()
}

fn role_names_of(stored: &Document) -> Vec<UserName> {
    stored
        .get_array("roles")
        .map(|roles| {
            roles
                .iter()
                .filter_map(|r| parse_role_name(r, "").ok())
                .collect()
        })
        .unwrap_or_default()
}

fn privileges_of(stored: &Document) -> Vec<Privilege> {
    stored
        .get_array("privileges")
        .map(|ps| {
            ps.iter()
                .filter_map(|p| match p {
                    Bson::Document(d) => Privilege::from_bson(d).ok(),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

fn is_builtin(name: &UserName) -> bool {
    privileges::builtin_role(&name.name, &name.db).is_some()
}

/// Under `--auth`, fails with 13 unless the logged-in user may grant
/// (`GrantRole`) or revoke (`RevokeRole`) roles of each role's database,
/// as mongod checks a command that hands out roles. The dispatch checked
/// the command's own database; roles may come from others.
pub fn check_may_grant(req: &Request<'_>, roles: &[UserName], action: Action) -> Result<()> {
    if !req.state.security.enabled || roles.is_empty() {
        return Ok(());
    }
    let held = {
        let auth = req.conn.auth.lock();
        if auth.user.is_none() {
            // The localhost exception: no user yet.
            return Ok(());
        }
        auth.privileges.as_ref().map(|h| h.resolved.clone())
    };
    let needed: Vec<(Resource, Action)> = roles
        .iter()
        .map(|r| {
            let db = Resource::Namespace {
                db: r.db.clone(),
                collection: String::new(),
            };
            (db, action)
        })
        .collect();
    match held {
        Some(held) if privileges::authorized(&held.privileges, &needed) => Ok(()),
        _ => {
            bail!(
            Unauthorized,
            "not authorized on {} to execute command {}: {} of {} needs {} on the role's database",
            req.db,
            req.name,
            if action == Action::GrantRole { "granting" } else { "revoking" },
            roles
                .iter()
                .map(UserName::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            action.name()
        )
        }
    }
}

/// Fails with 31 `RoleNotFound` unless every role exists, built in or
/// custom.
pub async fn check_roles_exist(router: &Router, names: &[UserName]) -> Result<()> {
    for name in names {
        if !is_builtin(name)
            && find_one(router, &roles_ns()?, &stored_id(name))
                .await?
                .is_none()
        {
            return Err(role_not_found(name));
        }
    }
    Ok(())
}

fn role_not_found(name: &UserName) -> Error {
    Error::new(
        ErrorCode::RoleNotFound,
        format!("Could not find role: {name}"),
    )
}

/// Resolves `direct` through the custom roles in `custom` (by name).
/// Roles that no longer exist grant nothing.
fn resolve_with(direct: &[UserName], custom: &HashMap<UserName, Document>) -> Resolved {
    let mut seen = BTreeSet::new();
    let mut queue: Vec<UserName> = direct.to_vec();
    let mut privileges = Vec::new();
    while let Some(role) = queue.pop() {
        if !seen.insert(role.clone()) {
            continue;
        }
        if let Some(builtin) = privileges::builtin_role(&role.name, &role.db) {
            privileges.extend(builtin);
        } else if let Some(stored) = custom.get(&role) {
            privileges.extend(privileges_of(stored));
            queue.extend(role_names_of(stored));
        }
    }
    Resolved {
        roles: seen.into_iter().collect(),
        privileges: merge(privileges),
    }
}

/// One privilege per resource, its actions united.
fn merge(privileges: Vec<Privilege>) -> Vec<Privilege> {
    let mut merged: Vec<Privilege> = Vec::new();
    for p in privileges {
        match merged.iter_mut().find(|m| m.resource == p.resource) {
            Some(m) => m.actions.extend(p.actions),
            None => merged.push(p),
        }
    }
    merged
}

async fn custom_roles(router: &Router) -> Result<HashMap<UserName, Document>> {
    Ok(find_all(router, &roles_ns()?, Document::new())
        .await?
        .into_iter()
        .filter_map(|d| {
            let name = UserName::new(d.get_str("role").ok()?, d.get_str("db").ok()?);
            Some((name, d))
        })
        .collect())
}

/// What `direct` grants, reading the custom roles through the router.
pub async fn resolve(router: &Router, direct: &[UserName]) -> Result<Resolved> {
    Ok(resolve_with(direct, &custom_roles(router).await?))
}

pub fn privileges_to_bson(privileges: &[Privilege]) -> Vec<Bson> {
    privileges
        .iter()
        .map(|p| Bson::Document(p.to_bson()))
        .collect()
}

/// Parses a `privileges` array; a role not on `admin` may only name
/// resources of its own database.
fn parse_privileges(cmd: &str, value: &Bson, role: &UserName) -> Result<Vec<Privilege>> {
    let Bson::Array(items) = value else {
        bail!(
            TypeMismatch,
            "BSON field '{cmd}.privileges' is the wrong type '{}', expected type 'array'",
            args::type_name(value)
        );
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Bson::Document(d) = item else {
            bail!(BadValue, "Each privilege must be a document");
        };
        let p = Privilege::from_bson(d)?;
        if role.db != "admin" {
            let own =
                matches!(&p.resource, privileges::Resource::Namespace { db, .. } if *db == role.db);
            if !own {
                bail!(
                    BadValue,
                    "Roles on the '{}' database cannot be granted privileges that target other databases or the cluster",
                    role.db
                );
            }
        }
        out.push(p);
    }
    Ok(out)
}

fn role_name_arg(req: &Request<'_>) -> Result<UserName> {
    match req.body.get(&req.name) {
        Some(Bson::String(s)) if !s.is_empty() => Ok(UserName::new(s, &req.db)),
        Some(Bson::String(_)) => bail!(BadValue, "Role name must not be empty"),
        Some(other) => bail!(
            TypeMismatch,
            "BSON field '{}' is the wrong type '{}', expected type 'string'",
            req.name,
            args::type_name(other)
        ),
        None => bail!(BadValue, "Must provide a role name"),
    }
}

fn required<'a>(req: &'a Request<'_>, field: &str) -> Result<&'a Bson> {
    req.body.get(field).ok_or_else(|| {
        Error::new(
            ErrorCode::MissingField,
            format!(
                "BSON field '{}.{field}' is missing but a required field",
                req.name
            ),
        )
    })
}

fn refuse_builtin(name: &UserName) -> Result<()> {
    if is_builtin(name) || privileges::builtin_role_names(&name.db).contains(&name.name.as_str()) {
        bail!(
            BadValue,
            "{name} is a built-in role and cannot be created or modified"
        );
    }
    Ok(())
}

/// Fails with 93 when `role` would inherit itself through `roles`.
fn refuse_cycle(
    role: &UserName,
    roles: &[UserName],
    custom: &HashMap<UserName, Document>,
) -> Result<()> {
    if resolve_with(roles, custom).roles.contains(role) {
        bail!(
            GraphContainsCycle,
            "Granting roles to {role} would introduce a cycle in the role graph"
        );
    }
    Ok(())
}

async fn stored_role(router: &Router, name: &UserName) -> Result<Document> {
    if is_builtin(name) {
        bail!(BadValue, "{name} is a built-in role and cannot be modified");
    }
    find_one(router, &roles_ns()?, &stored_id(name))
        .await?
        .ok_or_else(|| role_not_found(name))
}

pub async fn create_role(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, &["privileges", "roles", "authenticationRestrictions"])?;
    let name = role_name_arg(req)?;
    refuse_builtin(&name)?;
    let privileges = parse_privileges(&req.name, required(req, "privileges")?, &name)?;
    let roles = parse_role_names(&req.name, "roles", required(req, "roles")?, &req.db)?;
    check_may_grant(req, &roles, Action::GrantRole)?;
    let router = &req.state.router;
    check_roles_exist(router, &roles).await?;
    let stored = doc! {
        "_id": stored_id(&name),
        "role": &name.name,
        "db": &name.db,
        "privileges": privileges_to_bson(&privileges),
        "roles": role_names_to_bson(&roles),
    };
    if !insert_new(router, &roles_ns()?, &stored).await? {
        bail!(RoleAlreadyExists, "Role \"{name}\" already exists");
    }
    req.state.security.users_changed();
    Ok(Document::new())
}

pub async fn update_role(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, &["privileges", "roles", "authenticationRestrictions"])?;
    let name = role_name_arg(req)?;
    if !req.body.contains_key("privileges") && !req.body.contains_key("roles") {
        bail!(
            BadValue,
            "Must specify at least one field to update in updateRole"
        );
    }
    let privileges = match req.body.get("privileges") {
        Some(v) => Some(parse_privileges(&req.name, v, &name)?),
        None => None,
    };
    let roles = match req.body.get("roles") {
        Some(v) => Some(parse_role_names(&req.name, "roles", v, &req.db)?),
        None => None,
    };
    let router = &req.state.router;
    stored_role(router, &name).await?;
    let mut set = Document::new();
    if let Some(p) = privileges {
        set.insert("privileges", privileges_to_bson(&p));
    }
    if let Some(r) = roles {
        check_may_grant(req, &r, Action::GrantRole)?;
        check_roles_exist(router, &r).await?;
        refuse_cycle(&name, &r, &custom_roles(router).await?)?;
        set.insert("roles", role_names_to_bson(&r));
    }
    update_where(
        router,
        &roles_ns()?,
        doc! {"_id": stored_id(&name)},
        doc! {"$set": set},
        false,
    )
    .await?;
    req.state.security.users_changed();
    Ok(Document::new())
}

/// Removes role `name` from every user and role that holds it, as
/// mongod does when a role is dropped.
async fn remove_grants(router: &Router, name: &UserName) -> Result<()> {
    let grant = doc! {"role": &name.name, "db": &name.db};
    let pull = doc! {"$pull": {"roles": grant.clone()}};
    update_where(
        router,
        &users_ns()?,
        doc! {"roles": grant.clone()},
        pull.clone(),
        true,
    )
    .await?;
    update_where(router, &roles_ns()?, doc! {"roles": grant}, pull, true).await?;
    Ok(())
}

pub async fn drop_role(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, &[])?;
    let name = role_name_arg(req)?;
    let router = &req.state.router;
    stored_role(router, &name).await?;
    delete_where(router, &roles_ns()?, doc! {"_id": stored_id(&name)}).await?;
    remove_grants(router, &name).await?;
    req.state.security.users_changed();
    Ok(Document::new())
}

pub async fn drop_all_roles_from_database(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, &[])?;
    let router = &req.state.router;
    let dropped = find_all(router, &roles_ns()?, doc! {"db": &req.db}).await?;
    let n = delete_where(router, &roles_ns()?, doc! {"db": &req.db}).await?;
    for d in &dropped {
        if let (Ok(role), Ok(db)) = (d.get_str("role"), d.get_str("db")) {
            remove_grants(router, &UserName::new(role, db)).await?;
        }
    }
    req.state.security.users_changed();
    Ok(doc! {"n": args::int_or_long(n)})
}

/// `grantPrivilegesToRole` and `revokePrivilegesFromRole`.
pub async fn change_privileges(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, &["privileges"])?;
    let name = role_name_arg(req)?;
    let changes = parse_privileges(&req.name, required(req, "privileges")?, &name)?;
    let router = &req.state.router;
    let stored = stored_role(router, &name).await?;
    let mut held = privileges_of(&stored);
    if req.name == "grantPrivilegesToRole" {
        held.extend(changes);
        held = merge(held);
    } else {
        for change in &changes {
            for p in held.iter_mut().filter(|p| p.resource == change.resource) {
                p.actions.retain(|a| !change.actions.contains(a));
            }
        }
        held.retain(|p| !p.actions.is_empty());
    }
    update_where(
        router,
        &roles_ns()?,
        doc! {"_id": stored_id(&name)},
        doc! {"$set": {"privileges": privileges_to_bson(&held)}},
        false,
    )
    .await?;
    req.state.security.users_changed();
    Ok(Document::new())
}

/// `grantRolesToRole` and `revokeRolesFromRole`.
pub async fn change_inherited(req: &Request<'_>) -> Result<Document> {
    args::check_fields(req, &["roles"])?;
    let name = role_name_arg(req)?;
    let changes = parse_role_names(&req.name, "roles", required(req, "roles")?, &req.db)?;
    let router = &req.state.router;
    let stored = stored_role(router, &name).await?;
    let action = if req.name == "grantRolesToRole" {
        Action::GrantRole
    } else {
        Action::RevokeRole
    };
    check_may_grant(req, &changes, action)?;
    check_roles_exist(router, &changes).await?;
    let mut roles = role_names_of(&stored);
    if req.name == "grantRolesToRole" {
        refuse_cycle(&name, &changes, &custom_roles(router).await?)?;
        for c in changes {
            if !roles.contains(&c) {
                roles.push(c);
            }
        }
    } else {
        roles.retain(|r| !changes.contains(r));
    }
    update_where(
        router,
        &roles_ns()?,
        doc! {"_id": stored_id(&name)},
        doc! {"$set": {"roles": role_names_to_bson(&roles)}},
        false,
    )
    .await?;
    req.state.security.users_changed();
    Ok(Document::new())
}

/// What `rolesInfo` shows of one role.
fn role_info(
    name: &UserName,
    stored: Option<&Document>,
    custom: &HashMap<UserName, Document>,
    show_privileges: bool,
) -> Document {
    let direct = stored.map(role_names_of).unwrap_or_default();
    let inherited = resolve_with(&direct, custom);
    let mut info = doc! {
        "_id": stored_id(name),
        "role": &name.name,
        "db": &name.db,
        "isBuiltin": stored.is_none(),
        "roles": role_names_to_bson(&direct),
        "inheritedRoles": role_names_to_bson(&inherited.roles),
    };
    if show_privileges {
        let own = match stored {
            Some(s) => privileges_of(s),
            None => privileges::builtin_role(&name.name, &name.db).unwrap_or_default(),
        };
        let mut all = own.clone();
        all.extend(inherited.privileges);
        info.insert("privileges", privileges_to_bson(&own));
        info.insert("inheritedPrivileges", privileges_to_bson(&merge(all)));
    }
    info
}

pub async fn roles_info(req: &Request<'_>) -> Result<Document> {
    args::check_fields(
        req,
        &[
            "showPrivileges",
            "showBuiltinRoles",
            "showAuthenticationRestrictions",
        ],
    )?;
    let show_privileges = matches!(
        req.body.get("showPrivileges"),
        Some(Bson::Boolean(true) | Bson::String(_))
    );
    let show_builtin = args::bool_or(&req.name, &req.body, "showBuiltinRoles", false)?;
    let router = &req.state.router;
    let custom = custom_roles(router).await?;
    let asked = req.body.get(&req.name).cloned().unwrap_or(Bson::Null);
    let mut roles = Vec::new();
    let names: Vec<UserName> = match &asked {
        Bson::Int32(1) | Bson::Int64(1) | Bson::Double(_)
            if args::number_as_i64(&asked) == Some(1) =>
        {
            let mut names: Vec<UserName> =
                custom.keys().filter(|n| n.db == req.db).cloned().collect();
            if show_builtin {
                names.extend(
                    privileges::builtin_role_names(&req.db)
                        .iter()
                        .map(|r| UserName::new(*r, &req.db)),
                );
            }
            names.sort();
            names
        }
        Bson::Array(_) => parse_role_names(&req.name, &req.name, &asked, &req.db)?,
        other => vec![parse_role_name(other, &req.db)?],
    };
    for name in &names {
        let stored = custom.get(name);
        if stored.is_none() && !is_builtin(name) {
            continue;
        }
        roles.push(Bson::Document(role_info(
            name,
            stored,
            &custom,
            show_privileges,
        )));
    }
    Ok(doc! {"roles": roles})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_resolve_through_inheritance_and_ignore_missing_ones() {
        let mut custom = HashMap::new();
        let reader = UserName::new("reader", "shop");
        custom.insert(
            reader.clone(),
            doc! {
                "role": "reader", "db": "shop",
                "privileges": [{"resource": {"db": "shop", "collection": "orders"}, "actions": ["find"]}],
                "roles": [{"role": "gone", "db": "shop"}],
            },
        );
        let boss = UserName::new("boss", "shop");
        custom.insert(
            boss.clone(),
            doc! {
                "role": "boss", "db": "shop",
                "privileges": [{"resource": {"db": "shop", "collection": "orders"}, "actions": ["insert"]}],
                "roles": [{"role": "reader", "db": "shop"}],
            },
        );
        let resolved = resolve_with(std::slice::from_ref(&boss), &custom);
        assert_eq!(
            resolved.roles,
            vec![boss, UserName::new("gone", "shop"), reader]
        );
        assert_eq!(resolved.privileges.len(), 1, "one resource, actions merged");
        assert_eq!(resolved.privileges[0].actions.len(), 2);
    }

    #[test]
    fn role_names_are_strings_or_documents() {
        let names = parse_role_names(
            "createUser",
            "roles",
            &Bson::Array(vec![
                "read".into(),
                Bson::Document(doc! {"role": "root", "db": "admin"}),
            ]),
            "shop",
        )
        .unwrap();
        assert_eq!(
            names,
            vec![
                UserName::new("read", "shop"),
                UserName::new("root", "admin")
            ]
        );
        let bad = parse_role_names(
            "createUser",
            "roles",
            &Bson::Array(vec![Bson::Int32(1)]),
            "shop",
        );
        assert_eq!(bad.unwrap_err().code, ErrorCode::BadValue);
        let bad = parse_role_names("createUser", "roles", &Bson::Int32(1), "shop");
        assert_eq!(bad.unwrap_err().code, ErrorCode::TypeMismatch);
    }
}
