//! An archive's manifest (the document `Manifest` describes) as a stream both ways, so
//! neither export nor import holds a history: export writes it a page at a time from
//! one snapshot; import spools its rows to three anonymous owner-only files, which its
//! check and its write read side by side.

use std::collections::BTreeSet;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, Write};
use std::marker::PhantomData;

use serde::de::{self, DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::config::Redaction;
use crate::db::sql::Tx;
use crate::db::{entries, items, queries};
use crate::error::{Error, Result};
use crate::ids::{ItemId, SessionId};
use crate::model::{Event, Message, Session, Setting};
use crate::model::{Item, ItemBody};
use crate::redact;

/// What the manifest's `format` says, so `import` knows the archive for one of ours.
pub const ARCHIVE_FORMAT: &str = "sessionstore-archive";
/// The manifest layout this build writes and reads.
pub const ARCHIVE_VERSION: u32 = 1;
/// The manifest's entry name; it is always the archive's first entry.
pub const MANIFEST_NAME: &str = "manifest.json";
/// Where attachment files sit in the archive: `files/<stored name>`.
pub const FILES_DIR: &str = "files/";

/// The archive's table of contents: the session, its rows and log, the files that follow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    pub session: Session,
    pub messages: Vec<Message>,
    pub items: Vec<ArchivedItem>,
    pub events: Vec<Event>,
    /// Every file the archive holds after the manifest, in archive order.
    pub files: Vec<ArchivedFile>,
    /// Stored names no root had at export time: the references travel and degrade.
    pub missing: Vec<String>,
    /// The client's settings of a proxied session (absent in older archives).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settings: Vec<Setting>,
}

/// A recorded item as its row holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArchivedItem {
    pub id: ItemId,
    pub seq: i64,
    pub kind: String,
    /// The ACP JSON of the item, as the `body` column holds it.
    pub body: String,
    pub created_at: String,
    pub updated_at: String,
}

impl ArchivedItem {
    pub(super) fn from_item(item: &Item) -> ArchivedItem {
        ArchivedItem {
            id: item.id,
            seq: item.seq,
            kind: item.body.kind().to_owned(),
            body: item.body.to_json(),
            created_at: item.created_at.clone(),
            updated_at: item.updated_at.clone(),
        }
    }

    /// The item back, for the session `session`; an `Err` names what does not parse.
    pub fn to_item(&self, session: SessionId) -> std::result::Result<Item, String> {
        Ok(Item {
            id: self.id,
            session_id: session,
            seq: self.seq,
            body: ItemBody::from_json(&self.kind, &self.body)?,
            created_at: self.created_at.clone(),
            updated_at: self.updated_at.clone(),
        })
    }
}

/// One attachment file in the archive: its stored name and size in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchivedFile {
    pub name: String,
    pub size: u64,
}

/// How many history seqs (or log events) a page of an export reads.
const PAGE: i64 = 256;

/// What [`write`] wrote, for the export's report and the files that follow.
pub(super) struct Written {
    pub messages: usize,
    pub items: usize,
    pub files: Vec<ArchivedFile>,
    pub missing: Vec<String>,
}

