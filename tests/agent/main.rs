//! `sessionstore-test-agent`: an ACP agent built with the SDK, for the proxy's tests
//! (built only with the `testkit` feature, which `cargo test` turns on). It keeps its
//! sessions in memory, so a restarted agent knows none of them, and it writes each
//! request and notification it receives, method and params exactly as they came (blocks
//! and `_meta` included), as one JSON line to the file named by `--report`, so a test
//! can see exactly what the agent was given. Every line carries the agent's process id
//! (`pid`); besides the received messages (`kind` `request` or `notification`) it
//! writes the session id it answered a `session/new` with (`answered`) and the answer it
//! got to each permission request (`response`).
//!
//! What a prompt does depends on the words in its text:
//! - `crash`: one chunk, then the process exits with status 3, mid-turn;
//! - `hang`: a thought, then nothing, until `session/cancel` (then the turn ends
//!   `cancelled`);
//! - `permission`: a tool call and a permission request, then, once it is answered
//!   (it waits for the answer even when the turn is cancelled: ACP has the client
//!   answer `cancelled` then), the call completed or failed, and `end_turn` or
//!   `cancelled`;
//! - `stream N`: N agent message chunks of about 60 bytes each, each led by the time
//!   it was written, then `end_turn` (the streaming benches and the disk-full test);
//!   `stream N at R`: the same, R chunks a second (an agent's pace rather than as fast
//!   as the SDK's queue takes them, which is what a latency is measured at);
//! - `retitle`: a `session_info_update` with the title `The agent's title`, then
//!   `end_turn`;
//! - `usage`: a message chunk, then a `usage_update` (the Nth `usage` turn of the
//!   session: `used` N × 1000 of `size` 200000, `cost` N × 0.25 `USD`, or no `cost` when
//!   the text also says `nocost`), then `end_turn` with the end-of-turn `usage`
//!   `inputTokens` 100, `outputTokens` 20, `cachedReadTokens` 30, `totalTokens` 150
//!   (no thought or cache-write tokens);
//! - `garbage`: first, straight onto its standard output, a line that is not JSON, a
//!   JSON value that is not a message, and a line one byte over the proxy's
//!   `FRAME_LIMIT`; then as anything else;
//! - `endless`: first 200 MiB with no line ending (then the ending); then as anything
//!   else;
//! - `echo in two:` and more: what follows, back as a message in two chunks cut at its
//!   middle, a thought, and a completed tool call whose title and raw input hold it,
//!   then `end_turn` (the redaction tests);
//! - `cursors`: a thought, a message in two chunks (neither with a `messageId`), a
//!   tool call, a `cursor_update` of its own, a message in two chunks under
//!   `messageId` `agent-msg-2`, the call's update (completed) and a message under
//!   `agent-msg-3`, then `end_turn` (the session cursor tests);
//! - anything else: a thought, three message chunks, a tool call with a permission
//!   request and its update, a plan and an update kind the schema does not know, then
//!   `end_turn` (`cancelled` if the permission was).
//!
//! Flags: `--announce-meta` (announce `daemon/attachmentContext` under
//! `agentCapabilities._meta`), `--no-image`, `--no-embedded`, `--load`, `--resume`,
//! `--close`, `--delete`, `--archive`, `--title` (announce `sessionCapabilities`
//! `archive` and `title`; their requests are reported, and answered method not found),
//! `--report FILE`, `--last-block` (the words above are looked for in the
//! prompt's last text block only: a fresh agent session's first prompt starts with
//! the conversation so far, whose `crash` or `hang` must not act again).

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, CloseSessionRequest, CloseSessionResponse, ContentBlock,
    ContentChunk, Cost, DeleteSessionRequest, DeleteSessionResponse, Implementation,
    InitializeRequest, InitializeResponse, LoadSessionRequest, LoadSessionResponse,
    NewSessionRequest, NewSessionResponse, PermissionOption, PermissionOptionKind, Plan, PlanEntry,
    PlanEntryPriority, PlanEntryStatus, PromptCapabilities, PromptRequest, PromptResponse,
    RequestPermissionOutcome, RequestPermissionRequest, ResumeSessionRequest,
    ResumeSessionResponse, SessionArchiveCapabilities, SessionCapabilities,
    SessionCloseCapabilities, SessionDeleteCapabilities, SessionId, SessionInfoUpdate,
    SessionNotification, SessionResumeCapabilities, SessionTitleCapabilities, SessionUpdate,
    SetSessionConfigOptionRequest, SetSessionConfigOptionResponse, SetSessionModeRequest,
    SetSessionModeResponse, StopReason, TextContent, ToolCall, ToolCallId, ToolCallStatus,
    ToolCallUpdate, ToolCallUpdateFields, ToolKind, Usage, UsageUpdate,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Client, Dispatch, Error, Handled, Stdio, UntypedMessage, V1};
