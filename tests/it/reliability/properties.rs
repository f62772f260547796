//! Property tests for the pure edges hostile input reaches first: the URI parser, the
//! name sanitizer and the context encoder. `PROPTEST_CASES` makes them long; they
//! never touch a file.

use proptest::prelude::*;
use sessionstore::SessionId;
use sessionstore::attachments::{AttachmentUri, sanitize_name};
use sessionstore::dispatch::json_escaped;

fn session() -> SessionId {
    "01a22b1d-b6fa-778b-a534-d674f3630de8".parse().unwrap()
}

proptest! {
    #[test]
    fn uri_parse_never_panics_and_accepts_only_canonical_text(s in "(attachment:///01a22b1d-b6fa-778b-a534-d674f3630de8/)?(\\PC|%[0-9a-fA-F]{2}|[/.?#\\\\])*") {
        if let Ok(uri) = AttachmentUri::parse(&s) {
            prop_assert_eq!(uri.to_string(), s.clone(), "accepted text is exactly what the store makes");
            prop_assert_eq!(sanitize_name(uri.name()), uri.name().to_owned());
        }
    }

    #[test]
    fn every_upload_name_round_trips_through_its_uri(upload in any::<String>()) {
        let name = sanitize_name(&upload);
        prop_assert_eq!(sanitize_name(&name), name.clone());
        let uri = AttachmentUri::new(session(), &name);
        let back = AttachmentUri::parse(&uri.to_string()).unwrap();
        prop_assert_eq!(back.name(), name.as_str());
        prop_assert_eq!(back, uri);
    }

    #[test]
    fn the_context_encoder_round_trips_and_hides_nothing(s in any::<String>()) {
        let escaped = json_escaped(&s);
        let back: String = serde_json::from_str(&escaped).unwrap();
        prop_assert_eq!(back, s);
        let hidden = ['\n', '\r', '\u{202e}', '\u{200b}', '\u{2028}'];
        prop_assert!(!escaped.contains(hidden), "a hidden character in {:?}", escaped);
        prop_assert!(!escaped.chars().any(char::is_control));
    }
}
