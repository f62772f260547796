//! What a session carried by an ACP proxy keeps beside its history: its agent binding,
//! its turns from prompt to answer, and the client's settings to give a fresh agent
//! session again. Each change is one write with its event.

use super::Store;
use crate::db::{proxied, queries};
use crate::error::Result;
use crate::ids::{MessageId, SessionId, TurnId};
use crate::model::{AgentBinding, Setting, Turn, TurnEnd};

impl Store {
    /// Binds a session to another agent session (a fresh one replacing the one its
    /// agent no longer knows).
    pub async fn bind_agent(&self, session: SessionId, binding: AgentBinding) -> Result<()> {
        self.with_write(move |tx| {
            queries::get_session(tx, &session)?;
            queries::bind_agent(tx, &session, &binding)
        })
        .await
    }

    /// Begins a turn that delivers `messages` (stored user messages of the session, the
    /// first one's place in the history being the turn's).
    pub async fn begin_turn(&self, session: SessionId, messages: Vec<MessageId>) -> Result<Turn> {
        self.with_write(move |tx| {
            queries::get_session(tx, &session)?;
            proxied::begin_turn(tx, &session, &messages)
        })
        .await
    }

    /// Ends a running turn: its stop reason as the agent answered, or its failure, and
    /// the tokens the agent reported for it (the `usage` of its answer, if any),
    /// recorded in the turn's end event and its row. A turn never ended is one that
    /// was interrupted (its proxy stopped mid-turn).
    pub async fn end_turn(
        &self,
        session: SessionId,
        turn: TurnId,
        end: TurnEnd,
        usage: Option<crate::model::TurnUsage>,
    ) -> Result<()> {
        // An agent's error message is text it wrote, kept like the rest.
        let end = match end {
            TurnEnd::Failed { reason } => TurnEnd::Failed {
                reason: self.redacted(reason),
            },
            stopped => stopped,
        };
        self.with_write(move |tx| proxied::end_turn(tx, &session, &turn, &end, usage.as_ref()))
            .await
    }

    /// Records a client setting the agent took: `method` with its `params` (without
    /// the session id), replacing the earlier one of its kind (a config option's
    /// setting is one kind per option).
    pub async fn record_setting(
        &self,
        session: SessionId,
        method: &str,
        mut params: serde_json::Value,
    ) -> Result<()> {
        if self.config().redaction.is_on() {
            crate::redact::value(&mut params);
        }
        let key = if method == "session/set_config_option" {
            params["configId"].as_str().unwrap_or_default().to_owned()
        } else {
            String::new()
        };
        let setting = Setting {
            method: method.to_owned(),
            key,
            params,
        };
        self.with_write(move |tx| {
            queries::get_session(tx, &session)?;
            proxied::record_setting(tx, &session, &setting)
        })
        .await
    }

    /// A session's settings, to give a fresh agent session again.
    pub async fn settings(&self, session: SessionId) -> Result<Vec<Setting>> {
        self.with_read(move |tx| {
            queries::get_session(tx, &session)?;
            proxied::settings(tx, &session)
        })
        .await
    }
}
