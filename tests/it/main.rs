//! The single integration-test binary: real SQLite files, real attachment trees in
//! temporary folders, and the real `sessionstore` binary for command-line and
//! multi-process tests.

#[cfg(feature = "acp")]
mod acp;
mod attachments;
mod cli;
mod compat;
mod conformance;
mod dispatch;
#[cfg(feature = "acp")]
mod faults;
mod fixtures;
mod history;
mod lifecycle;
mod migrate;
mod opening;
mod privacy;
#[cfg(feature = "probe")]
mod probe;
#[cfg(feature = "acp")]
mod proxy;
mod redaction;
mod regressions;
mod reliability;
mod replay;
mod requests;
mod restore;
mod restored;
mod snapshots;
mod store;
mod streaming;
mod support;
mod turns;
mod usability;
#[cfg(feature = "acp")]
mod usage;
mod verify;
