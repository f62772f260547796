//! The scenario's second half: what it reads back, through new stores and `db`'s audit.

use super::*;
use crate::store::Dispatched;
use crate::store::{Access, Verify};

impl Probe {
    /// Restores the session through a new store and checks the replay.
    pub(super) async fn restore(
        &mut self,
        sent: &Sent,
        first: &FirstDelivery,
    ) -> Result<Vec<Dispatched>, Failure> {
        let (fresh, reads) = ReadCounter::open(self.config.clone())
            .await
            .step("open a second store on the same database")?;
        let restored = restored_messages(&fresh, self.known.session)
            .await
            .step("restore the session in a new store")?;
        let delivered = [&first.normal, &first.image_only, &first.drained[0]];
        let outcome = check::restore_replays(sent, delivered, &restored, &reads.snapshot());
        self.record("restore-replays-through-resolver", outcome);
        Ok(restored)
    }

    /// Everything a model gets from the restored history: ACP blocks, both OpenAI
    /// requests, the focus hint and the vision request.
    pub(super) fn model_bound(&mut self, restored: &[Dispatched]) {
        self.known.saw_paths(restored);
        let k = &self.known;
        let conversation: Vec<(Role, Vec<ContentBlock>)> = restored
            .iter()
            .map(|d| (d.message.role, d.blocks.clone()))
            .collect();
        let chat = openai::chat_request(MODEL, &conversation);
        let responses = openai::responses_request(MODEL, &conversation);
        let legacy_copy = k
            .folder(&k.configured)
            .join(UPLOADS[LEGACY].name)
            .symlink_metadata()
            .is_ok();
        let outcomes = [
            (
                "one-block-per-reference",
                bound::one_block_per_reference(restored),
            ),
            (
                "context-under-meta-key",
                bound::context_under_meta_key(restored),
            ),
            (
                "image-blocks-keep-bytes",
                bound::blocks_keep_content(k, restored, Kind::Image),
            ),
            (
                "text-blocks-keep-contents",
                bound::blocks_keep_content(k, restored, Kind::Text),
            ),
            (
                "binary-blocks-keep-bytes",
                bound::blocks_keep_content(k, restored, Kind::Blob),
            ),
            ("context-json-line", bound::context_json_line(k, restored)),
            (
                "context-escapes-hidden-characters",
                bound::context_escapes(k, restored),
            ),
            (
                "context-holds-no-file-contents",
                bound::context_holds_no_contents(k, restored),
            ),
            (
                "raw-text-has-no-meta",
                bound::raw_text_has_no_meta(restored),
            ),
            (
                "paths-read-back-byte-for-byte",
                bound::paths_read_back(k, &chat),
            ),
            (
                "legacy-path-from-its-read",
                bound::legacy_path(k, &chat, legacy_copy),
            ),
            (
                "openai-chat-parts",
                bound::openai_chat(&conversation, &chat),
            ),
            (
                "openai-responses-parts",
                bound::openai_responses(&conversation, &responses),
            ),
            (
                "openai-requests-round-trip",
                bound::round_trips(&chat, &responses, &conversation),
            ),
            (
                "focus-hint-holds-question-only",
                bound::focus_hints(k, restored),
            ),
            (
                "vision-request-has-no-path",
                bound::vision_request(k, restored),
            ),
        ];
        for (name, outcome) in outcomes {
            self.record(name, outcome);
        }
    }

