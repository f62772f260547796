//! The whole story through the proxy: a prompt with text, an image, a text
//! file, a binary file and a link to a client's file, interleaved; everything killed;
//! the attachment root moved; the session loaded again from the new root, prompted
//! again (the agent, which lost its state, is told the conversation with the new
//! paths), listed, forked twice, and a fork deleted.

use sessionstore::store::{Access, Verify};
use std::path::Path;

use agent_client_protocol::UntypedMessage;
use agent_client_protocol::v1::schema::{
    ContentBlock, DeleteSessionRequest, ForkSessionRequest, ListSessionsRequest,
    LoadSessionRequest, PromptRequest, ResourceLink, SessionId as AcpSessionId, StopReason,
};
use serde_json::{Value, json};

use super::{
    AGENT_NAME, Report, Seen, Setup, assert_schema_accepts, attachments, call, client, data_block,
    image_block, kinds, notes_block, open_session, prompt_text, store_id, text_block, wait_ended,
};
use crate::support::{Expect, check_attachment, context_of};

/// The first prompt: text, an image, text, a text file and a binary file (embedded, so
/// they become attachments), and a link to a file of the client's (kept as sent).
fn first_prompt(spec_url: &str) -> Vec<ContentBlock> {
    let mut link = ResourceLink::new("spec.md", spec_url);
    link.mime_type = Some("text/markdown".into());
    vec![
        text_block("Look at the chart,"),
        image_block(),
        text_block("the notes and the data:"),
        notes_block(),
        data_block(),
        ContentBlock::ResourceLink(link),
    ]
}

/// Checks each attachment block of a prompt the agent got: the file's bytes and a
/// path context (in `_meta`) whose path, under `folder`, reads those bytes; and, as
/// the agent does not read `_meta`, the same context as a text block right before it.
/// Returns how many it found, in order.
fn check_agent_attachments(blocks: &[Value], expected: &[Expect], folder: &Path) -> usize {
    let found: Vec<usize> = (0..blocks.len())
        .filter(|&i| context_of(&blocks[i]).is_some())
        .collect();
    assert_eq!(found.len(), expected.len(), "{blocks:#?}");
    for (&i, expect) in found.iter().zip(expected) {
        let (_, path) = check_attachment(&blocks[i], expect);
        assert!(path.starts_with(folder), "{path:?} is not under {folder:?}");
        let before = &blocks[i - 1];
        assert_eq!(before["type"], "text", "{blocks:#?}");
        assert_eq!(before["text"].as_str(), context_of(&blocks[i]));
        assert!(
            context_of(before).is_none(),
            "the text block carries no _meta"
        );
    }
    found.len()
}

