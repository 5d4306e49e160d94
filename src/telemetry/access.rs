//! The access line: one per request, written when it ends.
//!
//! It is the one line logged on every request, so it is formatted here, in the very shape
//! `tracing-subscriber`'s text and JSON formatters give every other line, and handed straight
//! to the log thread: through `tracing`, its fields went one by one through the formatter's
//! visitor, which cost a measurable share of a submit's CPU (docs/benchmarks.md, "The access
//! line written as it is"). `RUST_LOG` still decides whether it is written. Where the log is a
//! terminal (coloured) or was never set up by `telemetry::init` (easel as a library, the tests'
//! own subscriber), the line goes through `tracing` as before.

use std::io::Write;
use std::sync::OnceLock;

use tracing_appender::non_blocking::NonBlocking;
use uuid::Uuid;

/// What a request's access line says.
pub struct Line<'a> {
    pub method: &'a str,
    pub path: &'a str,
    /// The client's address: the peer's, or behind a trusted proxy the one it forwarded.
    pub client: Option<std::net::IpAddr>,
    pub request_id: Option<&'a str>,
    pub account: Option<&'a str>,
    pub task_id: Option<Uuid>,
    pub status: u16,
    pub latency_ms: f64,
}

/// Where access lines go when they skip `tracing`, and in which shape.
struct Sink {
    writer: NonBlocking,
    json: bool,
}

static SINK: OnceLock<Sink> = OnceLock::new();

/// Write access lines to `writer` (the log thread's) as text without colours, or as JSON.
pub(super) fn install(writer: NonBlocking, json: bool) {
    let _ = SINK.set(Sink { writer, json });
}

/// Log the access line of a request that has ended.
pub fn log(line: &Line) {
    if !tracing::enabled!(target: "easel::http::access", tracing::Level::INFO) {
        return;
    }
    let Some(sink) = SINK.get() else {
        return through_tracing(line);
    };
    let mut buf = Vec::with_capacity(384);
    let now = chrono::Utc::now();
    if sink.json {
        json(line, now, &mut buf);
    } else {
        text(line, now, &mut buf);
    }
    // The log thread's writer only queues the line; it fails only once that thread is gone.
    let _ = sink.writer.clone().write_all(&buf);
}

fn through_tracing(line: &Line) {
    tracing::info!(
        target: "easel::http::access",
        method = %line.method,
        path = %line.path,
        client = line.client.map(tracing::field::display),
        request_id = line.request_id,
        account = line.account,
        task_id = line.task_id.map(tracing::field::display),
        status = line.status,
        latency_ms = line.latency_ms,
        "request done"
    );
}

/// The time as `tracing-subscriber` writes it, `2026-11-27T10:34:27.761842Z`, written digit by
/// digit: through `chrono`'s formatter it was a fifth of the line's cost.
fn timestamp(now: chrono::DateTime<chrono::Utc>, buf: &mut Vec<u8>) {
    use chrono::{Datelike, Timelike};
    let t = now.naive_utc();
    digits(buf, t.year().max(0) as u32, 4);
    buf.push(b'-');
    digits(buf, t.month(), 2);
    buf.push(b'-');
    digits(buf, t.day(), 2);
    buf.push(b'T');
    digits(buf, t.hour(), 2);
    buf.push(b':');
    digits(buf, t.minute(), 2);
    buf.push(b':');
    digits(buf, t.second(), 2);
    buf.push(b'.');
    // `Utc::now` never gives a leap second; the bound only keeps the field six digits wide.
    digits(buf, (t.nanosecond() / 1000).min(999_999), 6);
    buf.push(b'Z');
}

