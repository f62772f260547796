//! `sessionstore acp` driven by a real ACP client: the SDK's client side talking to the
//! built binary over its standard input and output, and raw JSON-RPC lines for what a
//! well-behaved client never sends. Every child is killed when its test ends and every
//! conversation has a timeout, so a hang fails rather than sticks.

use sessionstore::store::Access;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    BlobResourceContents, CloseSessionRequest, ContentBlock, DeleteSessionRequest,
    EmbeddedResource, EmbeddedResourceResource, ForkSessionRequest, ImageContent,
    InitializeRequest, ListSessionsRequest, LoadSessionRequest, NewSessionRequest, PromptRequest,
    ResourceLink, ResumeSessionRequest, SessionId as AcpSessionId, SessionNotification,
    SessionUpdate, StopReason, TextContent, TextResourceContents, ToolCallStatus,
};
use agent_client_protocol::{Agent, ByteStreams, Client, ErrorCode, JsonRpcRequest};
use base64::Engine;
use blocking::Unblock;
use sessionstore::model::{NewSession, Role};
use sessionstore::store::Outgoing;
use sessionstore::{SessionId, Store};

use crate::support::Whole;
use crate::support::{Bin, Expect, PNG, TestStore, check_attachment, config_in};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A running `sessionstore acp`, killed and reaped when dropped. Its standard error
/// goes to a file, so a test can see what it logged and that it never panicked.
pub(crate) struct AgentProcess {
    pub(crate) child: Child,
    stderr: PathBuf,
}

impl AgentProcess {
    /// Starts the agent on `<dir>/sessions.db` with `root` as the configured root,
    /// serving sessions under `cwd`.
    fn start(dir: &Path, root: &Path, cwd: &Path) -> AgentProcess {
        let stderr = dir.join(format!("acp-stderr-{}.log", uuid_ish()));
        let mut config = config_in(dir);
        config.roots.configured = root.to_owned();
        let child = Bin::new(dir)
            .arg("acp")
            .arg("--cwd")
            .arg(cwd)
            .on(&config)
            .stderr(File::create(&stderr).expect("a log file"))
            .spawn();
        AgentProcess { child, stderr }
    }

