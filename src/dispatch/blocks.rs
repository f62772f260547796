//! Parts (`Part`, `Attached`, `ModelMessage`) and the one builder of the ACP content
//! block each stands for (`block_of`): a library caller gets the block whole, and the
//! writers in `format` serialize that same builder's block with a placeholder for its
//! large field and write the field from its shared buffer (`Part::write_json`), so a
//! typed block and a written one cannot differ. Pure: no IO, and no path but the one
//! the read reported.

use std::io::{self, Write};
use std::sync::{Arc, LazyLock};

use agent_client_protocol_schema::v1::{
    BlobResourceContents, ContentBlock, EmbeddedResource, EmbeddedResourceResource, ImageContent,
    Meta, ResourceLink, TextContent, TextResourceContents,
};

use super::shell::{self, Hole, Shell};
use super::{Content, Context, DAEMON_ATTACHMENT_CONTEXT_META_KEY, Prepared, SharedStr};
use crate::model::Message;

/// Which of the three attachment blocks a read becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Image,
    Text,
    Blob,
}

impl Kind {
    fn of(content: &Content) -> Kind {
        match content {
            Content::Image(_) => Kind::Image,
            Content::Text(_) => Kind::Text,
            Content::Blob(_) => Kind::Blob,
        }
    }
}

/// The one builder of an attachment's block: an image block, or an embedded text or
/// blob resource, with the read's MIME type and URI and the path context under
/// [`DAEMON_ATTACHMENT_CONTEXT_META_KEY`] (beside the client block's own `_meta`, if
/// the prompt it came in had one). `data` is the large field: the base64 of an image or
/// blob, or a text file's contents (or the writers' placeholder).
fn block_of(
    kind: Kind,
    mime: &str,
    uri: &str,
    context: &str,
    client: Option<&Meta>,
    data: String,
) -> ContentBlock {
    let mut meta = client.cloned().unwrap_or_default();
    meta.insert(
        DAEMON_ATTACHMENT_CONTEXT_META_KEY.to_owned(),
        serde_json::Value::String(context.to_owned()),
    );
    let meta = Some(meta);
    let uri = uri.to_owned();
    match kind {
        Kind::Image => {
            let mut image = ImageContent::new(data, mime.to_owned());
            image.uri = Some(uri);
            image.meta = meta;
            ContentBlock::Image(image)
        }
        Kind::Text => {
            let mut contents = TextResourceContents::new(data, uri);
            contents.mime_type = Some(mime.to_owned());
            let mut resource =
                EmbeddedResource::new(EmbeddedResourceResource::TextResourceContents(contents));
            resource.meta = meta;
            ContentBlock::Resource(resource)
        }
        Kind::Blob => {
            let mut contents = BlobResourceContents::new(data, uri);
            contents.mime_type = Some(mime.to_owned());
            let mut resource =
                EmbeddedResource::new(EmbeddedResourceResource::BlobResourceContents(contents));
            resource.meta = meta;
            ContentBlock::Resource(resource)
        }
    }
}

/// [`block_of`] for the read `p`, with `data` as its large field.
fn block_from(p: &Prepared, context: &str, client: Option<&Meta>, data: String) -> ContentBlock {
    block_of(
        Kind::of(&p.content),
        &p.mime,
        p.uri_text(),
        context,
        client,
        data,
    )
}

/// A `resource_link` to the file an attachment was read from, for an agent that takes
/// no embedded resources: named by its stored name, with its MIME type and size, its
/// URI the `file://` URL of the path of the read (percent-encoded), and the read's
/// path context under [`DAEMON_ATTACHMENT_CONTEXT_META_KEY`], as its block would
/// carry it. The agent's tools open the file there.
pub fn live_link(a: &Attached) -> ContentBlock {
    let p = &a.prepared;
    let mut meta = a.meta.clone().unwrap_or_default();
    meta.insert(
        DAEMON_ATTACHMENT_CONTEXT_META_KEY.to_owned(),
        serde_json::Value::String(a.context.as_str().to_owned()),
    );
    let mut link = ResourceLink::new(p.name.clone(), file_url(&p.path));
    link.mime_type = Some(p.mime.clone());
    link.size = i64::try_from(p.content.source_len()).ok();
    link.meta = Some(meta);
    ContentBlock::ResourceLink(link)
}

/// `file://` and the path, every byte but unreserved ones and `/` percent-encoded.
fn file_url(path: &std::path::Path) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    const KEPT: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'/')
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    format!(
        "file://{}",
        utf8_percent_encode(&path.to_string_lossy(), KEPT)
    )
}

/// The shell of a text block: what serde_json writes for `{"type":"text","text"}`
/// around the text.
static TEXT_SHELL: LazyLock<Option<Shell>> = LazyLock::new(|| {
    let block = ContentBlock::Text(TextContent::new(shell::placeholder()));
    Shell::cut(&block, &[Hole::String])
});

/// One piece of what the model gets for a message, before it is written anywhere: a
/// text, or an attachment as its shared encoding plus its context string. An encoding
/// made once is held here by `Arc`, never copied, so a writer can put it on the output
/// straight from the memo's buffer.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// The model text, a transcript, a degradation notice, or an assistant's words.
    Text(String),
    Attachment(Attached),
    /// A block of the client's own that a stored prompt kept as sent (a
    /// `resource_link`, a `file://` resource, a text with its own `_meta`).
    Verbatim(Box<ContentBlock>),
}

