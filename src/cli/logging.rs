//! Logs and progress on stderr (spinners only when stdout and stderr are terminals).
//! Never writes to stdout, and never logs a file's contents.

use std::fmt;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Installs the stderr subscriber. `RUST_LOG`, when set and not empty, decides;
/// otherwise warnings and errors show, `-q` leaves errors only, and each `-v` adds a
/// level (info, debug, trace).
pub fn init(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        (false, _) => "trace",
    };
    let filter = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .and_then(|v| EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .event_format(Line)
        .try_init();
}

/// `warning: <message>`: the shape of the command line's own error lines, with every
/// hidden character escaped, since a log names files and roots.
struct Line;

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => "error",
            Level::WARN => "warning",
            Level::INFO => "info",
            Level::DEBUG => "debug",
            Level::TRACE => "trace",
        };
        let mut text = String::new();
        ctx.format_fields(Writer::new(&mut text), event)?;
        writeln!(writer, "{level}: {}", super::output::terminal_line(&text))
    }
}

/// A spinner with `message` on stderr while slow work runs, or a hidden one when
/// stdout or stderr is not a terminal (a pipe, a file, a test), so nothing but the
/// output reaches a script.
pub fn spinner(message: &str) -> ProgressBar {
    if !(std::io::stdout().is_terminal() && std::io::stderr().is_terminal()) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner().with_message(message.to_owned());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// Awaits `work` with a [`spinner`] showing `message`, cleared at the end.
pub async fn spinning<T>(message: &str, work: impl Future<Output = T>) -> T {
    let progress = spinner(message);
    let done = work.await;
    progress.finish_and_clear();
    done
}

/// A bar counting `len` steps, hidden like [`spinner`].
pub fn bar(len: u64, message: &str) -> ProgressBar {
    if !(std::io::stdout().is_terminal() && std::io::stderr().is_terminal()) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len).with_message(message.to_owned());
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len}") {
        bar.set_style(style);
    }
    bar
}