    /// The SDK's byte-stream transport over the child's pipes.
    fn transport(&mut self) -> ByteStreams<Unblock<ChildStdin>, Unblock<ChildStdout>> {
        let stdin = self.child.stdin.take().expect("piped stdin");
        let stdout = self.child.stdout.take().expect("piped stdout");
        ByteStreams::new(Unblock::new(stdin), Unblock::new(stdout))
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).expect("the agent's log reads")
    }

    pub(crate) fn kill(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let log = self.stderr();
        assert!(!log.contains("panicked"), "the agent panicked: {log}");
        log
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn uuid_ish() -> String {
    SessionId::new().to_string()
}

/// Every `session/update` the client receives, in order, parsed by the SDK into the
/// schema's `SessionNotification` (a notification that did not parse would not be here,
/// and the counts below would miss it).
type Updates = Arc<Mutex<Vec<SessionNotification>>>;

/// Runs `script` as an ACP client of `agent`, collecting notifications into `updates`.
async fn client<T: Send + 'static>(
    agent: &mut AgentProcess,
    updates: &Updates,
    script: impl AsyncFnOnce(ConnectionTo<Agent>) -> Result<T, agent_client_protocol::Error> + Send,
) -> T {
    let sink = updates.clone();
    let run = Client
        .v1()
        .name("sessionstore-test")
        .on_receive_notification(
            async move |n: SessionNotification, _cx| {
                sink.lock().expect("the update list").push(n);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(agent.transport(), script);
    tokio::time::timeout(TIMEOUT, run)
        .await
        .expect("the client finished in time")
        .expect("the client ran")
}

async fn call<R: JsonRpcRequest>(
    cx: &ConnectionTo<Agent>,
    request: R,
) -> Result<R::Response, agent_client_protocol::Error> {
    cx.send_request(request).block_task().await
}

fn initialize() -> InitializeRequest {
    InitializeRequest::new(agent_client_protocol::schema::ProtocolVersion::V1)
}

fn taken(updates: &Updates) -> Vec<SessionNotification> {
    std::mem::take(&mut *updates.lock().expect("the update list"))
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn text_resource(text: &str, uri: &str) -> ContentBlock {
    let mut contents = TextResourceContents::new(text, uri);
    contents.mime_type = Some("text/plain".into());
    ContentBlock::Resource(EmbeddedResource::new(
        EmbeddedResourceResource::TextResourceContents(contents),
    ))
}

fn store_id(id: &AcpSessionId) -> SessionId {
    id.0.parse()
        .expect("the agent's session ids are the store's")
}

/// The whole story of the issue: a client records a prompt with an image and an
/// embedded file, the agent dies, the attachment folder moves to a new root, and a new
/// agent on that root replays the session with paths from reads made there.
#[tokio::test]
async fn a_real_client_records_a_prompt_and_reloads_it_from_a_moved_root() {
    let t = TestStore::empty();
    let cwd = t.dir.path().join("project");
    std::fs::create_dir(&cwd).expect("the project folder");
    let first_root = t.dir.path().join("attachments");
    let notes = "budget: 42\nquarterly notes\n";
    let updates = Updates::default();

    let mut agent = AgentProcess::start(t.dir.path(), &first_root, &cwd);
    let (id, listed) = client(&mut agent, &updates, {
        let cwd = cwd.clone();
        async move |cx| {
            let init = call(&cx, initialize()).await?;
            let caps = &init.agent_capabilities;
            assert!(caps.load_session);
            assert!(caps.prompt_capabilities.image);
            assert!(caps.prompt_capabilities.embedded_context);
            assert!(!caps.prompt_capabilities.audio);
            let sessions = &caps.session_capabilities;
            assert!(sessions.list.is_some() && sessions.resume.is_some());
            assert!(sessions.close.is_some());
            assert!(sessions.delete.is_some() && sessions.fork.is_some());

            let id = call(&cx, NewSessionRequest::new(&cwd)).await?.session_id;
            let prompt = vec![
                ContentBlock::Text(TextContent::new("what is in these?")),
                ContentBlock::Image(ImageContent::new(b64(PNG), "image/png")),
                // Not a `file://` resource: one of those is the client's own file,
                // kept as sent (`client_blocks_are_kept_as_sent_in_order`).
                text_resource(notes, "zed://buffer/notes%20%C3%A9t%C3%A9.txt"),
            ];
            let answer = call(&cx, PromptRequest::new(id.clone(), prompt)).await?;
            assert_eq!(answer.stop_reason, StopReason::EndTurn);

            let listed = call(&cx, ListSessionsRequest::new().cwd(cwd.clone())).await?;
            let elsewhere = call(&cx, ListSessionsRequest::new().cwd(cwd.join("other"))).await?;
            assert!(elsewhere.sessions.is_empty(), "{elsewhere:?}");
            Ok((id, listed))
        }
    })
    .await;
    assert_eq!(listed.sessions.len(), 1, "{listed:?}");
    assert_eq!(listed.sessions[0].session_id, id);
    assert_eq!(listed.sessions[0].cwd, cwd);
    assert_eq!(listed.next_cursor, None);
    assert!(
        taken(&updates).is_empty(),
        "with no agent behind, a prompt is recorded, not answered"
    );
    agent.kill();

    // What was stored: the text as typed, two references, and no path anywhere.
    let session = store_id(&id);
    let store = Store::open_as(t.config.clone(), Access::ReadOnly)
        .await
        .expect("the database opens for reading");
    let messages = store
        .all_messages(session)
        .await
        .expect("the messages read");
    assert_eq!(messages.len(), 1);
    let message = &messages[0];
    assert_eq!(message.role, Role::User);
    assert_eq!(message.display_text, "what is in these?");
    let names: Vec<&str> = message
        .refs
        .iter()
        .map(|r| r.stored_name.as_str())
        .collect();
    assert_eq!(names, ["attachment.png", "notes été.txt"]);
    let expected: Vec<Expect> = message
        .refs
        .iter()
        .zip([PNG.to_vec(), notes.as_bytes().to_vec()])
        .map(|(r, bytes)| Expect {
            name: r.stored_name.clone(),
            uri: r.uri.to_string(),
            bytes,
            host: sessionstore::config::host_name(),
        })
        .collect();
    drop(store);

    let moved_root = t.dir.path().join("moved").join("attachments");
    std::fs::create_dir(t.dir.path().join("moved")).expect("the new root's parent");
    std::fs::rename(&first_root, &moved_root).expect("the attachment folder moves");

    // Issue 14: "... fork; delete; list no longer shows it".
    let mut agent = AgentProcess::start(t.dir.path(), &moved_root, &cwd);
    let (fork, fork_replay, listed, gone) = client(&mut agent, &updates, {
        let (id, cwd) = (id.clone(), cwd.clone());
        let updates = updates.clone();
        let message_id = message.id.to_string();
        let expected: Vec<Expect> = expected.iter().map(|e| expect_in(e, session)).collect();
        let moved_root = moved_root.clone();
        async move |cx| {
            call(&cx, initialize()).await?;
            call(&cx, LoadSessionRequest::new(id.clone(), &cwd)).await?;
            // The replay was sent before the answer, so it is all here already.
            let replayed = taken(&updates);
            check_replay(&replayed, &id, &message_id, &expected, &moved_root);

            let fork = call(&cx, ForkSessionRequest::new(id.clone(), &cwd))
                .await?
                .session_id;
            assert_ne!(fork, id);
            // The fork is open on this connection, as a new session would be.
            let answer = call(
                &cx,
                PromptRequest::new(fork.clone(), vec!["and now?".into()]),
            )
            .await?;
            assert_eq!(answer.stop_reason, StopReason::EndTurn);

            call(&cx, DeleteSessionRequest::new(id.clone())).await?;
            // Deleting it again is no error; the deleted session takes no prompt.
            call(&cx, DeleteSessionRequest::new(id.clone())).await?;
            let gone = [
                call(
                    &cx,
                    PromptRequest::new(id.clone(), vec!["still there?".into()]),
                )
                .await
                .map(|_| ()),
                call(&cx, LoadSessionRequest::new(id.clone(), &cwd))
                    .await
                    .map(|_| ()),
                call(&cx, ForkSessionRequest::new(id.clone(), &cwd))
                    .await
                    .map(|_| ()),
                call(
                    &cx,
                    DeleteSessionRequest::new(AcpSessionId::new(uuid_ish())),
                )
                .await
                .map(|_| ()),
            ];
            assert!(taken(&updates).is_empty());

            // The fork replays from its own folder after its origin went.
            call(&cx, LoadSessionRequest::new(fork.clone(), &cwd)).await?;
            let fork_replay = taken(&updates);
            let listed = call(&cx, ListSessionsRequest::new()).await?;
            Ok((fork, fork_replay, listed, gone))
        }
    })
    .await;
    let log = agent.kill();
    for refused in gone {
        let e = refused.expect_err("the session is gone");
        assert_eq!(e.code, ErrorCode::RESOURCE_NOT_FOUND, "{e:?}");
    }
    assert!(log.contains("session/prompt failed"), "{log}");
    let listed: Vec<&AcpSessionId> = listed.sessions.iter().map(|s| &s.session_id).collect();
    assert_eq!(
        listed,
        [&fork],
        "the list no longer shows the deleted session"
    );
    assert!(
        !moved_root.join(&*id.0).exists(),
        "the deleted session's folder went with it"
    );

    // The fork's replay: the original prompt with the fork's own references, read
    // under its own folder of the moved root, then the prompt sent to the fork.
    let fork_folder = moved_root.join(&*fork.0);
    let store = Store::open_as(t.config.clone(), Access::ReadOnly)
        .await
        .expect("the database opens for reading");
    let fork_messages = store
        .all_messages(store_id(&fork))
        .await
        .expect("the fork's messages");
    assert_eq!(fork_messages.len(), 2);
    let fork_expected: Vec<Expect> = expected
        .iter()
        .map(|e| expect_in(e, store_id(&fork)))
        .collect();
    check_replay(
        &fork_replay[..3],
        &fork,
        &fork_messages[0].id.to_string(),
        &fork_expected,
        &fork_folder,
    );
    assert_eq!(fork_replay.len(), 4, "{fork_replay:#?}");
}

/// `session/list` pages with the store's cursor. ACP gives the client no page size,
/// so there are more sessions than one page holds; sessions created between pages
/// neither repeat nor push one off a later page, and a cursor the agent never gave out
/// is invalid params.
#[tokio::test]
async fn session_list_pages_through_every_session_with_the_stores_cursor() {
    let t = TestStore::empty();
    let cwd = t.dir.path().to_owned();
    let root = t.dir.path().join("attachments");
    let total = 2 * sessionstore::acp::LIST_PAGE + 7;
    let store = Store::open(t.config.clone()).await.expect("a store");
    let mut made = std::collections::HashSet::new();
    for _ in 0..total {
        let s = store
            .create_session(NewSession::default())
            .await
            .expect("a session");
        made.insert(s.id);
    }
    drop(store);

    let updates = Updates::default();
    let mut agent = AgentProcess::start(t.dir.path(), &root, &cwd);
    let (pages, added, bogus) = client(&mut agent, &updates, {
        let cwd = cwd.clone();
        async move |cx| {
            call(&cx, initialize()).await?;
            let mut pages = Vec::new();
            let mut added = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let mut request = ListSessionsRequest::new();
                request.cursor = cursor.take();
                let page = call(&cx, request).await?;
                pages.push(
                    page.sessions
                        .iter()
                        .map(|s| store_id(&s.session_id))
                        .collect::<Vec<_>>(),
                );
                added.push(store_id(
                    &call(&cx, NewSessionRequest::new(&cwd)).await?.session_id,
                ));
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            let mut bogus = ListSessionsRequest::new();
            bogus.cursor = Some("not-a-cursor".into());
            let bogus = call(&cx, bogus).await.map(|_| ());
            Ok((pages, added, bogus))
        }
    })
    .await;
    agent.kill();
    assert_eq!(
        pages.len(),
        3,
        "{:?}",
        pages.iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert!(
        pages
            .iter()
            .all(|p| p.len() <= sessionstore::acp::LIST_PAGE)
    );
    let seen: Vec<SessionId> = pages.concat();
    let unique: std::collections::HashSet<SessionId> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "a session was listed twice");
    assert_eq!(unique, made, "every session, and none added while paging");
    assert!(added.iter().all(|a| !unique.contains(a)));
    let e = bogus.expect_err("a cursor the agent never gave");
    assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{e:?}");
}

/// `e` as session `session` holds it: the same name and bytes, under its own URI.
fn expect_in(e: &Expect, session: SessionId) -> Expect {
    Expect {
        name: e.name.clone(),
        uri: sessionstore::oracle::expected_uri(session, &e.name),
        bytes: e.bytes.clone(),
        host: e.host.clone(),
    }
}

/// The replayed prompt: three user chunks of the stored message, in order, whose
/// attachment blocks hold the original bytes and a path from a read under `root`.
fn check_replay(
    replayed: &[SessionNotification],
    id: &AcpSessionId,
    message_id: &str,
    expected: &[Expect],
    root: &Path,
) {
    assert_eq!(replayed.len(), 3, "{replayed:#?}");
    let mut blocks = Vec::new();
    for n in replayed {
        assert_eq!(&n.session_id, id);
        let SessionUpdate::UserMessageChunk(chunk) = &n.update else {
            panic!("not a user chunk: {n:?}");
        };
        assert_eq!(
            chunk
                .message_id
                .as_ref()
                .map(|m| m.0.to_string())
                .as_deref(),
            Some(message_id)
        );
        blocks.push(serde_json::to_value(&chunk.content).expect("a block serializes"));
    }
    assert_eq!(blocks[0]["type"], "text");
    assert_eq!(blocks[0]["text"], "what is in these?");
    for (block, expect) in blocks[1..].iter().zip(expected) {
        let (_, path) = check_attachment(block, expect);
        assert!(
            path.starts_with(root),
            "{path:?} is under the new root {root:?}"
        );
    }
}

/// A session stays open on its connection until closed: prompts before load or
/// resume and after close are refused, with the connection still usable.
#[tokio::test]
async fn prompts_need_an_open_session_and_resume_replays_nothing() {
    let t = TestStore::empty();
    let cwd = t.dir.path().to_owned();
    let root = t.dir.path().join("attachments");
    let store = Store::open(t.config.clone()).await.expect("a store");
    let session = store
        .create_session(NewSession {
            title: Some("kept".into()),
            ..NewSession::default()
        })
        .await
        .expect("a session");
    drop(store);
    let id = AcpSessionId::new(session.id.to_string());
    let ghost = AcpSessionId::new(SessionId::new().to_string());
    let updates = Updates::default();

    let mut agent = AgentProcess::start(t.dir.path(), &root, &cwd);
    client(&mut agent, &updates, async move |cx| {
        call(&cx, initialize()).await?;
        let hello = || vec![ContentBlock::Text(TextContent::new("hello"))];
        let e = call(&cx, PromptRequest::new(id.clone(), hello()))
            .await
            .expect_err("not open yet");
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{e:?}");
        assert!(e.message.contains("not open"), "{e:?}");
        let e = call(&cx, PromptRequest::new(ghost.clone(), hello()))
            .await
            .expect_err("no such session");
        assert_eq!(e.code, ErrorCode::RESOURCE_NOT_FOUND, "{e:?}");
        let e = call(&cx, ResumeSessionRequest::new(ghost.clone(), &cwd))
            .await
            .expect_err("no such session");
        assert_eq!(e.code, ErrorCode::RESOURCE_NOT_FOUND, "{e:?}");
        // Another working directory is the client's to give, as in front of an
        // agent (the front that came before refused it as invalid params).
        call(
            &cx,
            ResumeSessionRequest::new(id.clone(), cwd.join("elsewhere")),
        )
        .await?;
        call(&cx, CloseSessionRequest::new(id.clone())).await?;

        call(&cx, ResumeSessionRequest::new(id.clone(), &cwd)).await?;
        call(&cx, PromptRequest::new(id.clone(), hello())).await?;
        call(&cx, CloseSessionRequest::new(id.clone())).await?;
        let e = call(&cx, PromptRequest::new(id.clone(), hello()))
            .await
            .expect_err("closed");
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{e:?}");
        Ok(())
    })
    .await;
    assert!(taken(&updates).is_empty(), "resume replays nothing");
    agent.kill();
    let store = Store::open_as(t.config.clone(), Access::ReadOnly)
        .await
        .expect("a store");
    let messages = store.all_messages(session.id).await.expect("messages");
    let texts: Vec<&str> = messages.iter().map(|m| m.display_text.as_str()).collect();
    assert_eq!(
        texts,
        ["hello"],
        "only the prompt made while open was stored"
    );
}

/// A prompt the layer refuses stores nothing, neither a message nor a file, and the
/// connection goes on; names come from the resource URI or the MIME type.
#[tokio::test]
async fn refused_prompts_store_nothing() {
    let t = TestStore::empty();
    let cwd = t.dir.path().to_owned();
    let root = t.dir.path().join("attachments");
    let updates = Updates::default();
    let mut agent = AgentProcess::start(t.dir.path(), &root, &cwd);
    let id = client(&mut agent, &updates, {
        let cwd = cwd.clone();
        async move |cx| {
            call(&cx, initialize()).await?;
            let id = call(&cx, NewSessionRequest::new(&cwd)).await?.session_id;
            let text = || ContentBlock::Text(TextContent::new("look"));
            let refused = [
                (
                    vec![
                        text(),
                        ContentBlock::Image(ImageContent::new("not base64!", "image/png")),
                    ],
                    "base64",
                ),
                (
                    // The first block would be an upload: it is not kept either.
                    vec![
                        text_resource("fine", "zed://buffer/a.txt"),
                        ContentBlock::Resource(EmbeddedResource::new(
                            EmbeddedResourceResource::BlobResourceContents(
                                BlobResourceContents::new("%%%", "zed://buffer/b.bin"),
                            ),
                        )),
                    ],
                    "base64",
                ),
                (vec![], "needs text"),
                (
                    vec![ContentBlock::Text(TextContent::new("  "))],
                    "needs text",
                ),
            ];
            for (prompt, why) in refused {
                let e = call(&cx, PromptRequest::new(id.clone(), prompt))
                    .await
                    .expect_err(why);
                assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{why}: {e:?}");
                assert!(e.message.contains(why), "{why}: {e:?}");
            }
            let blob = ContentBlock::Resource(EmbeddedResource::new(
                EmbeddedResourceResource::BlobResourceContents({
                    let mut b = BlobResourceContents::new(b64(b"\x00\x01\x02"), "");
                    b.mime_type = Some("application/pdf".into());
                    b
                }),
            ));
            call(&cx, PromptRequest::new(id.clone(), vec![blob])).await?;
            Ok(id)
        }
    })
    .await;
    let log = agent.kill();
    assert!(log.contains("base64"), "refusals are logged: {log}");
    let session = store_id(&id);
    let files = files_in(&root.join(session.to_string()));
    assert_eq!(files, ["attachment.pdf"], "refused prompts left no files");
    let store = Store::open_as(t.config.clone(), Access::ReadOnly)
        .await
        .expect("a store");
    let messages = store.all_messages(session).await.expect("messages");
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].refs[0].stored_name, "attachment.pdf");
}

/// The names of the files in `folder`.
fn files_in(folder: &Path) -> Vec<String> {
    std::fs::read_dir(folder)
        .expect("the session folder")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// The client's own blocks are its words, as in front of an agent: a `resource_link`
/// and a `file://` resource are kept as sent, in the order sent among the text and the
/// uploads, copy no file, and come back so on `session/load`. (The front that came
/// before refused a `resource_link` and copied a `file://` resource into the store.)
#[tokio::test]
async fn client_blocks_are_kept_as_sent_in_order() {
    let t = TestStore::empty();
    let cwd = t.dir.path().to_owned();
    let root = t.dir.path().join("attachments");
    let updates = Updates::default();
    let mut agent = AgentProcess::start(t.dir.path(), &root, &cwd);
    let link = ContentBlock::ResourceLink(ResourceLink::new("secrets", "file:///etc/passwd"));
    let own = text_resource("mine", "file:///home/me/a.txt");
    let sent = vec![
        ContentBlock::Text(TextContent::new("look")),
        link.clone(),
        ContentBlock::Image(ImageContent::new(b64(PNG), "image/png")),
        own.clone(),
        ContentBlock::Text(TextContent::new("again")),
    ];
    let (id, replayed) = client(&mut agent, &updates, {
        let (cwd, updates) = (cwd.clone(), updates.clone());
        async move |cx| {
            call(&cx, initialize()).await?;
            let id = call(&cx, NewSessionRequest::new(&cwd)).await?.session_id;
            let answer = call(&cx, PromptRequest::new(id.clone(), sent)).await?;
            assert_eq!(answer.stop_reason, StopReason::EndTurn);
            call(&cx, LoadSessionRequest::new(id.clone(), &cwd)).await?;
            Ok((id, taken(&updates)))
        }
    })
    .await;
    agent.kill();
    let session = store_id(&id);
    let files = files_in(&root.join(session.to_string()));
    assert_eq!(files, ["attachment.png"], "only the image is the store's");
    let store = Store::open_as(t.config.clone(), Access::ReadOnly)
        .await
        .expect("a store");
    let messages = store.all_messages(session).await.expect("messages");
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].display_text, "look\nagain");
    assert_eq!(messages[0].refs.len(), 1);
    let blocks: Vec<serde_json::Value> = replayed
        .iter()
        .map(|n| match &n.update {
            SessionUpdate::UserMessageChunk(c) => {
                serde_json::to_value(&c.content).expect("a block serializes")
            }
            other => panic!("not a user chunk: {other:?}"),
        })
        .collect();
    let kinds: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["text", "resource_link", "image", "resource", "text"]
    );
    assert_eq!(blocks[1], serde_json::to_value(&link).unwrap());
    assert_eq!(blocks[3], serde_json::to_value(&own).unwrap());
}

