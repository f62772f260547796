//! The ACP face of a `Store`: the session methods (`initialize`, `session/new`, `list`,
//! `load`, `resume`, `close`, `delete`, `fork`, `prompt`) answered with the SDK's types,
//! so a daemon that is itself an ACP agent can delegate to it; `server` runs it over
//! stdio. Nothing here stores or reads anything itself: every row and file goes through
//! `Store`, and this module keeps only which sessions are open on its connection.
//!
//! The store keeps no paths (invariant 1), so the working directory a client sees for
//! every session is the one this front was started with; a request for another one is
//! refused, and `session/list` filtered by another one is empty.

pub mod proxy;
pub mod server;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use agent_client_protocol::v1::schema::{
    AgentCapabilities, CloseSessionRequest, CloseSessionResponse, ContentBlock,
    DeleteSessionRequest, DeleteSessionResponse, EmbeddedResourceResource, ForkSessionRequest,
    ForkSessionResponse, Implementation, InitializeRequest, InitializeResponse,
    ListSessionsRequest, ListSessionsResponse, LoadSessionRequest, LoadSessionResponse,
    NewSessionRequest, NewSessionResponse, PromptCapabilities, PromptRequest, PromptResponse,
    ResumeSessionRequest, ResumeSessionResponse, SessionCapabilities, SessionCloseCapabilities,
    SessionDeleteCapabilities, SessionForkCapabilities, SessionId as AcpSessionId, SessionInfo,
    SessionListCapabilities, SessionResumeCapabilities, StopReason,
};
use agent_client_protocol::{Error as RpcError, ErrorCode};
use base64::Engine;

use crate::dispatch::DEFAULT_MEMO_BUDGET;
use crate::error::Error;
use crate::format;
use crate::history::{AcpPoint, Replay};
use crate::ids::SessionId;
use crate::lifecycle::{DEFAULT_PAGE, SessionCursor};
use crate::model::Delivery;
use crate::model::ToolsHost;
use crate::store::{Prompt as StorePrompt, PromptBlock, Store, Upload};

/// How many sessions one `session/list` answer holds: the store's default page.
pub const LIST_PAGE: usize = DEFAULT_PAGE;

/// What every method of the front returns: the SDK's response, or the JSON-RPC error
/// the client gets (the connection stays up either way).
pub type RpcResult<T> = std::result::Result<T, RpcError>;

/// The session methods over one `Store`, for one connection: it remembers which
/// sessions this connection has opened (new, load, resume) and not closed, since only
/// those take prompts.
#[derive(Debug)]
pub struct AcpFront {
    store: Store,
    cwd: PathBuf,
    open: Mutex<HashSet<SessionId>>,
}

impl AcpFront {
    /// A front over `store` that reports `cwd` for every session. ACP paths are
    /// absolute, so a relative `cwd` is taken from the current directory.
    pub fn new(store: Store, cwd: &Path) -> std::io::Result<AcpFront> {
        Ok(AcpFront {
            store,
            cwd: std::path::absolute(cwd)?,
            open: Mutex::new(HashSet::new()),
        })
    }

    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// What this front can do: every session method it answers is advertised.
    pub fn initialize(&self, _request: &InitializeRequest) -> InitializeResponse {
        // Version 1 is the only one spoken here, and ACP has an agent answer a version
        // it does not support with the one it does; the client decides what follows.
        let version = agent_client_protocol::schema::ProtocolVersion::V1;
        let sessions = SessionCapabilities::new()
            .list(SessionListCapabilities::new())
            .resume(SessionResumeCapabilities::new())
            .close(SessionCloseCapabilities::new())
            .delete(SessionDeleteCapabilities::new())
            .fork(SessionForkCapabilities::new());
        let capabilities = AgentCapabilities::new()
            .load_session(true)
            .prompt_capabilities(PromptCapabilities::new().image(true).embedded_context(true))
            .session_capabilities(sessions);
        InitializeResponse::new(version)
            .agent_capabilities(capabilities)
            .agent_info(Implementation::new(
                "sessionstore",
                env!("CARGO_PKG_VERSION"),
            ))
    }

