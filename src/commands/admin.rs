//! Small administrative commands drivers, mongosh and ODMs send while
//! connecting or monitoring: `ping`, `buildInfo`, `serverStatus`, ...

use std::sync::atomic::Ordering;

use bson::{doc, Bson, DateTime, Document};

use super::request::Request;
use super::version::{MONGODB_VERSION, MONGODB_VERSION_ARRAY};
use crate::base::host;
use crate::error::{Error, ErrorCode, Result};

/// Commands that only need `{ok: 1}` (`ping`, `endSessions`, `logout` …).
pub async fn ok(_req: &Request<'_>) -> Result<Document> {
    Ok(Document::new())
}

pub async fn build_info(_req: &Request<'_>) -> Result<Document> {
    Ok(doc! {
        "version": MONGODB_VERSION,
        "gitVersion": "shardgate",
        "versionArray": MONGODB_VERSION_ARRAY.to_vec(),
        "shardgateVersion": env!("CARGO_PKG_VERSION"),
        "bits": 64,
        "debug": false,
        "maxBsonObjectSize": crate::wire::MAX_BSON_OBJECT_SIZE as i32,
        "storageEngines": ["fjall"],
        "javascriptEngine": "none",
        "modules": [],
        "openssl": {"running": "disabled"},
        "buildEnvironment": {"target_os": std::env::consts::OS, "target_arch": std::env::consts::ARCH},
    })
}

pub async fn whats_my_uri(req: &Request<'_>) -> Result<Document> {
    Ok(doc! {"you": req.conn.peer.to_string()})
}

pub async fn host_info(_req: &Request<'_>) -> Result<Document> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as i32)
        .unwrap_or(1);
    let hostname = std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    Ok(doc! {
        "system": {
            "currentTime": DateTime::now(),
            "hostname": hostname,
            "cpuAddrSize": 64,
            "memSizeMB": (host::physical_memory().unwrap_or(0) >> 20) as i64,
            "numCores": cores,
            "cpuArch": std::env::consts::ARCH,
        },
        "os": {"type": std::env::consts::OS, "name": std::env::consts::OS},
        "extra": {},
    })
}

pub async fn server_status(req: &Request<'_>) -> Result<Document> {
    let c = &req.state.counters;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as i64;
    let rss_mb = host::proc_kib("/proc/self/status", "VmRSS:").unwrap_or(0) / 1024;
    let virt_mb = host::proc_kib("/proc/self/status", "VmSize:").unwrap_or(0) / 1024;
    let uptime = req.state.started.elapsed();
    Ok(doc! {
        "host": req.state.config.bind.to_string(),
        "version": MONGODB_VERSION,
        "process": "mongos",
        "pid": std::process::id() as i64,
        "uptime": uptime.as_secs_f64().floor(),
        "uptimeMillis": uptime.as_millis() as i64,
        "uptimeEstimate": uptime.as_secs() as i64,
        "localTime": DateTime::now(),
        "connections": {
            "current": load(&c.connections_current),
            "available": (req.state.config.max_connections as i64 - load(&c.connections_current)).max(0),
            "totalCreated": load(&c.connections_total),
            "awaitingTopologyChanges": load(&req.state.topology.awaiting),
        },
        "requestUnits": request_units(&req.state.router),
        "network": {
            "bytesIn": load(&c.traffic.bytes_in),
            "bytesOut": load(&c.traffic.bytes_out),
            "physicalBytesIn": load(&c.traffic.bytes_in),
            "physicalBytesOut": load(&c.traffic.bytes_out),
            "numRequests": load(&c.traffic.requests),
            "compression": compression(req.state.config.compressors),
        },
        "opcounters": {
            "insert": load(&c.op_insert),
            "query": load(&c.op_query),
            "update": load(&c.op_update),
            "delete": load(&c.op_delete),
            "getmore": load(&c.op_getmore),
            "command": load(&c.op_command),
        },
        "mem": {"bits": 64, "resident": rss_mb as i64, "virtual": virt_mb as i64, "supported": true},
        "metrics": {
            "document": {
                "deleted": load(&c.documents.deleted),
                "inserted": load(&c.documents.inserted),
                "returned": load(&c.documents.returned),
                "updated": load(&c.documents.updated),
            },
            "cursor": {
            "open": {"total": req.state.cursors.len() as i64, "noTimeout": 0_i64, "pinned": 0_i64},
            "timedOut": req.state.cursors.timed_out() as i64,
            "totalOpened": req.state.cursors.total_opened() as i64,
            // Not in MongoDB: results open cursors hold in memory.
            "memoryBytes": crate::aggregate::spill::held_bytes() as i64,
        }},
    })
}

