//! What sessions cost: `Store::usage`, the turns and tokens of each session summed by
//! the database, with the latest cost and context its agent reported.

use super::Store;
use crate::error::Result;
use crate::ids::SessionId;
use crate::model::{UsageReport, UsageTotal};

/// The start of a usage report: turns begun at or after it count. Read from an RFC 3339
/// date (`2026-12-01`, midnight UTC) or date-time (`2026-12-01T09:30:00Z`, any offset,
/// taken in UTC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Since(String);

impl Since {
    /// Reads `text`; the error is one line naming what was given.
    pub fn parse(text: &str) -> std::result::Result<Since, String> {
        use time::format_description::well_known::Rfc3339;
        let at = match time::OffsetDateTime::parse(text, &Rfc3339) {
            Ok(at) => at,
            Err(_) => time::Date::parse(
                text,
                time::macros::format_description!("[year]-[month]-[day]"),
            )
            .map(|d| d.midnight().assume_utc())
            .map_err(|_| {
                format!(
                    "{text:?} is not an RFC 3339 date or date-time (like 2026-12-01 or \
                         2026-12-01T09:30:00Z)"
                )
            })?,
        };
        let at = at.to_offset(time::UtcOffset::UTC);
        // As the store writes its timestamps, so that they compare as text.
        let text = at
            .format(time::macros::format_description!(
                "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:9]Z"
            ))
            .map_err(|e| format!("{text:?} cannot be used as a start: {e}"))?;
        Ok(Since(text))
    }

    /// The timestamp, as the store writes them.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Store {
    /// Each of `sessions` (every session, archived ones too, when empty; most recently
    /// updated first), with the turns that ran in it (from `since` on, when given) and
    /// the tokens they reported summed by kind, the latest cost and context its agent
    /// reported; and the total. A session that is not there is refused. Summed by the
    /// database: no history is read.
    pub async fn usage(
        &self,
        sessions: Vec<SessionId>,
        since: Option<Since>,
    ) -> Result<UsageReport> {
        let sessions = self
            .with_read(move |tx| {
                crate::db::usage::usage(tx, &sessions, since.as_ref().map(Since::as_str))
            })
            .await?;
        let mut total = UsageTotal::default();
        for s in &sessions {
            total.turns += s.turns;
            total.tokens.add(&s.tokens);
        }
        Ok(UsageReport { sessions, total })
    }
}

#[cfg(test)]
mod tests {
    use super::Since;

    #[test]
    fn a_start_is_an_rfc_3339_date_or_date_time_taken_in_utc() {
        let at = |t: &str| Since::parse(t).map(|s| s.as_str().to_owned());
        assert_eq!(at("2026-12-01").unwrap(), "2026-12-01T00:00:00.000000000Z");
        assert_eq!(
            at("2026-12-01T09:30:00Z").unwrap(),
            "2026-12-01T09:30:00.000000000Z"
        );
        assert_eq!(
            at("2026-12-01T01:30:00.5+02:00").unwrap(),
            "2026-11-30T23:30:00.500000000Z"
        );
        for bad in [
            "",
            "yesterday",
            "2026-12-32",
            "2026-12-01 09:30",
            "12/01/2026",
        ] {
            let e = at(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")) && !e.contains('\n'), "{e}");
        }
    }
}
