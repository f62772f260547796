//! Histories of any length: a long `record` input written in batches inside one
//! write, each batch its own `turn_recorded` event, so what is held at once is one
//! batch and not the whole input; and a replay from a point (`Replay`: the last N
//! entries, or from an entry's id), which says where it starts (`Partial`). It runs no
//! SQL itself (that is `db`) and reads no attachment file.

use std::collections::{BTreeMap, HashSet, VecDeque};

use crate::turns::Update;

use crate::db::sql::Tx;
use crate::db::turns::{Recorded, Touched, record_batch};
use crate::db::{entries, queries, turns};
use crate::dispatch::Memo;
use crate::error::{Error, Result};
use crate::ids::{EntryId, ItemId, SessionId};
use crate::model::{Delivery, Message};
use crate::projection;
use crate::projection::Entry;
use crate::replay::{Discard, RestoreStream, Sink};
use crate::store::{Store, blocking};

/// Where a replay starts. Entries are counted as `restore --format acp` shows them:
/// the delivered messages and the recorded items, in the history's one order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replay {
    /// The whole history.
    #[default]
    Whole,
    /// The last N entries (all of them when there are fewer).
    Tail(u64),
    /// From this entry (a delivered message or a recorded item), inclusive.
    From(EntryId),
}

impl Replay {
    /// A replay from a `messageId` as an ACP client saw it in a replay: a user
    /// message's id, which is the store's own, or the `messageId` an agent's
    /// recorded message or thought carried, which is the agent's; the store's
    /// id of a recorded item is taken too.
    pub fn from_acp_message(message_id: &str) -> AcpPoint {
        AcpPoint(message_id.to_owned())
    }
}

/// A replay point named by an ACP `messageId` (see [`Replay::from_acp_message`]),
/// found in the history when the replay starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcpPoint(String);

/// Where a replay starts: by the store's id, or by an ACP `messageId`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Point {
    Replay(Replay),
    Acp(AcpPoint),
}

impl Point {
    /// The whole history.
    pub(crate) const WHOLE: Point = Point::Replay(Replay::Whole);
}

pub use crate::replay::Partial;

/// How many updates one `turn_recorded` event of a long record holds at most: small
/// enough that one batch (its updates, their merge and its event's payload) is a few
/// tens of KiB, and that a replay from a point, which replays the whole event that
/// made its first entry, replays little more than it hands on (at 1,024, a tail of
/// 100 cost six times a 100-item session's whole restore; at 128, 1.3 times); big
/// enough that a million lines make under 8,000 events.
pub const RECORD_BATCH: usize = 128;

/// Where the updates of [`Store::record_from`] come from. A write may run more than
/// once (PostgreSQL runs a transaction again when it lost a race), so `batches`
/// hands the updates over from the first one every time it is called.
pub trait UpdateSource: Send + 'static {
    /// Calls `each` with the updates in order, in batches of at most
    /// [`RECORD_BATCH`], stopping at the first error `each` returns.
    fn batches(&mut self, each: &mut dyn FnMut(Vec<Update>) -> Result<()>) -> Result<()>;
}

/// Updates already in memory.
impl UpdateSource for Vec<Update> {
    fn batches(&mut self, each: &mut dyn FnMut(Vec<Update>) -> Result<()>) -> Result<()> {
        for batch in self.chunks(RECORD_BATCH) {
            each(batch.to_vec())?;
        }
        Ok(())
    }
}

/// The items a record touched, each listed once in the order first touched, without
/// a set of every id: within a batch the ids are distinct already, and a later batch
/// can only touch again the last item made (a chunk continuing it), a tool call, or
/// an item from before this record, which are the ones remembered.
#[derive(Default)]
struct ItemsTouched {
    ids: Vec<ItemId>,
    again: HashSet<ItemId>,
    last_made: Option<ItemId>,
}

impl ItemsTouched {
    fn add(&mut self, t: Touched) {
        if t.created {
            self.ids.push(t.id);
            self.last_made = Some(t.id);
            if t.tool_call {
                self.again.insert(t.id);
            }
        } else if self.last_made != Some(t.id) && self.again.insert(t.id) {
            self.ids.push(t.id);
        }
    }
}

