//! Storing a user's message with `send`: an [`Outgoing`] (text and references to uploads
//! already stored) or a [`Prompt`] (as an ACP client sends it: its files uploaded and the
//! message that refers to them stored as one step, its blocks kept in the order sent).
//! Both are checked every reference the way a read would before anything is written, and
//! write the message with its event in one write; nothing else persists a reference.

use agent_client_protocol_schema::v1::Meta;

use super::{Outgoing, Store, Upload, blocking};
use crate::attachments::{AttachmentUri, StoredAttachment};
use crate::db::queries;
use crate::error::{Error, Result};
use crate::ids::SessionId;
use crate::model::{Delivery, Message, MessageBlock, NewMessage, NewReference, Role};

/// A prompt as an ACP client sends it, for [`Store::send`]: its blocks in order,
/// delivered now or queued for the next drain (a prompt sent while a turn runs).
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    pub blocks: Vec<PromptBlock>,
    pub delivery: Delivery,
}

/// One block of a prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptBlock {
    /// Text the user typed, with the block's own `_meta`. The message's display text
    /// is its text blocks joined by line breaks.
    Text { text: String, meta: Option<Meta> },
    /// A file the client sent inline (an image, an embedded resource or blob): stored
    /// as an attachment of the session, so the model gets it with the path of a read
    /// made at each dispatch. `meta` is the client block's own `_meta`, kept beside the
    /// path context.
    Upload { upload: Upload, meta: Option<Meta> },
    /// A block of the client's own, kept as the JSON it came as and given back as it
    /// is: a `resource_link`, a resource with a `file://` URI the client owns (the
    /// agent may edit it in place), audio. Never copied into the store's files.
    Verbatim(serde_json::Value),
}

/// What [`Store::send`] stores: an [`Outgoing`] message or a [`Prompt`].
pub enum ToSend {
    Outgoing(Outgoing),
    Prompt(Prompt),
}

impl From<Outgoing> for ToSend {
    fn from(message: Outgoing) -> ToSend {
        ToSend::Outgoing(message)
    }
}

impl From<Prompt> for ToSend {
    fn from(prompt: Prompt) -> ToSend {
        ToSend::Prompt(prompt)
    }
}

impl Store {
    /// Stores a user's message, delivered or queued, with its event. Every reference
    /// is checked first: it names this session and opens now, the way a read would,
    /// which gives the stored name, MIME type and size without reading the whole file.
    /// A [`Prompt`]'s uploads become attachments of the session, referred to in the
    /// order they came; if its message is refused they are removed again, so nothing
    /// of a refused prompt stays.
    pub async fn send(&self, session: SessionId, message: impl Into<ToSend>) -> Result<Message> {
        match message.into() {
            ToSend::Outgoing(message) => self.send_outgoing(session, message).await,
            ToSend::Prompt(prompt) => self
                .send_prompt_as_given(session, prompt)
                .await
                .map(|(stored, _)| stored),
        }
    }

    async fn send_outgoing(&self, session: SessionId, send: Outgoing) -> Result<Message> {
        if send.role != Role::User && (!send.attach.is_empty() || send.mid_turn) {
            return Err(Error::RoleCannotAttach { role: send.role });
        }
        // Blank optional parts are no parts: an empty expansion must not replace what
        // was typed, and an empty transcript is no audio.
        let blank_to_none = |v: Option<String>| v.filter(|t| !t.trim().is_empty());
        let expanded = blank_to_none(send.expanded);
        let transcript = blank_to_none(send.transcript);
        if send.text.trim().is_empty()
            && send.attach.is_empty()
            && expanded.is_none()
            && transcript.is_none()
        {
            return Err(Error::EmptyMessage);
        }
        let state = if send.mid_turn {
            Delivery::Queued
        } else {
            Delivery::Delivered
        };
        let message = NewMessage {
            role: send.role,
            display_text: send.text,
            model_text: expanded,
            transcript,
            refs: vec![],
            content: None,
        };
        self.store_message(session, message, send.attach, state)
            .await
            .map(|(stored, _)| stored)
    }

    /// [`Store::send`] of a [`Prompt`], giving back beside the message as stored (redacted)
    /// the same message as it was given, for its first delivery (the proxy's).
    pub(crate) async fn send_prompt_as_given(
        &self,
        session: SessionId,
        prompt: Prompt,
    ) -> Result<(Message, Message)> {
        let Prompt { blocks, delivery } = prompt;
        let has_content = blocks.iter().any(|b| match b {
            PromptBlock::Text { text, .. } => !text.trim().is_empty(),
            PromptBlock::Upload { .. } | PromptBlock::Verbatim(_) => true,
        });
        if !has_content {
            return Err(Error::EmptyMessage);
        }
        let mut uploads = Vec::new();
        let mut texts = Vec::new();
        let mut content = Vec::with_capacity(blocks.len());
        for block in blocks {
            match block {
                PromptBlock::Text { text, meta } => {
                    texts.push(text.clone());
                    content.push(MessageBlock::Text { text, meta });
                }
                PromptBlock::Upload { upload, meta } => {
                    let ordinal = u32::try_from(uploads.len()).map_err(|_| Error::OutOfRange {
                        what: "a reference's ordinal",
                    })?;
                    uploads.push(upload);
                    content.push(MessageBlock::Reference { ordinal, meta });
                }
                PromptBlock::Verbatim(block) => content.push(MessageBlock::Verbatim { block }),
            }
        }
        let stored = self.attach(session, uploads).await?;
        let message = NewMessage {
            role: Role::User,
            display_text: texts.join("\n"),
            model_text: None,
            transcript: None,
            refs: vec![],
            content: Some(content),
        };
        let attach = stored.iter().map(|s| s.uri.clone()).collect();
        let sent = self.store_message(session, message, attach, delivery).await;
        if sent.is_err() {
            self.discard_uploads(session, stored).await;
        }
        sent
    }