/// Raw JSON-RPC lines, as a careless client might send them: malformed JSON, unknown
/// methods and bad params each get an error and the connection stays up; stdout
/// carries only JSON-RPC, and every notification parses as the schema's
/// `session/update`. A history of messages and a recorded turn (agent text, a tool
/// call) replays in order.
#[tokio::test]
async fn the_wire_is_json_rpc_and_errors_keep_the_connection_up() {
    let t = TestStore::empty();
    let cwd = t.dir.path().to_owned();
    let root = t.dir.path().join("attachments");
    let store = Store::open(t.config.clone()).await.expect("a store");
    let session = a_history(&store).await;
    drop(store);

    let mut agent = AgentProcess::start(t.dir.path(), &root, &cwd);
    let mut wire = Wire::over(&mut agent.child);

    wire.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}"#);
    assert_eq!(wire.next()["result"]["protocolVersion"], 1);
    let cases = [
        ("{not json", -32700),
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"session/set_mode","params":{}}"#,
            -32601,
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"no/such/method","params":{}}"#,
            -32601,
        ),
        (
            r#"{"jsonrpc":"2.0","id":4,"method":"session/load","params":{"cwd":5}}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"session/prompt","params":{"sessionId":"x"}}"#,
            -32602,
        ),
    ];
    for (line, code) in cases {
        wire.send(line);
        let answer = wire.next();
        assert_eq!(answer["error"]["code"], code, "{line}: {answer}");
    }

    let load = serde_json::json!({
        "jsonrpc": "2.0", "id": 6, "method": "session/load",
        "params": {"sessionId": session.id.to_string(), "cwd": cwd, "mcpServers": []},
    });
    wire.send(&load.to_string());
    let mut chunks = Vec::new();
    let mut lines = Vec::new();
    let answer = loop {
        let value = wire.next();
        if value.get("id").is_some() {
            break value;
        }
        lines.push(value.clone());
        let notification: agent_client_protocol_schema::v1::JsonRpcMessage<
            agent_client_protocol_schema::v1::Notification<SessionNotification>,
        > = serde_json::from_value(value.clone())
            .unwrap_or_else(|e| panic!("not a session/update the schema accepts: {value}: {e}"));
        let notification = notification.into_inner();
        assert_eq!(&*notification.method, "session/update");
        let params = notification.params.expect("params");
        assert_eq!(params.session_id.0.as_ref(), session.id.to_string());
        chunks.push(match params.update {
            SessionUpdate::UserMessageChunk(c) => match &c.content {
                ContentBlock::Resource(_) => ("user", "<notes.txt>".to_owned()),
                block => ("user", block_text(block)),
            },
            SessionUpdate::AgentMessageChunk(c) => ("agent", block_text(&c.content)),
            SessionUpdate::ToolCall(call) => {
                assert_eq!(call.status, ToolCallStatus::Completed, "merged: {call:?}");
                ("tool", call.title)
            }
            other => panic!("unexpected update {other:?}"),
        });
    };
    assert_eq!(answer["id"], 6);
    assert!(answer.get("result").is_some(), "{answer}");
    let texts: Vec<(&str, &str)> = chunks
        .iter()
        .map(|(who, text)| (*who, text.as_str()))
        .collect();
    assert_eq!(
        texts,
        [
            ("user", "first question"),
            ("agent", "Running the tests"),
            ("tool", "Run tests"),
            ("agent", "an answer"),
            ("user", "second question"),
            ("user", "<notes.txt>"),
        ]
    );
    same_stream_as_restore(t.dir.path(), session.id, &lines);

    // A client that gives no working directory gets `--cwd`; the store keeps none.
    wire.send(r#"{"jsonrpc":"2.0","id":7,"method":"session/new","params":{"mcpServers":[]}}"#);
    let made = wire.next();
    let made = made["result"]["sessionId"]
        .as_str()
        .expect("a session")
        .to_owned();
    wire.send(r#"{"jsonrpc":"2.0","id":8,"method":"session/list","params":{}}"#);
    let listed = wire.next();
    let listed = listed["result"]["sessions"].as_array().expect("sessions");
    let row = listed
        .iter()
        .find(|s| s["sessionId"] == made.as_str())
        .expect("the new session is listed");
    assert_eq!(row["cwd"], cwd.to_str().unwrap(), "{row}");
    drop(wire);
    let status = agent.child.wait().expect("the agent exits");
    assert!(
        status.success(),
        "closing stdin ends the agent cleanly: {status:?}"
    );
    assert!(!agent.stderr().contains("panicked"));
    let store = Store::open_as(t.config.clone(), Access::ReadOnly)
        .await
        .expect("a store");
    let made = store
        .session(made.parse().expect("a store id"))
        .await
        .expect("the session");
    assert_eq!(made.cwd, None, "the default is not the client's to keep");
    drop(store);
}

/// A session whose history has a message of each kind: a user question, a recorded
/// turn (agent text, a tool call and its update), an assistant message, and a user
/// question with an attached text file.
async fn a_history(store: &Store) -> sessionstore::model::Session {
    let session = store
        .create_session(NewSession::default())
        .await
        .expect("a session");
    store
        .send(session.id, Outgoing::user("first question"))
        .await
        .expect("a user message");
    let recorded: Vec<SessionUpdate> = [
        serde_json::json!({"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "Running the tests"}}),
        serde_json::json!({"sessionUpdate": "tool_call", "toolCallId": "t1",
            "title": "Run tests", "kind": "execute", "status": "pending"}),
        serde_json::json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1",
            "status": "completed"}),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).expect("a valid update"))
    .collect();
    store
        .record(session.id, recorded)
        .await
        .expect("the turn is recorded");
    let mut reply = Outgoing::user("an answer");
    reply.role = Role::Assistant;
    store
        .send(session.id, reply)
        .await
        .expect("an assistant message");
    let notes = store
        .attach_one(session.id, "notes.txt".into(), b"budget: 42\n".to_vec())
        .await
        .expect("an upload");
    let mut second = Outgoing::user("second question");
    second.attach = vec![notes.uri];
    store
        .send(session.id, second)
        .await
        .expect("a user message");
    session
}

