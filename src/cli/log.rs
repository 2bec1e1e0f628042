//! The binary's log: lines on stderr that a broken pipe cannot turn into a panic, each field
//! escaped, as text or JSON (`--log-format`).

use std::io::{self, Write};

use mediatord::config::LogFormat;
use mediatord::text;

/// Where log lines go: stderr, where a failed write is dropped, never reported. A log line is
/// worth less than the task that writes it: when the reader of stderr is gone (`2>&1 | head`, a
/// dead log driver) every write fails with EPIPE, and tracing-subscriber would report that with
/// `eprintln!`, which panics on the same broken pipe inside whatever task was logging.
///
/// `json`: the line is a JSON object (`--log-format json`), written as a whole per event; the
/// characters serde leaves raw that a terminal would act on (C1 controls, bidi overrides) are
/// written as `\uXXXX` ([`text::escape_json`]). Text lines are escaped field by field instead
/// ([`escaped_fields`]).
#[derive(Debug, Clone, Copy)]
struct LossyStderr {
    json: bool,
}

impl Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let line = if self.json { std::str::from_utf8(buf).ok().map(text::escape_json) } else { None };
        let _ = match &line {
            Some(line) => io::stderr().write_all(line.as_bytes()),
            None => io::stderr().write_all(buf),
        };
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

/// How a text log line writes its fields (the message too): each value as tracing-subscriber
/// would, then escaped ([`text::escape`]), so a session id, an agent's stderr line or a device name
/// can neither forge a line nor drive the terminal that shows the log.
fn escaped_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> {
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let shown = format!("{value:?}");
        match field.name() {
            "message" => write!(w, "{}", text::escape(&shown)),
            // What a library logging through `log` adds (its target, module, and the source file
            // on the machine that built it): the line's target says the first already.
            name if name.starts_with("log.") => Ok(()),
            // Each field after its own space, so one left out leaves none.
            name => write!(w, " {name}={}", text::escape(&shown)),
        }
    })
}

pub(super) fn init_logging(format: LogFormat, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let ansi = io::IsTerminal::is_terminal(&io::stderr());
    let json = format == LogFormat::Json;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(move || LossyStderr { json })
        .log_internal_errors(false)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.fmt_fields(escaped_fields()).init(),
        LogFormat::Json => builder.json().init(),
    }
}
