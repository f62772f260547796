//! Shells: what serde_json writes for a typed value whose large fields hold a
//! placeholder instead of their content, cut around each placeholder, so a writer can
//! put the serialization of the one typed form on the output with each large field
//! written straight from its shared buffer. Pure: it serializes into memory and writes
//! only to the writer it is given.
//!
//! The placeholder is a string no store string can hold: it starts and ends with a
//! control character (the store escapes every control character in the names and
//! paths it writes into a context, and content never goes through a shell) and carries
//! a per-process random nonce. A shell is still checked: it must hold exactly the holes
//! it was cut for, each in its expected place, or no shell is made and the caller
//! serializes the value with its content in place (slower, never wrong).

use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::sync::LazyLock;

use agent_client_protocol_schema::v1::{ContentBlock, TextContent};
use serde::Serialize;

/// The placeholder's text and its JSON-escaped form (without quotes).
struct Placeholder {
    text: String,
    escaped: Vec<u8>,
}

static PLACEHOLDER: LazyLock<Placeholder> = LazyLock::new(|| {
    // `RandomState` is seeded from the operating system's randomness, per process.
    let nonce = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let text = format!("\u{1}sessionstore-hole-{nonce:016x}\u{1}");
    let quoted = serde_json::to_vec(&text).expect("a string always serializes");
    Placeholder {
        text,
        escaped: quoted[1..quoted.len() - 1].to_vec(),
    }
});

/// The placeholder a builder puts where a large field goes.
pub(crate) fn placeholder() -> String {
    PLACEHOLDER.text.clone()
}

/// The text block a builder puts where a whole content block goes.
pub(crate) fn placeholder_block() -> &'static ContentBlock {
    &PLACEHOLDER_BLOCK
}

static PLACEHOLDER_BLOCK: LazyLock<ContentBlock> =
    LazyLock::new(|| ContentBlock::Text(TextContent::new(placeholder())));

/// What serde_json writes for [`placeholder_block`], split at its placeholder.
static PLACEHOLDER_BLOCK_AROUND: LazyLock<Around> =
    LazyLock::new(|| Around::of(placeholder_block()));

/// A value serialized around the one placeholder it holds: the bytes before and after
/// it, which a cut takes with it (made once, for a static).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Around {
    before: Vec<u8>,
    after: Vec<u8>,
}

impl Around {
    /// `value` must hold the placeholder exactly once, as a whole string; the
    /// builders' own placeholder values do, so this is checked once, when the static
    /// is first used.
    pub(crate) fn of(value: &impl Serialize) -> Around {
        let json = serde_json::to_vec(value).expect("a placeholder value serializes");
        let token = &PLACEHOLDER.escaped;
        let at = find(&json, token).expect("the value holds the placeholder");
        Around {
            before: json[..at].to_vec(),
            after: json[at + token.len()..].to_vec(),
        }
    }
}

/// Where a placeholder sits in the serialized value, so the cut takes exactly what the
/// content replaces: the whole string, only the placeholder's characters inside a
/// longer string (a `data:` URL), or a whole value that holds the placeholder once
/// (such as [`placeholder_block`], see [`Hole::block`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hole {
    String,
    InString,
    Value(&'static Around),
}

impl Hole {
    /// A whole content block, built as [`placeholder_block`].
    pub(crate) fn block() -> Hole {
        Hole::Value(&PLACEHOLDER_BLOCK_AROUND)
    }

    /// The bytes around the placeholder's own that the cut also takes.
    fn around(self) -> (&'static [u8], &'static [u8]) {
        match self {
            Hole::String => (b"\"", b"\""),
            Hole::InString => (b"", b""),
            Hole::Value(around) => (&around.before, &around.after),
        }
    }
}

/// A reusable buffer to serialize values in and cut them, for a writer that makes a
/// shell per message rather than per read.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    json: Vec<u8>,
    spans: Vec<(usize, usize)>,
}

impl Scratch {
    /// Serializes `value` and cuts it at each placeholder, which must be `holes` in
    /// number and kind, in the order serde_json meets them. `None` when they are not,
    /// or the value does not serialize: the caller then writes the value whole.
    pub(crate) fn cut(
        &mut self,
        value: &impl Serialize,
        holes: impl IntoIterator<Item = Hole>,
    ) -> Option<Cut<'_>> {
        self.json.clear();
        self.spans.clear();
        serde_json::to_writer(&mut self.json, value).ok()?;
        let json = &self.json[..];
        let token = &PLACEHOLDER.escaped[..];
        let mut from = 0;
        for hole in holes {
            let at = from + find(&json[from..], token)?;
            let end = at + token.len();
            let (before, after) = hole.around();
            let start = at.checked_sub(before.len())?;
            if start < from || &json[start..at] != before || !json[end..].starts_with(after) {
                return None;
            }
            self.spans.push((start, end + after.len()));
            from = end + after.len();
        }
        if find(&json[from..], token).is_some() {
            return None; // a placeholder where none was put: some string holds one
        }
        Some(Cut {
            json,
            spans: &self.spans,
        })
    }
}

/// A serialized value cut at its holes: `json[..spans[0].0]`, the content of hole 0,
/// `json[spans[0].1..spans[1].0]`, and so on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cut<'a> {
    json: &'a [u8],
    spans: &'a [(usize, usize)],
}

