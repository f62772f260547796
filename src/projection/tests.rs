//! Unit tests of the projection: the bounded set of parsed URIs.
use super::*;

/// Past its 16 latest, the set of parsed URIs forgets the oldest and parses it
/// again: every answer is the URI of the text asked about.
#[test]
fn parsed_uris_are_the_texts_own_whatever_was_forgotten() {
    let s = "01890a5d-ac96-774b-bcce-b302099a8057";
    let mut uris = Uris::default();
    let text = |i: usize| format!("attachment:///{s}/f{i}.bin");
    for round in 0..3 {
        for i in 0..40 {
            let uri = uris.parse(&text(i)).expect("a URI");
            assert_eq!(uri.name(), format!("f{i}.bin"), "round {round}");
        }
    }
    assert!(uris.recent.len() <= Uris::MOST);
    assert!(uris.parse(&format!("attachment:///{s}/..")).is_none());
}
