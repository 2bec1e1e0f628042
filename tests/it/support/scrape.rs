//! The daemon's own figures as a test reads them: a `/metrics` scrape parsed into samples, a bounded
//! wait for the figures to reach a state, and the kernel's view of the daemon's memory.

use std::time::{Duration, Instant};

use super::{Daemon, WAIT};

/// `(series name, labels, value)`.
type Sample = (String, Vec<(String, String)>, f64);

/// One scrape: a sample per line.
pub(crate) struct Scrape(Vec<Sample>);

impl Scrape {
    pub(crate) fn parse(text: &str) -> Scrape {
        let mut samples = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let (series, value) = line.rsplit_once(' ').expect("sample line");
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("value in {line:?}"));
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let rest = rest.strip_suffix('}').expect("closing brace");
                    let labels = rest
                        .split("\",")
                        .filter(|kv| !kv.is_empty())
                        .map(|kv| {
                            let (k, v) = kv.split_once("=\"").expect("label");
                            (k.to_owned(), v.trim_end_matches('"').to_owned())
                        })
                        .collect();
                    (name.to_owned(), labels)
                }
                None => (series.to_owned(), Vec::new()),
            };
            samples.push((name, labels, value));
        }
        Scrape(samples)
    }

    /// The sum over series called `name` carrying every label in `want`.
    pub(crate) fn get(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|(n, labels, _)| {
                n == name && want.iter().all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, _, v)| v)
            .sum()
    }
}

impl Daemon {
    /// `GET /metrics`, parsed.
    pub(crate) async fn scrape(&self) -> Scrape {
        let res = self.client().get(self.url("/metrics")).send().await.expect("scrape");
        assert_eq!(res.status(), 200);
        let ct = res.headers()["content-type"].to_str().expect("ascii").to_owned();
        assert!(ct.starts_with("application/openmetrics-text"), "content type {ct}");
        Scrape::parse(&res.text().await.expect("body"))
    }

    /// Scrapes (bounded by [`WAIT`]) until `ok` holds; `what` names the awaited state.
    pub(crate) async fn wait_for_metrics(&self, what: &str, ok: impl Fn(&Scrape) -> bool) -> Scrape {
        let deadline = Instant::now() + WAIT;
        loop {
            let s = self.scrape().await;
            if ok(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "metrics never showed {what}");
            tokio::time::sleep(Duration::from_millis(20)).await; // polling a scrape; no event to wait on
        }
    }

    /// A `/proc/<pid>/status` field in KiB (`VmRSS`, `VmHWM`).
    pub(crate) fn memory_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc status"))
    }

    /// Resets the kernel's peak-RSS mark (`VmHWM`) to the current RSS.
    pub(crate) fn reset_peak_rss(&self) {
        std::fs::write(format!("/proc/{}/clear_refs", self.pid()), "5").expect("clear_refs");
    }
}