impl Cut<'_> {
    /// Writes the value with `fill(i, out)` writing hole `i`'s content.
    pub(crate) fn write<W: Write + ?Sized>(
        &self,
        out: &mut W,
        mut fill: impl FnMut(usize, &mut W) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut from = 0;
        for (i, &(start, end)) in self.spans.iter().enumerate() {
            out.write_all(&self.json[from..start])?;
            fill(i, out)?;
            from = end;
        }
        out.write_all(&self.json[from..])
    }

    /// The text before the first hole and after the last: the opening and closing of a
    /// document whose one hole is where its entries go.
    pub(crate) fn ends(&self) -> (&[u8], &[u8]) {
        let first = self.spans.first().map_or(self.json.len(), |s| s.0);
        let last = self.spans.last().map_or(self.json.len(), |s| s.1);
        (&self.json[..first], &self.json[last..])
    }
}

/// A [`Cut`] of its own, kept beside what it was made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shell {
    json: Box<[u8]>,
    spans: Box<[(usize, usize)]>,
}

impl Shell {
    /// [`Scratch::cut`] into a shell of its own.
    pub(crate) fn cut(value: &impl Serialize, holes: &[Hole]) -> Option<Shell> {
        let mut scratch = Scratch::default();
        let cut = scratch.cut(value, holes.iter().copied())?;
        Some(Shell {
            json: cut.json.into(),
            spans: cut.spans.into(),
        })
    }

    pub(crate) fn write<W: Write + ?Sized>(
        &self,
        out: &mut W,
        fill: impl FnMut(usize, &mut W) -> io::Result<()>,
    ) -> io::Result<()> {
        Cut {
            json: &self.json,
            spans: &self.spans,
        }
        .write(out, fill)
    }
}

/// Counts, in tests, the values written whole because no shell could be cut, so a
/// test can tell the spliced path from the fallback (both write the same bytes).
pub(crate) fn written_whole() {
    #[cfg(test)]
    WRITTEN_WHOLE.with(|n| n.set(n.get() + 1));
}

#[cfg(test)]
thread_local! {
    pub(crate) static WRITTEN_WHOLE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A base64 text as the JSON string serde_json writes for it: standard base64 and its
/// padding need no escaping, so the text goes out as it is.
pub(crate) fn base64_string<W: Write + ?Sized>(out: &mut W, b64: &str) -> io::Result<()> {
    debug_assert!(is_base64(b64));
    out.write_all(b"\"")?;
    out.write_all(b64.as_bytes())?;
    out.write_all(b"\"")
}

/// Base64 inside a longer JSON string (a `data:` URL), as it is, for the same reason.
pub(crate) fn base64_chars<W: Write + ?Sized>(out: &mut W, b64: &str) -> io::Result<()> {
    debug_assert!(is_base64(b64));
    out.write_all(b64.as_bytes())
}

/// A text as a JSON string, through serde_json's own escaping.
pub(crate) fn text_string<W: Write + ?Sized>(out: &mut W, text: &str) -> io::Result<()> {
    serde_json::to_writer(out, text).map_err(io::Error::from)
}

fn is_base64(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
}

/// Where `needle` first starts in `haystack`. Shells are small (a block's few hundred
/// bytes, a message's texts), so a plain scan does.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Sample {
        a: String,
        url: String,
        b: String,
        block: ContentBlock,
    }

    fn sample(a: &str) -> Sample {
        Sample {
            a: a.to_owned(),
            url: format!("data:x;base64,{}", placeholder()),
            b: placeholder(),
            block: placeholder_block().clone(),
        }
    }

    #[test]
    fn a_shell_spliced_is_the_value_serialized_with_its_content() {
        let shell = Shell::cut(
            &sample("\"é\u{7}"),
            &[Hole::InString, Hole::String, Hole::block()],
        )
        .expect("three holes");
        let mut out = Vec::new();
        shell
            .write(&mut out, |i, out| match i {
                0 => base64_chars(out, "QUJD"),
                1 => text_string(out, "line\n\"two\""),
                _ => out.write_all(b"{\"type\":\"text\",\"text\":\"t\"}"),
            })
            .unwrap();
        let want = Sample {
            a: "\"é\u{7}".into(),
            url: "data:x;base64,QUJD".into(),
            b: "line\n\"two\"".into(),
            block: ContentBlock::Text(TextContent::new("t")),
        };
        assert_eq!(out, serde_json::to_vec(&want).unwrap());
    }

    /// A placeholder the builder did not put, a missing one, or one in another place
    /// than expected makes no shell, so the caller writes the value whole.
    #[test]
    fn a_placeholder_out_of_place_makes_no_shell() {
        let holes = [Hole::InString, Hole::String, Hole::block()];
        assert!(
            Shell::cut(&sample(&placeholder()), &holes).is_none(),
            "one too many"
        );
        assert!(
            Shell::cut(&sample("a"), &holes[..2]).is_none(),
            "one left over"
        );
        assert!(Shell::cut(&sample("a"), &[Hole::String, Hole::String, Hole::block()]).is_none());
        assert!(
            Shell::cut(
                &sample("a"),
                &[Hole::InString, Hole::block(), Hole::block()]
            )
            .is_none()
        );
        let holes4 = [Hole::InString, Hole::String, Hole::block(), Hole::String];
        assert!(Shell::cut(&sample("a"), &holes4).is_none(), "one missing");
    }
}
