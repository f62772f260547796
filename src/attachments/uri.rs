//! Attachment URIs: `attachment:///<session-id>/<percent-encoded stored name>`, printed
//! and parsed in exactly one spelling; pure string work that never touches the disk.

use std::fmt;
use std::str::FromStr;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::name::{is_stored_name, is_unreserved, sanitize_name};
use crate::ids::SessionId;

const PREFIX: &str = "attachment:///";

/// Everything but RFC 3986 unreserved characters (`A-Z a-z 0-9 - . _ ~`) is encoded.
const ENCODED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A reference to one stored attachment: its session and its stored name.
///
/// A parsed URI always names something the store could have written: its name is a
/// fixed point of [`sanitize_name`], so it is a single, normal path component.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttachmentUri {
    session: SessionId,
    name: String,
}

/// Why a string is not an attachment URI.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid attachment uri {input:?}: {kind}{}", canonical.as_ref().map(|c| format!("; the canonical form is {c}")).unwrap_or_default())]
pub struct UriError {
    pub input: String,
    pub kind: UriErrorKind,
    /// The one spelling of what `input` seems to mean, when it names a file the store
    /// could have written in a different spelling (a raw space or accent, lower-case
    /// escapes, an upper-case session id).
    pub canonical: Option<String>,
}

/// The specific way a URI is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UriErrorKind {
    #[error("expected the attachment scheme")]
    Scheme,
    #[error("an attachment uri has no host")]
    Host,
    #[error("expected attachment:///<session-id>/<name>")]
    Shape,
    #[error("{0}")]
    Session(crate::ids::IdError),
    #[error("bad percent escape")]
    PercentEscape,
    #[error("name is not utf-8")]
    Utf8,
    #[error("name contains an encoded path separator")]
    Separator,
    #[error("name contains nul")]
    Nul,
    #[error("name is empty, \".\" or \"..\"")]
    DotOrEmpty,
    #[error("name is not in canonical percent-encoded form")]
    NotCanonical,
    #[error("name is not one the store could have written")]
    NotAStoredName,
}

impl AttachmentUri {
    /// A URI for `stored_name` in `session`. Meant for names the store wrote; a name
    /// that is not a stored name prints a URI that [`AttachmentUri::parse`] refuses,
    /// and reading it is refused too.
    pub fn new(session: SessionId, stored_name: &str) -> Self {
        Self {
            session,
            name: stored_name.to_owned(),
        }
    }

    pub fn session(&self) -> SessionId {
        self.session
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Parses the one spelling [`fmt::Display`] produces, and nothing else.
    pub fn parse(s: &str) -> Result<Self, UriError> {
        let err = |kind| UriError {
            input: s.to_owned(),
            canonical: match kind {
                UriErrorKind::NotCanonical | UriErrorKind::Session(_) => canonical_spelling(s),
                _ => None,
            },
            kind,
        };
        let Some(rest) = s.strip_prefix(PREFIX) else {
            return Err(err(if s.starts_with("attachment://") {
                UriErrorKind::Host
            } else if s.starts_with("attachment:") {
                UriErrorKind::Shape
            } else {
                UriErrorKind::Scheme
            }));
        };
        let (session, encoded) = rest
            .split_once('/')
            .ok_or_else(|| err(UriErrorKind::Shape))?;
        if encoded.contains('/') {
            return Err(err(UriErrorKind::Shape));
        }
        let session = session
            .parse::<SessionId>()
            .map_err(|e| err(UriErrorKind::Session(e)))?;
        // A segment of unreserved characters only is its own decoding and its own
        // canonical encoding, so the decode and re-encode (two allocations and a
        // comparison, thousands of times per restore) can be skipped for it.
        let name = if encoded.bytes().all(is_unreserved) {
            if encoded.is_empty() || encoded == "." || encoded == ".." {
                return Err(err(UriErrorKind::DotOrEmpty));
            }
            encoded.to_owned()
        } else {
            let name = decode_name(encoded).map_err(err)?;
            if encode_name(&name) != encoded {
                return Err(err(UriErrorKind::NotCanonical));
            }
            name
        };
        if !is_stored_name(&name) {
            return Err(err(UriErrorKind::NotAStoredName));
        }
        Ok(Self { session, name })
    }
}

/// What a refused URI would be in the one spelling the store prints, if it names a
/// stored name in some session: the session id lower-cased, the name decoded and
/// encoded again. `None` when it is more than a matter of spelling.
fn canonical_spelling(s: &str) -> Option<String> {
    let (session, encoded) = s.strip_prefix(PREFIX)?.split_once('/')?;
    let session = session.to_ascii_lowercase().parse::<SessionId>().ok()?;
    let name = decode_name(encoded).ok()?;
    if sanitize_name(&name) != name {
        return None;
    }
    let canonical = AttachmentUri { session, name }.to_string();
    (canonical != s).then_some(canonical)
}

/// Decodes a name segment, refusing what could escape a session folder.
fn decode_name(encoded: &str) -> Result<String, UriErrorKind> {
    let bytes = encoded.as_bytes();
    for (i, _) in encoded.match_indices('%') {
        let hex = bytes.get(i + 1..i + 3).ok_or(UriErrorKind::PercentEscape)?;
        if !hex.iter().all(u8::is_ascii_hexdigit) {
            return Err(UriErrorKind::PercentEscape);
        }
    }
    let name = percent_decode_str(encoded)
        .decode_utf8()
        .map_err(|_| UriErrorKind::Utf8)?;
    if name.contains(['/', '\\']) {
        return Err(UriErrorKind::Separator);
    }
    if name.contains('\0') {
        return Err(UriErrorKind::Nul);
    }
    if name.is_empty() || name == "." || name == ".." {
        return Err(UriErrorKind::DotOrEmpty);
    }
    Ok(name.into_owned())
}

fn encode_name(name: &str) -> String {
    utf8_percent_encode(name, ENCODED).to_string()
}

impl fmt::Display for AttachmentUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Written piece by piece, and a name of unreserved characters as it is: a send
        // prints each of its URIs twice (the row and the event), a restore thousands.
        f.write_str(PREFIX)?;
        let mut id = uuid::Uuid::encode_buffer();
        f.write_str(self.session.as_uuid().hyphenated().encode_lower(&mut id))?;
        f.write_str("/")?;
        if self.name.bytes().all(is_unreserved) {
            f.write_str(&self.name)
        } else {
            fmt::Display::fmt(&utf8_percent_encode(&self.name, ENCODED), f)
        }
    }
}

