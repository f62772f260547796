//! `Store::fork_session`: a new session holding another's delivered history up to one
//! message, recorded turns included, with its attachment files in its own folder and
//! its own event log (which names where it came from). Never shares a row, an event or
//! a URI with its origin, and never leaves the origin's files or rows changed.

use std::collections::BTreeSet;

use crate::Store;
use crate::attachments::AttachmentUri;
use crate::db::copies::{self, Entry, NewSession};
use crate::error::{Error, Result};
use crate::ids::{MessageId, SessionId};
use crate::model::{Delivery, ForkedFrom, Message, NewMessage, NewReference, Session};
use crate::store::blocking;

/// A fork as made: the new session, and how its files got there.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Forked {
    pub session: Session,
    /// Files hard-linked from the origin's folder.
    pub linked: usize,
    /// Files copied (another file system, no hard links, or a file found only in a
    /// legacy root).
    pub copied: usize,
    /// Stored names no root had: their references are kept and degrade on dispatch,
    /// as they do in the origin.
    pub missing: Vec<String>,
}

/// Lifecycle: forking a session, whole or at a message.
impl Store {
    /// Forks `origin` into a new session holding its delivered history up to and
    /// including message `at` (default: all of it), its recorded items in that span
    /// included; queued messages stay behind. Every attachment the copied messages
    /// refer to is placed in the fork's own folder under the configured root (a hard
    /// link where the file system allows, else a copy), and the fork's references
    /// name the fork's URIs. The rows and their events are one write; if it fails,
    /// the files placed for it are removed again. `title` defaults to the origin's.
    pub async fn fork_session(
        &self,
        origin: SessionId,
        at: Option<MessageId>,
        title: Option<String>,
    ) -> Result<Forked> {
        let snap = super::snapshot(self, origin).await?;
        let cut = match at {
            Some(id) => {
                let m = snap.messages.iter().find(|m| m.id == id);
                match m {
                    Some(m) if m.state == Delivery::Queued => {
                        return Err(Error::ForkPoint {
                            session: origin,
                            message: id,
                            reason: "it is queued mid-turn, and queued messages stay behind",
                        });
                    }
                    Some(m) => m.seq,
                    None => {
                        // Tell an unknown message from another session's.
                        let found = self.message(id).await?;
                        return Err(Error::MessageOfAnotherSession {
                            message: id,
                            owner: found.session_id,
                            session: origin,
                        });
                    }
                }
            }
            None => i64::MAX,
        };
        let fork = SessionId::new();
        let delivered: Vec<&Message> = snap
            .messages
            .iter()
            .filter(|m| m.state == Delivery::Delivered && m.seq <= cut)
            .collect();
        let forked_from = ForkedFrom {
            session: origin,
            message: at.or_else(|| delivered.last().map(|m| m.id)),
        };
        let mut entries: Vec<(i64, Entry)> = delivered
            .iter()
            .map(|m| {
                (
                    m.seq,
                    Entry::Message(rewritten(m, fork), Delivery::Delivered),
                )
            })
            .collect();
        entries.extend(
            snap.items
                .iter()
                .filter(|i| i.seq <= cut)
                .map(|i| (i.seq, Entry::Item(Box::new(i.body.clone())))),
        );
        entries.sort_by_key(|(seq, _)| *seq);
        let entries: Vec<Entry> = entries.into_iter().map(|(_, e)| e).collect();
        let names: BTreeSet<String> = delivered
            .iter()
            .flat_map(|m| m.refs.iter().map(|r| r.stored_name.clone()))
            .collect();
        let title = title
            .filter(|t| !t.trim().is_empty())
            .or(snap.session.title.clone());
        // The fork keeps the client's working directory and settings; its agent side
        // is a new one, started when it is first used.
        let new = NewSession {
            id: fork,
            session: crate::model::NewSession {
                title,
                tools_host: snap.session.tools_host,
                cwd: snap.session.cwd.clone(),
                agent: None,
            },
            forked_from: Some(forked_from),
            settings: snap.settings.clone(),
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
            for name in &names {
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
            match db.write(|tx| copies::write_session(tx, &new, &entries)) {
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

/// `m` as a new message of session `to`: the same texts, its references naming `to`'s
/// URIs under the same stored names.
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
