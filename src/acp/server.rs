//! The ACP front as an agent on a transport (standard input and output for
//! `sessionstore acp`): one SDK handler per session method, each handing its request to
//! `AcpFront` and its answer back. It owns no behaviour of its own, and writes nothing
//! to standard output but the protocol: its few log lines go to standard error.
//!
//! Malformed JSON, unknown methods and requests whose params do not parse are answered
//! by the SDK with JSON-RPC errors (parse error, method not found, invalid params), and
//! an error from the front is an error response; none of them ends the connection.

use std::sync::Arc;

use agent_client_protocol::v1::schema::{
    CloseSessionRequest, DeleteSessionRequest, ForkSessionRequest, InitializeRequest,
    ListSessionsRequest, LoadSessionRequest, NewSessionRequest, PromptRequest,
    ResumeSessionRequest,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, ConnectTo, Error as RpcError, Stdio};

use super::{AcpFront, RpcResult};

/// Adds to `$agent` the handler of `$method`: its request goes whole to
/// `$front.$call`, and the answer back through `answer`. Every method but `initialize`
/// (no store), `session/load` and `session/resume` (they stream notifications while
/// they run) is one.
macro_rules! handler {
    ($agent:expr, $method:literal, $request:ty => $front:ident.$call:ident) => {{
        let front = $front.clone();
        $agent.on_receive_request(
            async move |request: $request, responder, _cx| {
                answer($method, responder, front.$call(request).await)
            },
            agent_client_protocol::on_receive_request!(),
        )
    }};
}

/// Serves `front` over standard input and output until the client closes its end.
pub async fn serve_stdio(front: AcpFront) -> RpcResult<()> {
    serve(front, Stdio::new()).await
}

/// Serves `front` over `transport` until the client closes it. The SDK runs one
/// request at a time, in the order they arrive, so a `session/load` has sent its whole
/// replay before the next request is looked at.
pub async fn serve(front: AcpFront, transport: impl ConnectTo<Agent> + 'static) -> RpcResult<()> {
    let front = Arc::new(front);
    let initialize = front.clone();
    let agent = Agent.v1().name("sessionstore").on_receive_request(
        async move |request: InitializeRequest, responder, _cx| {
            responder.respond(initialize.initialize(&request))
        },
        agent_client_protocol::on_receive_request!(),
    );
    let agent = handler!(agent, "session/new", NewSessionRequest => front.new_session);
    let agent = handler!(agent, "session/list", ListSessionsRequest => front.list_sessions);
    let load = front.clone();
    let agent = agent.on_receive_request(
        async move |request: LoadSessionRequest, responder, cx: ConnectionTo<Client>| {
            let loaded = load
                .load_session(request, |update| send_replayed(&cx, update))
                .await;
            answer("session/load", responder, loaded)
        },
        agent_client_protocol::on_receive_request!(),
    );
    let resume = front.clone();
    let agent = agent.on_receive_request(
        async move |request: ResumeSessionRequest, responder, cx: ConnectionTo<Client>| {
            let resumed = resume
                .resume_session(request, |update| send_replayed(&cx, update))
                .await;
            answer("session/resume", responder, resumed)
        },
        agent_client_protocol::on_receive_request!(),
    );
    let agent = handler!(agent, "session/close", CloseSessionRequest => front.close_session);
    let agent = handler!(agent, "session/delete", DeleteSessionRequest => front.delete_session);
    let agent = handler!(agent, "session/fork", ForkSessionRequest => front.fork_session);
    let agent = handler!(agent, "session/prompt", PromptRequest => front.prompt);
    agent.connect_to(transport).await
}

/// Sends one notification of a replay: a typed one as the SDK sends it, an update of
/// a kind the schema does not know as it came.
fn send_replayed(cx: &ConnectionTo<Client>, update: crate::format::Replayed) -> RpcResult<()> {
    match update {
        crate::format::Replayed::Typed(n) => cx.send_notification(n),
        opaque @ crate::format::Replayed::Opaque(_) => {
            cx.send_notification(agent_client_protocol::UntypedMessage::new(
                crate::format::SESSION_UPDATE,
                opaque.params(),
            )?)
        }
    }
}

/// Sends the answer, and logs a failure on standard error so whoever runs the agent
/// sees it too (the client gets it as the error response).
fn answer<T: agent_client_protocol::JsonRpcResponse>(
    method: &str,
    responder: Responder<T>,
    result: RpcResult<T>,
) -> Result<(), RpcError> {
    if let Err(e) = &result {
        eprintln!(
            "sessionstore acp: {method} failed: {}",
            crate::dispatch::hidden_escaped(&e.message)
        );
    }
    responder.respond_with_result(result)
}
