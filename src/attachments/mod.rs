//! Attachments on disk: stored names, attachment URIs, MIME types, and the one place
//! that reads and writes attachment files; it never touches the database and never
//! builds a path from a default root (a path always comes from the read that succeeded).

mod disk;
mod gc;
mod mime;
mod name;
mod roots;
mod uri;

use std::path::PathBuf;

use crate::ids::SessionId;
pub(crate) use gc::FileKind;

pub use mime::{SNIFF_BYTES, mime_for, mime_from_head};
pub use name::{MAX_NAME_BYTES, numbered_name, sanitize_name};
// The read observer is a test hook: public only with the `testkit` feature.
#[cfg(not(feature = "testkit"))]
pub(crate) use roots::ReadObserver;
#[cfg(feature = "testkit")]
pub use roots::ReadObserver;
pub use roots::{
    AttachmentStore, Checked, Download, Listed, Resolved, RootKind, Roots, SessionDirs,
    StoredAttachment, Swept, UPLOAD_GRACE,
};
pub use uri::{AttachmentUri, UriError, UriErrorKind};

/// The largest attachment, in bytes, that is stored or read (64 MiB). Every read holds
/// the whole file in memory, and dispatch encodes it again for the model, so without a
/// bound one planted or runaway file could take the daemon's memory with it.
pub const MAX_ATTACHMENT_BYTES: u64 = 64 * 1024 * 1024;

/// Why an attachment could not be stored or read. Every message is one lowercase line
/// naming the URI (or upload name), and the path involved when there is one.
#[derive(Debug, thiserror::Error)]
pub enum AttachmentError {
    /// The file is in none of the roots; `tried` holds each path looked at, in order.
    #[error("attachment {uri} not found; tried {}", join_paths(tried))]
    NotFound {
        uri: AttachmentUri,
        tried: Vec<PathBuf>,
    },
    /// The reference or what it points at must not be read: an unsafe name, a
    /// symlink, something that is not a regular file, or another session's URI.
    #[error("attachment {uri} refused: {reason}")]
    Refused { uri: AttachmentUri, reason: String },
    /// The file is larger than the limit; `size` is as much of it as was seen, which
    /// for a file that grew while it was read is at least `limit + 1`.
    #[error("attachment {uri} is {}", over_limit(*size, *limit))]
    TooLarge {
        uri: AttachmentUri,
        size: u64,
        limit: u64,
    },
    #[error("cannot read attachment {uri} at {path:?}: {cause}")]
    Io {
        uri: AttachmentUri,
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("cannot store attachment {name:?} at {path:?}: {cause}")]
    Store {
        name: String,
        path: PathBuf,
        cause: std::io::Error,
    },
    /// A session folder could not be listed.
    #[error("cannot list the attachments of session {session} in {path:?}: {cause}")]
    List {
        session: SessionId,
        path: PathBuf,
        cause: std::io::Error,
    },
    /// An upload larger than the limit, refused before anything was written.
    #[error("cannot store attachment {name:?}: it is {}", over_limit(*size, *limit))]
    UploadTooLarge { name: String, size: u64, limit: u64 },
}

impl AttachmentError {
    /// The URI the error is about; `None` for a failed upload, which has no URI yet.
    pub fn uri(&self) -> Option<&AttachmentUri> {
        match self {
            Self::NotFound { uri, .. }
            | Self::Refused { uri, .. }
            | Self::TooLarge { uri, .. }
            | Self::Io { uri, .. } => Some(uri),
            Self::Store { .. } | Self::UploadTooLarge { .. } | Self::List { .. } => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    /// A stable snake_case name for the condition (see `Error::kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NotFound { .. } => "attachment_not_found",
            Self::Refused { .. } => "attachment_refused",
            Self::TooLarge { .. } => "attachment_too_large",
            Self::Io { .. } => "attachment_io",
            Self::Store { .. } => "attachment_store",
            Self::UploadTooLarge { .. } => "upload_too_large",
            Self::List { .. } => "attachment_list",
        }
    }

    /// Whether the reference or its file must not be read at all (an unsafe name, a
    /// symlink, not a regular file), as opposed to being missing or failing to read.
    pub fn is_refused(&self) -> bool {
        matches!(self, Self::Refused { .. })
    }
}

/// Paths are printed `Debug`-quoted so a newline in a root cannot split the message.
fn join_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "no roots".to_owned();
    }
    paths
        .iter()
        .map(|p| format!("{p:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A size for people: bytes below 1 KiB, else KiB, MiB or GiB with one decimal when
/// it is not a whole number (`65 MiB`, `1.5 KiB`, `512 bytes`).
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 3] = ["KiB", "MiB", "GiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `65 MiB, over the 64 MiB limit`; when rounding would make the two look equal, the
/// size is given in bytes.
pub fn over_limit(size: u64, limit: u64) -> String {
    let (shown, cap) = (human_size(size), human_size(limit));
    let shown = if shown == cap || shown.replace(".0 ", " ") == cap {
        format!("{size} bytes")
    } else {
        shown
    };
    format!("{shown}, over the {cap} limit")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_size(0), "0 bytes");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(64 * 1024 * 1024), "64 MiB");
        assert_eq!(human_size(3 * 1024 * 1024 * 1024), "3 GiB");
        assert_eq!(
            over_limit(68_157_440, MAX_ATTACHMENT_BYTES),
            "65 MiB, over the 64 MiB limit"
        );
        assert_eq!(
            over_limit(MAX_ATTACHMENT_BYTES + 1, MAX_ATTACHMENT_BYTES),
            "67108865 bytes, over the 64 MiB limit"
        );
    }
}
