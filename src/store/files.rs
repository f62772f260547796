//! A session's files through the store: what it refers to, downloads, and uploads
//! that are not yet part of a message.

use super::*;

impl Store {
    /// A session's attachments: every file its folders hold, as a read would find
    /// them (configured root first), and every file its messages refer to, each with
    /// the messages that refer to it. Sorted by stored name; reads no file whole.
    pub async fn attachments_of(&self, session: SessionId) -> Result<Vec<SessionAttachment>> {
        let refs = self
            .with_read(move |tx| {
                queries::get_session(tx, &session)?;
                queries::session_references(tx, &session)
            })
            .await?;
        let attachments = self.attachments.clone();
        let files = blocking(move || Ok(attachments.list(&session)?)).await?;
        let mut out: std::collections::BTreeMap<String, SessionAttachment> = files
            .into_iter()
            .map(|f| {
                let entry = SessionAttachment {
                    uri: f.uri.clone(),
                    file: Some(f.clone()),
                    messages: vec![],
                };
                (f.name, entry)
            })
            .collect();
        for (uri, message) in refs {
            let entry = out
                .entry(uri.name().to_owned())
                .or_insert_with(|| SessionAttachment {
                    uri: uri.clone(),
                    file: None,
                    messages: vec![],
                });
            if !entry.messages.contains(&message) {
                entry.messages.push(message);
            }
        }
        Ok(out.into_values().collect())
    }

    /// The bytes of one attachment, read the way a dispatch reads it (the same roots,
    /// order and refusals) but with no path in the result: what a user download gets.
    /// The session must exist.
    pub async fn download(&self, uri: AttachmentUri) -> Result<Download> {
        let session = uri.session();
        self.session(session).await?;
        let attachments = self.attachments.clone();
        blocking(move || Ok(attachments.download(&session, &uri)?)).await
    }

    /// Stores uploads under the configured root for a session that exists, all or
    /// none: if one fails, the ones already stored by this call are removed again.
    /// One stored attachment per upload, in order.
    pub async fn attach(
        &self,
        session: SessionId,
        uploads: Vec<Upload>,
    ) -> Result<Vec<StoredAttachment>> {
        self.session(session).await?;
        let attachments = self.attachments.clone();
        blocking(move || {
            let mut stored = Vec::with_capacity(uploads.len());
            for upload in &uploads {
                match attachments.store(&session, &upload.name, &upload.bytes) {
                    Ok(s) => stored.push(s),
                    Err(e) => {
                        for s in &stored {
                            attachments.discard(&session, &s.uri);
                        }
                        return Err(e.into());
                    }
                }
            }
            Ok(stored)
        })
        .await
    }
}
