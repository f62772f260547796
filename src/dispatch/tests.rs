//! The dispatch unit tests: the base64 encoder against the `base64` crate, the memo's
//! budget, eviction and sharing, contexts tied to their read, byte sizes and escaping.
//! They read real files in temporary folders; nothing here is used outside tests.

use super::*;
use base64::Engine;
use proptest::prelude::*;

proptest! {
    /// The SIMD encoder writes what the `base64` crate writes, for every length
    /// (each of the three tails, and lengths past the SIMD block sizes).
    #[test]
    fn simd_base64_is_the_base64_crates_output(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        prop_assert_eq!(
            &*encode_base64(&bytes, None),
            base64::engine::general_purpose::STANDARD.encode(&bytes)
        );
    }
}

/// A memo's budget counts the buffer an encoding holds, which for a recycled one
/// may be up to twice its text: the budget bounds memory, not text.
#[test]
fn a_memo_counts_a_recycled_buffer_whole() {
    let recycler = Recycler::new(64 << 20);
    recycler.give(String::with_capacity(2 << 20));
    let bytes = vec![7u8; 900_000];
    let encoded = encode_base64(&bytes, Some(&recycler));
    assert_eq!(encoded.len(), 1_200_000);
    let content = Content::Blob(encoded);
    assert_eq!(content.held_bytes(), 2 << 20, "the recycled buffer, whole");
    let memo = Memo::with_budget(3 << 20);
    let session = SessionId::new();
    for name in ["a.bin", "b.bin"] {
        let uri = AttachmentUri::new(session, name);
        let prepared = Prepared::new(
            name.into(),
            uri.clone(),
            "application/octet-stream".into(),
            PathBuf::from("/nowhere").join(name),
            content.clone(),
        );
        memo.insert(&uri, Arc::new(prepared));
    }
    assert_eq!(memo.used(), 2 << 20, "the second entry evicted the first");
}

/// Into a fresh buffer and into recycled ones that held a longer and a shorter
/// encoding before: the same text, with nothing of the old one left.
#[test]
fn simd_base64_agrees_on_large_buffers_recycled_or_not() {
    let noise = |len: u32, seed: u32| -> Vec<u8> {
        (0..len)
            .map(|i| (i.wrapping_add(seed).wrapping_mul(2654435761) >> 13) as u8)
            .collect()
    };
    let recycler = Recycler::new(64 << 20);
    for (len, seed) in [(3 << 20, 1), (200_000, 2), (3 << 20, 3), (2_500_000, 4)] {
        let bytes = noise(len + 2, seed);
        let want = base64::engine::general_purpose::STANDARD.encode(&bytes);
        assert_eq!(&*encode_base64(&bytes, None), want);
        let recycled = encode_base64(&bytes, Some(&recycler));
        assert_eq!(&*recycled, want);
        drop(recycled);
        assert!(recycler.held() >= want.len(), "given back when dropped");
    }
}

use crate::attachments::Roots;
use crate::model::{Delivery, Reference};

fn message(session: SessionId, uris: &[AttachmentUri]) -> Message {
    Message {
        id: MessageId::new(),
        session_id: session,
        seq: 1,
        role: Role::User,
        display_text: "look".into(),
        model_text: None,
        transcript: None,
        state: Delivery::Delivered,
        created_at: String::new(),
        content: None,
        refs: uris
            .iter()
            .enumerate()
            .map(|(i, uri)| Reference {
                ordinal: i as u32,
                uri: uri.clone(),
                stored_name: String::new(),
                mime_type: String::new(),
                size: 0,
            })
            .collect(),
    }
}

fn encoded(read: &Result<Arc<Prepared>, Unreadable>) -> SharedStr {
    read.as_ref()
        .expect("the file reads")
        .content
        .text()
        .clone()
}