fn block_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(t) => t.text.clone(),
        other => panic!("not a text block: {other:?}"),
    }
}

/// `session/load` replays the stream `restore --format acp-updates` prints: every line
/// of it, in order. What load sends beyond it can only be the recorded turn (the agent
/// text and the tool call), for as long as that command does not print recorded items.
fn same_stream_as_restore(dir: &Path, session: SessionId, loaded: &[serde_json::Value]) {
    let out = Bin::new(dir)
        .args([
            "restore",
            "--session",
            &session.to_string(),
            "--format",
            "acp-updates",
        ])
        .on(&config_in(dir))
        .output();
    let printed: Vec<serde_json::Value> = crate::support::stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert!(out.status.success(), "{}", crate::support::stderr(&out));
    let mut rest = loaded.iter();
    let mut extra = Vec::new();
    for line in &printed {
        loop {
            let next = rest
                .next()
                .unwrap_or_else(|| panic!("load did not send {line}"));
            if next == line {
                break;
            }
            extra.push(next);
        }
    }
    extra.extend(rest);
    if !extra.is_empty() {
        let kinds: Vec<&str> = extra
            .iter()
            .map(|l| {
                l["params"]["update"]["sessionUpdate"]
                    .as_str()
                    .unwrap_or_default()
            })
            .collect();
        assert_eq!(kinds, ["agent_message_chunk", "tool_call"], "{extra:#?}");
    }
}