    /// A new session with no title (its first prompt names it), open on this
    /// connection. MCP servers are not kept: this front runs no tools.
    pub async fn new_session(&self, request: NewSessionRequest) -> RpcResult<NewSessionResponse> {
        self.check_cwd(&request.cwd)?;
        let session = self
            .store
            .create_session(None, ToolsHost::Local)
            .await
            .map_err(rpc_error)?;
        self.open_session(session.id);
        Ok(NewSessionResponse::new(acp_id(session.id)))
    }

    /// One page of sessions, most recently updated first, through the store's paged
    /// listing: `nextCursor` is the store's opaque cursor, so pages neither repeat nor
    /// skip a session while others are added. ACP lets a client pass a cursor but not
    /// a page size, so a page holds [`LIST_PAGE`] sessions. A cursor this front did
    /// not give out is refused as invalid params.
    pub async fn list_sessions(
        &self,
        request: ListSessionsRequest,
    ) -> RpcResult<ListSessionsResponse> {
        let cursor = request
            .cursor
            .as_deref()
            .map(str::parse::<SessionCursor>)
            .transpose()
            .map_err(|e| invalid_params(e.to_string()))?;
        if request.cwd.as_deref().is_some_and(|cwd| cwd != self.cwd) {
            return Ok(ListSessionsResponse::new(vec![]));
        }
        let page = self
            .store
            .list_sessions_page(LIST_PAGE, cursor)
            .await
            .map_err(rpc_error)?;
        let infos = page
            .sessions
            .into_iter()
            .map(|s| {
                SessionInfo::new(acp_id(s.id), self.cwd.clone())
                    .title(s.title)
                    .updated_at(s.updated_at)
            })
            .collect();
        Ok(ListSessionsResponse::new(infos).next_cursor(page.next_cursor.map(|c| c.to_string())))
    }

    /// Replays the history to `update`, one `session/update` notification at a time
    /// and in order, then opens the session; the caller answers the request only
    /// after this returns, as ACP requires. Every attachment block carries the path of
    /// the read made now. The whole history, unless `_meta` holds a `replayFrom`
    /// point ([`replay_point`]): then the replay starts there and ends with the
    /// `replay_complete` marker (`format::replay_complete`).
    pub async fn load_session(
        &self,
        request: LoadSessionRequest,
        mut update: impl FnMut(format::Replayed) -> RpcResult<()>,
    ) -> RpcResult<LoadSessionResponse> {
        self.check_cwd(&request.cwd)?;
        let id = store_id(&request.session_id)?;
        let point = replay_point(request.meta.as_ref())?;
        let marked = point.is_some();
        replay(
            &self.store,
            id,
            point.unwrap_or_default(),
            marked,
            &mut update,
        )
        .await?;
        self.open_session(id);
        Ok(LoadSessionResponse::new())
    }

    /// Opens a stored session on this connection. Nothing is replayed, unless `_meta`
    /// holds a `replayFrom` point ([`replay_point`], v2's `session/resume` cursor):
    /// then the history from that point goes to `update` first, as `session/load`
    /// sends it, ending with the `replay_complete` marker.
    pub async fn resume_session(
        &self,
        request: ResumeSessionRequest,
        mut update: impl FnMut(format::Replayed) -> RpcResult<()>,
    ) -> RpcResult<ResumeSessionResponse> {
        self.check_cwd(&request.cwd)?;
        let id = store_id(&request.session_id)?;
        match replay_point(request.meta.as_ref())? {
            Some(point) => replay(&self.store, id, point, true, &mut update).await?,
            None => {
                self.store.session(id).await.map_err(rpc_error)?;
            }
        }
        self.open_session(id);
        Ok(ResumeSessionResponse::new())
    }

    /// Closes a session on this connection. Nothing runs for a session here, so there
    /// is nothing to cancel; closing one that is not open is not an error.
    pub async fn close_session(
        &self,
        request: CloseSessionRequest,
    ) -> RpcResult<CloseSessionResponse> {
        let id = store_id(&request.session_id)?;
        self.store.session(id).await.map_err(rpc_error)?;
        self.open_sessions().remove(&id);
        Ok(CloseSessionResponse::new())
    }

