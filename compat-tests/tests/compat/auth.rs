//! Authentication and authorization (`--auth`) through the official
//! driver, as a MongoDB 7.0 user sees them: the first user created over
//! the localhost exception; logins with SCRAM-SHA-256 and SCRAM-SHA-1,
//! named or negotiated through `saslSupportedMechs`; wrong passwords and
//! unknown users refused with 18; commands before a login refused with
//! 13; users and roles kept across a restart; every user and role
//! command; and a matrix of roles × commands where every denial is 13
//! and changes nothing.

use compat_tests::{
    assert_ok, auth_error_code,
    bson::{doc, Bson, Document},
    expect_command_error, failure,
    mongodb::{
        options::{AuthMechanism, Credential},
        Client, Database,
    },
    num, TestServer,
};
use futures::TryStreamExt;

const ADMIN_USER: &str = "boss";
const ADMIN_PWD: &str = "boss-secret";

async fn run(db: &Database, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    db.run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"))
}

/// A server with `--auth` and its first user, `boss` (root), created
/// over the localhost exception.
async fn secured() -> TestServer {
    let srv = TestServer::start_with_args(&["--auth"]).await;
    run(
        &srv.db("admin"),
        doc! {"createUser": ADMIN_USER, "pwd": ADMIN_PWD, "roles": ["root"]},
    )
    .await;
    srv
}

async fn login(
    srv: &TestServer,
    user: &str,
    pwd: &str,
    source: &str,
    mech: Option<AuthMechanism>,
) -> Client {
    srv.client_with(|o| {
        o.credential = Some(
            Credential::builder()
                .username(user.to_string())
                .password(pwd.to_string())
                .source(source.to_string())
                .mechanism(mech)
                .build(),
        );
    })
    .await
}

async fn admin(srv: &TestServer) -> Client {
    login(srv, ADMIN_USER, ADMIN_PWD, "admin", None).await
}

