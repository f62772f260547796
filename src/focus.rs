//! The Vision Bridge focus hint, built from the user's resolved text alone; pure: no IO,
//! and it never sees attachments, so no name or path can displace the user's question.

/// The most Unicode scalar values (`char`s) a focus hint may hold, marker included.
pub const FOCUS_HINT_LIMIT: usize = 2000;

/// Ends a hint that had to be cut, so the vision model knows text is missing.
pub const TRUNCATION_MARKER: &str = "…[truncated]";

const SEPARATOR: &str = "\n\n";

/// The focus hint for a stored message, of every kind alike: never its references.
#[must_use]
pub fn focus_hint_for(message: &crate::model::Message) -> String {
    focus_hint(
        &message.display_text,
        message.model_text.as_deref(),
        message.transcript.as_deref(),
    )
}
const EXPANDED_LABEL: &str = "Custom command:\n";
// The same label the main model sees over a transcript, so both read it alike.
use crate::dispatch::TRANSCRIPT_LABEL;

/// The focus hint for a vision request: the question, then the expansion and the
/// transcript under their labels, empty pieces left out. At most [`FOCUS_HINT_LIMIT`]
/// chars: cut from the end (transcript first, question last) on a char boundary, with
/// [`TRUNCATION_MARKER`]; a label is kept only with at least one char of its piece.
#[must_use]
pub fn focus_hint(question: &str, expanded: Option<&str>, transcript: Option<&str>) -> String {
    let mut segments: Vec<Segment<'_>> = Vec::with_capacity(5);
    if !question.is_empty() {
        segments.push(Segment::Text(question));
    }
    for (label, piece) in [(EXPANDED_LABEL, expanded), (TRANSCRIPT_LABEL, transcript)] {
        let Some(piece) = piece.filter(|piece| !piece.is_empty()) else {
            continue;
        };
        segments.push(Segment::Label {
            separator: !segments.is_empty(),
            label,
        });
        segments.push(Segment::Text(piece));
    }

    let total: usize = segments.iter().map(Segment::chars).sum();
    if total <= FOCUS_HINT_LIMIT {
        return segments.iter().map(Segment::render).collect();
    }

    let mut budget = FOCUS_HINT_LIMIT - TRUNCATION_MARKER.chars().count();
    let mut hint = String::new();
    for segment in &segments {
        let chars = segment.chars();
        // A label is always followed by its non-empty piece: it needs room for one more.
        let needs = match segment {
            Segment::Label { .. } => chars + 1,
            Segment::Text(_) => chars,
        };
        if needs <= budget {
            hint.push_str(&segment.render());
            budget -= chars;
            continue;
        }
        if let Segment::Text(text) = segment {
            hint.push_str(char_prefix(text, budget));
        }
        break;
    }
    hint.push_str(TRUNCATION_MARKER);
    hint
}

enum Segment<'a> {
    /// A piece's heading; `separator` puts a blank line before it when a piece came first.
    Label {
        separator: bool,
        label: &'static str,
    },
    Text(&'a str),
}

impl Segment<'_> {
    fn chars(&self) -> usize {
        match self {
            Segment::Label { separator, label } => {
                label.chars().count()
                    + if *separator {
                        SEPARATOR.chars().count()
                    } else {
                        0
                    }
            }
            Segment::Text(text) => text.chars().count(),
        }
    }

    fn render(&self) -> String {
        match self {
            Segment::Label { separator, label } => {
                let separator = if *separator { SEPARATOR } else { "" };
                format!("{separator}{label}")
            }
            Segment::Text(text) => (*text).to_owned(),
        }
    }
}