    /// Deletes a session through the store: its rows and event log erased behind a
    /// tombstone, its folder under the configured root removed. It is closed on this
    /// connection first, so no prompt reaches it afterwards. Deleting a session that
    /// is already deleted succeeds again; an id the store never had is not found.
    pub async fn delete_session(
        &self,
        request: DeleteSessionRequest,
    ) -> RpcResult<DeleteSessionResponse> {
        let id = store_id(&request.session_id)?;
        self.open_sessions().remove(&id);
        self.store
            .delete_sessions(vec![id])
            .await
            .map_err(rpc_error)?;
        Ok(DeleteSessionResponse::new())
    }

    /// Forks a session through the store: a new session with the origin's delivered
    /// history and recorded turns, its files in its own folder, open on this
    /// connection as `session/new` would leave it. The fork keeps the origin's title;
    /// MCP servers are not kept, as for `session/new`.
    pub async fn fork_session(
        &self,
        request: ForkSessionRequest,
    ) -> RpcResult<ForkSessionResponse> {
        self.check_cwd(&request.cwd)?;
        let origin = store_id(&request.session_id)?;
        let forked = self
            .store
            .fork_session(origin, None, None)
            .await
            .map_err(rpc_error)?;
        self.open_session(forked.session.id);
        Ok(ForkSessionResponse::new(acp_id(forked.session.id)))
    }

    /// Records the prompt as a user message and ends the turn: this front records, it
    /// does not think. Text blocks become the message's text; each image or embedded
    /// resource becomes an attachment of the session and a reference of the message,
    /// after the text. Everything is decoded before anything is stored, and the store
    /// takes the uploads and the message as one step (`Store::send_prompt`), so the
    /// attachments of a prompt it refuses are removed again.
    pub async fn prompt(&self, request: PromptRequest) -> RpcResult<PromptResponse> {
        let id = store_id(&request.session_id)?;
        if !self.open_sessions().contains(&id) {
            // An unknown session is named as such, not as one that is merely closed.
            self.store.session(id).await.map_err(rpc_error)?;
            return Err(invalid_params(format!(
                "session {id} is not open on this connection: call session/new, session/load \
                 or session/resume first"
            )));
        }
        let prompt = Prompt::from_blocks(&request.prompt)?;
        let text = (!prompt.text.trim().is_empty()).then(|| PromptBlock::Text {
            text: prompt.text,
            meta: None,
        });
        let uploads = prompt
            .uploads
            .into_iter()
            .map(|upload| PromptBlock::Upload { upload, meta: None });
        let prompt = StorePrompt {
            blocks: text.into_iter().chain(uploads).collect(),
            delivery: Delivery::Delivered,
        };
        self.store
            .send_prompt(id, prompt)
            .await
            .map_err(rpc_error)?;
        Ok(PromptResponse::new(StopReason::EndTurn))
    }

    fn check_cwd(&self, cwd: &Path) -> RpcResult<()> {
        if cwd == self.cwd {
            return Ok(());
        }
        Err(invalid_params(format!(
            "this agent serves its sessions under {:?} (its --cwd), not {:?}",
            self.cwd, cwd
        )))
    }

    fn open_session(&self, id: SessionId) {
        self.open_sessions().insert(id);
    }