fn texts(blocks: &[Value]) -> String {
    blocks
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The prompt blocks after a restored conversation, which ends with the proxy's
/// closing line; panics if the prompt does not start with one.
fn split_restored(blocks: &[Value]) -> (&[Value], &[Value]) {
    let first = blocks[0]["text"].as_str().unwrap_or_default();
    assert!(
        first.starts_with("[sessionstore]"),
        "the prompt starts with the restored conversation: {blocks:#?}"
    );
    let end = blocks
        .iter()
        .rposition(|b| {
            b["text"]
                .as_str()
                .is_some_and(|t| t.contains("[sessionstore]"))
        })
        .expect("a closing line");
    blocks.split_at(end + 1)
}

/// `session/list` as the proxy answers it, raw (the SDK's type skips entries it cannot
/// read, which would hide a bad one), and checked to read as the schema's type.
async fn list(
    cx: &agent_client_protocol::v1::ConnectionTo<agent_client_protocol::Agent>,
    cwd: &Path,
) -> Result<Vec<Value>, agent_client_protocol::Error> {
    let raw = call(
        cx,
        UntypedMessage::new("session/list", json!({ "cwd": cwd }))?,
    )
    .await?;
    let typed = call(cx, ListSessionsRequest::new().cwd(cwd.to_owned())).await?;
    let sessions = raw["sessions"].as_array().expect("sessions").clone();
    assert_eq!(typed.sessions.len(), sessions.len(), "{raw}");
    Ok(sessions)
}

fn listed_ids(sessions: &[Value]) -> Vec<String> {
    sessions
        .iter()
        .map(|s| s["sessionId"].as_str().expect("a session id").to_owned())
        .collect()
}

#[tokio::test]
async fn a_session_survives_a_kill_and_a_moved_root_then_is_listed_forked_and_deleted() {
    let s = Setup::new();
    let spec = s.cwd.join("spec.md");
    std::fs::write(&spec, "# The spec\n").expect("the client's file");
    let spec_url = format!("file://{}", spec.display());
    let prompt = first_prompt(&spec_url);

    // The first run: one prompt, every kind of block.
    let seen = Seen::default();
    let mut proxy = s.proxy(&[]);
    let (id, answer) = client(&mut proxy, &seen, {
        let (cwd, prompt) = (s.cwd.clone(), prompt.clone());
        async move |cx| {
            let id = open_session(&cx, &cwd).await?;
            let answer = call(&cx, PromptRequest::new(id.clone(), prompt)).await?;
            Ok((id, answer))
        }
    })
    .await;
    assert_eq!(answer.stop_reason, StopReason::EndTurn);
    let session = store_id(&id);
    // The client is gone: the proxy exits, and its agent with it.
    assert!(proxy.wait().success());
    let first_agent = s.report.pids()[0];
    wait_ended(first_agent, "the first agent");

    // What the agent got: the blocks in order, each attachment with its context before
    // it and in its `_meta`, the path under the configured root; the link as sent.
    let prompts = s.report.prompts();
    assert_eq!(prompts.len(), 1);
    let blocks = &prompts[0];
    assert_eq!(
        kinds(blocks),
        [
            "text",
            "text",
            "image",
            "text",
            "text",
            "resource",
            "text",
            "resource",
            "resource_link"
        ],
        "{blocks:#?}"
    );
    assert_eq!(blocks[0]["text"], "Look at the chart,");
    assert_eq!(blocks[3]["text"], "the notes and the data:");
    let folder = s.root().join(session.to_string());
    check_agent_attachments(blocks, &attachments(session), &folder);
    assert_eq!(blocks[8], serde_json::to_value(&prompt[5]).expect("JSON"));
    // The agent saw its own session id, the client only the store's.
    let agent_session = s
        .report
        .entries()
        .into_iter()
        .find(|e| e["answered"] == "session/new")
        .expect("the agent made a session")["sessionId"]
        .clone();
    assert_eq!(
        s.report.requests("session/prompt")[0]["sessionId"],
        agent_session
    );
    let raw = seen.raw();
    assert!(
        !serde_json::to_string(&raw)
            .expect("JSON")
            .contains(agent_session.as_str().expect("an id"))
    );

    // What the client got: the agent's updates, under the store's session id, and the
    // permission request, which it answered.
    let updates = seen.raw_updates();
    let update_kinds: Vec<&str> = updates
        .iter()
        .map(|u| u["sessionUpdate"].as_str().expect("a kind"))
        .collect();
    assert_eq!(
        update_kinds,
        [
            "agent_thought_chunk",
            "agent_message_chunk",
            "agent_message_chunk",
            "agent_message_chunk",
            "tool_call",
            "tool_call_update",
            "plan",
            "sessionstore_test_future"
        ]
    );
    assert_eq!(
        updates[7],
        json!({"sessionUpdate": "sessionstore_test_future", "detail": {"n": 1}})
    );
    for m in &raw {
        assert_eq!(m["params"]["sessionId"], id.0.as_ref(), "{m}");
    }
    let asked = seen.permissions();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].session_id, id);
    assert_eq!(&*asked[0].tool_call.tool_call_id.0, "call-1");
    let answers = s.report.permission_answers();
    assert_eq!(answers.len(), 1);
    assert_eq!(
        answers[0]["result"]["outcome"],
        json!({"outcome": "selected", "optionId": "allow"})
    );
    assert_eq!(
        seen.updates().len(),
        7,
        "the SDK read every update it knows"
    );
    assert_schema_accepts(&seen, &s.report);

    // Everything is stopped; the attachments move to a new root.
    let moved = s.t.dir.path().join("moved attachments");
    std::fs::rename(s.root(), &moved).expect("the root moves");
    let folder = moved.join(session.to_string());

    let seen = Seen::default();
    let mut proxy = s.proxy_on(&moved, &[]);

    let run = client(&mut proxy, &seen, {
        let (cwd, seen, id) = (s.cwd.clone(), seen.clone(), id.clone());
        let (report, root) = (s.report.clone(), moved.clone());
        async move |cx| {
            call(&cx, super::initialize()).await?;
            call(&cx, LoadSessionRequest::new(id.clone(), &cwd)).await?;
            let replay = seen.raw();
            seen.clear();
            let again = prompt_text(&cx, &id, "What is new since then?").await?;
            let listed = list(&cx, &cwd).await?;
            let whole = call(&cx, ForkSessionRequest::new(id.clone(), &cwd)).await?;
            let in_whole = prompt_text(&cx, &whole.session_id, "And in the fork?").await?;
            told_the_whole_conversation(&report, &whole.session_id, &root);
            let first_message = replay
                .iter()
                .find(|m| m["params"]["update"]["sessionUpdate"] == "user_message_chunk")
                .expect("a replayed user message")["params"]["update"]["messageId"]
                .clone();
            let mut meta = serde_json::Map::new();
            meta.insert("sessionstore/forkAt".to_owned(), first_message);
            let at = call(&cx, ForkSessionRequest::new(id.clone(), &cwd).meta(meta)).await?;
            let in_at = prompt_text(&cx, &at.session_id, "Only the first question?").await?;
            let with_forks = list(&cx, &cwd).await?;
            call(&cx, DeleteSessionRequest::new(whole.session_id.clone())).await?;
            let after_delete = list(&cx, &cwd).await?;
            // Deleting again succeeds.
            call(&cx, DeleteSessionRequest::new(whole.session_id.clone())).await?;
            Ok(SecondRun {
                replay,
                stops: [again.stop_reason, in_whole.stop_reason, in_at.stop_reason],
                listed,
                whole: whole.session_id,
                at: at.session_id,
                with_forks,
                after_delete,
            })
        }
    })
    .await;
    assert!(proxy.wait().success());
    for pid in s.report.pids() {
        wait_ended(pid, "an agent");
    }
    assert_eq!(run.stops, [StopReason::EndTurn; 3]);

    // The replay: the user's message, each attachment read under the new root; the
    // link as sent; then the agent's items as recorded, the unknown kind verbatim.
    let replayed: Vec<Value> = run
        .replay
        .iter()
        .map(|m| {
            assert_eq!(m["method"], "session/update", "{m}");
            assert_eq!(m["params"]["sessionId"], id.0.as_ref(), "{m}");
            m["params"]["update"].clone()
        })
        .collect();
    let user: Vec<Value> = replayed
        .iter()
        .filter(|u| u["sessionUpdate"] == "user_message_chunk")
        .map(|u| u["content"].clone())
        .collect();
    assert_eq!(
        kinds(&user),
        [
            "text",
            "image",
            "text",
            "resource",
            "resource",
            "resource_link"
        ],
        "{user:#?}"
    );
    for (block, expect) in [&user[1], &user[3], &user[4]]
        .into_iter()
        .zip(attachments(session))
    {
        let (_, path) = check_attachment(block, &expect);
        assert!(path.starts_with(&folder), "{path:?} is under the new root");
    }
    assert_eq!(user[5], serde_json::to_value(&prompt[5]).expect("JSON"));
    let agent: Vec<&Value> = replayed
        .iter()
        .filter(|u| u["sessionUpdate"] != "user_message_chunk")
        .collect();
    let said = |kind: &str| -> String {
        agent
            .iter()
            .filter(|u| u["sessionUpdate"] == kind)
            .map(|u| u["content"]["text"].as_str().expect("text"))
            .collect()
    };
    assert_eq!(said("agent_thought_chunk"), "thinking about it");
    assert_eq!(said("agent_message_chunk"), "Hello from the test agent.");
    let calls: Vec<&&Value> = agent
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .collect();
    assert_eq!(calls.len(), 1, "{agent:#?}");
    assert_eq!(calls[0]["toolCallId"], "call-1");
    assert_eq!(
        calls[0]["status"], "completed",
        "the call in its final state"
    );
    assert_eq!(calls[0]["title"], "Read a file");
    assert!(agent.iter().any(
        |u| u["sessionUpdate"] == "plan" && u["entries"][0]["content"] == "answer the question"
    ));
    assert!(
        agent.contains(&&json!({"sessionUpdate": "sessionstore_test_future", "detail": {"n": 1}})),
        "{agent:#?}"
    );

    // The new agent knew nothing: it was given a new session, and the conversation so
    // far before the new prompt, every attachment with its path under the new root.
    let prompts = s.report.prompts();
    assert_eq!(prompts.len(), 4);
    let second_agent = s.report.pids()[1];
    assert_ne!(second_agent, first_agent);
    let (restored, asked) = split_restored(&prompts[1]);
    assert_eq!(
        asked,
        [json!({"type": "text", "text": "What is new since then?"})]
    );
    check_agent_attachments(restored, &attachments(session), &folder);
    let told = texts(restored);
    assert!(told.contains("Look at the chart,"), "{told}");
    assert!(told.contains("Hello from the test agent."), "{told}");
    assert!(
        restored.contains(&serde_json::to_value(&prompt[5]).expect("JSON")),
        "the link is given as the client sent it"
    );

    // Listed, with the client's working directory.
    let mine = run
        .listed
        .iter()
        .find(|l| l["sessionId"] == id.0.as_ref())
        .unwrap_or_else(|| panic!("the session is listed: {:?}", run.listed));
    assert_eq!(mine["cwd"], s.cwd.to_str().expect("UTF-8"));

    // The whole fork, checked while it lived (see `told_the_whole_conversation`).
    let whole = store_id(&run.whole);
    // The fork at the first message: that message alone.
    let at = store_id(&run.at);
    let (restored, asked) = split_restored(&prompts[3]);
    assert_eq!(
        asked,
        [json!({"type": "text", "text": "Only the first question?"})]
    );
    check_agent_attachments(restored, &attachments(at), &moved.join(at.to_string()));
    let told = texts(restored);
    assert!(told.contains("Look at the chart,"), "{told}");
    assert!(!told.contains("Hello from the test agent."), "{told}");
    assert!(!told.contains("What is new since then?"), "{told}");

    // Listed while they lived; the deleted fork is gone, the rest stay.
    let ids = |sessions: &[Value]| {
        let mut ids = listed_ids(sessions);
        ids.sort();
        ids
    };
    let mut all = vec![id.0.to_string(), whole.to_string(), at.to_string()];
    all.sort();
    assert_eq!(ids(&run.with_forks), all);
    all.retain(|i| *i != whole.to_string());
    assert_eq!(ids(&run.after_delete), all);
    assert!(
        !moved.join(whole.to_string()).exists(),
        "the fork's folder is gone"
    );

    // The store holds the sessions as the proxy kept them, and they verify.
    let mut config = s.t.config.clone();
    config.roots.configured = moved.clone();
    let store = sessionstore::Store::open(config)
        .await
        .expect("the store opens");
    let stored = store.session(session).await.expect("the session");
    assert_eq!(stored.cwd.as_deref(), s.cwd.to_str());
    assert_eq!(stored.agent.expect("an agent binding").agent, AGENT_NAME);
    let report = store
        .verify(Verify::Check)
        .await
        .expect("verify runs")
        .after;
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_schema_accepts(&seen, &s.report);
}

