//! A session's whole history read back page after page (`store::whole`), for tests
//! that compare all of it with what they wrote, and one upload stored on its own.

use sessionstore::attachments::StoredAttachment;
use sessionstore::model::{Delivery, Event, Item, Message, Turn};
use sessionstore::store::Upload;
use sessionstore::store::whole;
use sessionstore::{Result, SessionId, Store};

/// `Store`'s paged reads, every page of them at once.
pub(crate) trait Whole {
    /// Every message of the session, in history order.
    async fn all_messages(&self, session: SessionId) -> Result<Vec<Message>>;
    /// The session's queued mid-turn messages.
    async fn queued_messages(&self, session: SessionId) -> Result<Vec<Message>>;
    async fn all_events(&self, session: SessionId) -> Result<Vec<Event>>;
    async fn all_items(&self, session: SessionId) -> Result<Vec<Item>>;
    async fn all_turns(&self, session: SessionId) -> Result<Vec<Turn>>;
    /// `Store::attach` of one upload.
    async fn attach_one(
        &self,
        session: SessionId,
        name: String,
        bytes: Vec<u8>,
    ) -> Result<StoredAttachment>;
}

impl Whole for Store {
    async fn all_messages(&self, session: SessionId) -> Result<Vec<Message>> {
        whole(|q| self.messages(session, None, q)).await
    }

    async fn queued_messages(&self, session: SessionId) -> Result<Vec<Message>> {
        whole(|q| self.messages(session, Some(Delivery::Queued), q)).await
    }

    async fn all_events(&self, session: SessionId) -> Result<Vec<Event>> {
        whole(|q| self.events(session, q)).await
    }

    async fn all_items(&self, session: SessionId) -> Result<Vec<Item>> {
        whole(|q| self.items(session, q)).await
    }

    async fn all_turns(&self, session: SessionId) -> Result<Vec<Turn>> {
        whole(|q| self.turns(session, q)).await
    }

    async fn attach_one(
        &self,
        session: SessionId,
        name: String,
        bytes: Vec<u8>,
    ) -> Result<StoredAttachment> {
        let mut stored = self.attach(session, vec![Upload::new(name, bytes)]).await?;
        Ok(stored.remove(0))
    }
}