use serde_json::{Value, json};

#[derive(Default)]
struct Flags {
    announce_meta: bool,
    image: bool,
    embedded: bool,
    load: bool,
    resume: bool,
    close: bool,
    delete: bool,
    archive: bool,
    title: bool,
    report: Option<std::path::PathBuf>,
    last_block: bool,
}

fn flags() -> Flags {
    let mut f = Flags {
        image: true,
        embedded: true,
        ..Flags::default()
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--announce-meta" => f.announce_meta = true,
            "--no-image" => f.image = false,
            "--no-embedded" => f.embedded = false,
            "--load" => f.load = true,
            "--resume" => f.resume = true,
            "--close" => f.close = true,
            "--delete" => f.delete = true,
            "--archive" => f.archive = true,
            "--title" => f.title = true,
            "--report" => f.report = args.next().map(Into::into),
            "--last-block" => f.last_block = true,
            other => {
                eprintln!("sessionstore-test-agent: unknown argument {other:?}");
                std::process::exit(2);
            }
        }
    }
    f
}

struct State {
    flags: Flags,
    sessions: Mutex<HashSet<String>>,
    /// The turns that wait for a cancellation, by session.
    cancels: Mutex<HashMap<String, tokio::sync::oneshot::Sender<()>>>,
    next: Mutex<u64>,
    reporting: Mutex<()>,
    /// How many `usage` turns each session has run, and the sessions whose running
    /// turn answers with its usage.
    usage_turns: Mutex<HashMap<String, u64>>,
    answer_usage: Mutex<HashSet<String>>,
}

impl State {
    /// Appends `entry`, with this process's id, as one line in one write, so lines from
    /// concurrent turns (and from the agent started after this one) never interleave.
    fn report(&self, mut entry: Value) {
        let Some(path) = &self.flags.report else {
            return;
        };
        entry["pid"] = json!(std::process::id());
        let line = format!("{entry}\n");
        let _held = self.reporting.lock().unwrap();
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("the report file opens");
        file.write_all(line.as_bytes())
            .expect("the report is written");
    }