pub async fn get_cmd_line_opts(req: &Request<'_>) -> Result<Document> {
    let c = &req.state.config;
    let mut parsed = doc! {
        "net": {"bindIp": c.bind.ip().to_string(), "port": c.bind.port() as i32},
        "storage": {"dbPath": c.data_dir.display().to_string()},
    };
    if let Some(file) = &c.config {
        parsed.insert("config", file.display().to_string());
    }
    // Every setting as the server runs with it, and where each that is
    // not the default came from (flag, environment or file).
    let mut settings = Document::new();
    let mut sources = Document::new();
    for s in &c.settings {
        let value = match s.values.as_slice() {
            [one] => Bson::String(one.clone()),
            many => Bson::Array(many.iter().cloned().map(Bson::String).collect()),
        };
        settings.insert(&s.name, value);
        if s.source != crate::config::SettingSource::Default {
            sources.insert(&s.name, s.source.name());
        }
    }
    parsed.insert("settings", settings);
    parsed.insert("settingSources", sources);
    Ok(doc! {"argv": crate::config::Config::argv(), "parsed": parsed})
}

pub async fn get_log(req: &Request<'_>) -> Result<Document> {
    match req.body.get("getLog") {
        Some(Bson::String(s)) if s == "*" => Ok(doc! {"names": ["global", "startupWarnings"]}),
        Some(Bson::String(s)) if s == "global" => {
            let (lines, written) = crate::base::recent_log::lines();
            Ok(doc! {"totalLinesWritten": written as i64, "log": lines})
        }
        Some(Bson::String(s)) if s == "startupWarnings" => {
            Ok(doc! {"totalLinesWritten": 0, "log": []})
        }
        Some(Bson::String(s)) => Err(Error::new(
            ErrorCode::InvalidOptions,
            format!("No log named '{s}'"),
        )),
        _ => Err(Error::type_mismatch(
            "Argument to getLog must be of type String; found another type",
        )),
    }
}

pub async fn start_session(_req: &Request<'_>) -> Result<Document> {
    let uuid = bson::Uuid::new();
    Ok(doc! {
        "id": {"id": bson::Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: uuid.bytes().to_vec() }},
        "timeoutMinutes": 30,
    })
}

/// `serverStatus.network.compression`: for each compressor the server
/// offers, the data bytes it compressed (replies) and decompressed
/// (requests) since it started, as mongod counts them.
fn compression(offered: crate::base::CompressorList) -> Document {
    let mut out = Document::new();
    for c in offered.iter() {
        let s = crate::wire::compression::stats(c);
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        out.insert(
            c.name(),
            doc! {
                "compressor": {
                    "bytesIn": n(s.compressor_bytes_in),
                    "bytesOut": n(s.compressor_bytes_out),
                },
                "decompressor": {
                    "bytesIn": n(s.decompressor_bytes_in),
                    "bytesOut": n(s.decompressor_bytes_out),
                },
            },
        );
    }
    out
}

/// `serverStatus.requestUnits`: RU charged and requests throttled (16500)
/// since the server started, over every collection.
fn request_units(router: &crate::router::Router) -> Document {
    let t = router.unit_totals();
    doc! {
        "consumed": t.consumed,
        "throttled": t.throttled as i64,
        "operationsCharged": t.operations as i64,
    }
}

/// `configureFailPoint` (`--enable-test-commands`): sets the
/// `failCommand` fail point ([`super::fail_point`]).
pub async fn configure_fail_point(req: &Request<'_>) -> Result<Document> {
    let b = &req.body;
    match b.get("configureFailPoint") {
        Some(Bson::String(name)) if name == "failCommand" => {}
        Some(Bson::String(name)) => {
            return Err(Error::new(
                ErrorCode::FailPointSetFailed,
                format!("{name} not found"),
            ))
        }
        _ => {
            return Err(Error::type_mismatch(
                "BSON field 'configureFailPoint.configureFailPoint' is the wrong type, expected type 'string'",
            ))
        }
    }
    let was = super::fail_point::configure(&req.state.fail_points, b.get("mode"), b.get("data"))?;
    Ok(doc! {"count": was})
}
