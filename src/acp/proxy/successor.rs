//! The agent as the successor in a conductor's proxy chain ([`super::Behind::Successor`]).
//! The conductor initializes the proxy with `proxy/initialize` (`initialize`'s params
//! and answer); everything between the proxy and its agent goes on the client's own
//! connection in a `proxy/successor` envelope (`{"method","params"}`; a request's
//! result or error comes back unchanged as the envelope's). Unwrapped, every message
//! takes a child agent's paths: the successor is a [`Running`] agent whose link hands
//! its frames here to be wrapped. Wire shapes are schema 1.17's
//! `unstable_proxy_chains`: a cancellation of a wrapped request names the envelope's
//! id, and is never wrapped itself.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::agent::{Running, gone, name};
use super::link::Link;
use super::rpc::{Kind, Message, code};
use super::{Failure, Proxy, lock};

/// The envelope of a message to or from the successor.
pub const SUCCESSOR: &str = "proxy/successor";
/// How a conductor initializes a component that has a successor.
pub const INITIALIZE: &str = "proxy/initialize";

/// The answer to a plain `initialize` with no agent behind: the proxy needs one, or a
/// conductor around it.
pub(super) fn needs_an_agent() -> Failure {
    Failure::new(
        code::INVALID_REQUEST,
        "sessionstore proxy needs an agent (sessionstore proxy -- AGENT) or a conductor (which initializes it with proxy/initialize)",
    )
}

/// The answer to `proxy/initialize` or `proxy/successor` where the proxy is not a
/// component of a chain (`sessionstore proxy -- AGENT`, `sessionstore acp`).
pub(super) fn not_in_a_chain(method: &str) -> Failure {
    Failure::new(
        code::METHOD_NOT_FOUND,
        format!(
            "{method} is for a component of a conductor's chain (sessionstore proxy with no agent), which this is not"
        ),
    )
}

/// The requests to the successor still waiting: each one's id on the agent's link, to
/// the id of its envelope on the client's connection (what a cancellation names).
type Wrapped = Arc<Mutex<HashMap<u64, Value>>>;

impl Proxy {
    /// Reaches the successor, initialized through the envelope with the client's
    /// `initialize` params, as ACP asks before a proxy answers `proxy/initialize`.
    pub(super) async fn reach_successor(
        self: &Arc<Self>,
        generation: u64,
        initialize: Value,
    ) -> Result<Arc<Running>, Failure> {
        let (link, frames) = Link::channel();
        let running = Arc::new(Running::reached(
            generation,
            link,
            "behind the conductor".to_owned(),
        ));
        tokio::spawn(self.clone().to_successor(running.clone(), frames));
        let answer = match running.link.request("initialize", initialize).await {
            Ok(answer) => answer,
            Err(_) => {
                running.link.close();
                return Err(gone());
            }
        };
        match answer.outcome() {
            Ok(result) => running.set_initialized(result.clone()),
            Err(error) => {
                running.link.close();
                return Err(Failure::internal(format!(
                    "the successor refused initialize: {error}"
                )));
            }
        }
        tracing::info!(
            "reached the successor {} through the conductor",
            name(Some(&running))
        );
        Ok(running)
    }