/// The first `n` chars of `text`, or all of it when it is shorter.
fn char_prefix(text: &str, n: usize) -> &str {
    let end = text
        .char_indices()
        .nth(n)
        .map_or(text.len(), |(index, _)| index);
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn marker_chars() -> usize {
        TRUNCATION_MARKER.chars().count()
    }

    fn check(question: &str, expanded: Option<&str>, transcript: Option<&str>, expected: &str) {
        let hint = focus_hint(question, expanded, transcript);
        assert_eq!(hint, expected);
        assert!(hint.chars().count() <= FOCUS_HINT_LIMIT);
    }

    #[test]
    fn fits_untouched() {
        check(
            "What breed is this?",
            Some("Describe the animal."),
            Some("is it a husky"),
            "What breed is this?\n\nCustom command:\nDescribe the animal.\n\nAudio transcript:\nis it a husky",
        );
    }

    #[test]
    fn empty_and_missing_pieces_are_left_out() {
        check("", None, None, "");
        check("q", Some(""), None, "q");
        check("q", None, Some("t"), "q\n\nAudio transcript:\nt");
        check("", Some("e"), Some(""), "Custom command:\ne");
        check("", None, Some("t"), "Audio transcript:\nt");
    }

    #[test]
    fn transcript_is_cut_first() {
        let question = "q".repeat(1000);
        let expanded = "e".repeat(500);
        let transcript = "t".repeat(1000);
        let hint = focus_hint(&question, Some(&expanded), Some(&transcript));
        let kept = FOCUS_HINT_LIMIT
            - marker_chars()
            - 1000
            - "\n\nCustom command:\n".chars().count()
            - 500
            - "\n\nAudio transcript:\n".chars().count();
        let expected = format!(
            "{question}\n\nCustom command:\n{expanded}\n\nAudio transcript:\n{}{TRUNCATION_MARKER}",
            "t".repeat(kept)
        );
        assert_eq!(hint, expected);
        assert_eq!(hint.chars().count(), FOCUS_HINT_LIMIT);
    }

    #[test]
    fn expanded_is_cut_after_transcript_is_gone() {
        let question = "q".repeat(1000);
        let expanded = "e".repeat(1500);
        let hint = focus_hint(&question, Some(&expanded), Some("dropped"));
        let kept =
            FOCUS_HINT_LIMIT - marker_chars() - 1000 - "\n\nCustom command:\n".chars().count();
        let expected = format!(
            "{question}\n\nCustom command:\n{}{TRUNCATION_MARKER}",
            "e".repeat(kept)
        );
        assert_eq!(hint, expected);
        assert!(!hint.contains("dropped"));
        assert!(!hint.contains("Audio transcript"));
    }

    #[test]
    fn a_label_that_does_not_fit_is_dropped_whole() {
        let question = "q".repeat(FOCUS_HINT_LIMIT - marker_chars() - 5);
        let hint = focus_hint(&question, Some("expanded text"), None);
        assert_eq!(hint, format!("{question}{TRUNCATION_MARKER}"));
    }

    /// Regression: a label that fit with no room left for its text ended the hint as
    /// `…\n\nCustom command:\n…[truncated]`.
    #[test]
    fn a_label_with_no_room_for_its_text_is_dropped_with_its_separator() {
        let label = "\n\nCustom command:\n".chars().count();
        let question = "q".repeat(FOCUS_HINT_LIMIT - marker_chars() - label);
        let hint = focus_hint(&question, Some("expanded text"), None);
        assert!(!hint.ends_with(&format!("Custom command:\n{TRUNCATION_MARKER}")));
        assert!(hint.chars().count() <= FOCUS_HINT_LIMIT);
        assert!(hint.starts_with(&question));
        assert_eq!(hint, format!("{question}{TRUNCATION_MARKER}"));

        // One char more room keeps the label with the first char of its text.
        let question = "q".repeat(FOCUS_HINT_LIMIT - marker_chars() - label - 1);
        let hint = focus_hint(&question, Some("expanded text, too long to fit"), None);
        assert_eq!(
            hint,
            format!("{question}\n\nCustom command:\ne{TRUNCATION_MARKER}")
        );
        assert_eq!(hint.chars().count(), FOCUS_HINT_LIMIT);

        // The same boundary for the transcript's label, after a whole expansion.
        let transcript_label = "\n\nAudio transcript:\n".chars().count();
        let expanded = "e".repeat(100);
        let question =
            "q".repeat(FOCUS_HINT_LIMIT - marker_chars() - label - 100 - transcript_label);
        let hint = focus_hint(&question, Some(&expanded), Some(&"t".repeat(50)));
        assert_eq!(
            hint,
            format!("{question}\n\nCustom command:\n{expanded}{TRUNCATION_MARKER}")
        );
    }

    #[test]
    fn question_is_kept_whole() {
        let question = "Q".repeat(1500);
        let hint = focus_hint(&question, Some(&"e".repeat(3000)), Some(&"t".repeat(3000)));
        assert!(hint.starts_with(&question));
        assert!(hint.chars().count() <= FOCUS_HINT_LIMIT);
        assert!(hint.ends_with(TRUNCATION_MARKER));
    }

    #[test]
    fn question_alone_over_the_limit_is_cut_with_marker() {
        let question = "q".repeat(FOCUS_HINT_LIMIT + 1);
        let hint = focus_hint(&question, Some("e"), Some("t"));
        let expected = format!(
            "{}{TRUNCATION_MARKER}",
            "q".repeat(FOCUS_HINT_LIMIT - marker_chars())
        );
        assert_eq!(hint, expected);
    }

    #[test]
    fn exactly_the_limit_is_untouched() {
        let question = "q".repeat(FOCUS_HINT_LIMIT);
        check(&question, None, None, &question);

        let label = "\n\nAudio transcript:\n".chars().count();
        let question = "q".repeat(100);
        let transcript = "t".repeat(FOCUS_HINT_LIMIT - 100 - label);
        let hint = focus_hint(&question, None, Some(&transcript));
        assert_eq!(hint.chars().count(), FOCUS_HINT_LIMIT);
        assert!(hint.ends_with(&transcript));
        assert!(!hint.contains(TRUNCATION_MARKER));
    }

    #[test]
    fn one_over_the_limit_is_cut() {
        let question = "q".repeat(FOCUS_HINT_LIMIT + 1);
        let hint = focus_hint(&question, None, None);
        assert_eq!(hint.chars().count(), FOCUS_HINT_LIMIT);
        assert!(hint.ends_with(TRUNCATION_MARKER));
    }

    #[test]
    fn multibyte_text_is_cut_at_char_boundaries() {
        let question = "猫".repeat(1000);
        let expanded = "🐈".repeat(1500);
        let transcript = "é".repeat(10);
        let hint = focus_hint(&question, Some(&expanded), Some(&transcript));
        assert_eq!(hint.chars().count(), FOCUS_HINT_LIMIT);
        assert!(hint.starts_with(&question));
        let body = hint
            .strip_suffix(TRUNCATION_MARKER)
            .expect("cut hint ends with the marker");
        let cut = body
            .strip_prefix(&format!("{question}\n\nCustom command:\n"))
            .expect("question and label kept");
        assert!(cut.chars().all(|c| c == '🐈'));

        let emoji = "👍🏽".repeat(FOCUS_HINT_LIMIT);
        let hint = focus_hint(&emoji, None, None);
        assert_eq!(hint.chars().count(), FOCUS_HINT_LIMIT);
    }

    /// Any question short enough to be kept whole beside the marker.
    fn question_that_fits() -> impl Strategy<Value = String> {
        let most = FOCUS_HINT_LIMIT - marker_chars();
        proptest::string::string_regex(&format!("\\PC{{0,{most}}}"))
            .expect("a repetition of one class is a valid regex")
    }

    proptest! {
        #[test]
        fn hint_is_bounded_and_keeps_the_question(
            question in "(?s).{0,2100}",
            expanded in proptest::option::of("(?s).{0,2100}"),
            transcript in proptest::option::of("(?s).{0,2100}"),
        ) {
            let hint = focus_hint(&question, expanded.as_deref(), transcript.as_deref());
            prop_assert!(hint.chars().count() <= FOCUS_HINT_LIMIT);
            if question.chars().count() <= FOCUS_HINT_LIMIT - marker_chars() {
                prop_assert!(hint.starts_with(&question));
            }
        }

        #[test]
        fn long_pieces_keep_the_question(
            question in question_that_fits(),
            expanded in "\\PC{0,3000}",
            transcript in "\\PC{0,3000}",
        ) {
            let hint = focus_hint(&question, Some(&expanded), Some(&transcript));
            prop_assert!(hint.chars().count() <= FOCUS_HINT_LIMIT);
            prop_assert!(hint.starts_with(&question));
        }

        /// Questions and pieces sized around every place a label can fall at the limit.
        #[test]
        fn a_cut_hint_never_ends_on_a_label(
            question_len in 1900..=FOCUS_HINT_LIMIT - marker_chars(),
            expanded_len in 0..60usize,
            transcript_len in 0..60usize,
        ) {
            let question = "q".repeat(question_len);
            let expanded = "e".repeat(expanded_len);
            let transcript = "t".repeat(transcript_len);
            let hint = focus_hint(&question, Some(&expanded), Some(&transcript));
            prop_assert!(hint.chars().count() <= FOCUS_HINT_LIMIT);
            prop_assert!(hint.starts_with(&question));
            for label in [EXPANDED_LABEL, TRANSCRIPT_LABEL] {
                let bare = [label, TRUNCATION_MARKER].concat();
                prop_assert!(!hint.ends_with(&bare), "ends on {:?}", label);
                prop_assert!(!hint.ends_with(label));
            }
        }
    }
}
