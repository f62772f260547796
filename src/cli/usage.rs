//! `usage`: what sessions cost, as the store recorded it: each session's turns and the
//! tokens they reported by kind, its latest cost and context, and the total.

use anyhow::Result;
use clap::Args;
use sessionstore::model::{SessionUsage, TokenSums, UsageReport, UsageTotal};
use sessionstore::store::Access;
use sessionstore::store::Since;
use sessionstore::{Config, Error, SessionId, Store};

use super::errors::Usage;
use super::output::{cell, emit, print_json, title_cell};
use super::parse_session;

#[derive(Args)]
pub struct UsageArgs {
    /// Only these sessions (every session, archived ones too, by default)
    #[arg(long, value_name = "ID", num_args = 1.., value_parser = parse_session)]
    session: Vec<SessionId>,
    /// Count only the turns begun from this RFC 3339 date or date-time (UTC unless it
    /// says otherwise), like 2026-12-01 or 2026-12-01T09:30:00Z; cost and context are
    /// the latest whatever the date
    #[arg(long, value_name = "DATE")]
    since: Option<String>,
}

pub async fn usage(config: Config, json: bool, args: UsageArgs) -> Result<()> {
    // The date is checked before a database is opened.
    let since = args
        .since
        .as_deref()
        .map(Since::parse)
        .transpose()
        .map_err(|e| Usage(format!("--since: {e}")))?;
    let report = match Store::open_as(config, Access::ReadOnly).await {
        Ok(store) => store.usage(args.session, since).await?,
        // With no database yet nothing ran, unless sessions were named.
        Err(Error::NoDatabase(_)) if args.session.is_empty() => UsageReport {
            sessions: vec![],
            total: UsageTotal::default(),
        },
        Err(e) => return Err(e.into()),
    };
    if json {
        return print_json(&report);
    }
    emit(&table(&report))
}

/// The report as a compact table: a row a session, then the total; `-` where nothing
/// was reported.
fn table(report: &UsageReport) -> String {
    let mut rows: Vec<[String; 11]> = vec![
        [
            "SESSION", "TURNS", "INPUT", "OUTPUT", "THOUGHT", "CACHE-R", "CACHE-W", "TOTAL",
            "COST", "CONTEXT", "TITLE",
        ]
        .map(str::to_owned),
    ];
    let tokens = |t: &TokenSums| {
        t.kinds()
            .map(|k| k.map_or("-".to_owned(), |n| n.to_string()))
    };
    for s in &report.sessions {
        rows.push(row(s, tokens(&s.tokens)));
    }
    let [i, o, th, cr, cw, tt] = tokens(&report.total.tokens);
    rows.push([
        "total".to_owned(),
        report.total.turns.to_string(),
        i,
        o,
        th,
        cr,
        cw,
        tt,
        String::new(),
        String::new(),
        String::new(),
    ]);
    let mut widths = [0; 11];
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    rows.iter()
        .map(|r| {
            let mut line = String::new();
            for (n, (c, w)) in r.iter().zip(widths).enumerate() {
                match n {
                    0 | 10 => line.push_str(&format!("{c:<w$}")),
                    _ => line.push_str(&format!("{c:>w$}")),
                }
                if n < 10 {
                    line.push_str("  ");
                }
            }
            line.trim_end().to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn row(s: &SessionUsage, tokens: [String; 6]) -> [String; 11] {
    let [i, o, th, cr, cw, tt] = tokens;
    [
        s.id.to_string(),
        s.turns.to_string(),
        i,
        o,
        th,
        cr,
        cw,
        tt,
        s.cost.as_ref().map_or("-".to_owned(), |c| {
            format!("{} {}", c.amount, cell(&c.currency, 16))
        }),
        s.context
            .map_or("-".to_owned(), |c| format!("{}/{}", c.used, c.size)),
        title_cell(s.title.as_deref()),
    ]
}
