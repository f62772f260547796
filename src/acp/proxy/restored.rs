//! What a fresh agent session is told of the conversation so far (text, each
//! attachment's path context from a read made now, contents within a byte budget),
//! and what an agent that resumed its own session is told (each earlier attachment's
//! path read now: its history's may name a moved root). Either precedes the next
//! prompt and is never stored.

use std::sync::Arc;

use agent_client_protocol_schema::v1::{ContentBlock, TextContent};

use super::agent::Capabilities;
use super::prompt::agent_blocks;
use super::{Failure, Proxy};
use crate::dispatch::{ModelMessage, Part};
use crate::ids::{MessageId, SessionId};
use crate::model::{ItemBody, Role};
use crate::restore::ReplayItem;

/// How many bytes of attachment contents (encoded) the restored conversation carries
/// at most; past it, attachments are given by their path context alone.
pub const CONTENT_BUDGET: usize = 256 * 1024;

/// The memo budget of the restore that builds the conversation.
const MEMO_BUDGET: u64 = 16 * 1024 * 1024;

const OPENING: &str = "[sessionstore] This conversation was restored: the agent's own session \
    was started afresh, so what was said before is given here for context. It is not a new \
    request; the user's new message follows it.";
const CLOSING: &str = "[sessionstore] End of the restored conversation.";
const CURRENT_PATHS: &str = "[sessionstore] The files attached earlier in this conversation \
    were read again now; the path contexts below say where they are. Paths given for them \
    before may no longer exist. This is not a new request; the user's new message follows.";

impl Proxy {
    /// The conversation of `session` up to (not including) `before`, as blocks.
    pub(super) async fn restored_conversation(
        self: &Arc<Self>,
        session: SessionId,
        before: MessageId,
        caps: &Capabilities,
    ) -> Result<Vec<ContentBlock>, Failure> {
        let mut stream = self
            .store
            .restore(session, MEMO_BUDGET, crate::restore::Replay::Whole)
            .await?;
        let mut out = Conversation {
            blocks: Vec::new(),
            text: String::from(OPENING),
            budget: self.options.restored_content_budget,
            entries: 0,
        };
        while let Some(item) = stream.next().await {
            match item? {
                ReplayItem::Message(m) if m.message.id == before => break,
                ReplayItem::Message(m) => out.message(&m, caps),
                ReplayItem::Recorded(item) => out.recorded(&item.body),
            }
        }
        if out.entries == 0 {
            return Ok(vec![]);
        }
        out.line(CLOSING);
        out.flush_text();
        Ok(out.blocks)
    }

    /// The path context of each attachment of `session` before `before`, once per
    /// file, after a text block saying why; nothing when there is none.
    pub(super) async fn current_paths(
        self: &Arc<Self>,
        session: SessionId,
        before: MessageId,
    ) -> Result<Vec<ContentBlock>, Failure> {
        let mut stream = self
            .store
            .restore(session, MEMO_BUDGET, crate::restore::Replay::Whole)
            .await?;
        let mut seen = std::collections::HashSet::new();
        let mut contexts = Vec::new();
        while let Some(item) = stream.next().await {
            let ReplayItem::Message(m) = item? else {
                continue;
            };
            if m.message.id == before {
                break;
            }
            for part in &m.parts {
                if let Part::Attachment(a) = part
                    && seen.insert(a.prepared.uri_text().to_owned())
                {
                    contexts.push(ContentBlock::Text(TextContent::new(a.context.as_str())));
                }
            }
        }
        if contexts.is_empty() {
            return Ok(vec![]);
        }
        contexts.insert(0, ContentBlock::Text(TextContent::new(CURRENT_PATHS)));
        Ok(contexts)
    }
}

struct Conversation {
    blocks: Vec<ContentBlock>,
    /// Text not yet made a block: consecutive entries share one text block.
    text: String,
    budget: usize,
    entries: usize,
}

impl Conversation {
    fn line(&mut self, line: &str) {
        if !self.text.is_empty() {
            self.text.push('\n');
        }
        self.text.push_str(line);
    }

    fn flush_text(&mut self) {
        if !self.text.is_empty() {
            let text = std::mem::take(&mut self.text);
            self.blocks.push(ContentBlock::Text(TextContent::new(text)));
        }
    }

    fn message(&mut self, m: &ModelMessage, caps: &Capabilities) {
        self.entries += 1;
        let who = match m.message.role {
            Role::User => "User",
            Role::Assistant => "Agent",
            Role::System => "System",
        };
        self.line(&format!("{who}:"));
        for part in &m.parts {
            match part {
                Part::Text(text) => self.line(text),
                Part::Attachment(a) => {
                    let size = a.prepared.content.encoded_len() as usize;
                    if size <= self.budget {
                        self.budget -= size;
                        self.flush_text();
                        let single = ModelMessage {
                            message: m.message.clone(),
                            parts: vec![part.clone()],
                        };
                        self.blocks.extend(agent_blocks(&single, caps));
                    } else {
                        self.line(a.context.as_str());
                    }
                }
                Part::Verbatim(block) => {
                    self.flush_text();
                    self.blocks.push((**block).clone());
                }
            }
        }
    }

    fn recorded(&mut self, body: &ItemBody) {
        match body {
            ItemBody::AgentMessage(text) => {
                self.entries += 1;
                let words: Vec<&str> = text
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::Text(t) => Some(t.text.as_str()),
                        _ => None,
                    })
                    .collect();
                self.line(&format!("Agent:\n{}", words.join("")));
            }
            ItemBody::ToolCall(call) => {
                self.entries += 1;
                let status = serde_json::to_value(call.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "pending".to_owned());
                self.line(&format!("Agent tool call: {} ({status})", call.title));
            }
            // Thoughts, plans and session-level updates are the agent's working and the
            // client's state, not conversation.
            _ => {}
        }
    }
}
