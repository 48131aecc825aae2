//! What the server is doing now: `currentOp` (and the `$currentOp`
//! stage), `killOp`, and `top`'s time per collection.
//!
//! The dispatch in `mod.rs` lists every command while it runs
//! ([`listing`]); the router lists its own long work (partition splits,
//! TTL passes). Index builds and redistributions report how far they
//! have come, which `currentOp` shows as `progress: {done, total}` with
//! MongoDB's `msg`.

use bson::{doc, Bson, Document};

use super::args::{int_or_long, number_as_i64};
use super::request::Request;
use super::state::ConnectionInfo;
use crate::error::{Error, ErrorCode, Result};
use crate::query::active::{ActiveOp, Client, Listing};
use crate::query::filter::Filter;

/// How a client command is listed while it runs.
pub fn listing(conn: &ConnectionInfo, name: &str, ns: String, body: &Document) -> Listing {
    Listing {
        op: super::activity::op_kind(name),
        ns,
        command: body.clone(),
        desc: format!("conn{}", conn.id),
        client: Some(Client {
            connection_id: conn.id,
            address: conn.peer.to_string(),
            app_name: conn.app_name().map(str::to_string),
        }),
    }
}

/// `currentOp`: `{inprog: [...]}`, the operations running now that
/// match the command's filter (its fields other than the options).
pub async fn current_op(req: &Request<'_>) -> Result<Document> {
    let mut filter = Document::new();
    for (k, v) in req.body.iter().skip(1) {
        match k.as_str() {
            "$all" | "$ownOps" | "$truncateOps" | "allUsers" | "idleConnections" => {}
            k if k.starts_with('$') || super::args::GENERIC_FIELDS.contains(&k) => {}
            _ => {
                filter.insert(k.clone(), v.clone());
            }
        }
    }
    let filter = Filter::parse(&filter)?;
    let inprog: Vec<Bson> = documents(req)
        .into_iter()
        .filter(|d| filter.matches(d))
        .map(Bson::Document)
        .collect();
    Ok(doc! {"inprog": inprog})
}

/// The documents `currentOp` and `$currentOp` report: one per running
/// operation, oldest first.
pub fn documents(req: &Request<'_>) -> Vec<Document> {
    let host = req.state.router.host().to_string();
    req.state
        .router
        .operations()
        .list()
        .iter()
        .map(|op| describe(op, &host))
        .collect()
}

/// One operation as mongod's `currentOp` shows it.
fn describe(op: &ActiveOp, host: &str) -> Document {
    let running = op.started.elapsed();
    let mut d = doc! {
        "type": "op",
        "host": host,
        "desc": op.desc.clone(),
    };
    if let Some(client) = &op.client {
        d.insert("connectionId", int_or_long(client.connection_id));
        d.insert("client", client.address.clone());
        if let Some(app) = &client.app_name {
            d.insert("appName", app.clone());
        }
    }
    d.insert("active", true);
    d.insert(
        "currentOpTime",
        bson::DateTime::now()
            .try_to_rfc3339_string()
            .unwrap_or_default(),
    );
    d.insert("opid", int_or_long(op.opid));
    d.insert(
        "secs_running",
        i64::try_from(running.as_secs()).unwrap_or(i64::MAX),
    );
    d.insert(
        "microsecs_running",
        i64::try_from(running.as_micros()).unwrap_or(i64::MAX),
    );
    d.insert("op", op.op);
    d.insert("ns", op.ns.clone());
    d.insert("redacted", false);
    d.insert("command", op.command.clone());
    d.insert("numYields", 0);
    d.insert("locks", Document::new());
    d.insert("waitingForLock", false);
    if op.operation.is_stopping() {
        d.insert("killPending", true);
    }
    if let Some(p) = op.operation.progress() {
        let percent = (p.done * 100).checked_div(p.total).unwrap_or(0);
        d.insert(
            "msg",
            format!("{} {}/{} {percent}%", p.message, p.done, p.total),
        );
        d.insert(
            "progress",
            doc! {"done": int_or_long(p.done), "total": int_or_long(p.total)},
        );
    }
    d
}

/// `killOp: 1, op: <opid>`: asks the operation to stop at its next check;
/// it fails with 11601 `Interrupted`. An id no operation has is not an
/// error, as in MongoDB.
pub async fn kill_op(req: &Request<'_>) -> Result<Document> {
    let opid = match req.body.get("op") {
        None => {
            return Err(Error::new(
                ErrorCode::Location(50759),
                "Did not provide \"op\" field",
            ))
        }
        // A mongos's `shard:opid`: the shard is this process.
        Some(Bson::String(s)) => s
            .rsplit(':')
            .next()
            .and_then(|id| id.parse::<i64>().ok())
            .ok_or_else(|| Error::new(ErrorCode::BadValue, format!("invalid op : {s}")))?,
        Some(v) => {
            number_as_i64(v).ok_or_else(|| Error::type_mismatch(format!("invalid op : {v}")))?
        }
    };
    let killed = u32::try_from(opid)
        .map(|id| req.state.router.operations().kill(id))
        .unwrap_or(false);
    if killed {
        tracing::info!(opid, "killing operation");
    }
    Ok(doc! {"info": "attempting to kill op"})
}

/// `top`: time and count per collection since start.
pub async fn top(req: &Request<'_>) -> Result<Document> {
    let router = &req.state.router;
    // Collections dropped since are not reported.
    req.state.top.retain(|ns| {
        ns.split_once('.')
            .and_then(|(db, coll)| crate::base::Namespace::new(db, coll).ok())
            .is_some_and(|ns| router.collection(&ns).is_some())
    });
    Ok(doc! {"totals": req.state.top.totals()})
}