#[tokio::test]
async fn scram_logins_succeed_and_wrong_passwords_fail() {
    let srv = secured().await;
    // The exception closed with the first user.
    expect_command_error(
        &srv.db("admin"),
        doc! {"createUser": "second", "pwd": "x", "roles": []},
        13,
        "Unauthorized",
    )
    .await;
    let root = admin(&srv).await;
    run(
        &root.database("admin"),
        doc! {"createUser": "sha1only", "pwd": "pw1", "roles": [{"role": "readWrite", "db": "shop"}], "mechanisms": ["SCRAM-SHA-1"]},
    )
    .await;
    for mech in [
        Some(AuthMechanism::ScramSha256),
        Some(AuthMechanism::ScramSha1),
        None,
    ] {
        let client = login(&srv, ADMIN_USER, ADMIN_PWD, "admin", mech.clone()).await;
        let orders = client.database("shop").collection::<Document>("orders");
        orders
            .insert_one(doc! {"_id": 1})
            .await
            .unwrap_or_else(|e| panic!("{mech:?}: {e}"));
        assert_eq!(orders.count_documents(doc! {}).await.unwrap(), 1);
        orders.delete_many(doc! {}).await.unwrap();
    }
    // Negotiated: saslSupportedMechs says SCRAM-SHA-1 only, and the
    // driver uses it.
    let hello = run(
        &srv.db("admin"),
        doc! {"hello": 1, "saslSupportedMechs": "admin.sha1only"},
    )
    .await;
    assert_eq!(
        hello.get_array("saslSupportedMechs").unwrap(),
        &vec![Bson::from("SCRAM-SHA-1")]
    );
    let hello = run(
        &srv.db("admin"),
        doc! {"hello": 1, "saslSupportedMechs": "admin.boss"},
    )
    .await;
    assert_eq!(
        hello.get_array("saslSupportedMechs").unwrap(),
        &vec![Bson::from("SCRAM-SHA-1"), Bson::from("SCRAM-SHA-256")]
    );
    let hello = run(
        &srv.db("admin"),
        doc! {"hello": 1, "saslSupportedMechs": "admin.nobody"},
    )
    .await;
    assert!(!hello.contains_key("saslSupportedMechs"));
    let sha1 = login(&srv, "sha1only", "pw1", "admin", None).await;
    sha1.database("shop")
        .collection::<Document>("orders")
        .insert_one(doc! {"_id": 2})
        .await
        .unwrap();
    // SCRAM-SHA-256 for a user without its credentials fails.
    let wrong_mech = login(
        &srv,
        "sha1only",
        "pw1",
        "admin",
        Some(AuthMechanism::ScramSha256),
    )
    .await;
    let e = wrong_mech
        .database("shop")
        .run_command(doc! {"ping": 1})
        .await
        .unwrap_err();
    assert_eq!(auth_error_code(&e), Some(18), "{e:?}");

    // A wrong password and an unknown user: 18, "Authentication failed.".
    for (user, pwd) in [(ADMIN_USER, "wrong"), ("nobody", "x")] {
        for mech in [AuthMechanism::ScramSha256, AuthMechanism::ScramSha1] {
            let client = login(&srv, user, pwd, "admin", Some(mech.clone())).await;
            let e = client
                .database("shop")
                .collection::<Document>("orders")
                .find_one(doc! {})
                .await
                .unwrap_err();
            assert_eq!(auth_error_code(&e), Some(18), "{user} {mech:?}: {e:?}");
            assert!(e.to_string().contains("Authentication failed."), "{e}");
        }
        // Pause: failed attempts from one address are limited per second.
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    }
    // saslStart for an unknown user answers 18 itself.
    let f = expect_command_error(
        &srv.db("admin"),
        doc! {"saslStart": 1, "mechanism": "SCRAM-SHA-256",
        "payload": Bson::Binary(compat_tests::bson::Binary {
            subtype: compat_tests::bson::spec::BinarySubtype::Generic,
            bytes: b"n,,n=nobody,r=abcdefghijklmnop".to_vec() })},
        18,
        "AuthenticationFailed",
    )
    .await;
    assert_eq!(f.message, "Authentication failed.");
    expect_command_error(
        &srv.db("admin"),
        doc! {"saslStart": 1, "mechanism": "PLAIN", "payload": ""},
        334,
        "MechanismUnavailable",
    )
    .await;
    expect_command_error(
        &srv.db("admin"),
        doc! {"saslContinue": 1, "conversationId": 1, "payload": ""},
        17,
        "ProtocolError",
    )
    .await;
}

#[tokio::test]
async fn unauthenticated_clients_run_only_the_handshake_commands() {
    let srv = secured().await;
    let anon = srv.db("shop");
    for cmd in [
        doc! {"ping": 1},
        doc! {"hello": 1},
        doc! {"isMaster": 1},
        doc! {"buildInfo": 1},
        doc! {"connectionStatus": 1},
    ] {
        run(&anon, cmd).await;
    }
    let status = run(&anon, doc! {"connectionStatus": 1}).await;
    let info = status.get_document("authInfo").unwrap();
    assert!(info.get_array("authenticatedUsers").unwrap().is_empty());
    for cmd in [
        doc! {"find": "orders"},
        doc! {"insert": "orders", "documents": [{"_id": 1}]},
        doc! {"listCollections": 1},
        doc! {"serverStatus": 1},
        doc! {"usersInfo": 1},
    ] {
        let name = cmd.keys().next().unwrap().clone();
        let f = expect_command_error(&anon, cmd, 13, "Unauthorized").await;
        assert_eq!(f.message, format!("command {name} requires authentication"));
    }
    let root = admin(&srv).await;
    let n = root
        .database("shop")
        .collection::<Document>("orders")
        .count_documents(doc! {})
        .await
        .unwrap();
    assert_eq!(n, 0, "the refused insert wrote nothing");
}