/// `session/load` and `session/resume` take v2's `replayFrom` under `_meta`: from a
/// point the replay begins with the partial notice, is what `restore --format
/// acp-updates` prints from that point, and ends with the `replay_complete` marker; a
/// cursor the agent does not know is invalid params, and a plain load is as before.
#[tokio::test]
async fn load_and_resume_replay_from_a_point_under_meta_and_end_with_the_marker() {
    use sessionstore::format::REPLAY_META_KEY;
    let t = TestStore::empty();
    let cwd = t.dir.path().to_owned();
    let root = t.dir.path().join("attachments");
    let store = Store::open(t.config.clone()).await.expect("a store");
    let session = store
        .create_session(NewSession::default())
        .await
        .expect("a session");
    store
        .send(session.id, Outgoing::user("first"))
        .await
        .unwrap();
    let chunk: agent_client_protocol_schema::v1::SessionUpdate =
        serde_json::from_value(serde_json::json!({"sessionUpdate": "agent_message_chunk",
            "messageId": "agent-1", "content": {"type": "text", "text": "an answer"}}))
        .unwrap();
    store.record(session.id, vec![chunk]).await.unwrap();
    store
        .send(session.id, Outgoing::user("second"))
        .await
        .unwrap();
    drop(store);
    let id = AcpSessionId::new(session.id.to_string());
    let meta = |cursor: serde_json::Value| {
        let mut m = serde_json::Map::new();
        m.insert("replayFrom".to_owned(), cursor);
        m
    };
    let updates = Updates::default();
    let mut agent = AgentProcess::start(t.dir.path(), &root, &cwd);
    let wire = |n: &SessionNotification| serde_json::to_value(n).unwrap();
    let (tail, from_agent, start, plain) = {
        let updates = updates.clone();
        let cwd = cwd.clone();
        client(&mut agent, &updates.clone(), async move |cx| {
            call(&cx, initialize()).await?;
            let mut seen = Vec::new();
            let load = LoadSessionRequest::new(id.clone(), &cwd)
                .meta(meta(serde_json::json!({"type": "_tail", "count": 2})));
            call(&cx, load).await?;
            seen.push(taken(&updates));
            let resume = ResumeSessionRequest::new(id.clone(), &cwd).meta(meta(
                serde_json::json!({"type": "message", "messageId": "agent-1"}),
            ));
            call(&cx, resume).await?;
            seen.push(taken(&updates));
            let resume = ResumeSessionRequest::new(id.clone(), &cwd)
                .meta(meta(serde_json::json!({"type": "start"})));
            call(&cx, resume).await?;
            seen.push(taken(&updates));
            call(&cx, LoadSessionRequest::new(id.clone(), &cwd)).await?;
            seen.push(taken(&updates));
            for bad in [
                serde_json::json!({"type": "bogus"}),
                serde_json::json!({"type": "message"}),
                serde_json::json!({"type": "message", "messageId": "never"}),
                serde_json::json!({"type": "_tail", "count": -1}),
            ] {
                let e = call(
                    &cx,
                    ResumeSessionRequest::new(id.clone(), &cwd).meta(meta(bad.clone())),
                )
                .await
                .expect_err("an unknown cursor");
                assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{bad}: {e:?}");
            }
            assert!(
                taken(&updates).is_empty(),
                "a refused cursor replays nothing"
            );
            let mut seen = seen.into_iter();
            Ok((
                seen.next().unwrap(),
                seen.next().unwrap(),
                seen.next().unwrap(),
                seen.next().unwrap(),
            ))
        })
        .await
    };
    agent.kill();

    let printed = |point: &[&str]| -> Vec<serde_json::Value> {
        let sid = session.id.to_string();
        let mut args = vec!["restore", "--session", &sid, "--format", "acp-updates"];
        args.extend_from_slice(point);
        let out = Bin::new(t.dir.path())
            .args(args)
            .on(&config_in(t.dir.path()))
            .output();
        assert!(out.status.success(), "{}", crate::support::stderr(&out));
        crate::support::stdout(&out)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["params"].clone())
            .collect()
    };
    let marker = |n: &SessionNotification| wire(n)["_meta"][REPLAY_META_KEY].clone();
    // The tail of two: the notice, the agent text and "second", the marker.
    let sent: Vec<serde_json::Value> = tail.iter().map(wire).collect();
    let expected = printed(&["--tail", "2"]);
    assert_eq!(sent[..sent.len() - 1], expected[..]);
    assert_eq!(marker(&tail[0])["partial"]["skipped"], 1);
    assert_eq!(
        marker(tail.last().unwrap()),
        serde_json::json!({"sessionUpdate": "replay_complete",
            "partial": {"from": marker(&tail[0])["partial"]["from"], "skipped": 1}})
    );
    // From the agent's own messageId: the same point as that tail.
    assert_eq!(
        from_agent.iter().map(wire).collect::<Vec<_>>(),
        sent,
        "messageId agent-1 starts where the tail of two does"
    );
    // From the start: the whole replay, no notice, then the marker alone.
    let whole = printed(&[]);
    let sent: Vec<serde_json::Value> = start.iter().map(wire).collect();
    assert_eq!(sent[..sent.len() - 1], whole[..]);
    assert_eq!(
        marker(start.last().unwrap()),
        serde_json::json!({"sessionUpdate": "replay_complete"})
    );
    // A load with no replayFrom is as it always was: the whole stream, no marker.
    assert_eq!(plain.iter().map(wire).collect::<Vec<_>>(), whole);
}

