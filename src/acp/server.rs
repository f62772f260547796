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

/// Serves `front` over standard input and output until the client closes its end.
pub async fn serve_stdio(front: AcpFront) -> RpcResult<()> {
    serve(front, Stdio::new()).await
}

/// Serves `front` over `transport` until the client closes it. The SDK runs one
/// request at a time, in the order they arrive, so a `session/load` has sent its whole
/// replay before the next request is looked at.
pub async fn serve(front: AcpFront, transport: impl ConnectTo<Agent> + 'static) -> RpcResult<()> {
    let front = Arc::new(front);
    let (initialize, new, list, load, resume, close, delete, fork, prompt) = (
        front.clone(),
        front.clone(),
        front.clone(),
        front.clone(),
        front.clone(),
        front.clone(),
        front.clone(),
        front.clone(),
        front,
    );
    Agent
        .v1()
        .name("sessionstore")
        .on_receive_request(
            async move |request: InitializeRequest, responder, _cx| {
                responder.respond(initialize.initialize(&request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: NewSessionRequest, responder, _cx| {
                answer("session/new", responder, new.new_session(request).await)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: ListSessionsRequest, responder, _cx| {
                answer("session/list", responder, list.list_sessions(request).await)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: LoadSessionRequest, responder, cx: ConnectionTo<Client>| {
                let loaded = load
                    .load_session(request, |update| cx.send_notification(update))
                    .await;
                answer("session/load", responder, loaded)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: ResumeSessionRequest, responder, _cx| {
                answer(
                    "session/resume",
                    responder,
                    resume.resume_session(request).await,
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: CloseSessionRequest, responder, _cx| {
                answer(
                    "session/close",
                    responder,
                    close.close_session(request).await,
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: DeleteSessionRequest, responder, _cx| {
                answer(
                    "session/delete",
                    responder,
                    delete.delete_session(request).await,
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: ForkSessionRequest, responder, _cx| {
                answer("session/fork", responder, fork.fork_session(request).await)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PromptRequest, responder, _cx| {
                answer("session/prompt", responder, prompt.prompt(request).await)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_to(transport)
        .await
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