#[tokio::test]
async fn users_and_roles_survive_a_restart() {
    let mut srv = secured().await;
    let root = admin(&srv).await;
    let admin_db = root.database("admin");
    run(
        &admin_db,
        doc! {"createRole": "ordersReader", "privileges": [
        {"resource": {"db": "shop", "collection": "orders"}, "actions": ["find"]}], "roles": []},
    )
    .await;
    run(
        &root.database("shop"),
        doc! {"createUser": "ann", "pwd": "ann-pw", "roles": [{"role": "ordersReader", "db": "admin"}]},
    )
    .await;
    drop(root);
    srv.restart_with_args(&["--auth"]).await;
    let ann = login(&srv, "ann", "ann-pw", "shop", None).await;
    let orders = ann.database("shop").collection::<Document>("orders");
    orders.find_one(doc! {}).await.unwrap();
    let e = orders.insert_one(doc! {"_id": 1}).await.unwrap_err();
    assert_eq!(failure(&e).unwrap().code, 13);
    // The stored document has only SCRAM keys, in mongod's shape.
    let root = admin(&srv).await;
    let stored = root
        .database("admin")
        .collection::<Document>("system.users")
        .find_one(doc! {"_id": "shop.ann"})
        .await
        .unwrap()
        .unwrap();
    let creds = stored.get_document("credentials").unwrap();
    for mech in ["SCRAM-SHA-1", "SCRAM-SHA-256"] {
        let c = creds.get_document(mech).unwrap();
        let mut keys: Vec<&str> = c.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(keys, ["iterationCount", "salt", "serverKey", "storedKey"]);
    }
    assert_eq!(
        num(creds.get_document("SCRAM-SHA-1").unwrap(), "iterationCount"),
        10_000
    );
    assert_eq!(
        num(
            creds.get_document("SCRAM-SHA-256").unwrap(),
            "iterationCount"
        ),
        15_000
    );
    assert!(!format!("{stored}").contains("ann-pw"));
}