/// Long histories: replay from a point (the last entries, or from an id) and
/// recording a long input in batches.
impl Store {
    /// Rebuilds a session by replaying its event log, the record, as a stream of
    /// items in history order: every delivered message as its event holds it (a
    /// message row edited behind the log's back changes nothing here; `verify`
    /// reports it), its references replayed through the resolver as the reader asks
    /// for it (one memo of `memo_budget` bytes, [`dispatch::DEFAULT_MEMO_BUDGET`] by
    /// default: each distinct file is read once while it fits, and read again when
    /// evicted), and each recorded turn item from its row once the log agrees with
    /// it. References whose files are gone degrade; queued messages stay queued. The
    /// log and the rows are read a page at a time in one snapshot, as the reader
    /// takes the items, so neither the time to the first item nor what is held grows
    /// with the history. A problem (a log that does not replay, an item row that
    /// differs from it) found before the first batch (16 items) is handed over makes
    /// this call fail; one found later ends the stream with the error, after the items
    /// before it. Run [`Store::check_replay`] first where output cannot stop midway.
    /// Write the items as they come (a `format::StreamWriter`) rather than collect
    /// them.
    pub async fn restore_stream(
        &self,
        session: SessionId,
        memo_budget: u64,
    ) -> Result<RestoreStream> {
        self.restore_from(session, memo_budget, Replay::Whole).await
    }

    /// Records updates read from `source` in one write, all or nothing, as
    /// [`Store::record`] does, but one batch at a time: each batch of at most
    /// [`RECORD_BATCH`] updates is merged and written with its own `turn_recorded`
    /// event before the next is read, so a long input is never held whole. A
    /// refused update (numbered from 1 over the whole input) stores nothing.
    pub async fn record_from(
        &self,
        session: SessionId,
        mut source: impl UpdateSource,
    ) -> Result<Recorded> {
        let db = self.db().clone();
        let redacting = self.config().redaction.is_on();
        blocking(move || {
            db.write_for(&session, |tx| {
                queries::get_session(tx, &session)?;
                let mut listed = ItemsTouched::default();
                let mut recorded = 0usize;
                // A message streamed across batches is redacted as one text: its
                // held-back tail goes into the next batch, or one of its own at the
                // end (`redact::Streams`), which the input's numbering does not count.
                // Each batch is held until the next is redacted, so that a message
                // the next one ends gets its tail in its own last chunk.
                let mut streams = crate::redact::Streams::default();
                let mut held: Vec<Update> = Vec::new();
                let mut write = |batch: Vec<Update>, added: usize| {
                    let touched = record_batch(tx, &session, &batch).map_err(|e| match e {
                        Error::UpdateRefused { line, refusal } => Error::UpdateRefused {
                            line: (line + recorded).saturating_sub(added),
                            refusal,
                        },
                        e => e,
                    })?;
                    recorded += batch.len() - added;
                    touched.into_iter().for_each(|t| listed.add(t));
                    Ok(())
                };
                source.batches(&mut |batch| match redacting {
                    true => {
                        let (next, added) = streams.pass_after(&mut held, batch);
                        debug_assert_eq!(added, 0, "a held batch takes every tail");
                        match std::mem::replace(&mut held, next) {
                            done if done.is_empty() => Ok(()),
                            done => write(done, 0),
                        }
                    }
                    false => write(batch, 0),
                })?;
                streams.end(&mut held);
                if !held.is_empty() {
                    write(held, 0)?;
                }
                // Written outside the store's writer, which would not know that what
                // this sealed waits to be indexed (V14): indexed here, in the write.
                crate::db::search::index_waiting(tx, Some(&session), None)?;
                Ok(Recorded {
                    recorded,
                    items: std::mem::take(&mut listed.ids),
                })
            })
        })
        .await
    }

    /// [`Store::restore_stream`] from a point: the whole history, its last N entries,
    /// or the entries from one message or recorded item on (inclusive); an id that
    /// is not in the delivered history is `Error::ReplayPoint`. The stream says where
    /// a partial replay starts ([`RestoreStream::partial`]).
    pub async fn restore_from(
        &self,
        session: SessionId,
        memo_budget: u64,
        replay: Replay,
    ) -> Result<RestoreStream> {
        self.restore_at(session, memo_budget, Point::Replay(replay))
            .await
    }