/// An attachment as dispatched: the read (with its encoding), the path context
/// written from that read, and the `_meta` the client's own block had, if any.
#[derive(Debug, Clone)]
pub struct Attached {
    pub prepared: Arc<Prepared>,
    pub context: Context,
    pub meta: Option<Meta>,
}

impl PartialEq for Attached {
    fn eq(&self, other: &Attached) -> bool {
        self.context == other.context
            && self.meta == other.meta
            && self.prepared.same_as(&other.prepared)
    }
}

impl Attached {
    /// The block's shell: the one made for this read and its first context, kept
    /// beside it (`Prepared::shell`), or a new one for any other context.
    fn with_shell<T>(&self, write: impl FnOnce(Option<&Shell>) -> T) -> T {
        let p = &self.prepared;
        let cut = || {
            let block = block_from(p, &self.context, self.meta.as_ref(), shell::placeholder());
            Shell::cut(&block, &[Hole::String])
        };
        // A client block's own `_meta` makes a shell of its own (prompts from a proxy
        // are few, and their `_meta` differs from block to block).
        if self.meta.is_some() {
            return write(cut().as_ref());
        }
        let (context, kept) = p.shell.get_or_init(|| (self.context.clone(), cut()));
        if Context::ptr_eq(context, &self.context) {
            write(kept.as_ref())
        } else {
            write(cut().as_ref())
        }
    }

    fn to_block(&self) -> ContentBlock {
        let data = self.prepared.content.text().to_string_exact();
        block_from(&self.prepared, &self.context, self.meta.as_ref(), data)
    }
}

impl Part {
    /// The ACP block this part stands for. This copies the encoding into the block
    /// (the schema types own their strings), once, into a string of exactly its size;
    /// the writers in `format` never call it.
    pub fn to_block(&self) -> ContentBlock {
        match self {
            Part::Text(text) => ContentBlock::Text(TextContent::new(text.clone())),
            Part::Attachment(a) => a.to_block(),
            Part::Verbatim(block) => (**block).clone(),
        }
    }

    /// [`Part::to_block`], moving the encoding into the block instead of copying it
    /// when this part is the last holder of its read (no other part, and no memo,
    /// keeps it).
    pub fn into_block(self) -> ContentBlock {
        let a = match self {
            Part::Text(text) => return ContentBlock::Text(TextContent::new(text)),
            Part::Verbatim(block) => return *block,
            Part::Attachment(a) => a,
        };
        let Attached {
            prepared,
            context,
            meta,
        } = a;
        match Arc::try_unwrap(prepared) {
            Ok(p) => {
                let kind = Kind::of(&p.content);
                let Prepared {
                    mime,
                    uri_text,
                    content,
                    ..
                } = p;
                block_of(
                    kind,
                    &mime,
                    &uri_text,
                    &context,
                    meta.as_ref(),
                    content.into_text(),
                )
            }
            Err(shared) => Attached {
                prepared: shared,
                context,
                meta,
            }
            .to_block(),
        }
    }

    /// Writes the JSON of [`Part::to_block`]'s block, byte for byte what serde_json
    /// writes for it, without building it: the block's shell from the one builder,
    /// with the encoding written from its shared buffer (base64 as it is, text through
    /// serde_json's string escaping).
    pub(crate) fn write_json<W: Write + ?Sized>(&self, out: &mut W) -> io::Result<()> {
        match self {
            Part::Text(text) => match &*TEXT_SHELL {
                Some(shell) => shell.write(out, |_, out| shell::text_string(out, text)),
                None => write_value(out, &self.to_block()),
            },
            Part::Attachment(a) => a.with_shell(|kept| match kept {
                Some(shell) => shell.write(out, |_, out| match &a.prepared.content {
                    Content::Image(b64) | Content::Blob(b64) => shell::base64_string(out, b64),
                    Content::Text(text) => shell::text_string(out, text),
                }),
                None => write_value(out, &a.to_block()),
            }),
            // Written whole: it is the client's, small, and has no shared encoding.
            Part::Verbatim(block) => serde_json::to_writer(out, block).map_err(io::Error::from),
        }
    }
}

fn write_value<W: Write + ?Sized>(out: &mut W, value: &impl serde::Serialize) -> io::Result<()> {
    shell::written_whole();
    serde_json::to_writer(out, value).map_err(io::Error::from)
}

impl SharedStr {
    /// The text in a `String` of exactly its length: one allocation and one copy
    /// (`to_string` would go through the formatter and grow its buffer as it writes).
    pub fn to_string_exact(&self) -> String {
        String::from(&**self)
    }
}

/// One message and what the model gets for it, as parts that share their encodings.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelMessage {
    pub message: Message,
    pub parts: Vec<Part>,
}

impl ModelMessage {
    /// The parts as ACP blocks, each one owning a copy of its encoding.
    pub fn to_blocks(&self) -> Vec<ContentBlock> {
        self.parts.iter().map(Part::to_block).collect()
    }

    /// The parts as ACP blocks, each encoding moved into its last block when nothing
    /// else (a memo, another message) keeps its read, and copied otherwise.
    pub fn into_blocks(self) -> Vec<ContentBlock> {
        self.parts.into_iter().map(Part::into_block).collect()
    }
}