/// Invariant 6: duplicates share one encoding, within a dispatch and across
/// dispatches that share the memo, and a fresh memo encodes anew.
#[test]
fn duplicate_references_share_one_encoding() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = AttachmentStore::new(Roots {
        configured: dir.path().to_owned(),
        legacy: vec![],
    });
    let session = SessionId::new();
    let stored = store
        .store(&session, "blob.bin", &[0u8, 1, 2, 255])
        .expect("stored");
    let uri = stored.uri;
    let m = message(session, &[uri.clone(), uri.clone()]);
    let memo = Memo::new();
    let first = resolve(&store, &memo, &m);
    assert!(SharedStr::ptr_eq(&encoded(&first[0]), &encoded(&first[1])));
    let again = resolve(&store, &memo, &m);
    assert!(SharedStr::ptr_eq(&encoded(&first[0]), &encoded(&again[0])));
    let fresh = resolve(&store, &Memo::new(), &m);
    assert!(!SharedStr::ptr_eq(&encoded(&first[0]), &encoded(&fresh[0])));
    assert_eq!(encoded(&first[0]), encoded(&fresh[0]));
}

/// Three 3000-byte blobs encode to 4000 bytes each; a 9000-byte budget holds two.
/// `dir` as the configured root, with no legacy root.
fn only_root(dir: &std::path::Path) -> Roots {
    Roots {
        configured: dir.to_owned(),
        legacy: vec![],
    }
}

/// A temporary folder with `configured` and `legacy` root paths inside it.
fn two_roots() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let configured = dir.path().join("configured");
    let legacy = dir.path().join("legacy");
    (dir, configured, legacy)
}

fn three_blobs(roots: Roots) -> (AttachmentStore, SessionId, Vec<AttachmentUri>) {
    let store = AttachmentStore::new(roots);
    let session = SessionId::new();
    let uris = (0..3u8)
        .map(|i| {
            let bytes = vec![i; 3000];
            let stored = store
                .store(&session, &format!("f{i}.bin"), &bytes)
                .expect("stored");
            stored.uri
        })
        .collect();
    (store, session, uris)
}

#[test]
fn the_memo_keeps_its_budget_and_evicts_the_least_recently_used() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (store, session, uris) = three_blobs(only_root(dir.path()));
    let memo = Memo::with_budget(9000);
    let clone = memo.clone();
    resolve(&store, &memo, &message(session, &[uris[0].clone()]));
    resolve(&store, &memo, &message(session, &[uris[1].clone()]));
    assert_eq!(
        (clone.len(), clone.used()),
        (2, 8000),
        "clones share one memo"
    );
    // Using the first again makes the second the least recently used.
    resolve(&store, &memo, &message(session, &[uris[0].clone()]));
    resolve(&store, &memo, &message(session, &[uris[2].clone()]));
    assert!(memo.contains(&uris[0]) && memo.contains(&uris[2]));
    assert!(!memo.contains(&uris[1]));
    assert!(memo.used() <= memo.budget());
}

#[test]
fn duplicates_in_one_message_share_a_read_even_with_no_budget() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (store, session, uris) = three_blobs(only_root(dir.path()));
    let memo = Memo::with_budget(0);
    let m = message(
        session,
        &[uris[0].clone(), uris[1].clone(), uris[0].clone()],
    );
    let reads = resolve(&store, &memo, &m);
    assert!(SharedStr::ptr_eq(&encoded(&reads[0]), &encoded(&reads[2])));
    assert!(memo.is_empty());
    let again = resolve(&store, &memo, &m);
    assert!(!SharedStr::ptr_eq(&encoded(&reads[0]), &encoded(&again[0])));
    // So in a message of many references, each repeated.
    let many: Vec<AttachmentUri> = (0..20).map(|i| uris[i % 3].clone()).collect();
    let reads = resolve(&store, &memo, &message(session, &many));
    for (i, read) in reads.iter().enumerate() {
        assert!(SharedStr::ptr_eq(&encoded(read), &encoded(&reads[i % 3])));
    }
}

