//! A user's or role's name: the pair MongoDB names both by.

/// The database of users whose credentials the server does not keep:
/// those that log in with a client certificate (MONGODB-X509). Not a
/// database of data, but a name commands may run on.
pub const EXTERNAL_DB: &str = "$external";

/// A user or role name: `name` defined on database `db`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UserName {
    pub name: String,
    pub db: String,
}

impl UserName {
    pub fn new(name: impl Into<String>, db: impl Into<String>) -> UserName {
        UserName {
            name: name.into(),
            db: db.into(),
        }
    }
}

impl std::fmt::Display for UserName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.name, self.db)
    }
}