#[tokio::test]
async fn user_commands_and_their_errors() {
    let srv = secured().await;
    let root = admin(&srv).await;
    let shop = root.database("shop");
    run(
        &shop,
        doc! {"createUser": "cat", "pwd": "cat-pw", "roles": ["read"], "customData": {"team": "a"}},
    )
    .await;
    expect_command_error(
        &shop,
        doc! {"createUser": "cat", "pwd": "x", "roles": []},
        51003,
        "Location51003",
    )
    .await;
    expect_command_error(
        &shop,
        doc! {"createUser": "dog", "pwd": "x", "roles": ["noSuchRole"]},
        31,
        "RoleNotFound",
    )
    .await;
    expect_command_error(
        &shop,
        doc! {"createUser": "dog", "pwd": "", "roles": []},
        2,
        "BadValue",
    )
    .await;
    expect_command_error(&shop, doc! {"createUser": "dog", "pwd": "x"}, 40414, "").await;
    expect_command_error(&shop, doc! {"dropUser": "dog"}, 11, "UserNotFound").await;
    expect_command_error(
        &shop,
        doc! {"updateUser": "dog", "pwd": "x"},
        11,
        "UserNotFound",
    )
    .await;
    expect_command_error(
        &shop,
        doc! {"grantRolesToUser": "dog", "roles": ["read"]},
        11,
        "UserNotFound",
    )
    .await;

    let info = run(&shop, doc! {"usersInfo": "cat"}).await;
    let users = info.get_array("users").unwrap();
    assert_eq!(users.len(), 1);
    let cat = users[0].as_document().unwrap();
    assert_eq!(cat.get_str("_id").unwrap(), "shop.cat");
    assert_eq!(cat.get_str("user").unwrap(), "cat");
    assert_eq!(cat.get_str("db").unwrap(), "shop");
    assert_eq!(
        cat.get_array("roles").unwrap(),
        &vec![Bson::Document(doc! {"role": "read", "db": "shop"})]
    );
    assert_eq!(cat.get_document("customData").unwrap(), &doc! {"team": "a"});
    assert!(!cat.contains_key("credentials"));
    let with_creds = run(
        &shop,
        doc! {"usersInfo": {"user": "cat", "db": "shop"}, "showCredentials": true},
    )
    .await;
    let cat = with_creds.get_array("users").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert!(cat
        .get_document("credentials")
        .unwrap()
        .contains_key("SCRAM-SHA-256"));
    let with_privileges = run(&shop, doc! {"usersInfo": "cat", "showPrivileges": true}).await;
    let cat = with_privileges.get_array("users").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert!(!cat.get_array("inheritedPrivileges").unwrap().is_empty());

    run(
        &shop,
        doc! {"grantRolesToUser": "cat", "roles": ["readWrite"]},
    )
    .await;
    run(
        &shop,
        doc! {"revokeRolesFromUser": "cat", "roles": ["read"]},
    )
    .await;
    let info = run(&shop, doc! {"usersInfo": "cat"}).await;
    let cat = info.get_array("users").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(
        cat.get_array("roles").unwrap(),
        &vec![Bson::Document(doc! {"role": "readWrite", "db": "shop"})]
    );

    // A new password: the old one stops working.
    run(&shop, doc! {"updateUser": "cat", "pwd": "new-pw"}).await;
    let old = login(&srv, "cat", "cat-pw", "shop", None).await;
    let e = old
        .database("shop")
        .run_command(doc! {"ping": 1})
        .await
        .unwrap_err();
    assert_eq!(auth_error_code(&e), Some(18));
    let new = login(&srv, "cat", "new-pw", "shop", None).await;
    new.database("shop")
        .collection::<Document>("c")
        .insert_one(doc! {"x": 1})
        .await
        .unwrap();

    run(
        &root.database("other"),
        doc! {"createUser": "eve", "pwd": "x", "roles": []},
    )
    .await;
    let all = run(
        &root.database("admin"),
        doc! {"usersInfo": {"forAllDBs": true}},
    )
    .await;
    let mut names: Vec<String> = all
        .get_array("users")
        .unwrap()
        .iter()
        .map(|u| u.as_document().unwrap().get_str("_id").unwrap().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["admin.boss", "other.eve", "shop.cat"]);
    let all_on_shop = run(&shop, doc! {"usersInfo": 1}).await;
    assert_eq!(all_on_shop.get_array("users").unwrap().len(), 1);

    run(&shop, doc! {"createUser": "fox", "pwd": "x", "roles": []}).await;
    let dropped = run(&shop, doc! {"dropAllUsersFromDatabase": 1}).await;
    assert_eq!(num(&dropped, "n"), 2);
    run(&root.database("other"), doc! {"dropUser": "eve"}).await;
    let all = run(
        &root.database("admin"),
        doc! {"usersInfo": {"forAllDBs": true}},
    )
    .await;
    assert_eq!(all.get_array("users").unwrap().len(), 1);
}