    /// [`Store::restore_from`] from an ACP `messageId` (see
    /// [`Replay::from_acp_message`]); one the history does not hold is
    /// `Error::ReplayMessage`.
    pub async fn restore_from_acp(
        &self,
        session: SessionId,
        memo_budget: u64,
        point: AcpPoint,
    ) -> Result<RestoreStream> {
        self.restore_at(session, memo_budget, Point::Acp(point))
            .await
    }

    async fn restore_at(
        &self,
        session: SessionId,
        memo_budget: u64,
        point: Point,
    ) -> Result<RestoreStream> {
        let db = self.db().clone();
        let produce =
            move |sink: &mut dyn Sink| db.read_once(|tx| produce(tx, session, &point, sink));
        let host = self.config().host.clone();
        RestoreStream::start(
            produce,
            self.resolver(),
            move |session| crate::store::placement(&host, session),
            Memo::with_budget(memo_budget),
        )
        .await
    }

    /// Runs the check a restore from `replay` makes, to its end, without reading an
    /// attachment or producing an item: `Ok` when every entry it would replay is
    /// what the log says and the log replays. A format that is one document and
    /// cannot stop midway (`acp`, the OpenAI requests) runs this first, so that a
    /// damaged history is refused before any output; it costs a second read.
    pub async fn check_replay(&self, session: SessionId, replay: Replay) -> Result<()> {
        let db = self.db().clone();
        blocking(move || {
            db.read_once(|tx| produce(tx, session, &Point::Replay(replay), &mut Discard))
        })
        .await
    }
}

