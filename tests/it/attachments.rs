//! Attachment files through the public API, on real files: the size limit holds for
//! reads and uploads alike, and a text file with no extension is sent as text.

use sessionstore::store::Dispatched;
use std::fs::File;

use sessionstore::attachments::{AttachmentError, AttachmentUri, MAX_ATTACHMENT_BYTES};
use sessionstore::dispatch::{Memo, Mode};
use sessionstore::model::NewSession;
use sessionstore::store::Outgoing;
use sessionstore::{Error, SessionId};

use crate::support::Whole;
use crate::support::{TestStore, block_json};

async fn session(t: &TestStore) -> SessionId {
    t.store()
        .create_session(NewSession::default())
        .await
        .expect("a session")
        .id
}

fn session_folder(t: &TestStore, s: SessionId) -> std::path::PathBuf {
    t.store().config().roots.configured.join(s.to_string())
}

#[tokio::test]
async fn a_file_over_the_limit_is_refused_by_its_size_before_it_is_read() {
    let t = TestStore::new().await;
    let s = session(&t).await;
    let folder = session_folder(&t, s);
    std::fs::create_dir_all(&folder).unwrap();
    // Sparse: 65 MiB by its size, no byte of it written. A read that allocated or read
    // it before checking would still pass; this pins the error and its message.
    let size = 65 * 1024 * 1024;
    File::create(folder.join("huge.log"))
        .unwrap()
        .set_len(size)
        .unwrap();
    let uri = AttachmentUri::new(s, "huge.log");

    let e = t.store().attachments().read(&s, &uri).unwrap_err();
    match &e {
        AttachmentError::TooLarge {
            uri: named,
            size: got,
            limit,
        } => {
            assert_eq!(named, &uri);
            assert_eq!(*got, size);
            assert_eq!(*limit, MAX_ATTACHMENT_BYTES);
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert_eq!(e.uri(), Some(&uri));
    assert!(!e.is_not_found());
    assert_eq!(
        e.to_string(),
        format!("attachment {uri} is 65 MiB, over the 64 MiB limit")
    );

    // `send` resolves each reference first, so it refuses the message and stores none.
    let mut out = Outgoing::user("look at this log");
    out.attach = vec![uri.clone()];
    let e = t.store().send(s, out).await.unwrap_err();
    assert!(
        matches!(e, Error::Attachment(AttachmentError::TooLarge { .. })),
        "{e:?}"
    );
    assert!(!e.to_string().contains('\n'), "{e}");
    assert!(t.store().all_messages(s).await.unwrap().is_empty());
}

#[tokio::test]
async fn an_upload_over_the_limit_is_refused_and_leaves_no_file() {
    let t = TestStore::new().await;
    let s = session(&t).await;
    let too_big = usize::try_from(MAX_ATTACHMENT_BYTES + 1).expect("64 MiB fits in usize");
    let e = t
        .store()
        .attach_one(s, "big.bin".to_owned(), vec![b'x'; too_big])
        .await
        .unwrap_err();
    match &e {
        Error::Attachment(a @ AttachmentError::UploadTooLarge { name, size, limit }) => {
            assert_eq!(name, "big.bin");
            assert_eq!(*size, MAX_ATTACHMENT_BYTES + 1);
            assert_eq!(*limit, MAX_ATTACHMENT_BYTES);
            assert_eq!(a.uri(), None);
        }
        other => panic!("expected UploadTooLarge, got {other:?}"),
    }
    assert_eq!(
        e.to_string(),
        "cannot store attachment \"big.bin\": it is 67108865 bytes, over the 64 MiB limit"
    );
    let folder = session_folder(&t, s);
    let left: Vec<_> = match std::fs::read_dir(&folder) {
        Ok(entries) => entries.map(|e| e.unwrap().file_name()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
        Err(e) => panic!("cannot list {folder:?}: {e}"),
    };
    assert!(left.is_empty(), "nothing written: {left:?}");
}

#[tokio::test]
async fn an_extensionless_text_file_is_plain_text_and_reaches_the_model_as_text() {
    let t = TestStore::new().await;
    let s = session(&t).await;
    let readme = "# sessionstore\n\nStores sessions. Café ☕\n";
    let stored = t
        .store()
        .attach_one(s, "README".to_owned(), readme.as_bytes().to_vec())
        .await
        .unwrap();
    assert_eq!(stored.name, "README");
    assert_eq!(stored.mime, "text/plain");

    let read = t.store().attachments().read(&s, &stored.uri).unwrap();
    assert_eq!(read.mime, "text/plain");
    assert_eq!(&*read.bytes, readme.as_bytes());

    // Binary bytes under a name with no extension stay binary.
    let data = t
        .store()
        .attach_one(s, "data".to_owned(), b"\x00\x01\xff\xfe".to_vec())
        .await
        .unwrap();
    assert_eq!(data.mime, "application/octet-stream");

    let mut out = Outgoing::user("summarise the readme");
    out.attach = vec![stored.uri.clone()];
    t.store().send(s, out).await.unwrap();
    let dispatched = t
        .store()
        .dispatch(s, None, Mode::Strict, Memo::new())
        .await
        .map(Dispatched::from)
        .unwrap();
    let block = dispatched
        .blocks
        .iter()
        .map(block_json)
        .find(|b| b["type"] == "resource")
        .expect("a resource block for the README");
    assert_eq!(block["resource"]["mimeType"], "text/plain", "{block}");
    assert_eq!(block["resource"]["text"], readme, "{block}");
    assert!(block["resource"].get("blob").is_none(), "{block}");
}
