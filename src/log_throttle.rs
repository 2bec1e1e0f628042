//! A log line that may repeat at any rate — an agent writing garbage at full speed, a notification
//! target that drops or refuses thousands of deliveries — costs a couple of lines a second, not
//! one per occurrence: the first occurrence in each window is logged in full, the others are
//! counted, and the count is logged once the window is over.
//!
//! The owner of a [`LogThrottle`] closes windows itself (the agent's actor, on its timer); a
//! [`SharedLogThrottle`], for lines written from any task (a notification target's, the
//! mediator's refusals), starts a task to report the count when a window first holds one back.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::sync::lock;

/// How long a window lasts: the first line in it is logged, the rest summed up when it closes.
pub const LOG_WINDOW: Duration = Duration::from_secs(1);

/// One kind of repeated log line.
#[derive(Debug, Default)]
pub struct LogThrottle {
    /// When the current window opened, if one is open.
    window: Option<Instant>,
    suppressed: u64,
}

impl LogThrottle {
    /// Whether this occurrence should be logged in full (else it is counted). Close the previous
    /// window first ([`LogThrottle::close`]): a new window starts counting from zero only then.
    pub fn admit(&mut self, now: Instant) -> bool {
        match self.window {
            Some(opened) if now.duration_since(opened) < LOG_WINDOW => {
                self.suppressed += 1;
                false
            }
            _ => {
                self.window = Some(now);
                true
            }
        }
    }

    /// How many occurrences the open window has held back so far.
    pub fn suppressed(&self) -> u64 {
        self.suppressed
    }

    /// When the open window closes with something to report.
    pub fn report_at(&self) -> Option<Instant> {
        self.window.filter(|_| self.suppressed > 0).map(|opened| opened + LOG_WINDOW)
    }

    /// Closes the window if it is over; returns how many occurrences it did not log.
    pub fn close(&mut self, now: Instant) -> Option<u64> {
        let over = self.window.is_some_and(|opened| now.duration_since(opened) >= LOG_WINDOW);
        if !over {
            return None;
        }
        self.window = None;
        Some(std::mem::take(&mut self.suppressed)).filter(|n| *n > 0)
    }
}

/// A [`LogThrottle`] shared by whoever logs the line (await-free critical sections only), that
/// reports its own counts.
#[derive(Debug, Clone, Default)]
pub struct SharedLogThrottle(Arc<Mutex<LogThrottle>>);

impl SharedLogThrottle {
    /// Whether this occurrence should be logged in full. `report(n)` logs how many a window held
    /// back: a task started by the window's first held-back occurrence calls it when the window
    /// closes; without a runtime to run that task, the next occurrence after the window does.
    pub fn admit(&self, report: impl FnOnce(u64) + Send + 'static) -> bool {
        let now = Instant::now();
        let (admitted, closed, report_at) = {
            let mut throttle = lock(&self.0);
            let closed = throttle.close(now);
            let admitted = throttle.admit(now);
            let first_held = !admitted && throttle.suppressed() == 1;
            (admitted, closed, throttle.report_at().filter(|_| first_held))
        };
        match (closed, report_at.zip(tokio::runtime::Handle::try_current().ok())) {
            (Some(n), _) => report(n),
            (None, Some((at, runtime))) => {
                let shared = self.clone();
                runtime.spawn(async move {
                    tokio::time::sleep_until(at).await;
                    let closed = lock(&shared.0).close(Instant::now());
                    if let Some(n) = closed {
                        report(n);
                    }
                });
            }
            (None, None) => {}
        }
        admitted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #16, item 9: one line per window in full, the rest counted and reported when the
    /// window is over.
    #[tokio::test(start_paused = true)]
    async fn the_throttle_logs_the_first_and_counts_the_rest() {
        let mut log = LogThrottle::default();
        let start = Instant::now();
        assert_eq!(log.report_at(), None, "nothing held back, nothing to report");
        assert!(log.admit(start));
        assert_eq!(log.report_at(), None, "one line logged, nothing to report");
        for _ in 0..999 {
            assert!(!log.admit(Instant::now()));
        }
        assert_eq!(log.suppressed(), 999);
        assert_eq!(log.report_at(), Some(start + LOG_WINDOW));
        tokio::time::advance(LOG_WINDOW - Duration::from_millis(1)).await;
        assert_eq!(log.close(Instant::now()), None, "the window is still open");
        assert!(!log.admit(Instant::now()), "still the same window");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(log.close(Instant::now()), Some(1000));
        assert_eq!((log.report_at(), log.suppressed()), (None, 0));
        assert_eq!(log.close(Instant::now()), None, "a closed window reports once");
        assert!(log.admit(Instant::now()), "a new window logs its first line again");
        assert_eq!(log.report_at(), None, "nothing suppressed, nothing to report");
        tokio::time::advance(LOG_WINDOW).await;
        assert_eq!(log.close(Instant::now()), None, "a window that held nothing back reports nothing");
    }

    /// A window ends `LOG_WINDOW` after it opened, even when nobody closed it: the next line opens a
    /// new one and is logged.
    #[tokio::test(start_paused = true)]
    async fn a_line_exactly_one_window_later_opens_the_next_window() {
        let mut log = LogThrottle::default();
        assert!(log.admit(Instant::now()));
        tokio::time::advance(LOG_WINDOW - Duration::from_millis(1)).await;
        assert!(!log.admit(Instant::now()));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(log.admit(Instant::now()), "exactly one window later");
    }

    /// The shared throttle reports each window's count once, from its own task, when the window
    /// closes; the lines it admits are the first of each window.
    #[tokio::test(start_paused = true)]
    async fn the_shared_throttle_reports_its_counts_when_each_window_closes() {
        let log = SharedLogThrottle::default();
        let (tx, mut reports) = tokio::sync::mpsc::unbounded_channel();
        let line = || {
            let tx = tx.clone();
            log.admit(move |n| {
                let _ = tx.send(n);
            })
        };
        let tasks = || tokio::runtime::Handle::current().metrics().num_alive_tasks();
        assert!(line());
        assert_eq!(tasks(), 0, "a line logged in full starts nothing");
        assert_eq!((0..500).filter(|_| line()).count(), 0, "the rest of the window is held back");
        assert_eq!(tasks(), 1, "one task reports the window, not one per held-back line");
        assert!(reports.try_recv().is_err(), "nothing to report while the window is open");
        tokio::time::advance(LOG_WINDOW).await;
        let report = tokio::time::timeout(LOG_WINDOW, reports.recv()).await;
        assert_eq!(report, Ok(Some(500)), "reported when the window closed");
        assert!(line(), "a new window logs its first line");
        tokio::time::advance(LOG_WINDOW).await;
        tokio::task::yield_now().await;
        assert!(reports.try_recv().is_err(), "a window that held nothing back reports nothing");
    }
}
