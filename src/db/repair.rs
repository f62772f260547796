//! `verify --repair`: after a backup, in one write, rebuilds from its log each session
//! whose rows `verify` found disagreeing, then the search index from the rows. Writes
//! rows only, never an event or an attachment file.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::error::sql;
use super::queries;
use super::sql::{Engine, Tx, args};

use crate::error::Result;
use crate::ids::SessionId;
use crate::model::{Item, ItemBody, Message, ProblemKind, TurnEnd};
use crate::projection::{Projection, Replayer};

use super::verify::VerifyReport;

/// `backup` is `None` when there was nothing to repair; `after`'s problems are what
/// could not be rebuilt.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RepairReport {
    pub backup: Option<PathBuf>,
    pub rebuilt: Vec<SessionId>,
    /// Whether the search index was made again.
    pub search_rebuilt: bool,
    /// The problems `verify` found before the repair.
    pub found: Vec<crate::model::Problem>,
    /// `verify` after the repair: consistent when it has no problem.
    pub after: VerifyReport,
}

impl RepairReport {
    pub fn ok(&self) -> bool {
        self.after.ok()
    }
}

/// The sessions whose rows their log can answer, and whether the search index is
/// rebuilt (when anything it reads changes, or it disagrees with the rows).
pub(crate) struct Plan {
    pub(crate) sessions: Vec<SessionId>,
    pub(crate) search: bool,
}

