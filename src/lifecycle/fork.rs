//! `Store::fork_session`: a new session with another's delivered history up to a point,
//! its own files and log. Never shares a row, an event or a URI with its origin, and
//! never changes the origin.

use std::collections::BTreeSet;

use crate::Store;
use crate::attachments::AttachmentUri;
use crate::db::copies::{self, Entry, NewSession};
use crate::db::sql::Tx;
use crate::error::{Error, Result};
use crate::ids::{MessageId, SessionId};
use crate::model::{Delivery, ForkedFrom, Message, NewMessage, NewReference, Session};
use crate::projection::Entry as HistoryEntry;
use crate::restore::Replay;
use crate::restore::{Partial, Sink};
use crate::store::blocking;

/// A fork as made: the new session, and how its files got there.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Forked {
    pub session: Session,
    /// Files hard-linked from the origin's folder.
    pub linked: usize,
    /// Files copied (no hard link possible, or only in a legacy root).
    pub copied: usize,
    /// Stored names no root had: kept, degrading on dispatch as in the origin.
    pub missing: Vec<String>,
}

/// Lifecycle: forking a session, whole or at a message.
impl Store {
    /// Forks `origin`'s delivered history up to and including message `at` (default:
    /// all) into a new session; queued messages stay behind. Attachments are linked or
    /// copied into the fork's folder; rows and events are one write, and if it fails
    /// the files are removed. `title` defaults to the origin's.
    pub async fn fork_session(
        &self,
        origin: SessionId,
        at: Option<MessageId>,
        title: Option<String>,
    ) -> Result<Forked> {
        let origin_read = self.fork_origin(origin).await?;
        let upto = match at {
            Some(id) => {
                let m = self.message(id).await?;
                if m.session_id != origin {
                    return Err(Error::MessageOfAnotherSession {
                        message: id,
                        owner: m.session_id,
                        session: origin,
                    });
                }
                if m.state == Delivery::Queued {
                    return Err(Error::ForkPoint {
                        session: origin,
                        message: id,
                        reason: "it is queued mid-turn, and queued messages stay behind",
                    });
                }
                m.seq
            }
            None => i64::MAX,
        };
        self.fork_upto(origin, origin_read, upto, at, title).await
    }

    /// [`Store::fork_session`] up to and including `origin`'s recorded item `at`.
    pub(crate) async fn fork_session_at_item(
        &self,
        origin: SessionId,
        at: &crate::model::Item,
        title: Option<String>,
    ) -> Result<Forked> {
        let origin_read = self.fork_origin(origin).await?;
        if at.session_id != origin {
            return Err(Error::SessionNotFound(origin));
        }
        self.fork_upto(origin, origin_read, at.seq, None, title)
            .await
    }

    /// What a fork takes of its origin's row: the session, and its recorded settings.
    async fn fork_origin(
        &self,
        origin: SessionId,
    ) -> Result<(Session, Vec<crate::model::Setting>)> {
        let db = self.db.clone();
        blocking(move || {
            db.read(|tx| {
                let head = crate::db::queries::get_session(tx, &origin)?;
                Ok((head, crate::db::proxied::settings(tx, &origin)?))
            })
        })
        .await
    }