    fn open_sessions(&self) -> std::sync::MutexGuard<'_, HashSet<SessionId>> {
        // The set is only inserted into and removed from, so a panic elsewhere while
        // it was held cannot have left it half-changed.
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The `_meta` key of `session/load` and `session/resume` under which a client puts
/// ACP v2's `replayFrom` cursor, which the v1 schema has no field for: moving to v2
/// is taking it out of `_meta`.
pub const REPLAY_FROM_META_KEY: &str = "replayFrom";

/// Where a replay a client asked for starts, read from `_meta.replayFrom` in v2's
/// shapes: `{"type":"start"}` (the whole history), `{"type":"message","messageId"}`
/// (from that message, inclusive: a user message's id, or the `messageId` an agent's
/// message carried; see `Replay::from_acp_message`), or this store's
/// `{"type":"_tail","count":N}` (the last N entries). `None` when there is no
/// `replayFrom`; any other cursor is invalid params, as v2 requires, rather than
/// another replay.
pub fn replay_point(
    meta: Option<&serde_json::Map<String, serde_json::Value>>,
) -> RpcResult<Option<Point>> {
    let Some(cursor) = meta.and_then(|m| m.get(REPLAY_FROM_META_KEY)) else {
        return Ok(None);
    };
    let bad = |why: &str| {
        invalid_params(format!(
            "_meta.{REPLAY_FROM_META_KEY} {cursor}: {why}; this agent replays from \
             {{\"type\":\"start\"}}, {{\"type\":\"message\",\"messageId\":…}} or \
             {{\"type\":\"_tail\",\"count\":N}}"
        ))
    };
    match cursor.get("type").and_then(|t| t.as_str()) {
        Some("start") => Ok(Some(Point::Store(Replay::Whole))),
        Some("message") => match cursor.get("messageId").and_then(|m| m.as_str()) {
            Some(id) => Ok(Some(Point::Acp(Replay::from_acp_message(id)))),
            None => Err(bad("a message cursor needs a messageId string")),
        },
        Some("_tail") => match cursor.get("count").and_then(|n| n.as_u64()) {
            Some(n) => Ok(Some(Point::Store(Replay::Tail(n)))),
            None => Err(bad("a _tail cursor needs a count of zero or more")),
        },
        Some(_) => Err(bad("an unsupported cursor type")),
        None => Err(bad("a cursor needs a type string")),
    }
}

/// A replay point as the front takes it from a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Point {
    Store(Replay),
    Acp(AcpPoint),
}

impl Default for Point {
    fn default() -> Point {
        Point::Store(Replay::Whole)
    }
}

/// Replays the history to `update` as `session/update` notifications, one history
/// item at a time: the streamed restore, each item's notifications built by
/// `format::session_updates`, the builder whose values the `acp-updates` writer
/// serializes (so `restore --format acp-updates` prints exactly these), with no JSON
/// written or parsed in between. Only one item's content is held at a time; recorded
/// turn items come in the stream, in their place among the messages. A partial
/// replay begins with `format::replay_notice`, as the `acp-updates` writer's does;
/// one a client asked for with a point (`marked`) ends with
/// `format::replay_complete`.
async fn replay(
    store: &Store,
    session: SessionId,
    point: Point,
    marked: bool,
    update: &mut impl FnMut(format::Replayed) -> RpcResult<()>,
) -> RpcResult<()> {
    let mut stream = match point {
        Point::Store(replay) => {
            store
                .restore_from(session, DEFAULT_MEMO_BUDGET, replay)
                .await
        }
        Point::Acp(at) => {
            store
                .restore_from_acp(session, DEFAULT_MEMO_BUDGET, at)
                .await
        }
    }
    .map_err(rpc_error)?;
    let partial = stream.partial().copied();
    if let Some(partial) = &partial {
        update(format::Replayed::Typed(format::replay_notice(
            session, partial,
        )))?;
    }
    while let Some(item) = stream.next().await {
        let item = item.map_err(rpc_error)?;
        for notification in format::session_updates(session, item) {
            update(notification)?;
        }
    }
    if marked {
        update(format::Replayed::Typed(format::replay_complete(
            session,
            partial.as_ref(),
        )))?;
    }
    Ok(())
}

/// A prompt taken apart: the text the user typed and the files that came with it.
#[derive(Debug, PartialEq, Eq)]
struct Prompt {
    text: String,
    uploads: Vec<Upload>,
}

