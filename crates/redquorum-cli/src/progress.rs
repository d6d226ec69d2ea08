//! The live progress line of `demo` and `bench` (indicatif, on stderr).
//!
//! When stderr is not a terminal the bar draws nothing, and the few lines worth keeping (a node
//! killed, the results) go to stdout as plain lines, so logs and tests see them too.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A bar that fills over `length` of wall time; advance it with [`tick`].
pub fn timed(length: Duration) -> ProgressBar {
    let bar = ProgressBar::new(millis(length));
    if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed:>3} [{bar:30}] {msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// Moves the bar to `elapsed` and shows `message`.
pub fn tick(bar: &ProgressBar, elapsed: Duration, message: String) {
    bar.set_position(millis(elapsed));
    bar.set_message(message);
}

/// Prints `line` above the bar, or on stdout when the bar is hidden or done.
pub fn say(bar: &ProgressBar, line: &str) {
    if bar.is_hidden() || bar.is_finished() {
        // Best effort, like the bar itself: a closed stdout must not stop the run.
        let _ = crate::output::print(line);
    } else {
        bar.println(line);
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
