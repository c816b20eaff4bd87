//! A pull's progress: the bar `shepherd pull` draws on a terminal's stderr,
//! or each [`Step`] told to a listener (the API server's `/api/pull` writes
//! them as Ollama's progress lines), rate-limited either way.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// What a pull tells its listener ([`Prepared::run`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Bytes so far (a resumed part's included) of the whole, when announced:
    /// the first bytes, then at most every 100 ms or 1 % of the whole, and the last.
    Bytes { have: u64, total: Option<u64> },
    /// The bytes are all there: the GGUF and digest checks run.
    Verifying,
    /// Checked: the part takes the model's name.
    Naming,
}

/// A pull's progress: the bar on a terminal's stderr (percent, megabytes and
/// speed), or each [`Step`] to a listener.
pub(super) struct Progress<'a> {
    name: String,
    pub(super) total: Option<u64>,
    /// A resumed part's bytes from before.
    pub(super) done_before: u64,
    /// The bytes this request wrote.
    pub(super) done: u64,
    started: Instant,
    shown: Instant,
    terminal: bool,
    listen: Option<&'a mut dyn FnMut(Step) -> bool>,
    /// The bytes the listener last heard of, and when.
    told: Option<(u64, Instant)>,
}

impl<'a> Progress<'a> {
    pub(super) fn new(name: &str, listen: Option<&'a mut dyn FnMut(Step) -> bool>) -> Progress<'a> {
        let now = Instant::now();
        Progress {
            name: name.to_string(),
            total: None,
            done_before: 0,
            done: 0,
            started: now,
            shown: now,
            terminal: listen.is_none() && std::io::stderr().is_terminal(),
            listen,
            told: None,
        }
    }

    /// Counts `n` more bytes; `false` when the listener stops the pull.
    pub(super) fn add(&mut self, n: u64) -> bool {
        self.done += n;
        if self.terminal && self.shown.elapsed() >= Duration::from_millis(200) {
            self.shown = Instant::now();
            let _ = write!(std::io::stderr(), "\r{}\x1b[K", self.line());
        }
        let have = self.done_before + self.done;
        let total = self.total;
        let due = match self.told {
            None => true,
            Some((told, at)) => {
                Some(have) == total
                    || at.elapsed() >= Duration::from_millis(100)
                    || total.is_some_and(|t| (have - told.min(have)) * 100 >= t)
            }
        };
        if !due {
            return true;
        }
        self.told = Some((have, Instant::now()));
        self.step(Step::Bytes { have, total })
    }

    /// Tells the listener of `step`; `false` when it stops the pull.
    pub(super) fn step(&mut self, step: Step) -> bool {
        self.listen.as_mut().is_none_or(|listen| listen(step))
    }

    fn line(&self) -> String {
        let mb = |bytes: u64| bytes as f64 / 1e6;
        let have = self.done_before + self.done;
        let rate = mb(self.done) / self.started.elapsed().as_secs_f64().max(1e-3);
        match self.total {
            Some(total) if total > 0 => format!(
                "pulling {} {:3}% {:.1}/{:.1} MB {rate:.1} MB/s",
                self.name,
                have * 100 / total,
                mb(have),
                mb(total)
            ),
            _ => format!("pulling {} {:.1} MB {rate:.1} MB/s", self.name, mb(have)),
        }
    }

    pub(super) fn done(&self) {
        if self.terminal {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_hears_the_bytes_at_most_every_percent_and_can_stop_the_pull() {
        let mut heard = Vec::new();
        let mut listen = |step: Step| {
            heard.push(step);
            true
        };
        let started = Instant::now();
        let mut progress = Progress::new("m.gguf", Some(&mut listen));
        progress.total = Some(10_000);
        for _ in 0..10_000 {
            assert!(progress.add(1));
        }
        drop(progress);
        // One a percent, the first, and one for each 100 ms the loop took.
        let timed = started.elapsed().as_millis() as usize / 100;
        assert!(heard.len() <= 101 + timed, "{} steps", heard.len());
        assert!(heard.len() >= 50, "{} steps", heard.len());
        assert_eq!(
            heard.first(),
            Some(&Step::Bytes {
                have: 1,
                total: Some(10_000)
            })
        );
        assert_eq!(
            heard.last(),
            Some(&Step::Bytes {
                have: 10_000,
                total: Some(10_000)
            })
        );
        let mut stop = |_: Step| false;
        let mut progress = Progress::new("m.gguf", Some(&mut stop));
        assert!(
            !progress.add(1),
            "a listener that answers false stops the pull"
        );
    }
}
