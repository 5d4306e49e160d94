//! Logs: `tracing` to stderr, as text or JSON lines. `RUST_LOG` overrides the default filter.
//!
//! Lines are formatted on the thread that logs them and written by a thread of their own
//! (`tracing-appender`), through a buffer that is flushed whenever no more lines are waiting:
//! under load one `write` carries many lines instead of one `write` per line on the threads that
//! serve requests. Nothing waits on a timer, so a line is written as soon as that thread gets to
//! it. Should lines come faster than they can be written, loggers wait (nothing is dropped). At a
//! crash (SIGKILL) the lines not yet written are lost; a panic's message goes to stderr directly.
//! The log thread rests `WRITE_PAUSE` after each write (see `Paced`), so a line reaches stderr
//! at most a few milliseconds after it was logged. What each of these saved on the submit path
//! is measured in docs/benchmarks.md ("What limits each figure").

pub mod access;
pub mod request;

use std::io::{IsTerminal, Write};
use std::time::Duration;

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

const DEFAULT_FILTER: &str = "info,sqlx=warn,hyper=warn,reqwest=warn";

/// Lines buffered before a `write`.
const WRITE_BUFFER: usize = 64 * 1024;
/// Lines that may wait for the log thread; loggers wait beyond that. The channel is allocated
/// whole at the start: tracing-appender's default of 128,000 lines took about 4 MiB. With the
/// thread writing every `WRITE_PAUSE`, 40,000 lines a second queue about 200 at a time.
const QUEUED_LINES: usize = 16_384;
/// How long the log thread rests after each write; see `Paced`.
const WRITE_PAUSE: Duration = Duration::from_millis(5);

/// Stderr, buffered, written out at most once per `WRITE_PAUSE`. The log thread writes what is
/// waiting, flushes, then rests here; meanwhile new lines queue in its channel, and a logger only
/// wakes the thread when it is idle. Without the rest the thread woke for nearly every line under
/// load, and those wake-ups cost more than the lines' writes.
struct Paced {
    out: std::io::BufWriter<std::io::Stderr>,
}

impl Write for Paced {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.out.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let written = !self.out.buffer().is_empty();
        self.out.flush()?;
        if written {
            std::thread::sleep(WRITE_PAUSE);
        }
        Ok(())
    }
}

/// Start logging. Keep the guard until the end: dropping it writes the lines still waiting.
pub fn init(format: &str) -> WorkerGuard {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(false)
        .buffered_lines_limit(QUEUED_LINES)
        .thread_name("easel-logs")
        .finish(Paced {
            out: std::io::BufWriter::with_capacity(WRITE_BUFFER, std::io::stderr()),
        });
    let registry = tracing_subscriber::registry().with(filter);
    let json = format == "json";
    // Colour codes only for a terminal, not for a file or a log collector.
    let ansi = !json && std::io::stderr().is_terminal();
    let result = if json {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(true)
                    .with_writer(writer.clone()),
            )
            .try_init()
    } else {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(ansi)
                    .with_writer(writer.clone()),
            )
            .try_init()
    };
    // A second init (in tests) keeps the first subscriber, and its access lines' writer.
    if result.is_ok() && !ansi {
        access::install(writer, json);
    }
    guard
}