    /// Sends on the client's connection what the proxy writes to the successor: a
    /// request or notification in the envelope, an answer as it is (its id is the
    /// conductor's envelope's), a cancellation as one of the envelope. Ends once the
    /// agent's link is closed; the successor is gone then.
    async fn to_successor(
        self: Arc<Self>,
        running: Arc<Running>,
        mut frames: mpsc::Receiver<Vec<u8>>,
    ) {
        let wrapped: Wrapped = Arc::default();
        while let Some(frame) = frames.recv().await {
            // The proxy wrote every frame here itself, so each parses.
            let Ok(mut message) = Message::parse(&frame) else {
                continue;
            };
            match message.kind() {
                Kind::Response { .. } => {
                    let _ = self.client.send_bytes(frame).await;
                }
                Kind::Notification {
                    method: "$/cancel_request",
                } => {
                    let envelope = message
                        .params()
                        .and_then(|p| p.get("id"))
                        .and_then(Value::as_u64)
                        .and_then(|id| lock(&wrapped).get(&id).cloned());
                    if let Some(envelope) = envelope {
                        let cancel = Message::notification(
                            "$/cancel_request",
                            serde_json::json!({ "id": envelope }),
                        );
                        let _ = self.client.send(&cancel).await;
                    }
                }
                Kind::Notification { method } => {
                    let method = method.to_owned();
                    let envelope = envelope(&method, &mut message);
                    let _ = self
                        .client
                        .send(&Message::notification(SUCCESSOR, envelope))
                        .await;
                }
                Kind::Request { id, method } => {
                    let (id, method) = (id.clone(), method.to_owned());
                    let envelope = envelope(&method, &mut message);
                    let request = Message::request(Value::Null, SUCCESSOR, envelope);
                    let (envelope_id, answer) = self.client.forward(request).await;
                    let ours = id.as_u64();
                    if let Some(ours) = ours {
                        lock(&wrapped).insert(ours, Value::from(envelope_id));
                    }
                    let (running, wrapped) = (running.clone(), wrapped.clone());
                    tokio::spawn(async move {
                        let answer = answer.await;
                        if let Some(ours) = ours {
                            lock(&wrapped).remove(&ours);
                        }
                        // The result or error is the wrapped request's, unchanged; an
                        // answer lost with the client leaves the request to
                        // `mark_ended`.
                        if let Ok(mut answer) = answer {
                            answer.set_id(id);
                            let _ = running.link.answered(answer);
                        }
                    });
                }
            }
        }
        running.mark_ended("went away with the conductor's connection".to_owned());
        self.sessions.agent_ended(running.generation);
    }

    /// A `proxy/successor` message from the conductor: what the successor sent,
    /// unwrapped and taken as a child agent's. Outside a chain, or before
    /// `proxy/initialize`, a request is refused.
    pub(super) async fn from_successor(self: &Arc<Self>, mut message: Message) {
        let request = match message.kind() {
            Kind::Request { id, .. } => Some(id.clone()),
            _ => None,
        };
        let running = match self.agent.is_successor() {
            true => self.agent.current().ok_or_else(|| {
                Failure::new(
                    code::INVALID_REQUEST,
                    "proxy/successor before proxy/initialize: there is no successor yet",
                )
            }),
            false => Err(not_in_a_chain(SUCCESSOR)),
        };
        let mut envelope = message.take_params();
        let inner = envelope.get("method").and_then(Value::as_str);
        let inner = inner.map(str::to_owned).ok_or_else(|| {
            Failure::invalid_params("a proxy/successor envelope names the wrapped message's method")
        });
        let (running, method) = match running.and_then(|r| inner.map(|m| (r, m))) {
            Ok(reached) => reached,
            Err(failure) => {
                match request {
                    Some(id) => {
                        let _ = self.client.send(&failure.into_message(id)).await;
                    }
                    None => tracing::debug!(
                        "dropped a proxy/successor notification: {}",
                        failure.message
                    ),
                }
                return;
            }
        };
        let params = envelope.get_mut("params").map_or(Value::Null, Value::take);
        let omitted = params.is_null();
        let mut unwrapped = match request {
            Some(id) => Message::request(id, &method, params),
            None => Message::notification(&method, params),
        };
        if omitted {
            // Omitted and `null` mean the same: no params, as the successor sent it.
            let _ = unwrapped.take_params();
        }
        self.from_agent(&running, unwrapped).await;
    }
}

/// The envelope of a message to the successor: its method, and its params if any.
fn envelope(method: &str, message: &mut Message) -> Value {
    let mut envelope = Map::new();
    envelope.insert("method".to_owned(), Value::String(method.to_owned()));
    let params = message.take_params();
    if !params.is_null() {
        envelope.insert("params".to_owned(), params);
    }
    Value::Object(envelope)
}
