//! The checks fed inputs with their property broken: each must fail, or it proves
//! nothing when it passes in a real run.

use std::path::{Path, PathBuf};

use agent_client_protocol_schema::v1::{
    ContentBlock, EmbeddedResource, EmbeddedResourceResource, Meta,
};
use serde_json::Value;

use super::super::known::{AGENT_TEXT, BLOB_BYTES, RecordedTurn};
use super::super::model_bound::{
    context_under_meta_key, one_block_per_reference, raw_text_has_no_meta,
};
use super::super::oracle::{CONTEXT_META_KEY, PathAudit};
use super::{
    db_file_has_no_path, db_file_is_encrypted, db_text_has_no_path, recorded_turn_replays,
    schema_has_no_path_column,
};
use crate::attachments::AttachmentUri;
use crate::ids::SessionId;
use crate::model::{ItemBody, Message, Role};
use crate::restore::ReplayItem;
use crate::store::Dispatched;

fn user_message(refs: &[&AttachmentUri]) -> Message {
    Message {
        id: crate::ids::MessageId::new(),
        session_id: SessionId::new(),
        seq: 1,
        role: Role::User,
        display_text: "q".into(),
        model_text: None,
        transcript: None,
        state: crate::model::Delivery::Delivered,
        created_at: String::new(),
        content: None,
        refs: refs
            .iter()
            .enumerate()
            .map(|(i, uri)| crate::model::Reference {
                ordinal: i as u32,
                uri: (*uri).clone(),
                stored_name: "a.txt".into(),
                mime_type: "text/plain".into(),
                size: 1,
            })
            .collect(),
    }
}

fn text_resource(uri: &str, meta: Option<Meta>) -> ContentBlock {
    let mut resource = EmbeddedResource::new(EmbeddedResourceResource::TextResourceContents(
        agent_client_protocol_schema::v1::TextResourceContents::new("x", uri),
    ));
    resource.meta = meta;
    ContentBlock::Resource(resource)
}

fn context_meta() -> Meta {
    meta_under(CONTEXT_META_KEY)
}

fn meta_under(key: &str) -> Meta {
    let mut meta = Meta::new();
    meta.insert(key.to_owned(), Value::String("context".into()));
    meta
}

#[test]
fn block_checks_fail_on_broken_dispatches() {
    let question = ContentBlock::Text(agent_client_protocol_schema::v1::TextContent::new("q"));
    let u1 = AttachmentUri::new(SessionId::new(), "a.txt");
    let good = Dispatched {
        message: user_message(&[&u1, &u1]),
        blocks: vec![
            question.clone(),
            text_resource(&u1.to_string(), Some(context_meta())),
            text_resource(&u1.to_string(), Some(context_meta())),
        ],
    };
    assert!(one_block_per_reference(std::slice::from_ref(&good)).is_ok());
    assert!(context_under_meta_key(std::slice::from_ref(&good)).is_ok());
    assert!(raw_text_has_no_meta(std::slice::from_ref(&good)).is_ok());

    let mut merged = good.clone();
    merged.blocks.pop();
    assert!(one_block_per_reference(&[merged]).is_err());

    let mut bare = good.clone();
    bare.blocks[1] = text_resource(&u1.to_string(), None);
    assert!(context_under_meta_key(&[bare]).is_err());

    let mut tagged = good;
    tagged.blocks[0] = ContentBlock::Text(
        agent_client_protocol_schema::v1::TextContent::new("q").meta(context_meta()),
    );
    assert!(raw_text_has_no_meta(&[tagged]).is_err());
}

/// A context under any key but the contract's fails, however the key is spelt; so
/// does one beside another key.
#[test]
fn a_context_under_another_meta_key_fails() {
    let u = AttachmentUri::new(SessionId::new(), "a.txt");
    let under = |meta: Meta| Dispatched {
        message: user_message(&[&u]),
        blocks: vec![text_resource(&u.to_string(), Some(meta))],
    };
    assert!(context_under_meta_key(&[under(context_meta())]).is_ok());
    for key in [
        "daemon/attachmentcontext",
        "daemon/attachment_context",
        "attachmentContext",
        "daemon/pathContext",
    ] {
        let err = context_under_meta_key(&[under(meta_under(key))]).unwrap_err();
        assert!(err.contains("_meta keys"), "{key}: {err}");
    }
    let mut both = context_meta();
    both.insert("daemon/other".to_owned(), Value::String("x".into()));
    assert!(context_under_meta_key(&[under(both)]).is_err());
}