/// How many history seqs a page of rows covers: the first page is small, so the
/// first entry costs little, and each next one twice the last, up to the most.
const ENTRY_PAGE_FIRST: i64 = 16;
const ENTRY_PAGE_MOST: i64 = 256;
/// Reads a session's delivered history from its rows, from `point` on, a page at a
/// time, and hands each entry to `sink` once the event log, replayed alongside in the
/// same snapshot, agrees with it: the log is the record, and a row edited behind its
/// back is refused (`Error::LogMismatch`), never handed on. An entry the log may
/// still change (a tool call a later update may name, a queued message) is handed on
/// and checked when the log is done with it; so is the session row. What is held is
/// a page of rows, a page of events and the entries still open: never the history.
/// Time to the first entry is a page's, whatever the history's length; a problem
/// found later ends the output there.
pub(crate) fn produce(
    tx: &Tx<'_>,
    session: SessionId,
    point: &Point,
    sink: &mut dyn Sink,
) -> Result<()> {
    let row = queries::get_session(tx, &session)?;
    let last = entries::last_seq(tx, &session)?;
    let start = match point {
        Point::Replay(Replay::Whole) => None,
        Point::Replay(Replay::Tail(n)) => Some(entries::tail_start(tx, &session, *n)?),
        Point::Replay(Replay::From(entry)) => Some(Some(
            entries::seq_of(tx, &session, *entry)?.ok_or(Error::ReplayPoint {
                session,
                entry: *entry,
            })?,
        )),
        Point::Acp(AcpPoint(id)) => {
            let by_store_id = match id.parse::<EntryId>() {
                Ok(entry) => entries::seq_of(tx, &session, entry)?,
                Err(_) => None,
            };
            let found = match by_store_id {
                Some(seq) => Some(seq),
                None => entries::seq_of_acp_message(tx, &session, id)?,
            };
            Some(Some(found.ok_or_else(|| Error::ReplayMessage {
                session,
                message_id: id.clone(),
            })?))
        }
    };
    let (from, skipped) = match start {
        None => (1, None),
        Some(None) => {
            let skipped = entries::entries_before(tx, &session, last + 1)?;
            sink.begin(
                row,
                Some(Partial {
                    from: None,
                    skipped,
                }),
            );
            return Ok(());
        }
        Some(Some(seq)) => (seq, Some(entries::entries_before(tx, &session, seq)?)),
    };
    let whole = skipped.is_none();
    let mut log = entries::LogPages::new(tx, &session)?;
    // (A whole replay starts at the log's start: no walk back to find it.)
    let making = match whole {
        true => None,
        false => entries::event_making(tx, &session, from)?,
    };
    let mut replayer = match making {
        Some((event, first)) => {
            log = log.starting_at(event);
            let tail = match first > 1 {
                true => {
                    turns::items_in(tx, &session, first - 1..first, &mut turns::Made::default())?
                        .pop()
                }
                false => None,
            };
            projection::Replayer::from(
                session,
                projection::Start {
                    event,
                    last: first - 1,
                    tail,
                    session: row.clone(),
                    // Only a call made before the first event replayed: one made
                    // since is the replay's own. A read that fails here leaves the
                    // call unknown to the replay, which then finds the log wanting
                    // and says so.
                    tool_call: Box::new(move |id| {
                        turns::tool_call(tx, &session, id)
                            .ok()
                            .flatten()
                            .filter(|item| item.seq < first)
                    }),
                },
            )
        }
        // A whole replay, or a point no event made: the log from its start.
        _ => projection::Replayer::windowed(session),
    };
    // Which update made each item, for the rows that name it (V12); taken as each
    // item's row is met, so it holds what the log is ahead of the rows by. Not when
    // the whole log replays for rows that start later (a point no event made): the
    // items before the point would never be met, and their rows are read as text.
    if whole || making.is_some() {
        replayer.keep_makers();
    }
    let mut check = Check {
        items: projection::Meet::new(session, from),
        messages: BTreeMap::new(),
    };
    let mut head = Some(row.clone());
    // Item rows, a page at a time: `lo` is where the next page starts.
    let mut rows: VecDeque<turns::ItemRow> = VecDeque::new();
    let (mut lo, mut page) = (from, ENTRY_PAGE_FIRST);
    // The event whose updates the rows of the last page named (V12), kept for the next.
    let mut made = turns::Made::default();
    let mut want = from;
    while want <= last {
        // The log runs on until it is past `want` (the entry there can then change
        // only if it is a tool call) and has delivered a message queued there.
        while (replayer.last_seq() <= want || replayer.holds_queued(want)) && !log.done() {
            advance(tx, &mut log, &mut replayer, &mut check)?;
        }
        if want >= lo {
            let hi = lo.saturating_add(page);
            page = (page * 2).min(ENTRY_PAGE_MOST);
            rows.extend(turns::items_in_rows(tx, &session, lo..hi, &mut made)?);
            lo = hi;
        }
        let next = match check.messages.remove(&want) {
            Some(message) => Some(Next::Message(message)),
            None => match rows.front() {
                Some(item) if item.seq() == want => rows.pop_front().map(Next::Row),
                _ => None,
            },
        };
        // A row at a seq that is not its own in the log meets nothing here and is
        // named when the replay ends.
        while rows.front().is_some_and(|item| item.seq() <= want) {
            if let Some(item) = rows.pop_front() {
                let item = item.read(tx, &mut made)?;
                replayer.take_maker(&item.id);
                check.row(&Entry::Item(Box::new(item)))?;
            }
        }
        want += 1;
        let entry = match next {
            None => continue, // a message still queued, or no entry at all
            Some(Next::Message(message)) => Entry::Message(message),
            Some(Next::Row(row)) => {
                let maker = match &row {
                    turns::ItemRow::Unread(row) => replayer.take_maker(&row.id),
                    turns::ItemRow::Read(item) => {
                        replayer.take_maker(&item.id);
                        None
                    }
                };
                check.item_row(tx, &mut made, row, maker)?
            }
        };
        if let Some(session) = head.take() {
            let partial = skipped.map(|skipped| Partial {
                from: Some(entry.id()),
                skipped,
            });
            sink.begin(session, partial);
        }
        if !sink.entry(entry)? {
            return Ok(()); // nobody reads any more
        }
    }
    while !log.done() {
        advance(tx, &mut log, &mut replayer, &mut check)?;
    }
    let (replayed, problems) = replayer.finish();
    if !problems.is_empty() {
        return Err(Error::LogMismatch { session, problems });
    }
    if let Some(replayed) = replayed {
        if whole && let Some(problem) = projection::session_problem(&row, &replayed.session) {
            return Err(Error::LogMismatch {
                session,
                problems: vec![problem],
            });
        }
        for message in replayed.messages {
            check.logged(Entry::Message(message))?;
        }
        for item in replayed.items {
            check.logged(Entry::Item(Box::new(item)))?;
        }
    }
    check.finish()?;
    if let Some(session) = head {
        sink.begin(
            session,
            skipped.map(|skipped| Partial {
                from: None,
                skipped,
            }),
        );
    }
    Ok(())
}