#[tokio::test]
async fn role_commands_and_their_errors() {
    let srv = secured().await;
    let root = admin(&srv).await;
    let shop = root.database("shop");
    run(
        &shop,
        doc! {"createRole": "orderReader", "privileges": [
        {"resource": {"db": "shop", "collection": "orders"}, "actions": ["find"]}], "roles": []},
    )
    .await;
    expect_command_error(
        &shop,
        doc! {"createRole": "orderReader", "privileges": [], "roles": []},
        51002,
        "Location51002",
    )
    .await;
    expect_command_error(
        &shop,
        doc! {"createRole": "r2", "privileges": [], "roles": ["noSuchRole"]},
        31,
        "RoleNotFound",
    )
    .await;
    expect_command_error(
        &shop,
        doc! {"createRole": "r2", "privileges": [{"resource": {"cluster": true}, "actions": ["serverStatus"]}], "roles": []},
        2,
        "BadValue",
    )
    .await;
    expect_command_error(&shop, doc! {"dropRole": "noSuchRole"}, 31, "RoleNotFound").await;
    expect_command_error(
        &shop,
        doc! {"grantPrivilegesToRole": "noSuchRole", "privileges": []},
        31,
        "RoleNotFound",
    )
    .await;

    run(
        &shop,
        doc! {"grantPrivilegesToRole": "orderReader", "privileges": [
        {"resource": {"db": "shop", "collection": "orders"}, "actions": ["insert"]}]},
    )
    .await;
    let info = run(
        &shop,
        doc! {"rolesInfo": "orderReader", "showPrivileges": true},
    )
    .await;
    let role = info.get_array("roles").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(role.get_str("role").unwrap(), "orderReader");
    assert_eq!(role.get_str("db").unwrap(), "shop");
    assert!(!role.get_bool("isBuiltin").unwrap());
    let privileges = role.get_array("privileges").unwrap();
    assert_eq!(privileges.len(), 1);
    let mut actions: Vec<&str> = privileges[0]
        .as_document()
        .unwrap()
        .get_array("actions")
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    actions.sort();
    assert_eq!(actions, ["find", "insert"]);
    run(
        &shop,
        doc! {"revokePrivilegesFromRole": "orderReader", "privileges": [
        {"resource": {"db": "shop", "collection": "orders"}, "actions": ["insert"]}]},
    )
    .await;

    run(
        &shop,
        doc! {"createRole": "clerk", "privileges": [], "roles": []},
    )
    .await;
    run(
        &shop,
        doc! {"grantRolesToRole": "clerk", "roles": ["orderReader"]},
    )
    .await;
    expect_command_error(
        &shop,
        doc! {"grantRolesToRole": "orderReader", "roles": ["clerk"]},
        93,
        "GraphContainsCycle",
    )
    .await;
    let info = run(&shop, doc! {"rolesInfo": 1}).await;
    let names: Vec<&str> = info
        .get_array("roles")
        .unwrap()
        .iter()
        .map(|r| r.as_document().unwrap().get_str("role").unwrap())
        .collect();
    assert_eq!(names, ["clerk", "orderReader"]);
    let info = run(&shop, doc! {"rolesInfo": 1, "showBuiltinRoles": true}).await;
    let names: Vec<&str> = info
        .get_array("roles")
        .unwrap()
        .iter()
        .map(|r| r.as_document().unwrap().get_str("role").unwrap())
        .collect();
    for builtin in ["read", "readWrite", "dbAdmin", "userAdmin"] {
        assert!(names.contains(&builtin), "{names:?}");
    }
    let clerk = run(&shop, doc! {"rolesInfo": "clerk"}).await;
    let clerk = clerk.get_array("roles").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(
        clerk.get_array("inheritedRoles").unwrap(),
        &vec![Bson::Document(doc! {"role": "orderReader", "db": "shop"})]
    );

    // A user with the custom role reads orders, nothing else.
    run(
        &shop,
        doc! {"createUser": "gus", "pwd": "gus-pw", "roles": ["clerk"]},
    )
    .await;
    let gus = login(&srv, "gus", "gus-pw", "shop", None).await;
    gus.database("shop")
        .collection::<Document>("orders")
        .find_one(doc! {})
        .await
        .unwrap();
    let e = gus
        .database("shop")
        .collection::<Document>("customers")
        .find_one(doc! {})
        .await
        .unwrap_err();
    assert_eq!(failure(&e).unwrap().code, 13);

    // updateRole replaces; dropping the inherited role takes it from clerk.
    run(
        &shop,
        doc! {"updateRole": "clerk", "privileges": [
        {"resource": {"db": "shop", "collection": "customers"}, "actions": ["find"]}]},
    )
    .await;
    gus.database("shop")
        .collection::<Document>("customers")
        .find_one(doc! {})
        .await
        .unwrap();
    run(&shop, doc! {"dropRole": "orderReader"}).await;
    let e = gus
        .database("shop")
        .collection::<Document>("orders")
        .find_one(doc! {})
        .await
        .unwrap_err();
    assert_eq!(failure(&e).unwrap().code, 13);
    let clerk = run(&shop, doc! {"rolesInfo": "clerk"}).await;
    let clerk = clerk.get_array("roles").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert!(clerk.get_array("roles").unwrap().is_empty());
    let dropped = run(&shop, doc! {"dropAllRolesFromDatabase": 1}).await;
    assert_eq!(num(&dropped, "n"), 1);
}

