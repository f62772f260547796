//! What a probe run reports: a named check per line, or why it could not run.

use std::fmt;

use serde::Serialize;

use super::oracle::is_hidden;

/// What a check returns: a one-line detail of what it saw, or of what went wrong.
pub(super) type Outcome = Result<String, String>;

/// One named check: whether it passed, and what it saw or what went wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    /// One line.
    pub detail: String,
}

impl Check {
    pub(super) fn new(name: &str, outcome: Outcome) -> Check {
        let (ok, detail) = match outcome {
            Ok(detail) => (true, detail),
            Err(detail) => (false, detail),
        };
        Check {
            name: name.to_owned(),
            ok,
            detail: one_line(&detail),
        }
    }
}

/// Every check the probe ran, in order; serializes as `{"checks","passed","failed"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeReport {
    checks: Vec<Check>,
    passed: usize,
    failed: usize,
}

impl ProbeReport {
    pub(super) fn new(checks: Vec<Check>) -> ProbeReport {
        let passed = checks.iter().filter(|c| c.ok).count();
        ProbeReport {
            failed: checks.len() - passed,
            passed,
            checks,
        }
    }

    pub fn checks(&self) -> &[Check] {
        &self.checks
    }

    pub fn passed(&self) -> usize {
        self.passed
    }

    pub fn failed(&self) -> usize {
        self.failed
    }

    /// True when every check passed (and there was at least one).
    pub fn ok(&self) -> bool {
        self.failed == 0 && self.passed > 0
    }
}

/// One line per check (`ok   <name>` or `FAIL <name>: <detail>`), then the counts.
impl fmt::Display for ProbeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for check in &self.checks {
            if check.ok {
                writeln!(f, "ok   {}", check.name)?;
            } else {
                writeln!(f, "FAIL {}: {}", check.name, check.detail)?;
            }
        }
        write!(f, "probe: {} passed, {} failed", self.passed, self.failed)
    }
}

/// The probe could not run (its temporary directory failed); a failed check is a
/// `FAIL` line instead.
#[derive(Debug, thiserror::Error)]
#[error("probe cannot {action}: {error}")]
pub struct ProbeError {
    pub(super) action: String,
    pub(super) error: std::io::Error,
}

/// A detail on one line, with hidden characters made visible.
fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            c if is_hidden(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_stay_on_one_line() {
        let check = Check::new("x", Err("a\nb\u{202e}c".into()));
        assert_eq!(check.detail, "a\\nb\\u{202e}c");
        assert!(!check.ok);
    }

    #[test]
    fn the_report_counts_and_prints_each_check() {
        let report = ProbeReport::new(vec![
            Check::new("good", Ok("fine".into())),
            Check::new("bad", Err("broken".into())),
        ]);
        assert_eq!(
            (report.passed(), report.failed(), report.ok()),
            (1, 1, false)
        );
        assert_eq!(
            report.to_string(),
            "ok   good\nFAIL bad: broken\nprobe: 1 passed, 1 failed"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["passed"], 1);
        assert_eq!(json["checks"][1]["ok"], false);
        assert!(!ProbeReport::new(vec![]).ok());
    }
}