/// Raw JSON-RPC lines over a process's pipes: written to its standard input, and read
/// from its standard output by a thread of its own. Dropping it closes the input.
pub(crate) struct Wire {
    stdin: ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Wire {
    pub(crate) fn over(child: &mut Child) -> Wire {
        use std::io::BufRead;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Wire { stdin, lines }
    }

    pub(crate) fn send(&mut self, line: &str) {
        use std::io::Write;
        writeln!(self.stdin, "{line}").expect("the peer reads");
        self.stdin.flush().expect("the peer reads");
    }

    /// The next line, which must be JSON.
    pub(crate) fn next(&self) -> serde_json::Value {
        let line = self.lines.recv_timeout(TIMEOUT).expect("a line in time");
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout is JSON-RPC only: {line:?}: {e}"))
    }

    /// Sends one request and gives back what came before its answer, and the answer.
    pub(crate) fn call(
        &mut self,
        id: u64,
        method: &str,
        params: serde_json::Value,
    ) -> (Vec<serde_json::Value>, serde_json::Value) {
        let request = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method,
            "params": params});
        self.send(&request.to_string());
        let mut before = Vec::new();
        loop {
            let value = self.next();
            if value["id"] == id && value.get("method").is_none() {
                return (before, value);
            }
            before.push(value);
        }
    }
}

