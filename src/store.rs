//! The async face of the store: sessions, messages, events and attachments. Database
//! work runs on tokio's blocking threads and no pooled connection is held across an
//! `.await`; SQL stays in `db`, file IO stays in `attachments`.

use std::sync::Arc;

use crate::attachments::{AttachmentStore, StoredAttachment};
use crate::config::Config;
use crate::db::{self, Pool, queries, verify::VerifyReport};
use crate::error::{Error, Result};
use crate::ids::{MessageId, SessionId};
use crate::model::{Delivery, Event, Message, NewMessage, Session, ToolsHost};

#[derive(Clone)]
pub struct Store {
    pool: Pool,
    attachments: AttachmentStore,
    config: Arc<Config>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("config", &self.config)
            .finish()
    }
}

impl Store {
    /// Opens the database (migrating it first, refusing a newer or foreign file) and
    /// the attachment roots named by `config`.
    pub async fn open(config: Config) -> Result<Store> {
        let path = config.db_path.clone();
        let pool = blocking(move || db::open_pool(&path)).await?;
        Ok(Store {
            pool,
            attachments: AttachmentStore::new(config.roots.clone()),
            config: Arc::new(config),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn attachments(&self) -> &AttachmentStore {
        &self.attachments
    }

    async fn with_write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let pool = self.pool.clone();
        blocking(move || db::write(&mut *pool.get()?, f)).await
    }

    async fn with_read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let pool = self.pool.clone();
        blocking(move || db::read(&mut *pool.get()?, f)).await
    }

    pub async fn create_session(
        &self,
        title: Option<String>,
        tools_host: ToolsHost,
    ) -> Result<Session> {
        self.with_write(move |tx| queries::insert_session(tx, title.as_deref(), tools_host))
            .await
    }

    pub async fn rename_session(&self, id: SessionId, title: String) -> Result<()> {
        self.with_write(move |tx| queries::rename_session(tx, &id, &title))
            .await
    }

    pub async fn session(&self, id: SessionId) -> Result<Session> {
        self.with_read(move |tx| queries::get_session(tx, &id))
            .await
    }

    pub async fn list_sessions(&self) -> Result<Vec<Session>> {
        self.with_read(|tx| queries::list_sessions(tx)).await
    }

    /// Appends a delivered message with its references, and its event, in one write.
    pub async fn append_message(&self, session: SessionId, message: NewMessage) -> Result<Message> {
        self.with_write(move |tx| {
            queries::insert_message(tx, &session, &message, Delivery::Delivered)
        })
        .await
    }

    /// Persists a mid-turn message as queued; only a drain delivers it.
    pub async fn queue_message(&self, session: SessionId, message: NewMessage) -> Result<Message> {
        self.with_write(move |tx| queries::insert_message(tx, &session, &message, Delivery::Queued))
            .await
    }

    pub async fn mark_delivered(&self, session: SessionId, ids: Vec<MessageId>) -> Result<()> {
        self.with_write(move |tx| queries::mark_delivered(tx, &session, &ids))
            .await
    }

    pub async fn messages(&self, session: SessionId) -> Result<Vec<Message>> {
        self.with_read(move |tx| {
            queries::get_session(tx, &session)?;
            queries::messages(tx, &session, None)
        })
        .await
    }

    pub async fn queued_messages(&self, session: SessionId) -> Result<Vec<Message>> {
        self.with_read(move |tx| {
            queries::get_session(tx, &session)?;
            queries::messages(tx, &session, Some(Delivery::Queued))
        })
        .await
    }

    pub async fn message(&self, id: MessageId) -> Result<Message> {
        self.with_read(move |tx| queries::get_message(tx, &id))
            .await
    }

    pub async fn events(&self, session: SessionId) -> Result<Vec<Event>> {
        self.with_read(move |tx| {
            queries::get_session(tx, &session)?;
            queries::events(tx, &session)
        })
        .await
    }

    pub async fn verify(&self) -> Result<VerifyReport> {
        self.with_read(|tx| db::verify::verify(tx)).await
    }

    /// Stores an upload under the configured root, for a session that exists.
    pub async fn attach(
        &self,
        session: SessionId,
        upload_name: String,
        bytes: Vec<u8>,
    ) -> Result<StoredAttachment> {
        self.session(session).await?;
        let attachments = self.attachments.clone();
        blocking(move || Ok(attachments.store(&session, &upload_name, &bytes)?)).await
    }
}

/// Runs blocking work (SQLite, file reads) off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Task(e.to_string()))?
}