#[test]
fn an_evicted_file_is_read_again_and_given_the_path_of_that_read() {
    let (_dir, configured, legacy) = two_roots();
    let (store, session, uris) = three_blobs(Roots {
        configured: configured.clone(),
        legacy: vec![legacy.clone()],
    });
    let memo = Memo::with_budget(4000);
    let first = resolve(&store, &memo, &message(session, &[uris[0].clone()]));
    let first = first[0].as_ref().expect("the file reads");
    assert_eq!(
        first.path,
        configured.join(session.to_string()).join("f0.bin")
    );
    resolve(&store, &memo, &message(session, &[uris[1].clone()]));
    assert!(!memo.contains(&uris[0]), "evicted by the second file");
    // The file moves to the legacy root while it is out of the memo.
    let moved = legacy.join(session.to_string());
    std::fs::create_dir_all(&moved).expect("a legacy folder");
    std::fs::rename(
        configured.join(session.to_string()).join("f0.bin"),
        moved.join("f0.bin"),
    )
    .expect("the file moves");
    let again = resolve(&store, &memo, &message(session, &[uris[0].clone()]));
    let again = again[0]
        .as_ref()
        .expect("the file reads from the legacy root");
    assert_eq!(again.path, moved.join("f0.bin"));
    assert_eq!(encoded(&Ok(again.clone())), encoded(&Ok(first.clone())));
}

/// Invariant 2 with the cached context: blocks of one kept read share its context,
/// and a file evicted, moved and read again gets a context naming the new path.
#[test]
fn a_cached_context_belongs_to_its_read_and_a_re_read_writes_a_new_one() {
    let (_dir, configured, legacy) = two_roots();
    let (store, session, uris) = three_blobs(Roots {
        configured: configured.clone(),
        legacy: vec![legacy.clone()],
    });
    let placement = Placement {
        host: "h".into(),
        tools_host: ToolsHost::Local,
    };
    let memo = Memo::with_budget(4000);
    let context_of = |uri: &AttachmentUri| {
        let m = message(session, &[uri.clone(), uri.clone()]);
        let parts = dispatch_parts(&store, &memo, m, &placement, Mode::Strict)
            .expect("dispatched")
            .parts;
        let contexts: Vec<String> = parts
            .iter()
            .filter_map(|p| match p {
                Part::Attachment(a) => Some(a.context.to_string()),
                Part::Text(_) | Part::Verbatim(_) => None,
            })
            .collect();
        assert_eq!(contexts.len(), 2);
        assert_eq!(contexts[0], contexts[1], "duplicates share one context");
        contexts[0].clone()
    };
    let old = configured.join(session.to_string()).join("f0.bin");
    let first = context_of(&uris[0]);
    assert!(first.contains(&json_escaped(&old.to_string_lossy())[1..]));
    context_of(&uris[1]); // evicts the first file
    let moved = legacy.join(session.to_string());
    std::fs::create_dir_all(&moved).expect("a legacy folder");
    std::fs::rename(&old, moved.join("f0.bin")).expect("the file moves");
    let again = context_of(&uris[0]);
    assert!(again.contains(&json_escaped(&moved.join("f0.bin").to_string_lossy())[1..]));
    assert!(!again.contains(&json_escaped(&old.to_string_lossy())[1..]));
}

#[test]
fn a_failed_read_is_never_kept() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (store, session, uris) = three_blobs(only_root(dir.path()));
    std::fs::remove_file(dir.path().join(session.to_string()).join("f0.bin"))
        .expect("the file goes");
    let memo = Memo::new();
    let reads = resolve(&store, &memo, &message(session, &[uris[0].clone()]));
    assert!(reads[0].as_ref().is_err_and(|u| u.not_found));
    assert!(memo.is_empty() && memo.used() == 0);
}

#[test]
fn byte_sizes_parse_with_binary_units_and_garbage_is_refused() {
    for (text, bytes) in [
        ("0", 0),
        ("1048576", 1 << 20),
        ("64MiB", 64 << 20),
        ("512KiB", 512 << 10),
        ("1GiB", 1 << 30),
        ("1gib", 1 << 30),
        ("3 MiB", 3 << 20),
        ("7B", 7),
        ("2k", 2048),
        (" 5M ", 5 << 20),
    ] {
        assert_eq!(parse_byte_size(text), Ok(bytes), "{text:?}");
    }
    for text in [
        "",
        "MiB",
        "-1",
        "1.5MiB",
        "64MB",
        "64 MiBs",
        "x",
        "1e6",
        "0x10",
        "99999999999999999999",
        "17179869184GiB",
    ] {
        let e = parse_byte_size(text).expect_err(text);
        assert!(!e.contains('\n') && e.contains(&format!("{text:?}")), "{e}");
    }
}