/// `sessionstore acp` and `sessionstore proxy -- AGENT` are one layer: on the same store
/// they advertise the same session methods, answer `session/list` alike and replay
/// `session/load` (whole, and from a point on `session/resume`) line for line alike.
#[tokio::test]
async fn acp_and_the_proxy_answer_the_session_methods_alike() {
    let t = TestStore::empty();
    let dir = t.dir.path().to_owned();
    let store = Store::open(t.config.clone()).await.expect("a store");
    let session = a_history(&store).await;
    store
        .create_session(NewSession::default())
        .await
        .expect("another session");
    drop(store);

    let open = serde_json::json!({"sessionId": session.id.to_string(), "cwd": dir,
        "mcpServers": []});
    let mut tail = open.clone();
    tail["_meta"] = serde_json::json!({"replayFrom": {"type": "_tail", "count": 2}});
    let mut seen = Vec::new();
    // `acp` first: the proxy's load binds the session to its agent, a write.
    for behind in [None, Some(&[][..])] {
        let mut process = spawn_layer(&t, behind);
        let mut wire = Wire::over(&mut process.child);
        let (_, init) = wire.call(1, "initialize", serde_json::json!({"protocolVersion": 1}));
        let (none, list) = wire.call(2, "session/list", serde_json::json!({}));
        assert!(none.is_empty());
        let (replay, load) = wire.call(3, "session/load", open.clone());
        assert!(load.get("result").is_some(), "{load}");
        let (from_tail, resume) = wire.call(4, "session/resume", tail.clone());
        assert!(resume.get("result").is_some(), "{resume}");
        let (_, closed) = wire.call(5, "session/close", open.clone());
        assert!(closed.get("result").is_some(), "{closed}");
        seen.push((init, list, replay, from_tail));
        drop(wire);
        process.kill();
    }
    let (acp, proxy) = (&seen[0], &seen[1]);
    let caps = |init: &serde_json::Value| init["result"]["agentCapabilities"].clone();
    let (acp_caps, proxy_caps) = (caps(&acp.0), caps(&proxy.0));
    assert_eq!(acp_caps["loadSession"], true);
    assert_eq!(proxy_caps["loadSession"], true);
    for served in ["list", "resume", "close", "delete", "fork"] {
        assert!(
            acp_caps["sessionCapabilities"].get(served).is_some()
                && proxy_caps["sessionCapabilities"].get(served).is_some(),
            "{served}: {acp_caps} {proxy_caps}"
        );
    }
    for taken in ["image", "embeddedContext"] {
        assert_eq!(acp_caps["promptCapabilities"][taken], true);
        assert_eq!(proxy_caps["promptCapabilities"][taken], true);
    }
    assert_eq!(
        acp.1["result"]["sessions"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(acp.1, proxy.1, "session/list");
    assert_eq!(acp.2.len(), 6, "{:#?}", acp.2);
    assert_eq!(acp.2, proxy.2, "session/load's replay");
    assert_eq!(acp.3, proxy.3, "session/resume's replay from a point");
}

/// `sessionstore acp`, or `sessionstore proxy -- test-agent ARGS`, on the store of `t`.
pub(crate) fn spawn_layer(t: &TestStore, behind: Option<&[&str]>) -> AgentProcess {
    let dir = t.dir.path();
    let log = dir.join(format!("stderr-{}.log", uuid_ish()));
    let mut bin = Bin::new(dir);
    bin.current_dir(dir)
        .arg(if behind.is_some() { "proxy" } else { "acp" })
        .arg("--db")
        .arg(t.db_path())
        .arg("--attachments-root")
        .arg(t.configured())
        .stderr(File::create(&log).expect("a log file"));
    match behind {
        Some(args) => bin
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_sessionstore-test-agent"))
            .args(args),
        None => bin.arg("--cwd").arg(dir),
    };
    AgentProcess {
        child: bin.spawn(),
        stderr: log,
    }
}

/// Issue 47, items 1, 2, 3 and 7: `session/archive`, `unarchive`, `set_title`,
/// `status` and the `archived` filter of `session/list` are the store's, alike with
/// nothing behind and in front of an agent: advertised whatever the agent says;
/// archive and unarchive idempotent; an archived session left out of the default
/// list, listed by `include` and `only` (and by a cursor that carries the filter),
/// still loaded; a title trimmed and answered as stored; the status `open` on this
/// connection and in another process, found without a claim taken; unknown sessions
/// not found (`-32002`, for `status` with the id in `data`), bad filters and blank
/// titles invalid params; the log and `verify` agree.
#[tokio::test]
async fn archive_title_and_status_are_the_stores_whatever_runs_behind() {
    use agent_client_protocol::v1::schema::{
        ListSessionsResponse, SessionStatus, SessionStatusResponse, SetSessionTitleResponse,
    };
    for behind in [None, Some(&["--close"][..])] {
        let t = TestStore::empty();
        let dir = t.dir.path().to_owned();
        let mut process = spawn_layer(&t, behind);
        let mut wire = Wire::over(&mut process.child);
        let (_, init) = wire.call(1, "initialize", serde_json::json!({"protocolVersion": 1}));
        let caps = &init["result"]["agentCapabilities"]["sessionCapabilities"];
        for served in [
            "list", "resume", "close", "delete", "fork", "archive", "title", "status",
        ] {
            assert!(caps.get(served).is_some(), "{served}: {init}");
        }
        let new = serde_json::json!({"cwd": dir, "mcpServers": []});
        let (_, a) = wire.call(2, "session/new", new.clone());
        let a = a["result"]["sessionId"]
            .as_str()
            .expect("a session")
            .to_owned();
        let (_, b) = wire.call(3, "session/new", new.clone());
        let b = b["result"]["sessionId"]
            .as_str()
            .expect("a session")
            .to_owned();
        let status = |wire: &mut Wire, id: u64, session: &str| {
            let (_, answer) = wire.call(
                id,
                "session/status",
                serde_json::json!({"sessionId": session}),
            );
            let parsed: SessionStatusResponse =
                serde_json::from_value(answer["result"].clone()).expect("the schema's shape");
            parsed.status
        };
        assert_eq!(status(&mut wire, 4, &a), SessionStatus::Open);

        let (_, titled) = wire.call(
            5,
            "session/set_title",
            serde_json::json!({"sessionId": a, "title": "  Charting the estuary \n"}),
        );
        let titled: SetSessionTitleResponse =
            serde_json::from_value(titled["result"].clone()).expect("the schema's shape");
        assert_eq!(titled.title, "Charting the estuary");
        let (_, blank) = wire.call(
            6,
            "session/set_title",
            serde_json::json!({"sessionId": a, "title": " \t "}),
        );
        assert_eq!(blank["error"]["code"], -32602, "{blank}");

        for (id, method) in [(7, "session/archive"), (8, "session/archive")] {
            let (_, archived) = wire.call(id, method, serde_json::json!({"sessionId": a}));
            assert_eq!(archived["result"], serde_json::json!({}), "{archived}");
        }
        // Archiving closed it on this connection.
        assert_eq!(status(&mut wire, 9, &a), SessionStatus::Saved);
        let (_, prompt) = wire.call(
            10,
            "session/prompt",
            serde_json::json!({"sessionId": a, "prompt": [{"type": "text", "text": "hi"}]}),
        );
        assert_eq!(prompt["error"]["code"], -32602, "closed: {prompt}");

        let list = |wire: &mut Wire, id: u64, params: serde_json::Value| {
            let (_, answer) = wire.call(id, "session/list", params);
            let parsed: ListSessionsResponse = serde_json::from_value(answer["result"].clone())
                .unwrap_or_else(|e| panic!("the schema's shape: {answer}: {e}"));
            parsed
                .sessions
                .into_iter()
                .map(|s| (s.session_id.to_string(), s.archived, s.title))
                .collect::<Vec<_>>()
        };
        let titled = Some("Charting the estuary".to_owned());
        assert_eq!(
            list(&mut wire, 11, serde_json::json!({})),
            [(b.clone(), Some(false), None)]
        );
        assert_eq!(
            list(&mut wire, 12, serde_json::json!({"archived": "only"})),
            [(a.clone(), Some(true), titled.clone())]
        );
        assert_eq!(
            list(&mut wire, 13, serde_json::json!({"archived": "include"})),
            [
                (a.clone(), Some(true), titled.clone()),
                (b.clone(), Some(false), None)
            ]
        );
        let (_, bad) = wire.call(14, "session/list", serde_json::json!({"archived": "yes"}));
        assert_eq!(bad["error"]["code"], -32602, "{bad}");

        // An archived session keeps everything and still loads.
        let (_, loaded) = wire.call(
            15,
            "session/load",
            serde_json::json!({"sessionId": a, "cwd": dir, "mcpServers": []}),
        );
        assert!(loaded.get("result").is_some(), "{loaded}");
        for (id, method) in [(16, "session/unarchive"), (17, "session/unarchive")] {
            let (_, back) = wire.call(id, method, serde_json::json!({"sessionId": a}));
            assert_eq!(back["result"], serde_json::json!({}), "{back}");
        }
        assert_eq!(list(&mut wire, 18, serde_json::json!({})).len(), 2);

        let unknown = SessionId::new().to_string();
        for (id, method) in [
            (19, "session/archive"),
            (20, "session/unarchive"),
            (21, "session/status"),
        ] {
            let (_, answer) = wire.call(id, method, serde_json::json!({"sessionId": unknown}));
            assert_eq!(answer["error"]["code"], -32002, "{method}: {answer}");
            if method == "session/status" {
                assert_eq!(answer["error"]["data"]["sessionId"], unknown.as_str());
            }
        }
        let (_, untitled) = wire.call(
            22,
            "session/set_title",
            serde_json::json!({"sessionId": unknown, "title": "x"}),
        );
        assert_eq!(untitled["error"]["code"], -32002, "{untitled}");

        // Another process: `b` is open here, so it is `open` there and cannot be
        // archived there; the probe took no claim, so closing it here frees it.
        let mut other = spawn_layer(&t, behind);
        let mut there = Wire::over(&mut other.child);
        there.call(1, "initialize", serde_json::json!({"protocolVersion": 1}));
        assert_eq!(status(&mut there, 2, &b), SessionStatus::Open);
        assert_eq!(
            status(&mut there, 3, &a),
            SessionStatus::Open,
            "loaded here"
        );
        let (_, refused) = there.call(4, "session/archive", serde_json::json!({"sessionId": b}));
        assert_eq!(
            refused["error"]["code"], -32600,
            "open elsewhere: {refused}"
        );
        let (_, closed) = wire.call(23, "session/close", serde_json::json!({"sessionId": b}));
        assert!(closed.get("result").is_some(), "{closed}");
        assert_eq!(status(&mut there, 5, &b), SessionStatus::Saved);
        let (_, archived) = there.call(6, "session/archive", serde_json::json!({"sessionId": b}));
        assert_eq!(archived["result"], serde_json::json!({}), "{archived}");
        drop(there);
        other.kill();
        drop(wire);
        process.kill();

        let verified = t.run(&["verify"]);
        assert!(verified.status.success(), "{verified:?}");
        let events = String::from_utf8(t.run(&["events", "--session", &a]).stdout).unwrap();
        let kinds: Vec<String> = events
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["kind"].to_string())
            .filter(|k| k.contains("archived") || k.contains("renamed"))
            .collect();
        assert_eq!(
            kinds,
            [
                "\"session_renamed\"",
                "\"session_archived\"",
                "\"session_unarchived\""
            ],
            "idempotent calls write nothing: {events}"
        );
    }
}

/// Issue 47, items 1, 2 and 7, in front of an agent: the agent's titles
/// (`session_info_update`) are recorded and in force until an explicit one, which then
/// stays; an agent that announces `title` and `archive` is told of each (its own
/// session id), so its lists agree; archiving a session with a turn running cancels
/// the turn (it ends `cancelled`, recorded) and closes the session.
#[tokio::test]
async fn in_front_of_an_agent_titles_follow_their_source_and_archiving_cancels_the_turn() {
    let t = TestStore::empty();
    let dir = t.dir.path().to_owned();
    let report = dir.join("agent-report.jsonl");
    let report_arg = report.to_str().unwrap().to_owned();
    let args = ["--archive", "--title", "--report", report_arg.as_str()];
    let mut process = spawn_layer(&t, Some(&args[..]));
    let mut wire = Wire::over(&mut process.child);
    wire.call(1, "initialize", serde_json::json!({"protocolVersion": 1}));
    let (_, made) = wire.call(
        2,
        "session/new",
        serde_json::json!({"cwd": dir, "mcpServers": []}),
    );
    let session = made["result"]["sessionId"]
        .as_str()
        .expect("a session")
        .to_owned();
    let prompt = |text: &str| serde_json::json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]});
    let title = |wire: &mut Wire, id: u64| {
        let (_, listed) = wire.call(id, "session/list", serde_json::json!({}));
        listed["result"]["sessions"][0]["title"].clone()
    };
    // The first message names an untitled session; the agent's title replaces that.
    let (_, done) = wire.call(3, "session/prompt", prompt("please retitle this"));
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(title(&mut wire, 4), "The agent's title");
    let (_, set) = wire.call(
        5,
        "session/set_title",
        serde_json::json!({"sessionId": session, "title": "Mine"}),
    );
    assert_eq!(set["result"]["title"], "Mine");
    let (_, done) = wire.call(6, "session/prompt", prompt("retitle again"));
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(title(&mut wire, 7), "Mine", "an explicit title stays");

    // A turn that runs until cancelled: archiving cancels it and closes the session.
    wire.send(
        &serde_json::json!({"jsonrpc": "2.0", "id": 8, "method": "session/prompt",
        "params": prompt("hang")})
        .to_string(),
    );
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(&report)
        .unwrap_or_default()
        .contains("\"hang\"")
    {
        assert!(started.elapsed() < TIMEOUT, "the agent got the prompt");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (before, archived) = wire.call(
        9,
        "session/archive",
        serde_json::json!({"sessionId": session}),
    );
    assert_eq!(archived["result"], serde_json::json!({}), "{archived}");
    let cancelled = before
        .iter()
        .find(|m| m["id"] == 8)
        .expect("the turn ended before the archive answered");
    assert_eq!(
        cancelled["result"]["stopReason"], "cancelled",
        "{cancelled}"
    );
    let (_, unarchived) = wire.call(
        10,
        "session/unarchive",
        serde_json::json!({"sessionId": session}),
    );
    assert!(unarchived.get("result").is_some(), "{unarchived}");
    drop(wire);
    process.kill();

    let reported: Vec<serde_json::Value> = std::fs::read_to_string(&report)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let agent_session = reported
        .iter()
        .find(|r| r["answered"] == "session/new")
        .map(|r| r["sessionId"].clone())
        .expect("the agent made a session");
    let told: Vec<(String, serde_json::Value)> = reported
        .iter()
        .filter(|r| r["kind"] == "request")
        .filter_map(|r| {
            let method = r["method"].as_str()?;
            ["session/set_title", "session/archive", "session/unarchive"]
                .contains(&method)
                .then(|| (method.to_owned(), r["params"].clone()))
        })
        .collect();
    assert_eq!(
        told,
        [
            (
                "session/set_title".to_owned(),
                serde_json::json!({"sessionId": agent_session, "title": "Mine"})
            ),
            (
                "session/archive".to_owned(),
                serde_json::json!({"sessionId": agent_session})
            ),
            (
                "session/unarchive".to_owned(),
                serde_json::json!({"sessionId": agent_session})
            ),
        ]
    );
    let cancels = reported
        .iter()
        .filter(|r| r["method"] == "session/cancel")
        .count();
    assert_eq!(cancels, 1);

    let store = Store::open_as(t.config.clone(), Access::ReadOnly)
        .await
        .expect("a store");
    let id: SessionId = session.parse().unwrap();
    let turns = store.all_turns(id).await.expect("turns");
    assert_eq!(turns.len(), 3);
    assert_eq!(turns[2].state(), "cancelled", "{:?}", turns[2]);
    drop(store);
    let verified = t.run(&["verify"]);
    assert!(verified.status.success(), "{verified:?}");
}
