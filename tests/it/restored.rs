//! A restore collected for assertions: the library streams a restore and offers no
//! call that collects one (a collected history holds every attachment's encoding at
//! once), so tests that judge a whole small history collect the stream here, each
//! message's blocks typed (`Dispatched::from`), and serialize it through the library's
//! typed restore shapes (`format::RestoreObject`) to compare with what the binary
//! prints.

use agent_client_protocol_schema::v1::ContentBlock;
use sessionstore::dispatch::DEFAULT_MEMO_BUDGET;
use sessionstore::format::{RecordedEntry, RestoreEntry, RestoreMessage, RestoreObject};
use sessionstore::model::{Item, Role, Session};
use sessionstore::restore::ReplayItem;
use sessionstore::store::Dispatched;
use sessionstore::{SessionId, Store};

/// A session's delivered history and recorded items, as the streamed restore gave
/// them, in its one order.
#[derive(Debug, Clone, PartialEq)]
pub struct Restored {
    pub session: Session,
    pub messages: Vec<Dispatched>,
    /// The recorded turn items, in history order.
    pub items: Vec<Item>,
    /// The history's order: `true` for the next message, `false` for the next item.
    order: Vec<bool>,
}

/// One entry of a collected history.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HistoryEntry<'a> {
    Message(&'a Dispatched),
    Recorded(&'a Item),
}

/// The collecting restore, for tests only.
pub trait CollectRestore {
    /// `Store::restore` of the whole history with the default memo budget, collected.
    async fn collect_restore(&self, session: SessionId) -> sessionstore::Result<Restored> {
        self.collect_restore_with_budget(session, DEFAULT_MEMO_BUDGET)
            .await
    }

    async fn collect_restore_with_budget(
        &self,
        session: SessionId,
        memo_budget: u64,
    ) -> sessionstore::Result<Restored>;
}

impl CollectRestore for Store {
    async fn collect_restore_with_budget(
        &self,
        session: SessionId,
        memo_budget: u64,
    ) -> sessionstore::Result<Restored> {
        let mut stream = self
            .restore(session, memo_budget, sessionstore::restore::Replay::Whole)
            .await?;
        let mut restored = Restored {
            session: stream.session().clone(),
            messages: vec![],
            items: vec![],
            order: vec![],
        };
        while let Some(item) = stream.next().await {
            match item? {
                ReplayItem::Message(m) => {
                    restored.messages.push(Dispatched::from(m));
                    restored.order.push(true);
                }
                ReplayItem::Recorded(item) => {
                    restored.items.push(*item);
                    restored.order.push(false);
                }
                other => panic!("a replay item this test does not know: {other:?}"),
            }
        }
        Ok(restored)
    }
}

impl Restored {
    /// Messages and items in their one history order.
    pub fn history(&self) -> Vec<HistoryEntry<'_>> {
        let (mut messages, mut items) = (self.messages.iter(), self.items.iter());
        self.order
            .iter()
            .map(|&message| match message {
                true => HistoryEntry::Message(messages.next().expect("as many as collected")),
                false => HistoryEntry::Recorded(items.next().expect("as many as collected")),
            })
            .collect()
    }

    /// What a model request carries, in order: every message, and each recorded agent
    /// message's text (`turns::model_text`) as an assistant turn.
    pub fn conversation(&self) -> Vec<(Role, Vec<ContentBlock>)> {
        self.history()
            .into_iter()
            .filter_map(|entry| match entry {
                HistoryEntry::Message(d) => Some((d.message.role, d.blocks.clone())),
                HistoryEntry::Recorded(item) => sessionstore::turns::model_text(&item.body)
                    .map(|blocks| (Role::Assistant, blocks)),
            })
            .collect()
    }
}

/// The restore object `restore --format acp` prints, built from the typed values.
impl serde::Serialize for Restored {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let messages: Vec<RestoreEntry<'_>> = self
            .history()
            .into_iter()
            .map(|entry| match entry {
                HistoryEntry::Message(d) => RestoreEntry::Message(RestoreMessage {
                    id: d.message.id,
                    role: d.message.role,
                    content: &d.blocks[..],
                }),
                HistoryEntry::Recorded(item) => RestoreEntry::Recorded(RecordedEntry::new(item)),
            })
            .collect();
        RestoreObject {
            session_id: self.session.id,
            partial: None,
            messages,
        }
        .serialize(serializer)
    }
}