    fn knows(&self, session: &SessionId) -> bool {
        self.sessions.lock().unwrap().contains(&*session.0)
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let state = Arc::new(State {
        flags: flags(),
        sessions: Mutex::new(HashSet::new()),
        cancels: Mutex::new(HashMap::new()),
        next: Mutex::new(0),
        reporting: Mutex::new(()),
        usage_turns: Mutex::new(HashMap::new()),
        answer_usage: Mutex::new(HashSet::new()),
    });
    let s = state.clone();
    let agent = agent_client_protocol::Agent
        .v1()
        .name("sessionstore-test-agent")
        // First in the chain, so it sees every message as it came, before any typed
        // handler parses it (and whether one does or not).
        .on_receive_dispatch(
            async move |message: Dispatch<UntypedMessage, UntypedMessage, V1>, _cx| {
                match &message {
                    Dispatch::Request(request, _) => s.report(json!({
                        "kind": "request",
                        "method": request.method,
                        "params": request.params,
                    })),
                    Dispatch::Notification(note) => s.report(json!({
                        "kind": "notification",
                        "method": note.method,
                        "params": note.params,
                    })),
                    Dispatch::Response(..) => {}
                }
                Ok(Handled::No {
                    message,
                    retry: false,
                })
            },
            agent_client_protocol::on_receive_dispatch!(),
        );
    let s = state.clone();
    let agent = agent.on_receive_request(
        async move |request: InitializeRequest, responder, _cx| {
            responder.respond(initialize(&s.flags, &request))
        },
        agent_client_protocol::on_receive_request!(),
    );
    let s = state.clone();
    let agent = agent.on_receive_request(
        async move |_: NewSessionRequest, responder, _cx| {
            let id = {
                let mut next = s.next.lock().unwrap();
                *next += 1;
                format!("agent-{}-{}", std::process::id(), *next)
            };
            s.sessions.lock().unwrap().insert(id.clone());
            s.report(json!({"answered": "session/new", "sessionId": id}));
            responder.respond(NewSessionResponse::new(SessionId::new(id)))
        },
        agent_client_protocol::on_receive_request!(),
    );
    let s = state.clone();
    let agent = agent.on_receive_request(
        async move |request: LoadSessionRequest, responder: Responder<LoadSessionResponse>, _cx| {
            if !s.flags.load || !s.knows(&request.session_id) {
                return responder.respond_with_error(unknown_session(&request.session_id));
            }
            responder.respond(LoadSessionResponse::new())
        },
        agent_client_protocol::on_receive_request!(),
    );
    let s = state.clone();
    let agent = agent.on_receive_request(
        async move |request: ResumeSessionRequest,
                    responder: Responder<ResumeSessionResponse>,
                    _cx| {
            if !s.flags.resume || !s.knows(&request.session_id) {
                return responder.respond_with_error(unknown_session(&request.session_id));
            }
            responder.respond(ResumeSessionResponse::new())
        },
        agent_client_protocol::on_receive_request!(),
    );
    let s = state.clone();
    let agent = agent.on_receive_request(
        async move |request: CloseSessionRequest,
                    responder: Responder<CloseSessionResponse>,
                    _cx| {
            s.sessions.lock().unwrap().remove(&*request.session_id.0);
            responder.respond(CloseSessionResponse::new())
        },
        agent_client_protocol::on_receive_request!(),
    );
    let s = state.clone();
    let agent = agent.on_receive_request(
        async move |request: DeleteSessionRequest,
                    responder: Responder<DeleteSessionResponse>,
                    _cx| {
            s.sessions.lock().unwrap().remove(&*request.session_id.0);
            responder.respond(DeleteSessionResponse::new())
        },
        agent_client_protocol::on_receive_request!(),
    );
    let agent = agent.on_receive_request(
        async move |_: SetSessionModeRequest, responder: Responder<SetSessionModeResponse>, _cx| {
            responder.respond(SetSessionModeResponse::new())
        },
        agent_client_protocol::on_receive_request!(),
    );
    let agent = agent.on_receive_request(
        async move |_: SetSessionConfigOptionRequest,
                    responder: Responder<SetSessionConfigOptionResponse>,
                    _cx| { responder.respond(SetSessionConfigOptionResponse::new(vec![])) },
        agent_client_protocol::on_receive_request!(),
    );
    let s = state.clone();
    let agent = agent.on_receive_notification(
        async move |note: CancelNotification, _cx| {
            if let Some(cancel) = s.cancels.lock().unwrap().remove(&*note.session_id.0) {
                let _ = cancel.send(());
            }
            Ok(())
        },
        agent_client_protocol::on_receive_notification!(),
    );
    let s = state.clone();
    let agent = agent.on_receive_request(
        async move |request: PromptRequest,
                    responder: Responder<PromptResponse>,
                    cx: ConnectionTo<Client>| {
            if !s.knows(&request.session_id) {
                return responder.respond_with_error(unknown_session(&request.session_id));
            }
            let (tx, rx) = tokio::sync::oneshot::channel();
            s.cancels
                .lock()
                .unwrap()
                .insert(request.session_id.to_string(), tx);
            let turn = s.clone();
            let runner = cx.clone();
            // The turn runs beside the dispatch loop, so a cancellation and the
            // client's answers to the agent's requests get through while it runs.
            runner.spawn(async move {
                let stop = run_turn(&turn, &cx, &request, rx).await?;
                turn.cancels.lock().unwrap().remove(&*request.session_id.0);
                let mut answer = PromptResponse::new(stop);
                if turn
                    .answer_usage
                    .lock()
                    .unwrap()
                    .remove(&*request.session_id.0)
                {
                    answer = answer.usage(Usage::new(150, 100, 20).cached_read_tokens(30));
                }
                responder.respond(answer)
            })
        },
        agent_client_protocol::on_receive_request!(),
    );
    agent.connect_to(Stdio::new()).await
}

/// ACP's "resource not found", for a session this agent does not know (any session
/// after a restart: it keeps them in memory).
fn unknown_session(session: &SessionId) -> Error {
    Error::new(-32002, format!("unknown session {session}"))
}

fn initialize(flags: &Flags, request: &InitializeRequest) -> InitializeResponse {
    let mut sessions = SessionCapabilities::new();
    if flags.resume {
        sessions = sessions.resume(SessionResumeCapabilities::new());
    }
    if flags.close {
        sessions = sessions.close(SessionCloseCapabilities::new());
    }
    if flags.delete {
        sessions = sessions.delete(SessionDeleteCapabilities::new());
    }
    if flags.archive {
        sessions = sessions.archive(SessionArchiveCapabilities::new());
    }
    if flags.title {
        sessions = sessions.title(SessionTitleCapabilities::new());
    }
    let mut caps = AgentCapabilities::new()
        .load_session(flags.load)
        .prompt_capabilities(
            PromptCapabilities::new()
                .image(flags.image)
                .embedded_context(flags.embedded),
        )
        .session_capabilities(sessions);
    if flags.announce_meta {
        let mut meta = serde_json::Map::new();
        meta.insert("daemon/attachmentContext".to_owned(), json!(true));
        caps.meta = Some(meta);
    }
    InitializeResponse::new(request.protocol_version)
        .agent_capabilities(caps)
        .agent_info(Implementation::new("sessionstore-test-agent", "0"))
}

/// The words of a prompt that say what the turn does: its text blocks after the
/// conversation a proxy restored ahead of it (which ends with a block of the proxy's
/// own, marked `[sessionstore]`), so that a `crash` or `hang` said in an earlier turn
/// is not obeyed again.
fn text_of(request: &PromptRequest) -> String {
    let texts: Vec<&str> = request
        .prompt
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect();
    let after = texts
        .iter()
        .rposition(|t| t.contains("[sessionstore]"))
        .map_or(0, |i| i + 1);
    texts[after..].join("\n")
}

fn last_text_of(request: &PromptRequest) -> String {
    request
        .prompt
        .iter()
        .rev()
        .find_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

fn update(
    cx: &ConnectionTo<Client>,
    session: &SessionId,
    update: SessionUpdate,
) -> Result<(), Error> {
    cx.send_notification(SessionNotification::new(session.clone(), update))
}

/// Bytes written onto standard output past the SDK, which is idle meanwhile (the
/// turn has sent nothing yet), so they never land inside one of its messages.
fn raw(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .expect("the proxy reads the agent's output");
    out.flush().expect("the proxy reads the agent's output");
}

fn chunk(text: &str) -> ContentChunk {
    ContentChunk::new(ContentBlock::Text(TextContent::new(text.to_owned())))
}

/// N, and R if given, of a prompt that says `stream N` or `stream N at R`.
fn streamed_chunks(text: &str) -> Option<(u64, Option<f64>)> {
    let mut words = text.split_whitespace();
    while let Some(word) = words.next() {
        if word == "stream" {
            let n = words.next()?.parse().ok()?;
            let rate = match (words.next(), words.next()) {
                (Some("at"), Some(rate)) => rate.parse().ok().filter(|r: &f64| *r > 0.0),
                _ => None,
            };
            return Some((n, rate));
        }
    }
    None
}

async fn run_turn(
    state: &State,
    cx: &ConnectionTo<Client>,
    request: &PromptRequest,
    cancelled: tokio::sync::oneshot::Receiver<()>,
) -> Result<StopReason, Error> {
    let session = &request.session_id;
    let text = if state.flags.last_block {
        last_text_of(request)
    } else {
        text_of(request)
    };
    if text.contains("garbage") {
        raw(b"{\"jsonrpc\": \"2.0\", \"method\": oops\n");
        raw(b"[1, 2, 3]\n");
        let mut over = vec![b'x'; sessionstore::acp::proxy::FRAME_LIMIT + 1];
        over.push(b'\n');
        raw(&over);
    }
    if text.contains("endless") {
        let block = vec![b'y'; 1 << 20];
        for _ in 0..200 {
            raw(&block);
        }
        raw(b"\n");
    }
    if text.contains("crash") {
        update(
            cx,
            session,
            SessionUpdate::AgentMessageChunk(chunk("about to crash")),
        )?;
        // Give the chunk a moment to leave before the process goes.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        std::process::exit(3);
    }
    if text.contains("hang") {
        // Something to record before the wait, for a turn whose proxy dies meanwhile.
        update(
            cx,
            session,
            SessionUpdate::AgentThoughtChunk(chunk("waiting to be cancelled")),
        )?;
        let _ = cancelled.await;
        return Ok(StopReason::Cancelled);
    }
    if text.contains("usage") {
        update(
            cx,
            session,
            SessionUpdate::AgentMessageChunk(chunk("counted")),
        )?;
        let n = {
            let mut turns = state.usage_turns.lock().unwrap();
            let n = turns.entry(session.to_string()).or_default();
            *n += 1;
            *n
        };
        let mut usage = UsageUpdate::new(n * 1000, 200_000);
        if !text.contains("nocost") {
            usage = usage.cost(Cost::new(n as f64 * 0.25, "USD"));
        }
        update(cx, session, SessionUpdate::UsageUpdate(usage))?;
        state
            .answer_usage
            .lock()
            .unwrap()
            .insert(session.to_string());
        return Ok(StopReason::EndTurn);
    }
    if text.contains("retitle") {
        update(
            cx,
            session,
            SessionUpdate::SessionInfoUpdate(SessionInfoUpdate::new().title("The agent's title")),
        )?;
        return Ok(StopReason::EndTurn);
    }
    if let Some((_, said)) = text.split_once("echo in two:") {
        // What was said, back as a message in two chunks cut at its middle, a thought,
        // and a tool call that takes it as its input: a secret in it reaches the
        // recorder split across two chunks, and whole in the others. The second chunk
        // comes well after the proxy's recording window (5 ms) closed on the first, so
        // the two are written apart.
        let mut mid = said.len() / 2;
        while !said.is_char_boundary(mid) {
            mid += 1;
        }
        update(
            cx,
            session,
            SessionUpdate::AgentMessageChunk(chunk(&said[..mid])),
        )?;
        tokio::time::sleep(std::time::Duration::from_millis(40)).await;
        update(
            cx,
            session,
            SessionUpdate::AgentMessageChunk(chunk(&said[mid..])),
        )?;
        update(cx, session, SessionUpdate::AgentThoughtChunk(chunk(said)))?;
        update(
            cx,
            session,
            SessionUpdate::ToolCall(
                ToolCall::new(ToolCallId::new("call-echo"), format!("run {said}"))
                    .raw_input(json!({ "command": said }))
                    .status(ToolCallStatus::Completed),
            ),
        )?;
        return Ok(StopReason::EndTurn);
    }
    if text.contains("cursors") {
        // Entries to anchor cursors at, with and without the agent's own messageIds, and
        // a cursor_update of the agent's own, which the proxy must not relay.
        update(
            cx,
            session,
            SessionUpdate::AgentThoughtChunk(chunk("thinking it over")),
        )?;
        for piece in ["Hello", " there."] {
            update(cx, session, SessionUpdate::AgentMessageChunk(chunk(piece)))?;
        }
        update(
            cx,
            session,
            SessionUpdate::ToolCall(
                ToolCall::new(ToolCallId::new("call-cursors"), "Look around")
                    .kind(ToolKind::Read)
                    .status(ToolCallStatus::Pending),
            ),
        )?;
        cx.send_notification(UntypedMessage::new(
            "session/update",
            json!({
                "sessionId": session,
                "update": {"sessionUpdate": "cursor_update", "cursorId": "agent-own",
                    "capabilities": {"fork": {}},
                    "anchor": {"type": "tool_call", "toolCallId": "call-cursors",
                        "position": "after"}}
            }),
        )?)?;
        for piece in ["Second", " answer."] {
            update(
                cx,
                session,
                SessionUpdate::AgentMessageChunk(chunk(piece).message_id("agent-msg-2")),
            )?;
        }
        update(
            cx,
            session,
            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                ToolCallId::new("call-cursors"),
                ToolCallUpdateFields::new().status(ToolCallStatus::Completed),
            )),
        )?;
        update(
            cx,
            session,
            SessionUpdate::AgentMessageChunk(chunk("Third.").message_id("agent-msg-3")),
        )?;
        return Ok(StopReason::EndTurn);
    }
    if text.contains("permission") {
        let call = ToolCallId::new("call-permission");
        let stop =
            tool_call_asking(state, cx, session, &call, "Edit a file", ToolKind::Edit).await?;
        return Ok(stop);
    }
    if let Some((n, rate)) = streamed_chunks(&text) {
        let start = tokio::time::Instant::now();
        for i in 0..n {
            if let Some(rate) = rate {
                let due = std::time::Duration::from_secs_f64(i as f64 / rate);
                tokio::time::sleep_until(start + due).await;
            }
            // About 60 bytes, led by when it was written (nanoseconds since the epoch),
            // so a client can measure how long each chunk took to reach it.
            let sent = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let piece = format!("{sent:020} chunk {i:>8} of a streamed answer. ");
            update(cx, session, SessionUpdate::AgentMessageChunk(chunk(&piece)))?;
        }
        return Ok(StopReason::EndTurn);
    }
    update(
        cx,
        session,
        SessionUpdate::AgentThoughtChunk(chunk("thinking about it")),
    )?;
    for piece in ["Hello", " from", " the test agent."] {
        update(cx, session, SessionUpdate::AgentMessageChunk(chunk(piece)))?;
    }
    let call = ToolCallId::new("call-1");
    let stop = tool_call_asking(state, cx, session, &call, "Read a file", ToolKind::Read).await?;
    update(
        cx,
        session,
        SessionUpdate::Plan(Plan::new(vec![PlanEntry::new(
            "answer the question",
            PlanEntryPriority::High,
            PlanEntryStatus::Completed,
        )])),
    )?;
    // An update kind no schema knows yet: a store must keep it as it came.
    cx.send_notification(UntypedMessage::new(
        "session/update",
        json!({
            "sessionId": session,
            "update": {"sessionUpdate": "sessionstore_test_future", "detail": {"n": 1}}
        }),
    )?)?;
    Ok(stop)
}