/// Writes the manifest of `session` to `out`, a page of rows or events at a time; `io`
/// turns a failed write into the export's error.
pub(super) fn write(
    tx: &Tx<'_>,
    session: &Session,
    settings: &[Setting],
    out: &mut impl Write,
    io: &dyn Fn(io::Error) -> Error,
    redaction: Redaction,
    files: impl FnOnce(&BTreeSet<String>) -> Result<(Vec<ArchivedFile>, Vec<String>)>,
) -> Result<Written> {
    let id = &session.id;
    let redacting = redaction.is_on();
    let session = &Session {
        title: session.title.clone().map(|t| redaction.apply(t)),
        ..session.clone()
    };
    // A row redacted as a JSON document (its stored names and URIs kept).
    let scrubbed_with = |row: &dyn erased::Json, scrub: fn(&mut serde_json::Value)| {
        let mut v = row.value().map_err(io)?;
        scrub(&mut v);
        Ok::<_, Error>(v)
    };
    let scrubbed = |row: &dyn erased::Json| scrubbed_with(row, redact_row);
    let json = |out: &mut dyn Write, value: &dyn erased::Json| value.write(out).map_err(io);
    let raw = |out: &mut dyn Write, text: &str| out.write_all(text.as_bytes()).map_err(io);
    raw(out, "{\"format\":")?;
    json(out, &ARCHIVE_FORMAT)?;
    raw(out, ",\"version\":")?;
    json(out, &ARCHIVE_VERSION)?;
    raw(out, ",\"session\":")?;
    json(out, session)?;
    let last = entries::last_seq(tx, id)?;
    let mut names = BTreeSet::new();
    let mut comma = Comma::default();
    raw(out, ",\"messages\":[")?;
    let mut messages = 0;
    for lo in (1..=last).step_by(PAGE as usize) {
        for m in queries::messages_in(tx, id, None, lo..lo.saturating_add(PAGE))? {
            names.extend(m.refs.iter().map(|r| r.uri.name().to_owned()));
            raw(out, comma.next())?;
            match redacting {
                true => json(out, &scrubbed(&m)?)?,
                false => json(out, &m)?,
            }
            messages += 1;
        }
    }
    raw(out, "],\"items\":[")?;
    let mut comma = Comma::default();
    let mut items = 0;
    let mut made = items::Made::default();
    for lo in (1..=last).step_by(PAGE as usize) {
        for item in items::items_in(tx, id, lo..lo.saturating_add(PAGE), &mut made)? {
            raw(out, comma.next())?;
            let archived = ArchivedItem::from_item(&item);
            match redacting {
                true => json(out, &scrubbed_with(&archived, redact_item)?)?,
                false => json(out, &archived)?,
            }
            items += 1;
        }
    }
    raw(out, "],\"events\":[")?;
    let mut comma = Comma::default();
    let end = crate::db::append::last_session_seq(tx, id)?;
    let mut next = 1;
    while next <= end {
        let (events, after) = queries::events_page(tx, id, next, PAGE)?;
        for event in events {
            // The payload as a document, as `Store::events` hands it out.
            let mut payload: serde_json::Value =
                serde_json::from_str(&event.payload).map_err(|e| Error::DamagedRow {
                    action: "export an event",
                    detail: format!("the payload of event {} does not parse: {e}", event.seq),
                })?;
            if redacting {
                redact::payload(&mut payload);
            }
            raw(out, comma.next())?;
            json(
                out,
                &Event {
                    seq: event.seq,
                    session_id: event.session_id,
                    session_seq: event.session_seq,
                    kind: event.kind,
                    payload,
                    created_at: event.created_at,
                },
            )?;
        }
        next = after;
    }
    let (files, missing) = files(&names)?;
    raw(out, "],\"files\":")?;
    json(out, &files)?;
    raw(out, ",\"missing\":")?;
    json(out, &missing)?;
    if !settings.is_empty() {
        raw(out, ",\"settings\":")?;
        match redacting {
            true => json(out, &scrubbed(&settings)?)?,
            false => json(out, &settings)?,
        }
    }
    raw(out, "}")?;
    Ok(Written {
        messages,
        items,
        files,
        missing,
    })
}

/// Redacts a row (a message, settings) as a JSON document.
fn redact_row(row: &mut serde_json::Value) {
    redact::value(row);
}

/// Redacts an archived item's body whole, so a message's text is redacted as one.
fn redact_item(item: &mut serde_json::Value) {
    let Some(serde_json::Value::String(text)) = item.get_mut("body") else {
        return;
    };
    if let Some(redacted) = redact::json_text(text) {
        *text = redacted;
    }
}

/// Redacts an event: its payload (below).
fn redact_event(event: &mut serde_json::Value) {
    if let Some(payload) = event.get_mut("payload") {
        redact::payload(payload);
    }
}