    /// Removes uploads this call stored for a message that was refused.
    pub(crate) async fn discard_uploads(&self, session: SessionId, stored: Vec<StoredAttachment>) {
        let attachments = self.attachments.clone();
        let _ = blocking(move || {
            for s in &stored {
                attachments.discard(&session, &s.uri);
            }
            Ok(())
        })
        .await;
    }

    /// The checks and the write every stored message goes through: `attach` becomes
    /// the message's references once checked on a blocking thread (skipped when there
    /// are none), then the message is written through the store's writer.
    async fn store_message(
        &self,
        session: SessionId,
        mut message: NewMessage,
        attach: Vec<AttachmentUri>,
        state: Delivery,
    ) -> Result<(Message, Message)> {
        let attachments = self.attachments.clone();
        // The files are looked at before the write is queued, so no writer waits on a
        // slow disk.
        let (dirs, refs, roots, refused) = if attach.is_empty() {
            Default::default()
        } else {
            let attachments = attachments.clone();
            blocking(move || {
                let mut dirs = crate::attachments::SessionDirs::default();
                let refs = attach
                    .into_iter()
                    .map(|uri| {
                        if uri.session() != session {
                            return Err(Error::ForeignReference { uri, session });
                        }
                        let checked = attachments.check_in(&mut dirs, &session, &uri)?;
                        let reference = NewReference {
                            uri,
                            stored_name: checked.name,
                            mime_type: checked.mime,
                            size: checked.size,
                        };
                        Ok((reference, checked.root))
                    })
                    .collect::<Result<Vec<_>>>();
                Ok(match refs {
                    Ok(checked) => {
                        let (refs, roots): (Vec<_>, Vec<_>) = checked.into_iter().unzip();
                        (dirs, refs, roots, None)
                    }
                    Err(e) => (dirs, vec![], vec![], Some(e)),
                })
            })
            .await?
        };
        // A refusal found above writes nothing: it is returned once the session is
        // known to exist (an unknown session is named as such first).
        if let Some(e) = refused {
            self.with_read(move |tx| queries::get_session(tx, &session).map(|_| ()))
                .await?;
            return Err(e);
        }
        // The write may run more than once (a group runs again when one of its
        // members is refused, or when PostgreSQL retries it), so it borrows what it
        // writes.
        message.refs = refs;
        let given = self.config.redaction.is_on().then(|| {
            let given = (
                message.display_text.clone(),
                message.model_text.clone(),
                message.transcript.clone(),
                message.content.clone(),
            );
            redact_message(&mut message);
            given
        });
        let stored = self
            .write_as(Some(session), move |tx| {
                let current = queries::get_session(tx, &session)?;
                // gc decides and removes unreferenced uploads under this same write
                // lock, so a file it took since the check above is seen gone here,
                // and one still here stays: this message's reference now protects it.
                for (reference, root) in message.refs.iter().zip(&roots) {
                    attachments.still_there(&dirs, &session, &reference.uri, root)?;
                }
                // A streamed agent message this one follows has ended: seal it first.
                crate::db::items::settle(tx, &session)?;
                queries::insert_message_for(tx, &current, &message, state)
            })
            .await?;
        let as_given = match given {
            Some((display_text, model_text, transcript, content)) => Message {
                display_text,
                model_text,
                transcript,
                content,
                ..stored.clone()
            },
            None => stored.clone(),
        };
        Ok((stored, as_given))
    }
}

/// Replaces the secrets in every text of a message before it is written: what was
/// typed, its expansion and transcript, its text blocks and their `_meta`, and the
/// client's own blocks (their URIs and names kept). References are not text: their
/// files stay byte-exact.
pub(crate) fn redact_message(message: &mut NewMessage) {
    use crate::redact;
    let take = |s: &mut String| *s = redact::owned(std::mem::take(s));
    take(&mut message.display_text);
    message.model_text.iter_mut().for_each(take);
    message.transcript.iter_mut().for_each(take);
    for block in message.content.iter_mut().flatten() {
        match block {
            MessageBlock::Text { text, meta } => {
                take(text);
                meta.iter_mut().for_each(redact::object);
            }
            MessageBlock::Reference { meta, .. } => meta.iter_mut().for_each(redact::object),
            MessageBlock::Verbatim { block } => {
                redact::value(block);
            }
        }
    }
}