/// `n` in decimal, padded with zeros to `width` digits.
fn digits(buf: &mut Vec<u8>, mut n: u32, width: usize) {
    let mut out = [b'0'; 10];
    let mut i = out.len();
    while n > 0 || i == out.len() {
        i -= 1;
        out[i] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    let start = i.min(out.len() - width);
    buf.extend_from_slice(&out[start..]);
}

/// A string quoted as `{:?}` quotes it; the usual one (printable ASCII, nothing to escape) is
/// copied as it is.
fn quoted(buf: &mut Vec<u8>, s: &str) {
    if s.bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
    {
        buf.push(b'"');
        buf.extend_from_slice(s.as_bytes());
        buf.push(b'"');
    } else {
        let _ = write!(buf, "{s:?}");
    }
}

fn uuid(buf: &mut Vec<u8>, id: Uuid) {
    let mut out = Uuid::encode_buffer();
    buf.extend_from_slice(id.hyphenated().encode_lower(&mut out).as_bytes());
}

/// `tracing-subscriber`'s text line: strings quoted and escaped as `{:?}` writes them, the
/// method and path as they are (they are logged with `%`), absent fields left out.
fn text(line: &Line, now: chrono::DateTime<chrono::Utc>, buf: &mut Vec<u8>) {
    timestamp(now, buf);
    buf.extend_from_slice(b"  INFO easel::http::access: request done method=");
    buf.extend_from_slice(line.method.as_bytes());
    buf.extend_from_slice(b" path=");
    buf.extend_from_slice(line.path.as_bytes());
    if let Some(client) = line.client {
        let _ = write!(buf, " client={client}");
    }
    if let Some(id) = line.request_id {
        buf.extend_from_slice(b" request_id=");
        quoted(buf, id);
    }
    if let Some(account) = line.account {
        buf.extend_from_slice(b" account=");
        quoted(buf, account);
    }
    if let Some(task) = line.task_id {
        buf.extend_from_slice(b" task_id=");
        uuid(buf, task);
    }
    buf.extend_from_slice(b" status=");
    digits(buf, line.status.into(), 1);
    let _ = writeln!(buf, " latency_ms={:?}", line.latency_ms);
}

/// `tracing-subscriber`'s JSON line, its keys in the same order.
fn json(line: &Line, now: chrono::DateTime<chrono::Utc>, buf: &mut Vec<u8>) {
    buf.extend_from_slice(b"{\"timestamp\":\"");
    timestamp(now, buf);
    buf.extend_from_slice(
        b"\",\"level\":\"INFO\",\"fields\":{\"message\":\"request done\",\"method\":",
    );
    string(buf, line.method);
    buf.extend_from_slice(b",\"path\":");
    string(buf, line.path);
    if let Some(client) = line.client {
        let _ = write!(buf, ",\"client\":\"{client}\"");
    }
    if let Some(id) = line.request_id {
        buf.extend_from_slice(b",\"request_id\":");
        string(buf, id);
    }
    if let Some(account) = line.account {
        buf.extend_from_slice(b",\"account\":");
        string(buf, account);
    }
    if let Some(task) = line.task_id {
        buf.extend_from_slice(b",\"task_id\":\"");
        uuid(buf, task);
        buf.push(b'"');
    }
    buf.extend_from_slice(b",\"status\":");
    digits(buf, line.status.into(), 1);
    buf.extend_from_slice(b",\"latency_ms\":");
    // serde_json writes a float as `tracing-subscriber` does (it uses serde_json), NaN as null.
    let _ = serde_json::to_writer(&mut *buf, &line.latency_ms);
    buf.extend_from_slice(b"},\"target\":\"easel::http::access\"}\n");
}

/// A JSON string, escaped.
fn string(buf: &mut Vec<u8>, s: &str) {
    let _ = serde_json::to_writer(&mut *buf, s);
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A writer the test reads back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);
    impl Write for Captured {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().write(b)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The line as `tracing-subscriber`'s formatter writes it, as `init` sets it up.
    fn through_subscriber(line: &Line, json: bool) -> String {
        let out = Captured::default();
        let writer = {
            let out = out.clone();
            move || out.clone()
        };
        let builder = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(writer);
        let dispatch: tracing::Dispatch = if json {
            builder
                .json()
                .with_current_span(true)
                .with_span_list(true)
                .finish()
                .into()
        } else {
            builder.finish().into()
        };
        tracing::dispatcher::with_default(&dispatch, || through_tracing(line));
        let bytes = out.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    fn ours(line: &Line, as_json: bool) -> String {
        let mut buf = Vec::new();
        let now = chrono::Utc::now();
        if as_json {
            json(line, now, &mut buf);
        } else {
            text(line, now, &mut buf);
        }
        String::from_utf8(buf).unwrap()
    }

    /// The two lines with their timestamps (which differ by when each was written) cut out;
    /// each timestamp must be in the same shape, to the microsecond.
    fn without_timestamp(line: &str) -> String {
        const SHAPE: &[u8] = b"dddd-dd-ddTdd:dd:dd.ddddddZ";
        let fits = |w: &[u8]| {
            w.iter().zip(SHAPE).all(|(c, s)| match s {
                b'd' => c.is_ascii_digit(),
                s => c == s,
            })
        };
        let at: Vec<usize> = line
            .as_bytes()
            .windows(SHAPE.len())
            .enumerate()
            .filter(|(_, w)| fits(w))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(at.len(), 1, "one timestamp in {line}");
        format!("{}TIME{}", &line[..at[0]], &line[at[0] + SHAPE.len()..])
    }

    #[test]
    fn timestamps_and_numbers_are_written_as_chrono_and_std_write_them() {
        for micros in [
            0,
            1,
            1_795_000_000_000_001,
            1_798_761_599_999_999,
            253_402_300_799_999_999,
        ] {
            let t = chrono::DateTime::from_timestamp_micros(micros).unwrap();
            let mut buf = Vec::new();
            timestamp(t, &mut buf);
            assert_eq!(
                String::from_utf8(buf).unwrap(),
                t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
            );
        }
        for n in [0, 7, 10, 200, 404, 65_535, u32::MAX] {
            let mut buf = Vec::new();
            digits(&mut buf, n, 1);
            assert_eq!(String::from_utf8(buf).unwrap(), n.to_string());
        }
    }

    #[test]
    fn the_line_is_the_one_tracing_subscriber_writes() {
        let task = Uuid::parse_str("f9ac13c6-645a-4660-9a46-44f17eef815c").unwrap();
        let lines = [
            Line {
                method: "POST",
                path: "/api/v1/imagine",
                client: Some("10.0.0.5".parse().unwrap()),
                request_id: Some("2af7d5cc-c26f-46eb-be9f-1e1a18e3fa42"),
                account: Some("ae4e0bf2-4a47-496b-99b9-1e57a929e0f5"),
                task_id: Some(task),
                status: 200,
                latency_ms: 0.342_199_000_000_000_03,
            },
            // A caller's request id may hold anything a header value may: quotes, backslashes,
            // bytes beyond ASCII, an escape character.
            Line {
                method: "GET",
                path: "/api/v1/tasks/%22x%22",
                client: Some("2001:db8::7".parse().unwrap()),
                request_id: Some("a \"quoted\" \\ id\u{1b}[31m é"),
                account: None,
                task_id: None,
                status: 404,
                latency_ms: 12.0,
            },
            Line {
                method: "PATCH",
                path: "/",
                client: None,
                request_id: None,
                account: Some("acct"),
                task_id: None,
                status: 401,
                latency_ms: 1e-7,
            },
        ];
        for line in &lines {
            for json in [false, true] {
                let expected = through_subscriber(line, json);
                let got = ours(line, json);
                assert_eq!(
                    without_timestamp(&got),
                    without_timestamp(&expected),
                    "json: {json}"
                );
                if json {
                    let value: serde_json::Value = serde_json::from_str(&got).unwrap();
                    assert_eq!(value["fields"]["message"], "request done");
                }
            }
        }
    }
}