/// `""` before a list's first element, `","` before every other one.
#[derive(Default)]
struct Comma(bool);

impl Comma {
    fn next(&mut self) -> &'static str {
        match std::mem::replace(&mut self.0, true) {
            false => "",
            true => ",",
        }
    }
}

/// A value written as JSON through a `dyn Write` (`Serialize` is not object safe).
mod erased {
    pub trait Json {
        fn write(&self, out: &mut dyn std::io::Write) -> std::io::Result<()>;
        fn value(&self) -> std::io::Result<serde_json::Value>;
    }

    impl<T: serde::Serialize + ?Sized> Json for T {
        fn write(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
            serde_json::to_writer(out, self).map_err(std::io::Error::from)
        }

        fn value(&self) -> std::io::Result<serde_json::Value> {
            serde_json::to_value(self).map_err(std::io::Error::from)
        }
    }
}

/// One list of a manifest, a JSON line a row in an anonymous (unlinked) owner-only file.
pub(super) struct Spool {
    file: BufWriter<File>,
    pub count: u64,
}

impl Spool {
    fn new() -> io::Result<Spool> {
        Ok(Spool {
            file: BufWriter::new(tempfile::tempfile()?),
            count: 0,
        })
    }

    fn push(&mut self, row: &impl Serialize) -> io::Result<()> {
        serde_json::to_writer(&mut self.file, row)?;
        self.file.write_all(b"\n")?;
        self.count += 1;
        Ok(())
    }

    /// The rows from the first; each pass reads the file again from its start.
    pub fn rows<T: DeserializeOwned>(&mut self) -> Result<Rows<T>> {
        let unreadable = |cause| Error::Io {
            path: std::env::temp_dir(),
            cause,
        };
        self.file.flush().map_err(unreadable)?;
        let mut file = self.file.get_ref().try_clone().map_err(unreadable)?;
        file.rewind().map_err(unreadable)?;
        Ok(Rows {
            lines: BufReader::new(file),
            line: String::new(),
            kind: PhantomData,
        })
    }
}

/// The rows of a [`Spool`], parsed one at a time.
pub(super) struct Rows<T> {
    lines: BufReader<File>,
    line: String,
    kind: PhantomData<T>,
}

impl<T: DeserializeOwned> Iterator for Rows<T> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Result<T>> {
        self.line.clear();
        match self.lines.read_line(&mut self.line) {
            Ok(0) => None,
            // The spool holds what this process wrote from parsed rows.
            Ok(_) => Some(serde_json::from_str(&self.line).map_err(|e| Error::Io {
                path: std::env::temp_dir(),
                cause: io::Error::other(format!("a spooled row does not read back: {e}")),
            })),
            Err(cause) => Some(Err(Error::Io {
                path: std::env::temp_dir(),
                cause,
            })),
        }
    }
}

/// A manifest as import reads it: its small fields, its three long lists spooled.
pub(super) struct Spooled {
    pub format: String,
    pub version: u32,
    pub session: Session,
    pub messages: Spool,
    pub items: Spool,
    pub events: Spool,
    pub files: Vec<ArchivedFile>,
    pub missing: Vec<String>,
    pub settings: Vec<Setting>,
}

/// Reads a manifest one row at a time, by the derived [`Manifest`] reader's rules; an
/// `Err` says why it does not parse, in serde's words.
pub(super) fn read(input: impl Read, redaction: Redaction) -> std::result::Result<Spooled, String> {
    let mut de = serde_json::Deserializer::from_reader(BufReader::new(input));
    let mut spooled = de
        .deserialize_map(Fields(redaction))
        .map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    if redaction.is_on() {
        // As export redacts, so that the log still replays to the rows.
        spooled.session.title = spooled.session.title.take().map(redact::owned);
        for setting in &mut spooled.settings {
            redact::value(&mut setting.params);
        }
    }
    Ok(spooled)
}

use serde::Deserializer as _;