impl Prompt {
    fn from_blocks(blocks: &[ContentBlock]) -> RpcResult<Prompt> {
        let mut texts = Vec::new();
        let mut uploads = Vec::new();
        for (i, block) in blocks.iter().enumerate() {
            match block {
                ContentBlock::Text(t) => texts.push(t.text.as_str()),
                ContentBlock::Image(image) => uploads.push(Upload {
                    name: upload_name(image.uri.as_deref(), Some(&image.mime_type)),
                    bytes: decode_base64(&image.data, i)?,
                }),
                ContentBlock::Resource(embedded) => match &embedded.resource {
                    EmbeddedResourceResource::TextResourceContents(r) => uploads.push(Upload {
                        name: upload_name(Some(&r.uri), r.mime_type.as_deref()),
                        bytes: r.text.clone().into_bytes(),
                    }),
                    EmbeddedResourceResource::BlobResourceContents(r) => uploads.push(Upload {
                        name: upload_name(Some(&r.uri), r.mime_type.as_deref()),
                        bytes: decode_base64(&r.blob, i)?,
                    }),
                    _ => return Err(refused_block(i, "an embedded resource of an unknown kind")),
                },
                ContentBlock::ResourceLink(link) => {
                    return Err(invalid_params(format!(
                        "prompt block {i} is a resource_link to {:?}: this store does not read \
                         files from the client's paths; embed the content as a resource instead",
                        link.uri
                    )));
                }
                ContentBlock::Audio(_) => {
                    return Err(refused_block(i, "audio, which this agent does not take"));
                }
                _ => return Err(refused_block(i, "a content block of an unknown kind")),
            }
        }
        Ok(Prompt {
            text: texts.join("\n"),
            uploads,
        })
    }
}

fn refused_block(index: usize, what: &str) -> RpcError {
    invalid_params(format!("prompt block {index} is {what}"))
}

fn decode_base64(data: &str, index: usize) -> RpcResult<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| invalid_params(format!("prompt block {index} is not valid base64: {e}")))
}

/// The upload's own name: the last path segment of the resource URI, percent-decoded
/// (the store then makes it safe), or else `attachment.<ext>` from the MIME type.
pub(crate) fn upload_name(uri: Option<&str>, mime: Option<&str>) -> String {
    if let Some(name) = uri.and_then(last_segment) {
        return name;
    }
    match mime.and_then(extension_for) {
        Some(ext) => format!("attachment.{ext}"),
        None => "attachment".to_owned(),
    }
}

fn last_segment(uri: &str) -> Option<String> {
    let end = uri.find(['?', '#']).unwrap_or(uri.len());
    let path = &uri[..end];
    // `data:` and other opaque URIs have no path to take a name from.
    if path.starts_with("data:") {
        return None;
    }
    let segment = path.rsplit('/').next()?;
    let decoded = percent_encoding::percent_decode_str(segment).decode_utf8_lossy();
    let name = decoded.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// An extension for a MIME type: the subtype itself when it is one of the type's
/// extensions (`png`, `pdf`), else a usual choice for the common types whose subtype is
/// not (mime_guess lists `text/plain`'s extensions alphabetically, starting at `asm`),
/// else the first one mime_guess knows.
fn extension_for(mime: &str) -> Option<&'static str> {
    let essence = mime.split(';').next()?.trim().to_ascii_lowercase();
    let usual = match essence.as_str() {
        "text/plain" => Some("txt"),
        "image/jpeg" => Some("jpg"),
        "image/svg+xml" => Some("svg"),
        "text/markdown" => Some("md"),
        "application/octet-stream" => Some("bin"),
        _ => None,
    };
    if usual.is_some() {
        return usual;
    }
    let extensions = mime_guess::get_mime_extensions_str(&essence)?;
    let subtype = essence.split('/').nth(1).unwrap_or_default();
    extensions
        .iter()
        .find(|e| **e == subtype)
        .or_else(|| extensions.first())
        .copied()
}

fn acp_id(id: SessionId) -> AcpSessionId {
    AcpSessionId::new(id.to_string())
}

/// A session id as the store knows it; one that could not be a store's id names no
/// session here.
fn store_id(id: &AcpSessionId) -> RpcResult<SessionId> {
    id.0.parse::<SessionId>().map_err(|e: crate::IdError| {
        RpcError::new(
            ErrorCode::RESOURCE_NOT_FOUND,
            format!("no session {:?}: {e}", &*id.0),
        )
    })
}

fn invalid_params(message: String) -> RpcError {
    RpcError::new(ErrorCode::INVALID_PARAMS, message)
}

