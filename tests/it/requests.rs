//! Model requests built from real dispatches: the OpenAI shapes carry every path, and
//! the Vision Bridge focus hint and vision request carry none.

use sessionstore::dispatch::{Memo, Mode};
use sessionstore::model::Role;
use sessionstore::openai::{ChatMessage, ChatPart, chat_request, vision_request};
use sessionstore::store::Outgoing;
use sessionstore::store::{Dispatched, Drain};
use sessionstore::{DAEMON_ATTACHMENT_CONTEXT_META_KEY, focus};

use crate::support::TestStore;
use crate::support::Whole;

#[tokio::test]
async fn fifty_long_names_do_not_displace_the_question_but_all_paths_reach_the_model() {
    let t = TestStore::new().await;
    let s = t.session().await;
    let mut uris = Vec::new();
    let mut names = Vec::new();
    for i in 0..50 {
        let name = format!("{i:02}-{}.txt", "n".repeat(193));
        assert_eq!(name.chars().count(), 200);
        let stored = t
            .store()
            .attach_one(s, name.clone(), format!("file {i}").into_bytes())
            .await
            .unwrap();
        assert_eq!(stored.name, name);
        uris.push(stored.uri.clone());
        names.push(name);
    }
    let question: String = "Which of these files mention the budget? "
        .chars()
        .cycle()
        .take(1500)
        .collect();
    let sent = t
        .store()
        .send(
            s,
            Outgoing {
                attach: uris.clone(),
                transcript: Some("spoken words ".repeat(100)),
                ..Outgoing::user(question.clone())
            },
        )
        .await
        .unwrap();
    let dispatched = t
        .store()
        .dispatch(s, None, Mode::Strict, Memo::new())
        .await
        .map(Dispatched::from)
        .unwrap();
    assert_eq!(dispatched.message.id, sent.id);

    let hint = focus::focus_hint_for(&dispatched.message);
    assert!(hint.chars().count() <= focus::FOCUS_HINT_LIMIT);
    assert!(
        hint.starts_with(&question),
        "the whole question leads the hint"
    );
    let root = t.dir.path().to_string_lossy().into_owned();
    assert!(!hint.contains(&root), "no path in the hint");
    assert!(!hint.contains("attachment:///"), "no URI in the hint");
    assert!(
        !hint.contains("nnnnnnnnnn"),
        "no attachment name in the hint"
    );

    let request = chat_request("gpt-4o", &[(Role::User, dispatched.blocks.clone())]);
    let ChatMessage::User { content } = &request.messages[0] else {
        panic!("a user message")
    };
    let contexts: Vec<&str> = content
        .iter()
        .filter_map(|p| match p {
            ChatPart::Text { text } if text.contains(DAEMON_CONTEXT_MARK) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(contexts.len(), 50, "one context part per attachment");
    for (i, context) in contexts.iter().enumerate() {
        let line = crate::support::context_line(context);
        assert_eq!(line.name, names[i]);
        let path = line.path.as_str();
        assert!(std::path::Path::new(path).is_absolute());
        assert_eq!(
            std::fs::read(path).unwrap(),
            format!("file {i}").into_bytes()
        );
    }

    let vision =
        serde_json::to_string(&vision_request("vision", &hint, &dispatched.blocks)).unwrap();
    assert!(
        !vision.contains(&root),
        "the vision request carries no path"
    );
    assert!(!vision.contains(DAEMON_ATTACHMENT_CONTEXT_META_KEY));
    assert!(vision.contains(&question[..200]));
}

/// Every context string begins with this line; it marks context parts in a request.
const DAEMON_CONTEXT_MARK: &str = "Attachment context.";

#[tokio::test]
async fn custom_command_and_mid_turn_hints_use_the_same_filtering() {
    let t = TestStore::new().await;
    let s = t.session().await;
    let stored = t
        .store()
        .attach_one(s, "secret-plan.png".into(), crate::support::PNG.to_vec())
        .await
        .unwrap();
    let custom = t
        .store()
        .send(
            s,
            Outgoing {
                expanded: Some("Describe the chart in detail.".into()),
                attach: vec![stored.uri.clone()],
                ..Outgoing::user("/describe")
            },
        )
        .await
        .unwrap();
    let hint = focus::focus_hint_for(&custom);
    assert!(hint.starts_with("/describe"));
    assert!(hint.contains("Describe the chart in detail."));
    assert!(!hint.contains("secret-plan"));

    let queued = t
        .store()
        .send(
            s,
            Outgoing {
                mid_turn: true,
                attach: vec![stored.uri.clone()],
                ..Outgoing::user("and this one?")
            },
        )
        .await
        .unwrap();
    let drained = t
        .store()
        .drain(s, Mode::Strict, Memo::new(), Drain::Commit)
        .await
        .unwrap();
    assert_eq!(drained[0].message.id, queued.id);
    let hint = focus::focus_hint_for(&drained[0].message);
    assert_eq!(hint, "and this one?");
    let vision =
        serde_json::to_string(&vision_request("v", &hint, &drained[0].to_blocks())).unwrap();
    assert!(vision.contains("image_url"));
    assert!(!vision.contains("secret-plan"));
    assert!(!vision.contains(&t.dir.path().to_string_lossy().into_owned()));
}
