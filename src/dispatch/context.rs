//! The path context string of an attachment and the escaping of names and paths in
//! it (`json_escaped`, `hidden_escaped`), the degradation notice, and `Context`, the
//! shared form of one read's context. Pure: it formats what a read reported and never
//! builds a path itself.

use std::sync::Arc;

use super::{Placement, Prepared, Unreadable};
use crate::model::ToolsHost;

/// Escapes a string as JSON, and then also every control, invisible-format, bidi,
/// zero-width, tag and line-separator character as `\uXXXX`, so a name or path can
/// neither hide text nor reorder what the model reads. Printable Unicode stays.
pub fn json_escaped(s: &str) -> String {
    hidden_escaped(&serde_json::to_string(s).expect("a string always serializes"))
}

/// Every control, invisible-format, bidi, zero-width, tag and separator character of
/// `s` as `\\uXXXX` (UTF-16 units, as in JSON), the rest unchanged: how a message that
/// echoes a name, a path or a database's own text reaches a terminal without letting
/// it move the cursor, recolour the screen or reorder what is read.
pub fn hidden_escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if is_hidden(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Control characters (Cc), format characters (Cf: bidi controls, zero-width,
/// tags...) and the line and paragraph separators.
fn is_hidden(c: char) -> bool {
    let u = c as u32;
    c.is_control()
        || matches!(
            u,
            0x00AD
                | 0x0600..=0x0605
                | 0x061C
                | 0x06DD
                | 0x070F
                | 0x0890..=0x0891
                | 0x08E2
                | 0x115F..=0x1160
                | 0x17B4..=0x17B5
                | 0x180B..=0x180F
                | 0x200B..=0x200F
                | 0x2028..=0x202E
                | 0x2060..=0x206F
                | 0x3164
                | 0xFE00..=0xFE0F
                | 0xFEFF
                | 0xFFA0
                | 0xFFF0..=0xFFFB
                | 0x110BD
                | 0x110CD
                | 0x13430..=0x1343F
                | 0x1BCA0..=0x1BCA3
                | 0x1D173..=0x1D17A
                | 0xE0000..=0xE0FFF
        )
}

/// The plain-text context that rides in an attachment block's `_meta`: instructions,
/// then exactly one JSON line with the name, URI, MIME type, path and host. Nothing
/// from the file's contents is in it.
pub fn attachment_context(p: &Prepared, placement: &Placement) -> String {
    let json = format!(
        "{{\"name\":{},\"uri\":{},\"mimeType\":{},\"path\":{},\"host\":{}}}",
        json_escaped(&p.name),
        json_escaped(p.uri_text()),
        json_escaped(&p.mime),
        json_escaped(&p.path.to_string_lossy()),
        json_escaped(&placement.host),
    );
    let instruction = match placement.tools_host {
        ToolsHost::Local => {
            "This attachment is stored as a file on the daemon host. Tools running on the \
             daemon host can open it at the absolute path below."
        }
        ToolsHost::Ssh | ToolsHost::Managed => {
            "This attachment is stored as a file on the daemon host, not where this \
             session's tools run. The path below is on the daemon host; those tools may not \
             be able to reach it."
        }
    };
    format!("Attachment context.\n{instruction}\n{json}")
}

/// The short notice a degrading dispatch adds: names only, never paths.
pub fn degradation_notice(unreadable: &[Unreadable]) -> String {
    let mut names: Vec<String> = Vec::new();
    for u in unreadable {
        let n = json_escaped(&u.name);
        if !names.contains(&n) {
            names.push(n);
        }
    }
    format!(
        "[Some attachments could not be read and were left out: {}]",
        names.join(", ")
    )
}

/// The path context of one read, shared by every block made from that read (one
/// buffer, however many blocks repeat the reference).
#[derive(Clone)]
pub struct Context(Arc<str>);

impl Context {
    pub fn new(text: String) -> Context {
        Context(text.into())
    }

    /// Whether both are the one context (not merely equal text).
    pub fn ptr_eq(a: &Context, b: &Context) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for Context {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq for Context {
    fn eq(&self, other: &Context) -> bool {
        self.as_str() == other.as_str()
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl From<String> for Context {
    fn from(text: String) -> Context {
        Context::new(text)
    }
}
