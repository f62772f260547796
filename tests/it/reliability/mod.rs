//! The reliability suites: crashes, concurrency, corrupted databases and hostile input,
//! run from outside against real files and the real binary. Short counts run in plain
//! `cargo test`; the `long_*` tests (ignored) run the same code with the counts of
//! RELIABILITY.md. They never fix anything; they only measure and assert.

mod concurrency;
mod corruption;
mod crash;
mod hostile;
mod properties;
