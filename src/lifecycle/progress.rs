//! The hook a long command reports its progress through: counts, never how shown.

use std::sync::Arc;

/// One step of a long operation: `done` of `total` units of `what`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub what: &'static str,
    pub done: u64,
    pub total: u64,
}

/// Told of each step of a long operation, from the blocking thread doing the work.
#[derive(Clone)]
pub struct Progress(Arc<dyn Fn(Step) + Send + Sync>);

impl Progress {
    pub fn new(f: impl Fn(Step) + Send + Sync + 'static) -> Progress {
        Progress(Arc::new(f))
    }

    /// A hook that shows nothing.
    pub fn none() -> Progress {
        Progress::new(|_| {})
    }

    pub(crate) fn step(&self, what: &'static str, done: u64, total: u64) {
        (self.0)(Step { what, done, total })
    }
}

impl Default for Progress {
    fn default() -> Progress {
        Progress::none()
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}