#[tokio::test]
async fn connection_status_and_logout() {
    let srv = secured().await;
    let root = admin(&srv).await;
    run(
        &root.database("shop"),
        doc! {"createUser": "hal", "pwd": "hal-pw", "roles": ["read"]},
    )
    .await;
    let hal = login(&srv, "hal", "hal-pw", "shop", None).await;
    let status = run(
        &hal.database("shop"),
        doc! {"connectionStatus": 1, "showPrivileges": true},
    )
    .await;
    let info = status.get_document("authInfo").unwrap();
    assert_eq!(
        info.get_array("authenticatedUsers").unwrap(),
        &vec![Bson::Document(doc! {"user": "hal", "db": "shop"})]
    );
    assert_eq!(
        info.get_array("authenticatedUserRoles").unwrap(),
        &vec![Bson::Document(doc! {"role": "read", "db": "shop"})]
    );
    assert!(!info
        .get_array("authenticatedUserPrivileges")
        .unwrap()
        .is_empty());

    // logout and the next command on the same connection: one
    // connection, so the pool's one socket carries both.
    let one = srv
        .client_with(|o| {
            o.max_pool_size = Some(1);
            o.credential = Some(
                Credential::builder()
                    .username("hal".to_string())
                    .password("hal-pw".to_string())
                    .source("shop".to_string())
                    .build(),
            );
        })
        .await;
    let db = one.database("shop");
    db.collection::<Document>("orders")
        .find_one(doc! {})
        .await
        .unwrap();
    assert_ok(&run(&db, doc! {"logout": 1}).await);
    let status = run(&db, doc! {"connectionStatus": 1}).await;
    assert!(status
        .get_document("authInfo")
        .unwrap()
        .get_array("authenticatedUsers")
        .unwrap()
        .is_empty());
    expect_command_error(&db, doc! {"find": "orders"}, 13, "Unauthorized").await;
}

#[tokio::test]
async fn cursors_belong_to_the_user_that_opened_them() {
    let srv = secured().await;
    let root = admin(&srv).await;
    let shop = root.database("shop");
    for user in ["alice", "bob"] {
        run(
            &shop,
            doc! {"createUser": user, "pwd": format!("{user}-pw"), "roles": ["readWrite"]},
        )
        .await;
    }
    let orders = shop.collection::<Document>("orders");
    orders
        .insert_many((0..6).map(|i| doc! {"_id": i}).collect::<Vec<_>>())
        .await
        .unwrap();
    let alice = login(&srv, "alice", "alice-pw", "shop", None).await;
    let bob = login(&srv, "bob", "bob-pw", "shop", None).await;
    let first = run(
        &alice.database("shop"),
        doc! {"find": "orders", "batchSize": 2},
    )
    .await;
    let id = first.get_document("cursor").unwrap().get_i64("id").unwrap();
    assert_ne!(id, 0);
    let f = expect_command_error(
        &bob.database("shop"),
        doc! {"getMore": id, "collection": "orders", "batchSize": 2},
        13,
        "Unauthorized",
    )
    .await;
    assert_eq!(
        f.message,
        format!("cursor id {id} was not created by the authenticated user")
    );
    expect_command_error(
        &bob.database("shop"),
        doc! {"killCursors": "orders", "cursors": [id]},
        13,
        "Unauthorized",
    )
    .await;
    // Alice reads on, from whichever of her pool's connections, and the
    // cursor survived Bob's attempts.
    let next = run(
        &alice.database("shop"),
        doc! {"getMore": id, "collection": "orders", "batchSize": 2},
    )
    .await;
    let batch = next
        .get_document("cursor")
        .unwrap()
        .get_array("nextBatch")
        .unwrap();
    assert_eq!(batch.len(), 2);
    let killed = run(
        &alice.database("shop"),
        doc! {"killCursors": "orders", "cursors": [id]},
    )
    .await;
    assert_eq!(
        killed.get_array("cursorsKilled").unwrap(),
        &vec![Bson::Int64(id)]
    );
}