    /// The fork of `origin`'s delivered history up to and including the entry at
    /// `upto` (a history seq); `at`, the message the fork was asked at, if it was.
    async fn fork_upto(
        &self,
        origin: SessionId,
        (head, settings): (Session, Vec<crate::model::Setting>),
        upto: i64,
        at: Option<MessageId>,
        title: Option<String>,
    ) -> Result<Forked> {
        // The origin is checked against its log first (a copy of rows edited behind
        // it would carry damage `verify` could no longer point at), then read up to the
        // cut for its files, the cut's seq and last message; never the history.
        let db = self.db.clone();
        let cut = blocking(move || {
            let mut cut = Cut {
                upto,
                last: 0,
                names: BTreeSet::new(),
                message: None,
            };
            db.read_once(|tx| {
                let row = crate::db::queries::get_session(tx, &origin)?;
                crate::db::verify::check_session(tx, &row)?;
                crate::restore::produce(tx, origin, &Replay::Whole, &mut cut)
            })?;
            Ok(cut)
        })
        .await?;
        let fork = SessionId::new();
        let forked_from = ForkedFrom {
            session: origin,
            message: at.or(cut.message),
        };
        let title = title
            .filter(|t| !t.trim().is_empty())
            .or(head.title.clone())
            .map(|t| self.redacted(t));
        let redacting = self.config().redaction.is_on();
        let mut settings = settings;
        if redacting {
            for setting in &mut settings {
                crate::redact::value(&mut setting.params);
            }
        }
        // The fork keeps the client's working directory and settings; its agent side
        // is a new one, started when it is first used.
        let new = NewSession {
            id: fork,
            session: crate::model::NewSession {
                title,
                tools_host: head.tools_host,
                cwd: head.cwd.clone(),
                agent: None,
            },
            forked_from: Some(forked_from),
            settings,
        };
        let attachments = self.attachments.clone();
        let db = self.db.clone();
        blocking(move || {
            let mut placed = Vec::new();
            let (mut linked, mut copied, mut missing) = (0, 0, Vec::new());
            let undo = |placed: &[AttachmentUri]| {
                for uri in placed {
                    attachments.discard(&fork, uri);
                }
                attachments.remove_folder_if_empty(&fork);
            };
            for name in &cut.names {
                let from = AttachmentUri::new(origin, name);
                match attachments.copy_into(&origin, &from, &fork) {
                    Ok(was_linked) => {
                        placed.push(AttachmentUri::new(fork, name));
                        if was_linked {
                            linked += 1;
                        } else {
                            copied += 1;
                        }
                    }
                    Err(e) if e.is_not_found() => missing.push(name.clone()),
                    Err(e) => {
                        undo(&placed);
                        return Err(e.into());
                    }
                }
            }
            // Then, in one write, each entry written to the fork as the read hands it on.
            let written = db.write(|tx| {
                copies::create(tx, &new)?;
                let mut into = CopyInto {
                    tx,
                    upto: cut.last,
                    appender: copies::Appender::new(fork),
                    redacting,
                };
                crate::restore::produce(tx, origin, &Replay::Whole, &mut into)?;
                into.appender.finish(tx)?;
                crate::db::queries::get_session(tx, &fork)
            });
            match written {
                Ok(session) => Ok(Forked {
                    session,
                    linked,
                    copied,
                    missing,
                }),
                Err(e) => {
                    undo(&placed);
                    Err(e)
                }
            }
        })
        .await
    }
}

/// The first read of a fork: its files, last entry's seq and last message's id.
struct Cut {
    upto: i64,
    last: i64,
    names: BTreeSet<String>,
    message: Option<MessageId>,
}

impl Sink for Cut {
    fn begin(&mut self, _: Session, _: Option<Partial>) {}

    fn entry(&mut self, entry: HistoryEntry) -> Result<bool> {
        if entry.seq() > self.upto {
            return Ok(false);
        }
        self.last = entry.seq();
        if let HistoryEntry::Message(m) = &entry {
            self.names
                .extend(m.refs.iter().map(|r| r.stored_name.clone()));
            self.message = Some(m.id);
        }
        Ok(true)
    }
}

/// The second read of a fork: each entry up to the cut written to the fork.
struct CopyInto<'a, 'c> {
    tx: &'a Tx<'c>,
    upto: i64,
    appender: copies::Appender,
    /// Whether the fork's text is redacted as written (the origin's may not be).
    redacting: bool,
}

impl Sink for CopyInto<'_, '_> {
    fn begin(&mut self, _: Session, _: Option<Partial>) {}

    fn entry(&mut self, entry: HistoryEntry) -> Result<bool> {
        if entry.seq() > self.upto {
            return Ok(false);
        }
        let entry = match entry {
            HistoryEntry::Message(m) => {
                let mut message = rewritten(&m, self.appender.session());
                if self.redacting {
                    crate::store::redact_message(&mut message);
                }
                Entry::Message(message, Delivery::Delivered)
            }
            HistoryEntry::Item(item) if self.redacting => {
                Entry::Item(Box::new(redacted_item(item.body)?))
            }
            HistoryEntry::Item(item) => Entry::Item(Box::new(item.body)),
        };
        self.appender.append(self.tx, &entry)?;
        Ok(true)
    }
}

/// An item's body with its secrets redacted, whole (a message's text as one).
fn redacted_item(body: crate::model::ItemBody) -> Result<crate::model::ItemBody> {
    let Some(redacted) = crate::redact::json_text(&body.to_json()) else {
        return Ok(body);
    };
    crate::model::ItemBody::from_json(body.kind(), &redacted).map_err(|detail| Error::DamagedRow {
        action: "redact an item of a fork",
        detail,
    })
}

/// `m` as a new message of `to`, its references naming `to`'s URIs.
pub(crate) fn rewritten(m: &Message, to: SessionId) -> NewMessage {
    NewMessage {
        role: m.role,
        display_text: m.display_text.clone(),
        model_text: m.model_text.clone(),
        transcript: m.transcript.clone(),
        refs: m
            .refs
            .iter()
            .map(|r| NewReference {
                uri: AttachmentUri::new(to, &r.stored_name),
                stored_name: r.stored_name.clone(),
                mime_type: r.mime_type.clone(),
                size: r.size,
            })
            .collect(),
        content: m.content.clone(),
    }
}