impl Plan {
    pub(crate) fn of(report: &VerifyReport) -> Plan {
        let mut sessions = BTreeSet::new();
        let mut search = false;
        for problem in &report.problems {
            match problem.kind() {
                ProblemKind::SearchIndex => search = true,
                ProblemKind::ChangedRow
                | ProblemKind::UnloggedRow
                | ProblemKind::MissingRow
                | ProblemKind::UnreadableRows
                // Streamed parts no item of the session holds go with its rows.
                | ProblemKind::StrayRows => {
                    if let Some(session) = problem.session() {
                        sessions.insert(session);
                    }
                }
                _ => {}
            }
        }
        Plan {
            search: search || !sessions.is_empty(),
            sessions: sessions.into_iter().collect(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.sessions.is_empty() && !self.search
    }
}

/// `false` when the log does not replay whole: the rows are left for `verify` to name.
pub(crate) fn rebuild_session(conn: &Tx<'_>, session: &SessionId) -> Result<bool> {
    let mut replayer = Replayer::new(*session);
    queries::each_event(conn, session, |event| replayer.apply(event))?;
    let (projection, problems) = replayer.finish();
    let Some(projection) = projection.filter(|_| problems.is_empty()) else {
        return Ok(false);
    };
    remove_rows(conn, session)?;
    write_rows(conn, &projection)?;
    Ok(true)
}

/// Not the session's own row (the rest refers to it), nor its events.
pub(crate) fn remove_rows(conn: &Tx<'_>, session: &SessionId) -> Result<()> {
    let id = session.to_string();
    for statement in [
        "DELETE FROM message_refs WHERE message_id IN
             (SELECT id FROM messages WHERE session_id = ?1)",
        "DELETE FROM messages WHERE session_id = ?1",
        "DELETE FROM streaming_parts WHERE session_id = ?1",
        "DELETE FROM item_parts WHERE session_id = ?1",
        "DELETE FROM items WHERE session_id = ?1",
        "DELETE FROM turns WHERE session_id = ?1",
        "DELETE FROM settings WHERE session_id = ?1",
    ] {
        conn.execute(statement, args![id])
            .map_err(sql("remove a session's rows to rebuild them"))?;
    }
    Ok(())
}

/// Items are written whole: no parts, no update named.
fn write_rows(conn: &Tx<'_>, p: &Projection) -> Result<()> {
    for m in &p.messages {
        write_message(conn, m)?;
    }
    for item in &p.items {
        write_item(conn, item)?;
    }
    write_session(conn, p)
}

/// The session's own columns, its turns and settings.
pub(crate) fn write_session(conn: &Tx<'_>, p: &Projection) -> Result<()> {
    let s = &p.session;
    let id = s.id.to_string();
    conn.execute(
        "UPDATE sessions SET title = ?2, tools_host = ?3, created_at = ?4, updated_at = ?5,
                cwd = ?6, agent = ?7, agent_session = ?8, title_source = ?9, archived = ?10
         WHERE id = ?1",
        args![
            id,
            s.title,
            s.tools_host.as_str(),
            s.created_at,
            s.updated_at,
            s.cwd,
            s.agent.as_ref().map(|a| a.agent.as_str()),
            s.agent.as_ref().map(|a| a.session.as_str()),
            s.title_source.map(crate::model::TitleSource::as_str),
            i64::from(s.archived)
        ],
    )
    .map_err(sql("rebuild a session's rows"))?;
    super::usage::set_figures(conn, &s.id, &p.figures)?;
    for t in &p.turns {
        let k = super::proxied::token_columns(t.usage.as_ref())?;
        let (state, stop_reason, failure) = match &t.end {
            None => ("running", None, None),
            Some(TurnEnd::Stopped { stop_reason }) => ("ended", Some(stop_reason.as_str()), None),
            Some(TurnEnd::Failed { reason }) => ("failed", None, Some(reason.as_str())),
        };
        let messages = serde_json::to_string(&t.messages).expect("ids always serialize");
        conn.execute(
            "INSERT INTO turns
               (id, session_id, seq, messages, state, stop_reason, failure, started_at, ended_at,
                input_tokens, output_tokens, thought_tokens, cached_read_tokens,
                cached_write_tokens, total_tokens)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            args![
                t.id.to_string(),
                id,
                t.seq,
                messages,
                state,
                stop_reason,
                failure,
                t.started_at,
                t.ended_at,
                k[0],
                k[1],
                k[2],
                k[3],
                k[4],
                k[5]
            ],
        )
        .map_err(sql("rebuild a session's rows"))?;
    }
    for setting in &p.settings {
        let params = serde_json::to_string(&setting.params).expect("JSON values always serialize");
        // A setting's time is not in its event's payload, and `verify` does not
        // compare it: the session's last change stands in.
        conn.execute(
            "INSERT INTO settings (session_id, method, key, params, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            args![id, setting.method, setting.key, params, s.updated_at],
        )
        .map_err(sql("rebuild a session's rows"))?;
    }
    Ok(())
}

pub(crate) fn write_message(conn: &Tx<'_>, m: &Message) -> Result<()> {
    let id = m.id.to_string();
    queries::insert_message_row(
        conn,
        &queries::MessageRow {
            id: &id,
            session: &m.session_id.to_string(),
            seq: m.seq,
            role: m.role,
            display_text: &m.display_text,
            model_text: m.model_text.as_deref(),
            transcript: m.transcript.as_deref(),
            state: m.state,
            created_at: &m.created_at,
            content: m.content.as_deref(),
        },
    )
    .map_err(sql("rebuild a message"))?;
    for r in &m.refs {
        queries::insert_reference(conn, &id, r)?;
    }
    Ok(())
}

pub(crate) fn write_item(conn: &Tx<'_>, item: &Item) -> Result<()> {
    let tool_call_id = match &item.body {
        ItemBody::ToolCall(call) => Some(call.tool_call_id.to_string()),
        _ => None,
    };
    conn.execute(
        "INSERT INTO items
           (id, session_id, seq, kind, tool_call_id, body, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        args![
            item.id.to_string(),
            item.session_id.to_string(),
            item.seq,
            item.body.kind(),
            tool_call_id,
            item.body.to_json(),
            item.created_at,
            item.updated_at
        ],
    )
    .map_err(sql("rebuild an item"))?;
    Ok(())
}

/// Before rows are removed: a delete trigger hands FTS5 the row's text, and FTS5
/// calls the database malformed if a row edited behind the store's back disagrees.
pub(crate) fn align_search(conn: &Tx<'_>) -> Result<()> {
    if conn.engine() != Engine::Sqlite {
        return Ok(());
    }
    conn.execute("INSERT INTO search (search) VALUES ('rebuild')", args![])
        .map_err(sql("rebuild the search index"))?;
    Ok(())
}

/// An entry for each title, message and sealed segment (existing ones kept, dangling
/// ones gone), nothing waiting, then FTS5's `rebuild` through `search_text`.
pub(crate) fn rebuild_search(conn: &Tx<'_>) -> Result<()> {
    if conn.engine() != Engine::Sqlite {
        return Ok(());
    }
    conn.execute(
        "DELETE FROM search_entries
         WHERE CASE source
             WHEN 'title' THEN NOT EXISTS (SELECT 1 FROM sessions s
                                           WHERE s.id = entry_id AND s.title IS NOT NULL)
             WHEN 'message' THEN NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = entry_id)
             ELSE NOT EXISTS (SELECT 1 FROM item_parts p
                              WHERE p.session_id = search_entries.session_id
                                AND p.item_id = substr(entry_id, 1, 36)
                                AND p.part = CAST(substr(entry_id, 38) AS INTEGER))
         END",
        args![],
    )
    .map_err(sql("rebuild the search index"))?;
    // What has no entry: (session, entry, source).
    let missing: Vec<(String, String, String)> = conn
        .query_map(
            "SELECT s.id, s.id, 'title' FROM sessions s
             WHERE s.title IS NOT NULL AND NOT EXISTS
                 (SELECT 1 FROM search_entries e WHERE e.entry_id = s.id AND e.source = 'title')
             UNION ALL
             SELECT m.session_id, m.id, 'message' FROM messages m
             WHERE NOT EXISTS
                 (SELECT 1 FROM search_entries e WHERE e.entry_id = m.id AND e.source = 'message')
             UNION ALL
             SELECT p.session_id, p.item_id || '/' || p.part, i.kind
             FROM item_parts p JOIN items i ON i.id = p.item_id
             WHERE p.sealed = 1 AND i.kind IN ('agent_message', 'agent_thought')
               AND NOT EXISTS (SELECT 1 FROM search_entries e
                               WHERE e.entry_id = p.item_id || '/' || p.part)",
            args![],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .map_err(sql("rebuild the search index"))?;
    for (session, entry, source) in missing {
        conn.execute(super::search::NEW_ENTRY, args![session, entry, source])
            .map_err(sql("rebuild the search index"))?;
    }
    conn.execute("INSERT INTO search (search) VALUES ('rebuild')", args![])
        .map_err(sql("rebuild the search index"))?;
    Ok(())
}