#[tokio::test]
async fn users_see_themselves_and_change_their_own_password_only_when_granted() {
    let srv = secured().await;
    let root = admin(&srv).await;
    let shop = root.database("shop");
    run(
        &shop,
        doc! {"createRole": "selfService", "roles": [], "privileges": [
            {"resource": {"db": "shop", "collection": ""}, "actions": ["changeOwnPassword", "changeOwnCustomData"]},
        ]},
    )
    .await;
    run(
        &shop,
        doc! {"createUser": "carol", "pwd": "carol-pw", "roles": ["read", "selfService"]},
    )
    .await;
    run(
        &shop,
        doc! {"createUser": "dave", "pwd": "dave-pw", "roles": ["read"]},
    )
    .await;
    let carol = login(&srv, "carol", "carol-pw", "shop", None).await;
    let mine = carol.database("shop");
    // usersInfo about oneself needs no viewUser; about another it does.
    let me = run(&mine, doc! {"usersInfo": "carol"}).await;
    let users = me.get_array("users").unwrap();
    assert_eq!(users.len(), 1);
    let me = run(&mine, doc! {"usersInfo": {"user": "carol", "db": "shop"}}).await;
    assert_eq!(me.get_array("users").unwrap().len(), 1);
    expect_command_error(&mine, doc! {"usersInfo": "dave"}, 13, "Unauthorized").await;
    expect_command_error(&mine, doc! {"usersInfo": 1}, 13, "Unauthorized").await;
    // Her own password and custom data, through changeOwn…; not Dave's,
    // and not her roles.
    run(&mine, doc! {"updateUser": "carol", "pwd": "carol-new"}).await;
    run(
        &mine,
        doc! {"updateUser": "carol", "customData": {"team": "ops"}},
    )
    .await;
    expect_command_error(
        &mine,
        doc! {"updateUser": "dave", "pwd": "stolen"},
        13,
        "Unauthorized",
    )
    .await;
    expect_command_error(
        &mine,
        doc! {"updateUser": "carol", "roles": ["readWrite"]},
        13,
        "Unauthorized",
    )
    .await;
    let again = login(&srv, "carol", "carol-new", "shop", None).await;
    let status = run(&again.database("shop"), doc! {"usersInfo": "carol"}).await;
    let user = status.get_array("users").unwrap()[0].as_document().unwrap();
    assert_eq!(
        user.get_document("customData").unwrap(),
        &doc! {"team": "ops"}
    );
    // Without changeOwnPassword, Dave cannot change even his own.
    let dave = login(&srv, "dave", "dave-pw", "shop", None).await;
    expect_command_error(
        &dave.database("shop"),
        doc! {"updateUser": "dave", "pwd": "dave-new"},
        13,
        "Unauthorized",
    )
    .await;
}

/// The data every matrix check looks at after a denial.
async fn snapshot(root: &Client) -> (Vec<Document>, Vec<String>, Vec<String>) {
    let shop = root.database("shop");
    let docs: Vec<Document> = shop
        .collection::<Document>("orders")
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut colls = shop.list_collection_names().await.unwrap();
    colls.sort();
    let indexes = shop
        .collection::<Document>("orders")
        .list_index_names()
        .await
        .unwrap();
    (docs, colls, indexes)
}