    /// Moves the blob aside, plants look-alikes, and dispatches strict, degrading, and
    /// again once the file is back, all through one memo.
    pub(super) async fn degradation(&mut self, sent: &Sent) -> Result<(), Failure> {
        let s = self.known.session;
        let blob = self.known.file(BLOB).parsed.clone();
        let name = UPLOADS[BLOB].name;
        let folder = self.known.folder(&self.known.configured);
        let real = folder.join(name);
        let aside = self.tmp.join("aside.bin");
        setup(std::fs::rename(&real, &aside), "move a file aside")?;
        let other_folder = self.known.configured.join(SessionId::new().to_string());
        let decoys = [
            other_folder.join(name),
            folder.join("data blob (1).bin"),
            folder.join("data blob.BIN"),
        ];
        setup(
            std::fs::create_dir_all(&other_folder),
            "make a decoy folder",
        )?;
        for decoy in &decoys {
            setup(std::fs::write(decoy, BLOB_BYTES), "plant a decoy file")?;
        }

        let memo = Memo::new();
        let before = self.reads.snapshot();
        let strict = self
            .store
            .dispatch(s, Some(sent.normal.id), Mode::Strict, memo.clone())
            .await
            .map(Dispatched::from);
        let outcome = check::strict_names_missing(&self.known, strict);
        self.record("strict-dispatch-names-missing-reference", outcome);

        let degraded = self
            .store
            .dispatch(s, Some(sent.normal.id), Mode::Degrade, memo.clone())
            .await
            .map(Dispatched::from)
            .step("dispatch with a missing file, degrading")?;
        let after_missing = self.reads.snapshot();
        let again = Outgoing {
            attach: vec![self.known.file(BLOB).parsed.clone()],
            ..Outgoing::user("again")
        };
        let refused_send = self.store.send(s, again).await.is_err();
        let evicted_while_missing = !memo.contains(&blob);
        let outcome = check::degraded_keeps_survivors(&self.known, sent, &degraded);
        self.record("degraded-dispatch-keeps-survivors", outcome);
        let outcome = check::no_replacement(&degraded, &decoys, refused_send);
        self.record("no-replacement-search", outcome);

        for decoy in &decoys {
            setup(std::fs::remove_file(decoy), "remove a decoy file")?;
        }
        setup(std::fs::rename(&aside, &real), "put a file back")?;
        let before_back = self.reads.snapshot();
        let again = self
            .store
            .dispatch(s, Some(sent.normal.id), Mode::Degrade, memo.clone())
            .await
            .map(Dispatched::from)
            .step("dispatch once the file is back")?;
        let eviction = Eviction {
            evicted_while_missing,
            kept_once_back: memo.contains(&blob),
            before: &before,
            after_missing: &after_missing,
            before_back: &before_back,
            after_back: &self.reads.snapshot(),
            again: &again,
        };
        let outcome = check::failed_read_evicted(&self.known, sent, &eviction);
        self.record("failed-read-is-evicted", outcome);
        Ok(())
    }

