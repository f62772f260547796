//! `sessionstore probe`: `scenario` makes the store calls in a temporary directory;
//! `checks` and `model_bound` judge what came back, one pure function per invariant;
//! `known` is what both share, `report` what a run prints, `oracle` what the contract
//! says (also the tests', through `testkit`). Never touches the user's data directory.

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
