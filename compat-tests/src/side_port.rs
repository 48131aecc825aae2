//! Asking the HTTP side port (`--http-bind`) what tests check: a plain
//! HTTP/1.1 GET, and `/metrics` read into series and values.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `GET path`: the status code, the head and the body. Panics when the
/// port refuses the connection (see [`try_get`]).
pub async fn get(side: SocketAddr, path: &str) -> (u16, String, String) {
    try_get(side, path)
        .await
        .unwrap_or_else(|e| panic!("side port {side}: {e}"))
}

/// [`get`], or why there was no answer.
pub async fn try_get(side: SocketAddr, path: &str) -> Result<(u16, String, String), String> {
    let mut stream = TcpStream::connect(side)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {side}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("send: {e}"))?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .map_err(|e| format!("read: {e}"))?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no header end in {response:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    Ok((status, head.to_string(), body.to_string()))
}

/// One scrape of `/metrics`, checked to be OpenMetrics text: each series
/// (name with labels) and its value.
pub async fn scrape(side: SocketAddr) -> BTreeMap<String, f64> {
    let (status, head, body) = get(side, "/metrics").await;
    assert_eq!(status, 200, "{head}\n{body}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("no value in {l:?}"));
            let value = value
                .parse()
                .unwrap_or_else(|_| panic!("no number in {l:?}"));
            (series.to_string(), value)
        })
        .collect()
}

/// Each partition's value of `metric` for `db.coll`, by partition name.
pub fn per_partition(
    m: &BTreeMap<String, f64>,
    metric: &str,
    db: &str,
    coll: &str,
) -> BTreeMap<String, f64> {
    let prefix = format!("{metric}{{database=\"{db}\",collection=\"{coll}\",partition=\"");
    m.iter()
        .filter_map(|(series, v)| {
            let partition = series.strip_prefix(&prefix)?.strip_suffix("\"}")?;
            Some((partition.to_string(), *v))
        })
        .collect()
}