impl FromStr for AttachmentUri {
    type Err = UriError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for AttachmentUri {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for AttachmentUri {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::{Component, Path};

    fn sid() -> SessionId {
        "01890a5d-ac96-774b-bcce-b302099a8057".parse().unwrap()
    }

    fn check_refused(s: &str, kind: UriErrorKind) {
        let e = AttachmentUri::parse(s).expect_err(s);
        assert_eq!(e.kind, kind, "{s}");
        let msg = e.to_string();
        assert!(!msg.contains('\n'), "{msg}");
        assert!(msg.starts_with("invalid attachment uri"), "{msg}");
    }

    #[test]
    fn a_misspelled_uri_is_refused_with_its_canonical_form() {
        let s = sid();
        for given in [
            format!("attachment:///{s}/caf\u{e9} chart.png"),
            format!("attachment:///{s}/caf%c3%a9%20chart.png"),
            format!(
                "attachment:///{}/caf%C3%A9%20chart.png",
                s.to_string().to_uppercase()
            ),
        ] {
            let e = AttachmentUri::parse(&given).expect_err(&given);
            let want = format!("attachment:///{s}/caf%C3%A9%20chart.png");
            assert_eq!(e.canonical.as_deref(), Some(want.as_str()), "{given}");
            assert!(
                e.to_string()
                    .ends_with(&format!("the canonical form is {want}"))
            );
        }
        let e = AttachmentUri::parse(&format!("attachment:///{s}/..%2Fx")).unwrap_err();
        assert_eq!(e.canonical, None, "an unsafe name has no canonical form");
    }

    #[test]
    fn display_encodes_all_but_unreserved() {
        let uri = AttachmentUri::new(sid(), "my file (1).txt");
        assert_eq!(
            uri.to_string(),
            format!("attachment:///{}/my%20file%20%281%29.txt", sid())
        );
        let uri = AttachmentUri::new(sid(), "café~_-.md");
        assert_eq!(
            uri.to_string(),
            format!("attachment:///{}/caf%C3%A9~_-.md", sid())
        );
        assert_eq!(AttachmentUri::parse(&uri.to_string()).unwrap(), uri);
    }

    #[test]
    fn unsafe_uris_are_refused() {
        use UriErrorKind::*;
        let s = sid();
        check_refused(&format!("attachment:///{s}/.."), DotOrEmpty);
        check_refused(&format!("attachment:///{s}/."), DotOrEmpty);
        check_refused(&format!("attachment:///{s}/"), DotOrEmpty);
        check_refused(&format!("attachment:///{s}/%2E%2E"), DotOrEmpty);
        check_refused(&format!("attachment:///{s}/..%2Fetc%2Fpasswd"), Separator);
        check_refused(&format!("attachment:///{s}/a%2Fb"), Separator);
        check_refused(&format!("attachment:///{s}/a%5Cb"), Separator);
        check_refused(&format!("attachment:///{s}/a%00b"), Nul);
        check_refused(&format!("attachment://host/{s}/a.txt"), Host);
        check_refused(&format!("attachment://{s}/a.txt"), Host);
        check_refused(&format!("file:///{s}/a.txt"), Scheme);
        check_refused(&format!("ATTACHMENT:///{s}/a.txt"), Scheme);
        check_refused(&format!("attachment:/{s}/a.txt"), Shape);
        check_refused(&format!("attachment:///{s}/x/a.txt"), Shape);
        check_refused(&format!("attachment:///{s}/../a.txt"), Shape);
        check_refused(&format!("attachment:///{s}"), Shape);
        check_refused(&format!("attachment:///{s}/a%c3%a9.txt"), NotCanonical);
        check_refused(&format!("attachment:///{s}/%61.txt"), NotCanonical);
        check_refused(&format!("attachment:///{s}/a b.txt"), NotCanonical);
        check_refused(&format!("attachment:///{s}/a.txt?x=1"), NotCanonical);
        check_refused(&format!("attachment:///{s}/a.txt#frag"), NotCanonical);
        check_refused(&format!("attachment:///{s}/a%2"), PercentEscape);
        check_refused(&format!("attachment:///{s}/a%zz"), PercentEscape);
        check_refused(&format!("attachment:///{s}/%FF"), Utf8);
        check_refused(&format!("attachment:///{s}/a%0A"), NotAStoredName);
        check_refused(&format!("attachment:///{s}/a."), NotAStoredName);
        check_refused(&format!("attachment:///{s}/%20a"), NotAStoredName);
        check_refused(&format!("attachment:///{s}/cafe%CC%81"), NotAStoredName);
        let upper = s.to_string().to_uppercase();
        assert!(matches!(
            AttachmentUri::parse(&format!("attachment:///{upper}/a.txt"))
                .unwrap_err()
                .kind,
            Session(_)
        ));
        assert!(matches!(
            AttachmentUri::parse("attachment:///../a.txt")
                .unwrap_err()
                .kind,
            Session(_)
        ));
    }

    #[test]
    fn serde_uses_the_string_form() {
        let uri = AttachmentUri::new(sid(), "a b.txt");
        let json = serde_json::to_string(&uri).unwrap();
        assert_eq!(json, format!("\"attachment:///{}/a%20b.txt\"", sid()));
        let back: AttachmentUri = serde_json::from_str(&json).unwrap();
        assert_eq!(back, uri);
        assert!(serde_json::from_str::<AttachmentUri>("\"attachment:///x/..\"").is_err());
    }

    /// The shortcut for unreserved-only names must agree with the full decode and
    /// re-encode on every input, refusals included.
    fn parse_the_long_way(s: &str) -> Result<AttachmentUri, UriErrorKind> {
        let rest = s.strip_prefix(PREFIX).ok_or(UriErrorKind::Scheme)?;
        let (session, encoded) = rest.split_once('/').ok_or(UriErrorKind::Shape)?;
        if encoded.contains('/') {
            return Err(UriErrorKind::Shape);
        }
        let session = session
            .parse::<SessionId>()
            .map_err(UriErrorKind::Session)?;
        let name = decode_name(encoded)?;
        if encode_name(&name) != encoded {
            return Err(UriErrorKind::NotCanonical);
        }
        if sanitize_name(&name) != name {
            return Err(UriErrorKind::NotAStoredName);
        }
        Ok(AttachmentUri { session, name })
    }

    #[test]
    fn unreserved_names_parse_as_the_long_way_does() {
        for tail in [
            "",
            ".",
            "..",
            "...",
            "a.",
            ".a",
            "a",
            "~",
            "_upload-x",
            "a-b_c.d~e",
        ] {
            let s = format!("attachment:///{}/{tail}", sid());
            assert_eq!(
                AttachmentUri::parse(&s).map_err(|e| e.kind),
                parse_the_long_way(&s),
                "{s}"
            );
        }
    }

    proptest! {
        #[test]
        fn parse_agrees_with_the_long_way(tail in "([a-zA-Z0-9._~ -]|%[0-9A-F]{2}){0,12}") {
            let s = format!("attachment:///{}/{tail}", sid());
            prop_assert_eq!(AttachmentUri::parse(&s).map_err(|e| e.kind), parse_the_long_way(&s));
        }

        #[test]
        fn parse_never_panics(s in any::<String>()) {
            let _ = AttachmentUri::parse(&s);
        }

        #[test]
        fn parse_never_panics_on_near_misses(tail in "[a-zA-Z0-9%./\\\\~ _-]{0,40}") {
            let _ = AttachmentUri::parse(&format!("attachment:///{}/{tail}", sid()));
        }

        #[test]
        fn stored_names_round_trip(upload in any::<String>()) {
            let name = sanitize_name(&upload);
            let uri = AttachmentUri::new(sid(), &name);
            let parsed = AttachmentUri::parse(&uri.to_string()).unwrap();
            prop_assert_eq!(parsed.name(), name.as_str());
            prop_assert_eq!(parsed.session(), sid());
        }

        #[test]
        fn parsed_names_stay_in_their_folder(tail in "([a-zA-Z0-9._~-]|%[0-9A-F]{2}){1,30}") {
            if let Ok(uri) = AttachmentUri::parse(&format!("attachment:///{}/{tail}", sid())) {
                let components: Vec<_> = Path::new(uri.name()).components().collect();
                prop_assert_eq!(components.len(), 1);
                prop_assert!(matches!(components[0], Component::Normal(_)));
                let folder = Path::new("/srv/att/session");
                let joined = folder.join(uri.name());
                prop_assert_eq!(joined.parent(), Some(folder));
            }
        }
    }
}