#[tokio::test]
async fn roles_grant_what_they_should_and_denials_change_nothing() {
    let srv = secured().await;
    let root = admin(&srv).await;
    let shop = root.database("shop");
    shop.collection::<Document>("orders")
        .insert_many(vec![doc! {"_id": 1, "n": 1}, doc! {"_id": 2, "n": 2}])
        .await
        .unwrap();
    run(
        &shop,
        doc! {"createRole": "onlyInsert", "privileges": [
        {"resource": {"db": "shop", "collection": "orders"}, "actions": ["insert"]}], "roles": []},
    )
    .await;
    let users: &[(&str, Bson)] = &[
        ("reader", Bson::from("read")),
        ("writer", Bson::from("readWrite")),
        ("dbadmin", Bson::from("dbAdmin")),
        ("useradmin", Bson::from("userAdmin")),
        (
            "monitor",
            Bson::Document(doc! {"role": "clusterMonitor", "db": "admin"}),
        ),
        ("inserter", Bson::from("onlyInsert")),
    ];
    for (user, role) in users {
        run(
            &shop,
            doc! {"createUser": *user, "pwd": "pw", "roles": [role.clone()]},
        )
        .await;
    }
    let before = snapshot(&root).await;

    // Each command and whether each user may run it, in `users` order:
    // reader, writer, dbadmin, useradmin, monitor, inserter.
    let matrix: Vec<(Document, [bool; 6])> = vec![
        (
            doc! {"find": "orders", "filter": {}},
            [true, true, false, false, false, false],
        ),
        (
            doc! {"count": "orders"},
            [true, true, false, false, false, false],
        ),
        (
            doc! {"insert": "orders", "documents": [{"_id": 10}]},
            [false, true, false, false, false, true],
        ),
        (
            doc! {"update": "orders", "updates": [{"q": {"_id": 1}, "u": {"$set": {"n": 5}}}]},
            [false, true, false, false, false, false],
        ),
        (
            doc! {"delete": "orders", "deletes": [{"q": {"_id": 2}, "limit": 1}]},
            [false, true, false, false, false, false],
        ),
        (
            doc! {"createIndexes": "orders", "indexes": [{"key": {"n": 1}, "name": "n_1"}]},
            [false, true, true, false, false, false],
        ),
        (
            doc! {"drop": "orders"},
            [false, true, true, false, false, false],
        ),
        (
            doc! {"serverStatus": 1},
            [false, false, false, false, true, false],
        ),
        (
            doc! {"usersInfo": 1},
            [false, false, false, true, false, false],
        ),
    ];
    for (cmd, allowed) in &matrix {
        for (i, (user, _)) in users.iter().enumerate() {
            let client = login(&srv, user, "pw", "shop", None).await;
            let db = if cmd.contains_key("serverStatus") {
                client.database("admin")
            } else {
                client.database("shop")
            };
            if allowed[i] {
                continue;
            }
            let f = expect_command_error(&db, cmd.clone(), 13, "Unauthorized").await;
            assert!(
                f.message.starts_with("not authorized on "),
                "{user}: {cmd}: {}",
                f.message
            );
            assert_eq!(snapshot(&root).await, before, "{user}: {cmd} changed data");
        }
    }
    // userAdmin of shop hands out shop's roles, not another database's.
    let ua = login(&srv, "useradmin", "pw", "shop", None).await;
    let ua_shop = ua.database("shop");
    run(
        &ua_shop,
        doc! {"createUser": "made", "pwd": "x", "roles": ["read"]},
    )
    .await;
    expect_command_error(
        &ua_shop,
        doc! {"createUser": "made2", "pwd": "x", "roles": [{"role": "readWrite", "db": "other"}]},
        13,
        "Unauthorized",
    )
    .await;
    expect_command_error(
        &ua_shop,
        doc! {"grantRolesToUser": "made", "roles": [{"role": "root", "db": "admin"}]},
        13,
        "Unauthorized",
    )
    .await;
    let made = run(&shop, doc! {"usersInfo": ["made", "made2"]}).await;
    let made = made.get_array("users").unwrap();
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(
        made[0].as_document().unwrap().get_array("roles").unwrap(),
        &vec![Bson::Document(doc! {"role": "read", "db": "shop"})]
    );

    // Then what each may do, on fresh data where it writes.
    for (cmd, allowed) in &matrix {
        for (i, (user, _)) in users.iter().enumerate() {
            if !allowed[i] {
                continue;
            }
            let client = login(&srv, user, "pw", "shop", None).await;
            let db = if cmd.contains_key("serverStatus") {
                client.database("admin")
            } else {
                client.database("shop")
            };
            let reply = run(&db, cmd.clone()).await;
            assert_ok(&reply);
            // Put the data back for the next check.
            let orders = root.database("shop").collection::<Document>("orders");
            orders.delete_many(doc! {}).await.unwrap();
            orders
                .insert_many(vec![doc! {"_id": 1, "n": 1}, doc! {"_id": 2, "n": 2}])
                .await
                .unwrap();
        }
    }
}
