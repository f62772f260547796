//! `sessionstore probe`: a runner over one oracle. `scenario` sets up a store in a
//! temporary directory and makes the store calls, `checks` (how the store behaved)
//! and `model_bound` (what a model gets) judge what they returned, pure functions,
//! one per invariant; `known` holds what both sides share (the files and texts, and
//! what the scenario saw), `report` what a run prints, and `oracle` what the contract
//! says, shared with the integration tests. Only the oracle is
//! built without the `probe` feature (with `testkit`, for the tests); nothing here
//! touches the user's data directory.

/// Returns `Err(detail)` from a check when `cond` does not hold.
#[cfg(feature = "probe")]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

#[cfg(feature = "probe")]
mod checks;
#[cfg(feature = "probe")]
mod known;
#[cfg(feature = "probe")]
mod model_bound;
// The probe uses only part of what the tests take from the oracle.
#[cfg_attr(not(feature = "testkit"), allow(dead_code, unused_imports))]
pub mod oracle;
#[cfg(feature = "probe")]
mod report;
#[cfg(feature = "probe")]
mod scenario;

#[cfg(feature = "probe")]
pub use report::{Check, ProbeError, ProbeReport};
#[cfg(feature = "probe")]
pub use scenario::run_probe;
#[cfg(all(feature = "probe", feature = "postgres"))]
pub use scenario::run_probe_on_postgres;