#[test]
fn database_checks_fail_on_a_stored_path() {
    let clean = PathAudit {
        tables: vec!["refs".into()],
        columns: vec!["refs.uri".into()],
        values: 1,
        files: vec!["x.db".into()],
        file_bytes: 10,
        ..PathAudit::default()
    };
    let db = Path::new("x.db");
    assert!(schema_has_no_path_column(&clean).is_ok());
    assert!(db_text_has_no_path(&clean).is_ok());
    assert!(db_file_has_no_path(&clean, db).is_ok());
    let dirty = PathAudit {
        path_columns: vec!["cache.file_path".into()],
        value_hits: vec![("refs".into(), "/tmp/x".into())],
        file_hits: vec![("x.db-wal".into(), "/tmp/x".into())],
        ..clean
    };
    assert!(schema_has_no_path_column(&dirty).is_err());
    assert!(db_text_has_no_path(&dirty).is_err());
    assert!(db_file_has_no_path(&dirty, db).is_err());
}

/// The encryption check fails on a plaintext header, on a text found in the files'
/// bytes, and on a decrypting read that found a text missing (proving nothing).
#[test]
fn the_encryption_check_fails_on_plaintext_or_on_a_read_that_saw_nothing() {
    let texts = vec!["hello there".to_owned()];
    let good = PathAudit {
        files: vec!["x.db".into()],
        file_bytes: 4096,
        value_hits: vec![("messages".into(), texts[0].clone())],
        ..PathAudit::default()
    };
    let random = [0x9a_u8; 16];
    assert!(db_file_is_encrypted(&good, &texts, &random).is_ok());
    assert!(db_file_is_encrypted(&good, &texts, b"SQLite format 3\0").is_err());
    let leaked = PathAudit {
        file_hits: vec![("x.db-wal".into(), texts[0].clone())],
        ..good.clone()
    };
    assert!(db_file_is_encrypted(&leaked, &texts, &random).is_err());
    let blind = PathAudit {
        value_hits: vec![],
        ..good
    };
    assert!(db_file_is_encrypted(&blind, &texts, &random).is_err());
}

/// The file audit fails when it read no file, not the database's, or only empty ones:
/// finding no path in nothing is no finding.
#[test]
fn the_file_audit_fails_when_it_read_nothing() {
    let db = Path::new("/probe/db/sessions.db");
    let read = |files: &[&str], file_bytes| PathAudit {
        files: files.iter().map(PathBuf::from).collect(),
        file_bytes,
        ..PathAudit::default()
    };
    let db_text = db.to_str().unwrap();
    assert!(db_file_has_no_path(&read(&[db_text, "/probe/db/sessions.db-wal"], 4096), db).is_ok());
    let err = db_file_has_no_path(&read(&[], 0), db).unwrap_err();
    assert!(err.contains("did not read the database file"), "{err}");
    let err = db_file_has_no_path(&read(&["/probe/db/sessions.db-wal"], 4096), db).unwrap_err();
    assert!(err.contains("did not read the database file"), "{err}");
    let err = db_file_has_no_path(&read(&[db_text], 0), db).unwrap_err();
    assert!(err.contains("no bytes"), "{err}");
}

#[test]
fn the_blob_is_no_image_and_no_text() {
    assert_eq!(
        crate::attachments::mime_for("x.bin", BLOB_BYTES),
        "application/octet-stream"
    );
}

/// The recorded-turn check judges the order first: an agent answer handed over
/// after the next user message, or one whose text changed, fails it.
#[test]
fn a_recorded_turn_out_of_order_or_reworded_fails() {
    use crate::dispatch::ModelMessage;
    use crate::model::{AgentText, Item};
    use agent_client_protocol_schema::v1::ToolCall;

    let turn = RecordedTurn {
        question: user_message(&[]),
        follow_up: user_message(&[]),
        configured: PathBuf::from("/nowhere"),
    };
    let message = |m: &Message| {
        ReplayItem::Message(ModelMessage {
            message: m.clone(),
            parts: vec![],
        })
    };
    let item = |body: ItemBody| {
        ReplayItem::Recorded(Box::new(Item {
            id: crate::ids::ItemId::new(),
            session_id: SessionId::new(),
            seq: 2,
            body,
            created_at: String::new(),
            updated_at: String::new(),
        }))
    };
    let answer = |text: String| {
        item(ItemBody::AgentMessage(AgentText {
            message_id: None,
            content: vec![ContentBlock::from(text)],
        }))
    };
    let call = || item(ItemBody::ToolCall(ToolCall::new("c", "Read")));
    let late = [
        message(&turn.question),
        call(),
        message(&turn.follow_up),
        answer(AGENT_TEXT.concat()),
    ];
    let err = recorded_turn_replays(&turn, &late, "").unwrap_err();
    assert!(err.starts_with("replayed as"), "{err}");
    let reworded = [
        message(&turn.question),
        answer(AGENT_TEXT.join(" ")),
        call(),
        message(&turn.follow_up),
    ];
    let err = recorded_turn_replays(&turn, &reworded, "").unwrap_err();
    assert!(err.contains("not verbatim"), "{err}");
}