/// The entry a restore hands on next: a delivered message the log finished, or an item
/// row still to be checked against the log.
enum Next {
    Message(Message),
    Row(turns::ItemRow),
}

/// Replays the next page of the log and checks what it finished: a problem the log
/// itself has refuses the restore there.
fn advance(
    tx: &Tx<'_>,
    log: &mut entries::LogPages,
    replayer: &mut projection::Replayer<'_>,
    check: &mut Check,
) -> Result<()> {
    let done = log.advance(tx, replayer)?;
    if !replayer.problems().is_empty() {
        return Err(Error::LogMismatch {
            session: check.session(),
            problems: replayer.problems().to_vec(),
        });
    }
    for entry in done {
        check.logged(entry)?;
    }
    Ok(())
}

/// What a restore checks: each item row against the log ([`projection::Meet`]; the
/// first problem refuses the restore), and the delivered messages the log has
/// finished, by seq, until their turn to be handed on. A message is handed on as its
/// event has it: the event holds the whole message as it was sent, so its row is a
/// copy that a restore need not read (`verify` compares the two). An item row is
/// what the log's updates merged into, so it is read and checked.
struct Check {
    items: projection::Meet,
    messages: BTreeMap<i64, Message>,
}

impl Check {
    fn refuse(&self, problem: Option<crate::model::Problem>) -> Result<()> {
        match problem {
            Some(problem) => Err(Error::LogMismatch {
                session: self.session(),
                problems: vec![problem],
            }),
            None => Ok(()),
        }
    }

    fn session(&self) -> SessionId {
        self.items.session()
    }

    /// An item row about to be handed on.
    fn row(&mut self, row: &Entry) -> Result<()> {
        let problem = self.items.row(row);
        self.refuse(problem)
    }

    /// An item row about to be handed on, checked: when the log is done with its item
    /// and the row holds that item in the very words the store writes, the log's item
    /// is handed on and the row is never parsed; else the row is read and checked as
    /// [`Check::row`] checks it. A row with no body (V12) that names the very update
    /// the log made its item from (`maker`, [`projection::Replayer::take_maker`]) holds
    /// that item by construction, once its own columns agree: its update is not even
    /// read.
    fn item_row(
        &mut self,
        tx: &Tx<'_>,
        made: &mut turns::Made,
        row: turns::ItemRow,
        maker: Option<projection::Maker>,
    ) -> Result<Entry> {
        let row = match row {
            turns::ItemRow::Unread(mut row) => {
                if maker.is_some() && row.maker() == maker {
                    let met = self.items.take_met(row.id.into(), |want| match want {
                        Entry::Item(want) => row.made_as(want),
                        Entry::Message(_) => false,
                    });
                    if let Some(met) = met {
                        return Ok(met);
                    }
                }
                row.find_maker(tx, made)?;
                let met = self.items.take_met(row.id.into(), |want| match want {
                    Entry::Item(want) => row.is(want),
                    Entry::Message(_) => false,
                });
                if let Some(met) = met {
                    return Ok(met);
                }
                Box::new(row.read(tx, made)?)
            }
            turns::ItemRow::Read(item) => item,
        };
        let entry = Entry::Item(row);
        self.row(&entry)?;
        Ok(entry)
    }

    /// An entry the log is done with.
    fn logged(&mut self, want: Entry) -> Result<()> {
        match want {
            Entry::Message(m) if m.seq >= self.items.from() && m.state == Delivery::Delivered => {
                self.messages.insert(m.seq, m);
                Ok(())
            }
            Entry::Message(_) => Ok(()),
            item => {
                let problem = self.items.logged(item);
                self.refuse(problem)
            }
        }
    }

    /// Every item row checked, every entry of the log met or handed on.
    fn finish(self) -> Result<()> {
        let session = self.session();
        let mut problems = self.items.finish();
        problems.extend(
            self.messages
                .values()
                .map(|m| projection::missing_entry(session, &Entry::Message(m.clone()))),
        );
        match problems.is_empty() {
            true => Ok(()),
            false => Err(Error::LogMismatch { session, problems }),
        }
    }
}