/// A tool call (`pending`), a permission request for it, and, once the client has
/// answered (reported as `response`), the call `completed` if it allowed, else
/// `failed`. The turn's stop reason: `cancelled` when the answer was, else `end_turn`.
/// It waits for the answer even when the turn is cancelled meanwhile: ACP has the
/// client answer a pending permission request `cancelled` then.
async fn tool_call_asking(
    state: &State,
    cx: &ConnectionTo<Client>,
    session: &SessionId,
    call: &ToolCallId,
    title: &str,
    kind: ToolKind,
) -> Result<StopReason, Error> {
    update(
        cx,
        session,
        SessionUpdate::ToolCall(
            ToolCall::new(call.clone(), title)
                .kind(kind)
                .status(ToolCallStatus::Pending),
        ),
    )?;
    let ask = RequestPermissionRequest::new(
        session.clone(),
        ToolCallUpdate::new(call.clone(), ToolCallUpdateFields::new()),
        vec![
            PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce),
            PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
        ],
    );
    let answer = cx.send_request(ask).block_task().await;
    state.report(json!({
        "response": "session/request_permission",
        "result": answer.as_ref().ok(),
        "error": answer.as_ref().err().map(|e| e.to_string()),
    }));
    let outcome = answer.map(|a| a.outcome).ok();
    let allowed = matches!(
        &outcome,
        Some(RequestPermissionOutcome::Selected(s)) if &*s.option_id.0 == "allow"
    );
    let status = if allowed {
        ToolCallStatus::Completed
    } else {
        ToolCallStatus::Failed
    };
    update(
        cx,
        session,
        SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            call.clone(),
            ToolCallUpdateFields::new().status(status),
        )),
    )?;
    Ok(match outcome {
        Some(RequestPermissionOutcome::Cancelled) => StopReason::Cancelled,
        _ => StopReason::EndTurn,
    })
}
