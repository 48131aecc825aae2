//! `getLastRequestStatistics`: Cosmos DB's way to read the request
//! charge of the last operation on this connection. The charge itself is
//! recorded by [`super::handle`] for every command but the ones listed in
//! [`replaces_last_request`].

use bson::{doc, Document};

use super::request::Request;
pub use super::state::LastRequest;
use crate::error::Result;
use crate::router::charge::request_charge;

/// Whether a command becomes the connection's "last request". Not this
/// command itself (reading the statistics twice gives the same answer),
/// nor what drivers send on their own to open and watch a connection
/// (handshake, monitoring, authentication, session bookkeeping), which
/// would otherwise slip in between an application's operation and its
/// question about it.
pub fn replaces_last_request(command: &str) -> bool {
    !matches!(
        command,
        "getLastRequestStatistics"
            | "hello"
            | "isMaster"
            | "ismaster"
            | "ping"
            | "buildInfo"
            | "buildinfo"
            | "saslStart"
            | "saslContinue"
            | "endSessions"
            | "whatsmyuri"
            | "getLastError"
    )
}

pub async fn run(req: &Request<'_>) -> Result<Document> {
    let last = req.conn.last_request();
    let (command, charge, millis, activity) = match last {
        Some(l) => (
            l.command,
            l.charge,
            l.millis,
            l.activity.to_uuid().to_string(),
        ),
        None => (String::new(), 0, 0, String::new()),
    };
    Ok(doc! {
        "_t": "GetRequestStatisticsResponse",
        "ok": 1.0,
        "CommandName": command,
        "RequestCharge": request_charge(charge),
        "RequestDurationInMilliSeconds": millis,
        "ActivityId": activity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshakes_and_the_question_itself_do_not_replace_the_last_request() {
        assert!(replaces_last_request("find"));
        assert!(replaces_last_request("insert"));
        assert!(!replaces_last_request("getLastRequestStatistics"));
        assert!(!replaces_last_request("hello"));
        assert!(!replaces_last_request("ping"));
    }
}