    /// What is stored and shown: titles, display text, references and the event log.
    pub(super) async fn persisted(&mut self, sent: &Sent) -> Result<(), Failure> {
        // Every session, archived ones too, a page at a time.
        let (mut sessions, mut cursor) = (Vec::new(), None);
        loop {
            let query = crate::lifecycle::ListQuery {
                limit: crate::lifecycle::MAX_PAGE,
                cursor,
                archived: Some(crate::model::ArchiveFilter::Include),
                ..Default::default()
            };
            let page = self
                .store
                .list_sessions(query)
                .await
                .step("list sessions")?;
            for summary in page.sessions {
                sessions.push(
                    self.store
                        .session(summary.id)
                        .await
                        .step("read a session")?,
                );
            }
            cursor = page.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        let mut records = Vec::new();
        for session in &sessions {
            let messages = whole(|q| self.store.messages(session.id, None, q))
                .await
                .step("list messages")?;
            let events = whole(|q| self.store.events(session.id, q))
                .await
                .step("list events")?;
            records.push(serde_json::to_string(&messages).unwrap_or_default());
            records.push(serde_json::to_string(&events).unwrap_or_default());
        }
        let outcome = check::nothing_persisted_holds_a_path(&self.known, sent, &sessions, &records);
        self.record("no-path-in-display-title-references", outcome);
        let report = self
            .store
            .verify(Verify::Check)
            .await
            .step("verify the database")?
            .after;
        self.record(
            "event-log-matches-tables",
            check::log_matches_tables(&report),
        );
        Ok(())
    }

    /// Moves both roots and restores through a store that knows only the new ones.
    pub(super) async fn moved_roots(&mut self) -> Result<(), Failure> {
        let moved = self.tmp.join("moved");
        setup(
            std::fs::create_dir_all(&moved),
            "make a folder for the moved roots",
        )?;
        let roots = Roots {
            configured: moved.join("attachments"),
            legacy: vec![moved.join("legacy")],
        };
        setup(
            std::fs::rename(&self.known.configured, &roots.configured),
            "move the configured root",
        )?;
        setup(
            std::fs::rename(&self.known.legacy, &roots.legacy[0]),
            "move the legacy root",
        )?;
        let config = Config {
            roots: roots.clone(),
            ..self.config.clone()
        };
        let store = Store::open(config)
            .await
            .step("open a store on moved roots")?;
        let restored = restored_messages(&store, self.known.session)
            .await
            .step("restore after moving the roots")?;
        let outcome = check::restored_from_moved_roots(
            &self.known,
            &roots.configured,
            &roots.legacy[0],
            &restored,
        );
        self.record("restore-after-moving-roots", outcome);
        self.known.saw_paths(&restored);
        // The files live there now; later steps use the roots where they are.
        self.config.roots = roots;
        Ok(())
    }

    /// Records an agent turn between two user messages in a session of its own, and
    /// replays it through a fresh store, as items and as `acp-updates` lines.
    pub(super) async fn recorded_turn(&mut self) -> Result<Outcome, Failure> {
        let store = Store::open(self.config.clone())
            .await
            .step("open a store to record a turn")?;
        let s = store
            .create_session(NewSession {
                title: Some("probe recorded turn".to_owned()),
                ..NewSession::default()
            })
            .await
            .step("create a session for the recorded turn")?
            .id;
        let note = store
            .attach(s, vec![Upload::new("lunch note.txt", TURN_NOTE)])
            .await
            .step("store the recorded turn's attachment")?
            .remove(0);
        let question = Outgoing {
            attach: vec![note.uri],
            ..Outgoing::user(TURN_QUESTION)
        };
        let question = store
            .send(s, question)
            .await
            .step("send the recorded turn's question")?;
        let update = |value: serde_json::Value| {
            serde_json::from_value::<SessionUpdate>(value)
                .map_err(|e| Failure::Step(format!("cannot build a session update: {e}")))
        };
        let mut updates = Vec::new();
        for text in AGENT_TEXT {
            updates.push(update(serde_json::json!({
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": text},
                "messageId": "probe-answer",
            }))?);
        }
        updates.push(update(serde_json::json!({
            "sessionUpdate": "tool_call", "toolCallId": "probe-read",
            "title": "Read the note", "kind": "read", "status": "pending",
        }))?);
        updates.push(update(serde_json::json!({
            "sessionUpdate": "tool_call_update", "toolCallId": "probe-read",
            "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "read"}}],
        }))?);
        store
            .record(s, updates)
            .await
            .step("record the agent's turn")?;
        let follow_up = store
            .send(s, Outgoing::user(TURN_FOLLOW_UP))
            .await
            .step("send the message after the turn")?;

        let fresh = Store::open_as(self.config.clone(), Access::ReadOnly)
            .await
            .step("open a fresh store to replay the turn")?;
        let mut stream = fresh
            .restore(s, DEFAULT_MEMO_BUDGET, crate::restore::Replay::Whole)
            .await
            .step("replay the recorded turn")?;
        let written = |e: std::io::Error| Failure::Step(format!("cannot write acp-updates: {e}"));
        let mut lines =
            StreamWriter::begin(Vec::new(), Format::AcpUpdates, s, MODEL).map_err(written)?;
        let mut items = Vec::new();
        while let Some(item) = stream.next().await {
            let item = item.step("replay the recorded turn")?;
            lines.item(&item).map_err(written)?;
            items.push(item);
        }
        let lines = lines.finish().map_err(written)?;
        let turn = RecordedTurn {
            question,
            follow_up,
            configured: self.config.roots.configured.clone(),
        };
        Ok(check::recorded_turn_replays(
            &turn,
            &items,
            &String::from_utf8_lossy(&lines),
        ))
    }

    /// Audits the database behind the store's back for every path the run saw.
    pub(super) fn database(&mut self) {
        let needles: Vec<String> = self.known.needles.iter().cloned().collect();
        let audit = oracle::audit_database(&self.config, &needles);
        let audit = audit.as_ref().map_err(|e| e.to_string());
        let outcome = audit.clone().and_then(check::schema_has_no_path_column);
        self.record("schema-has-no-path-column", outcome);
        let outcome = audit.clone().and_then(check::db_text_has_no_path);
        self.record("db-text-has-no-path", outcome);
        // A PostgreSQL server's files are its own to read: there the audit is of the
        // tables, and this check is not run rather than passed unread.
        if let crate::config::Database::Sqlite(db) = self.config.database.clone() {
            let outcome = audit.and_then(|a| check::db_file_has_no_path(a, &db));
            self.record("db-file-has-no-path", outcome);
            if self.config.key.is_some() {
                let texts = [QUESTION, MID_TURN, REPLY].map(str::to_owned);
                let audit = oracle::audit_database(&self.config, &texts);
                let head = std::fs::read(&db).map(|mut bytes| {
                    bytes.truncate(16);
                    bytes
                });
                let outcome = match (audit, head) {
                    (Ok(audit), Ok(head)) => check::db_file_is_encrypted(&audit, &texts, &head),
                    (Err(e), _) => Err(format!("cannot audit the database: {e}")),
                    (_, Err(e)) => Err(format!("cannot read the database file: {e}")),
                };
                self.record("db-file-is-encrypted", outcome);
            }
        }
    }
}

/// The restored messages, collected: the probe's few small files, judged whole.
async fn restored_messages(
    store: &Store,
    session: SessionId,
) -> crate::error::Result<Vec<Dispatched>> {
    let mut stream = store
        .restore(session, DEFAULT_MEMO_BUDGET, crate::restore::Replay::Whole)
        .await?;
    let mut messages = Vec::new();
    while let Some(item) = stream.next().await {
        if let crate::restore::ReplayItem::Message(m) = item? {
            messages.push(Dispatched::from(m));
        }
    }
    Ok(messages)
}