/// A store error as the client sees it: an unknown session is "resource not found",
/// input the store will not take is "invalid params", and the rest is an internal
/// error. The message is the error and its causes on one line; `data.kind` is the
/// store's stable name for the condition.
pub fn rpc_error(e: Error) -> RpcError {
    let code = match &e {
        Error::SessionNotFound(_) => ErrorCode::RESOURCE_NOT_FOUND,
        Error::EmptyMessage
        | Error::MalformedReference(_)
        | Error::ForeignReference { .. }
        | Error::Attachment(crate::attachments::AttachmentError::UploadTooLarge { .. })
        | Error::Id(_)
        | Error::ReplayPoint { .. }
        | Error::ReplayMessage { .. } => ErrorCode::INVALID_PARAMS,
        e if e.is_refused() => ErrorCode::INVALID_PARAMS,
        _ => ErrorCode::INTERNAL_ERROR,
    };
    let kind = e.kind();
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    RpcError::new(code, message.replace(['\n', '\r'], " "))
        .data(serde_json::json!({ "kind": kind }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prompt frame written from parts is, byte for byte, the line the SDK sends for
    /// the same typed `PromptRequest`, through its own message type and serialization.
    #[test]
    fn a_prompt_frame_is_the_line_the_sdk_sends_for_the_typed_request() {
        use crate::attachments::AttachmentUri;
        use crate::dispatch::{Attached, Content, Part, Placement, Prepared};
        let session = SessionId::new();
        let placement = Placement {
            host: "h \u{202E}".into(),
            tools_host: ToolsHost::Ssh,
        };
        let part = |name: &str, mime: &str, content: Content| {
            let prepared = std::sync::Arc::new(Prepared::new(
                name.into(),
                AttachmentUri::new(session, name),
                mime.into(),
                PathBuf::from(format!("/roots/{session}/{name}")),
                content,
            ));
            Part::Attachment(Attached {
                context: prepared.context(&placement),
                prepared,
                meta: None,
            })
        };
        let parts = vec![
            Part::Text("look \"here\"\n\u{7}".into()),
            part(
                "a \"b\".png",
                "image/png",
                Content::Image("iVBORw0K".into()),
            ),
            part(
                "n.txt",
                "text/plain",
                Content::Text("x\ty \u{0} 日本".into()),
            ),
            part(
                "d.bin",
                "application/octet-stream",
                Content::Blob("AAEC".into()),
            ),
        ];
        for id in [
            agent_client_protocol::v1::schema::RequestId::Number(3),
            agent_client_protocol::v1::schema::RequestId::Str("p-1".into()),
        ] {
            let mut frame = Vec::new();
            format::prompt_frame(&mut frame, id.clone(), session, &parts).unwrap();
            let request =
                PromptRequest::new(acp_id(session), parts.iter().map(Part::to_block).collect());
            let params = serde_json::to_value(&request).unwrap();
            let sdk = agent_client_protocol::RawJsonRpcMessage::request(
                format::SESSION_PROMPT.to_owned(),
                params,
                agent_client_protocol::RawJsonRpcId::from(id),
            )
            .unwrap();
            assert_eq!(
                String::from_utf8(frame).unwrap(),
                serde_json::to_string(&sdk).unwrap()
            );
        }
    }

    #[test]
    fn upload_names_come_from_the_uri_then_the_mime_type() {
        let cases = [
            (Some("file:///home/me/notes%20v2.txt"), None, "notes v2.txt"),
            (Some("zed://selection/src/main.rs#L1-5"), None, "main.rs"),
            (
                Some("https://example.com/a/chart.png?x=1"),
                None,
                "chart.png",
            ),
            (
                Some("file:///home/me/"),
                Some("text/plain"),
                "attachment.txt",
            ),
            (None, Some("image/png"), "attachment.png"),
            (None, Some("image/jpeg"), "attachment.jpg"),
            (None, Some("application/pdf"), "attachment.pdf"),
            (
                Some("data:image/png;base64,AAAA"),
                Some("image/png"),
                "attachment.png",
            ),
            (None, Some("x-unknown/whatever"), "attachment"),
            (None, None, "attachment"),
        ];
        for (uri, mime, expected) in cases {
            assert_eq!(upload_name(uri, mime), expected, "{uri:?} {mime:?}");
        }
    }
}
