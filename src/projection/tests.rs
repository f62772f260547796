//! Unit tests of the projection: the bounded set of parsed URIs, and folds of
//! hand-made event sequences.
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

/// The plain `message_appended` decoder must accept exactly what the tagged one
/// accepts, with the same result, and leave every refusal to it.
#[test]
fn message_appended_text_decodes_as_the_tagged_form_does() {
    let s = "01890a5d-ac96-774b-bcce-b302099a8057";
    let m = "01890a5d-ac96-774b-bcce-b302099a8058";
    let uri = format!("attachment:///{s}/a.png");
    let refs = format!(
        r#"[{{"ordinal":0,"uri":"{uri}","storedName":"a.png","mimeType":"image/png","size":3}}]"#
    );
    let payloads = [
        format!(
            r#"{{"kind":"message_appended","id":"{m}","seq":1,"role":"user","displayText":"hi","modelText":null,"transcript":"t","state":"queued","refs":{refs}}}"#
        ),
        format!(
            r#"{{"id":"{m}","seq":2,"kind":"message_appended","role":"assistant","displayText":"x","state":"delivered","refs":[],"extra":1}}"#
        ),
        format!(r#"{{"kind":"message_delivered","id":"{m}"}}"#),
        format!(
            r#"{{"kind":"message_appended","kind":"message_appended","id":"{m}","seq":1,"role":"user","displayText":"","state":"queued","refs":[]}}"#
        ),
        format!(
            r#"{{"kind":"message_appended","id":"{m}","seq":1.5,"role":"user","displayText":"","state":"queued","refs":[]}}"#
        ),
        format!(
            r#"{{"kind":"message_appended","id":"{m}","seq":1,"role":"user","displayText":"","state":"queued","refs":[{{"ordinal":0,"uri":"attachment:///{s}/..","storedName":"a","mimeType":"a/b","size":1}}]}}"#
        ),
        format!(r#"{{"kind":"message_appended","id":"{m}","seq":1}}"#),
        // The same URI twice, once written with JSON escapes (not borrowable), and
        // a percent-encoded name: parsed once, then found by its text.
        format!(
            r#"{{"kind":"message_appended","id":"{m}","seq":3,"role":"user","displayText":"again","state":"delivered","refs":[{{"ordinal":0,"uri":"{uri}","storedName":"a.png","mimeType":"image/png","size":3}},{{"ordinal":1,"uri":"attachment:\/\/\/{s}\/a.png","storedName":"a.png","mimeType":"image/png","size":3}},{{"ordinal":2,"uri":"attachment:///{s}/my%20notes.txt","storedName":"my notes.txt","mimeType":"text/plain","size":5}}]}}"#
        ),
    ];
    for text in payloads[..2].iter().chain(payloads.last()) {
        assert!(
            serde_json::from_str::<PlainAppended>(text).is_ok(),
            "{text}"
        );
    }
    let last = payloads.last().unwrap().as_str();
    let Ok(Decoded::Payload(EventPayload::MessageAppended { message })) =
        last.decode("message_appended", &mut Uris::default())
    else {
        panic!("{last} decodes");
    };
    assert_eq!(message.refs.len(), 3);
    assert_eq!(message.refs[0].uri, message.refs[1].uri);
    assert_eq!(message.refs[2].uri.name(), "my notes.txt");
    // One set of parsed URIs for every payload, as in a replay.
    let mut uris = Uris::default();
    for text in payloads {
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let tagged = value
            .decode("message_appended", &mut Uris::default())
            .map_err(|e| e.to_string());
        let plain = text
            .as_str()
            .decode("message_appended", &mut uris)
            .map(Decoded::split)
            .map_err(|e| e.to_string());
        let tagged = tagged.map(Decoded::split);
        let general = serde_json::from_str::<EventPayload>(&text)
            .map(|p| Decoded::from(p).split())
            .map_err(|e| e.to_string());
        assert_eq!(plain, general, "{text}");
        // A parsed `Value` keeps only the last of duplicate keys, so only what the
        // text decoders accept is compared with it.
        if let Ok(a) = &plain {
            assert_eq!(Ok(a), tagged.as_ref(), "{text}");
        }
    }
}

/// The plain `turn_recorded` decoder accepts what the tagged one accepts, with the
/// same result, and leaves every refusal to it.
#[test]
fn turn_recorded_text_decodes_as_the_tagged_form_does() {
    let i = "01890a5d-ac96-774b-bcce-b302099a8059";
    let chunk = r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}"#;
    let payloads = [
        format!(
            r#"{{"kind":"turn_recorded","updates":[{chunk}],"items":[{{"id":"{i}","seq":2}}]}}"#
        ),
        format!(
            r#"{{"items":[],"updates":[{chunk},{{"x":1}}],"kind":"turn_recorded","extra":[1]}}"#
        ),
        format!(r#"{{"kind":"turn_recorded","updates":[{chunk}]}}"#),
        format!(r#"{{"kind":"turn_recorded","updates":{chunk},"items":[]}}"#),
        r#"{"kind":"message_delivered","updates":[],"items":[]}"#.to_string(),
        r#"{"kind":"turn_recorded","kind":"turn_recorded","updates":[],"items":[]}"#.to_string(),
        format!(r#"{{"kind":"turn_recorded","updates":[],"items":[{{"id":"{i}","seq":"2"}}]}}"#),
    ];
    for text in &payloads {
        let plain = text
            .as_str()
            .decode("turn_recorded", &mut Uris::default())
            .map(Decoded::split)
            .map_err(|e| e.to_string());
        let general = serde_json::from_str::<EventPayload>(text)
            .map(|p| Decoded::from(p).split())
            .map_err(|e| e.to_string());
        assert_eq!(plain, general, "{text}");
    }
    assert!(serde_json::from_str::<PlainRecorded>(&payloads[1]).is_ok());
}