/// The whole fork's agent side is told the whole conversation, its files in the
/// fork's own folder (checked before the fork is deleted, with its folder).
fn told_the_whole_conversation(report: &Report, fork: &AcpSessionId, root: &Path) {
    let whole = store_id(fork);
    let prompts = report.prompts();
    let (restored, asked) = split_restored(prompts.last().expect("a prompt"));
    assert_eq!(asked, [json!({"type": "text", "text": "And in the fork?"})]);
    check_agent_attachments(restored, &attachments(whole), &root.join(whole.to_string()));
    let told = texts(restored);
    assert!(told.contains("What is new since then?"), "{told}");
    assert!(told.contains("Hello from the test agent."), "{told}");
}

struct SecondRun {
    replay: Vec<Value>,
    stops: [StopReason; 3],
    listed: Vec<Value>,
    whole: AcpSessionId,
    at: AcpSessionId,
    with_forks: Vec<Value>,
    after_delete: Vec<Value>,
}

/// A client that gives no working directory gets the proxy's own (as `sessionstore
/// acp` gives its `--cwd`): the agent is given it, the session is listed under it, and
/// the store keeps none for the session.
#[tokio::test]
async fn a_client_that_gives_no_cwd_gets_the_proxys_own() {
    let s = Setup::new();
    let own = std::fs::canonicalize(s.t.dir.path()).expect("the proxy's directory");
    let mut proxy = s.proxy(&[]);
    let seen = Seen::default();
    let (id, listed) = client(&mut proxy, &seen, async move |cx| {
        call(&cx, super::initialize()).await?;
        let made = call(
            &cx,
            UntypedMessage::new("session/new", json!({ "mcpServers": [] }))?,
        )
        .await?;
        let id = made["sessionId"].as_str().expect("a session id").to_owned();
        let listed = call(&cx, UntypedMessage::new("session/list", json!({}))?).await?;
        Ok((id, listed))
    })
    .await;
    assert!(proxy.wait().success());
    let given = s.report.requests("session/new");
    assert_eq!(given.len(), 1, "{given:?}");
    assert_eq!(given[0]["cwd"], own.to_str().expect("a UTF-8 path"));
    let row = listed["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .find(|r| r["sessionId"] == id.as_str())
        .cloned()
        .expect("the session is listed");
    assert_eq!(row["cwd"], given[0]["cwd"], "{row}");
    let store = sessionstore::Store::open_as(s.t.config.clone(), Access::ReadOnly)
        .await
        .expect("a store");
    let session = store
        .session(id.parse().expect("a store id"))
        .await
        .expect("the session");
    assert_eq!(session.cwd, None);
}