#[test]
fn hidden_characters_are_escaped_and_printable_ones_kept() {
    let escaped = json_escaped("a\u{202E}b\u{200B}c\u{E0041}d é 日本\n");
    assert_eq!(escaped, "\"a\\u202eb\\u200bc\\udb40\\udc41d é 日本\\n\"");
    let back: String = serde_json::from_str(&escaped).expect("still JSON");
    assert_eq!(back, "a\u{202E}b\u{200B}c\u{E0041}d é 日本\n");
}

fn blob_part(session: SessionId, encoded: SharedStr) -> Part {
    let uri = AttachmentUri::new(session, "b.bin");
    let prepared = Arc::new(Prepared::new(
        "b.bin".into(),
        uri,
        "application/octet-stream".into(),
        PathBuf::from("/nowhere/b.bin"),
        Content::Blob(encoded),
    ));
    let placement = Placement {
        host: "h".into(),
        tools_host: ToolsHost::Local,
    };
    Part::Attachment(Attached {
        context: prepared.context(&placement),
        prepared,
        meta: None,
    })
}

fn blob_data(block: &ContentBlock) -> &str {
    use agent_client_protocol_schema::v1::EmbeddedResourceResource;
    match block {
        ContentBlock::Resource(r) => match &r.resource {
            EmbeddedResourceResource::BlobResourceContents(b) => &b.blob,
            _ => panic!("a blob resource"),
        },
        _ => panic!("a resource block"),
    }
}

/// A part that is the last holder of its read gives its encoding to its block without
/// a copy; one whose read is held elsewhere (a memo, another part) copies it, into a
/// string of exactly its length, and both blocks are the one builder's.
#[test]
fn a_sole_holder_moves_its_encoding_into_its_block_and_others_copy_it_exactly() {
    let session = SessionId::new();
    let encoded = encode_base64(&[9u8; 3000], None);
    let buffer = encoded.as_ptr();
    let part = blob_part(session, encoded);
    let typed = part.to_block();
    assert_ne!(blob_data(&typed).as_ptr(), buffer, "to_block copies");
    let ContentBlock::Resource(r) = &typed else {
        unreachable!()
    };
    let agent_client_protocol_schema::v1::EmbeddedResourceResource::BlobResourceContents(b) =
        &r.resource
    else {
        unreachable!()
    };
    assert_eq!(b.blob.capacity(), b.blob.len(), "an exact copy");

    let twin = part.clone();
    let copied = twin.into_block();
    assert_ne!(blob_data(&copied).as_ptr(), buffer, "still shared: copied");
    let moved = part.into_block();
    assert_eq!(blob_data(&moved).as_ptr(), buffer, "the last holder: moved");
    assert_eq!(moved, typed);
    assert_eq!(copied, typed);
}

/// The shell a read keeps is for the context it was made with: a part pairing the
/// same read with another context writes its own, and both write their typed block.
#[test]
fn a_kept_shell_serves_only_its_own_context() {
    let session = SessionId::new();
    let Part::Attachment(first) = blob_part(session, "AAEC".into()) else {
        unreachable!()
    };
    let other = Part::Attachment(Attached {
        prepared: first.prepared.clone(),
        context: Context::new("another context".into()),
        meta: None,
    });
    let first = Part::Attachment(first);
    for part in [&first, &other, &first, &other] {
        let mut written = Vec::new();
        part.write_json(&mut written).unwrap();
        assert_eq!(written, serde_json::to_vec(&part.to_block()).unwrap());
    }
    let Part::Attachment(a) = &first else {
        unreachable!()
    };
    let kept = a.prepared.shell.get().expect("a shell kept");
    assert!(Context::ptr_eq(&kept.0, &a.context) && kept.1.is_some());
    assert_eq!(
        shell::WRITTEN_WHOLE.with(|n| n.get()),
        0,
        "both contexts were cut"
    );
    let copy = (*a.prepared).clone();
    assert!(
        copy.shell.get().is_none() && copy.context.get().is_none(),
        "a clone keeps no shell"
    );
}
