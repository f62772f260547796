//! A session's files through the store: listing, downloads, uploads.

use super::*;

impl Store {
    /// A page of a session's attachments, by stored name: the files its folders hold,
    /// as a read would find them (configured root first), and the files its messages
    /// refer to, each with the messages that refer to it. Each page is one bounded
    /// query and a look at only its own names on disk; reads no file whole.
    pub async fn attachments_of(
        &self,
        session: SessionId,
        query: PageQuery<SessionAttachment>,
    ) -> Result<Page<SessionAttachment>> {
        let (after, probe) = (query.name().to_owned(), query.probe());
        let from = after.clone();
        let refs = self
            .with_read(move |tx| {
                queries::get_session(tx, &session)?;
                db::pages::references(tx, &session, &from, probe)
            })
            .await?;
        let attachments = self.attachments.clone();
        let files = blocking(move || Ok(attachments.list_page(&session, &after, probe)?)).await?;
        let mut found = std::collections::BTreeMap::new();
        for (name, file) in files {
            let entry = SessionAttachment {
                uri: AttachmentUri::new(session, &name),
                file,
                messages: vec![],
            };
            found.insert(name, entry);
        }
        for (name, uri, message) in refs {
            if uri.name() != name {
                return Err(Error::DamagedRow {
                    action: "read references",
                    detail: format!("{uri} is stored under another name, {name:?}"),
                });
            }
            let entry = found.entry(name).or_insert_with(|| SessionAttachment {
                uri,
                file: None,
                messages: vec![],
            });
            if !entry.messages.contains(&message) {
                entry.messages.push(message);
            }
        }
        Ok(pages::named_page(found, probe))
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