/// The manifest's fields in any order, redacted as spooled when redaction is on.
struct Fields(Redaction);

impl<'de> Visitor<'de> for Fields {
    type Value = Spooled;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a manifest object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Spooled, A::Error> {
        fn once<T, E: de::Error>(slot: &mut Option<T>, name: &'static str, v: T) -> Result<(), E> {
            match slot.replace(v) {
                Some(_) => Err(E::duplicate_field(name)),
                None => Ok(()),
            }
        }
        let spool = || Spool::new().map_err(|e| de::Error::custom(format!("cannot spool: {e}")));
        let (mut format, mut version, mut session) = (None, None, None);
        let (mut messages, mut items, mut events) = (None, None, None);
        let (mut files, mut missing, mut settings) = (None, None, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "format" => once(&mut format, "format", map.next_value()?)?,
                "version" => once(&mut version, "version", map.next_value()?)?,
                "session" => once(&mut session, "session", map.next_value::<Session>()?)?,
                "messages" => {
                    let mut s = spool()?;
                    map.next_value_seed(Each::<Message>::into(&mut s, self.0, redact_row))?;
                    once(&mut messages, "messages", s)?;
                }
                "items" => {
                    let mut s = spool()?;
                    map.next_value_seed(Each::<ArchivedItem>::into(&mut s, self.0, redact_item))?;
                    once(&mut items, "items", s)?;
                }
                "events" => {
                    let mut s = spool()?;
                    map.next_value_seed(Each::<Event>::into(&mut s, self.0, redact_event))?;
                    once(&mut events, "events", s)?;
                }
                "files" => once(&mut files, "files", map.next_value()?)?,
                "missing" => once(&mut missing, "missing", map.next_value()?)?,
                "settings" => once(&mut settings, "settings", map.next_value()?)?,
                other => return Err(de::Error::unknown_field(other, FIELDS)),
            }
        }
        let need = |name: &'static str| de::Error::missing_field(name);
        Ok(Spooled {
            format: format.ok_or_else(|| need("format"))?,
            version: version.ok_or_else(|| need("version"))?,
            session: session.ok_or_else(|| need("session"))?,
            messages: messages.ok_or_else(|| need("messages"))?,
            items: items.ok_or_else(|| need("items"))?,
            events: events.ok_or_else(|| need("events"))?,
            files: files.ok_or_else(|| need("files"))?,
            missing: missing.ok_or_else(|| need("missing"))?,
            settings: settings.unwrap_or_default(),
        })
    }
}

const FIELDS: &[&str] = &[
    "format", "version", "session", "messages", "items", "events", "files", "missing", "settings",
];

/// A list whose elements are parsed one at a time and spooled.
struct Each<'a, T> {
    spool: &'a mut Spool,
    kind: PhantomData<T>,
    /// Redacts a row before it is spooled, when redaction is on.
    scrub: Option<fn(&mut serde_json::Value)>,
}

impl<'a, T> Each<'a, T> {
    fn into(
        spool: &'a mut Spool,
        redaction: Redaction,
        scrub: fn(&mut serde_json::Value),
    ) -> Each<'a, T> {
        Each {
            spool,
            kind: PhantomData,
            scrub: redaction.is_on().then_some(scrub),
        }
    }
}

impl<'de, T: Deserialize<'de> + Serialize> DeserializeSeed<'de> for Each<'_, T> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, T: Deserialize<'de> + Serialize> Visitor<'de> for Each<'_, T> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        let spooled = |e: io::Error| de::Error::custom(format!("cannot spool: {e}"));
        while let Some(row) = seq.next_element::<T>()? {
            match self.scrub {
                Some(scrub) => {
                    let mut v = serde_json::to_value(&row).map_err(|e| spooled(e.into()))?;
                    scrub(&mut v);
                    self.spool.push(&v).map_err(spooled)?;
                }
                None => self.spool.push(&row).map_err(spooled)?,
            }
        }
        Ok(())
    }
}
