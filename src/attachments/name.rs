//! Stored names: turns an upload's name into the one name it gets on disk, and its
//! de-duplicated variants; pure string work that never touches the disk and never refuses.

use unicode_normalization::{UnicodeNormalization, is_nfc};

/// The longest stored name, in bytes: `NAME_MAX` on the file systems we write to.
pub const MAX_NAME_BYTES: usize = 255;

/// An extension (from the last `.`, dot included) longer than this is treated as part
/// of the stem, so truncation never keeps a "extension" that is really most of the name.
const MAX_EXTENSION_BYTES: usize = 16;

/// What an empty or dot-only upload name becomes.
const FALLBACK_NAME: &str = "attachment";

/// How the store's own temporary files in a session folder begin (`disk.rs` writes an
/// upload to `.upload-<id>.partial.` before giving it its name). A stored name never
/// begins this way, so nothing that cleans up such leftovers can mistake an upload for one.
pub const TEMPORARY_PREFIX: &str = ".upload-";

/// Rewrites an upload's name into a safe stored name; never refuses.
///
/// Keeps the part after the last `/` or `\`, drops control characters (Unicode `Cc`),
/// normalizes to NFC, trims surrounding whitespace and trailing dots, maps an empty
/// result, `.` or `..` to `attachment`, and cuts to 255 bytes at a character boundary
/// keeping a short extension; a name that would begin like the store's temporary files
/// (`.upload-`, in any case) gets `_` for its leading dot. The result never contains
/// `/`, `\` or NUL, is never empty, `.` or `..`, never begins with `.upload-`, and
/// `sanitize_name(&sanitize_name(x)) == sanitize_name(x)`.
pub fn sanitize_name(upload: &str) -> String {
    let base = upload.rsplit(['/', '\\']).next().unwrap_or(upload);
    let visible: String = base.chars().filter(|c| !c.is_control()).collect();
    // ASCII is its own NFC: most names skip the normalizer, which every URI parse
    // runs through (a restore parses thousands).
    let normalized: String = if visible.is_ascii() {
        visible
    } else {
        visible.nfc().collect()
    };
    let trimmed = trim_name(&normalized);
    if trimmed.is_empty() {
        return FALLBACK_NAME.to_owned();
    }
    let cut = unlike_temporary(truncate_keeping_extension(trimmed, MAX_NAME_BYTES));
    // A prefix of an NFC string is NFC in practice, but if some sequence proves
    // otherwise, normalizing again keeps the result a fixed point of this function.
    if !cut.is_ascii() && !is_nfc(&cut) {
        return sanitize_name(&cut.nfc().collect::<String>());
    }
    cut
}

/// Whether `name` is a fixed point of [`sanitize_name`]: a name the store could have
/// written. A name of RFC 3986 unreserved characters only (`A-Z a-z 0-9 - . _ ~`), as
/// most are, is answered without building the sanitized copy: such a name has no
/// separator, control character, whitespace or non-ASCII character, so sanitizing it
/// could only trim trailing dots, replace an empty name, cut a long one, or rename a
/// temporary-looking one.
pub fn is_stored_name(name: &str) -> bool {
    if !name.bytes().all(is_unreserved) {
        return sanitize_name(name) == name;
    }
    !name.is_empty()
        && !name.ends_with('.')
        && name.len() <= MAX_NAME_BYTES
        && !looks_temporary(name)
}

/// RFC 3986 unreserved bytes (`A-Z a-z 0-9 - . _ ~`): what a URI writes as they are.
pub(super) fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Whether `name` begins like the store's temporary files, in any case (for file
/// systems that ignore it).
fn looks_temporary(name: &str) -> bool {
    name.get(..TEMPORARY_PREFIX.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(TEMPORARY_PREFIX))
}

/// `_upload-…` for a name that begins like the store's temporary files; the dot is one
/// byte, so the length holds.
fn unlike_temporary(name: String) -> String {
    if looks_temporary(&name) {
        format!("_{}", &name[1..])
    } else {
        name
    }
}

/// The `n`th de-duplicated variant of a stored name: `stem (n).ext`, or `name (n)` when
/// there is no short extension; the stem is shortened so the result stays within 255
/// bytes. For a sanitized `name` the result is again a fixed point of [`sanitize_name`].
pub fn numbered_name(name: &str, n: u32) -> String {
    let (stem, ext) = split_extension(name);
    let suffix = format!(" ({n})");
    let room = MAX_NAME_BYTES.saturating_sub(suffix.len() + ext.len());
    let stem = &stem[..floor_char_boundary(stem, room)];
    format!("{stem}{suffix}{ext}")
}

/// Splits `name` into stem and extension (`.ext`, dot included). The extension is the
/// part from the last `.` when it is at most 16 bytes and not the whole name.
pub fn split_extension(name: &str) -> (&str, &str) {
    match name.rfind('.') {
        Some(dot) if dot > 0 && name.len() - dot <= MAX_EXTENSION_BYTES => name.split_at(dot),
        _ => (name, ""),
    }
}

/// Trims leading whitespace and trailing whitespace and dots: a trailing dot is
/// invisible or stripped on several systems, so a name never ends with one.
fn trim_name(name: &str) -> &str {
    name.trim_start()
        .trim_end_matches(|c: char| c.is_whitespace() || c == '.')
}

/// Cuts a trimmed, non-empty name to `max` bytes at a character boundary, keeping a
/// short extension. The result is non-empty, never ends in whitespace or a dot, and is
/// never `.` or `..`.
fn truncate_keeping_extension(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_owned();
    }
    let (stem, ext) = split_extension(name);
    // `ext` is at most 16 bytes, so at least 239 bytes of a longer stem are kept; the
    // stem starts with the name's first (non-whitespace) character and so stays non-empty.
    let room = max - ext.len();
    let stem = &stem[..floor_char_boundary(stem, room)];
    if ext.is_empty() {
        let cut = trim_name(stem);
        if cut.is_empty() {
            FALLBACK_NAME.to_owned()
        } else {
            cut.to_owned()
        }
    } else {
        format!("{stem}{ext}")
    }
}

/// The largest character boundary of `s` that is at most `max`.
fn floor_char_boundary(s: &str, max: usize) -> usize {
    if max >= s.len() {
        return s.len();
    }
    (0..=max)
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::{Component, Path};

    fn check(upload: &str, expected: &str) {
        assert_eq!(sanitize_name(upload), expected, "sanitize_name({upload:?})");
    }

    #[test]
    fn ordinary_names_stay() {
        check("report.pdf", "report.pdf");
        check("my photo (final).jpg", "my photo (final).jpg");
        check("\"quoted\" 'name'.txt", "\"quoted\" 'name'.txt");
        check(
            "<i>markup<i> & 'single' \"double\".txt",
            "<i>markup<i> & 'single' \"double\".txt",
        );
        // A closing tag contains '/', so only the part after it is kept.
        check("<b>markup</b>", "b>");
        check("résumé — 履歴書.txt", "résumé — 履歴書.txt");
        check(".bashrc", ".bashrc");
        check(".uploaded.txt", ".uploaded.txt");
        check("upload-x.partial", "upload-x.partial");
    }

    /// Issue 12, hole 6: `.upload-x.partial.` was stored as the hidden
    /// `.upload-x.partial`, which looks like one of the store's own temporary files.
    #[test]
    fn hole_6_a_name_like_the_stores_temporary_files_is_rewritten() {
        check(".upload-x.partial.", "_upload-x.partial");
        check(".upload-x.partial", "_upload-x.partial");
        check("  .upload-", "_upload-");
        check(".UPLOAD-x.Partial", "_UPLOAD-x.Partial");
        check("dir/.upload-1234.partial.", "_upload-1234.partial");
        check("_upload-x.partial", "_upload-x.partial");
    }

    #[test]
    fn unicode_is_stored_in_nfc() {
        let nfd = "cafe\u{301}.txt";
        let nfc = "caf\u{e9}.txt";
        check(nfd, nfc);
        check(nfc, nfc);
    }

    #[test]
    fn traversal_and_control_characters_are_rewritten() {
        check("../../etc/passwd", "passwd");
        check("..\\..\\x", "x");
        check("..", "attachment");
        check(".", "attachment");
        check("", "attachment");
        check("   ", "attachment");
        check("/abs/path", "path");
        check("dir/", "attachment");
        check("a\0b.txt", "ab.txt");
        check("line\nbreak\t.txt", "linebreak.txt");
        check("\u{1b}[31mred", "[31mred");
        check("  padded name .txt. . ", "padded name .txt");
        check("trailing...", "trailing");
    }

    #[test]
    fn long_names_keep_their_extension() {
        let long = format!("{}.txt", "a".repeat(300));
        let name = sanitize_name(&long);
        assert!(name.len() <= MAX_NAME_BYTES);
        assert!(name.ends_with(".txt"));
        assert_eq!(name.len(), MAX_NAME_BYTES);

        // Multi-byte characters are never split.
        let long = format!("{}.txt", "é".repeat(200));
        let name = sanitize_name(&long);
        assert!(name.len() <= MAX_NAME_BYTES && name.ends_with(".txt"));
        assert_eq!(sanitize_name(&name), name);

        // A long "extension" is not kept whole.
        let long = format!("a.{}", "b".repeat(300));
        assert_eq!(sanitize_name(&long).len(), MAX_NAME_BYTES);
    }

    #[test]
    fn numbered_names() {
        assert_eq!(numbered_name("a.txt", 1), "a (1).txt");
        assert_eq!(numbered_name("archive.tar.gz", 2), "archive.tar (2).gz");
        assert_eq!(numbered_name("README", 3), "README (3)");
        assert_eq!(numbered_name(".bashrc", 1), ".bashrc (1)");
        let long = sanitize_name(&format!("{}.txt", "x".repeat(300)));
        let numbered = numbered_name(&long, 12);
        assert!(numbered.len() <= MAX_NAME_BYTES);
        assert!(numbered.ends_with(" (12).txt"));
    }

    fn interesting_name() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "(\\.[uU]pload-)?[ ./\\\\a-zé\u{301}\u{0}\t\u{200b}\u{202e}\u{1100}\u{1161}\u{11a8}]{0,40}",
            "[a-zé\u{301}\u{e000} .]{200,400}(\\.[a-z]{1,20})?",
            "[\u{0300}-\u{036f}a\u{0f73}\u{0958}]{0,300}",
        ]
    }

    #[test]
    fn is_stored_name_agrees_with_sanitize_name_on_edge_cases() {
        let long = "a".repeat(MAX_NAME_BYTES);
        let longer = "a".repeat(MAX_NAME_BYTES + 1);
        for name in [
            "",
            ".",
            "..",
            "a.",
            "a..",
            ".a",
            "a",
            "~",
            ".upload-x",
            ".UPLOAD-x",
            "_upload-x",
            ".upload",
            "a b",
            " a",
            "a\u{e9}",
            long.as_str(),
            longer.as_str(),
        ] {
            assert_eq!(
                is_stored_name(name),
                sanitize_name(name) == name,
                "{name:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn is_stored_name_agrees_with_sanitize_name(
            name in "([a-zA-Z0-9._~-]|\\.upload-|\\.UpLoAd-| |\\u{e9}){0,300}"
        ) {
            prop_assert_eq!(is_stored_name(&name), sanitize_name(&name) == name);
        }

        #[test]
        fn is_stored_name_agrees_on_any_string(name in any::<String>()) {
            prop_assert_eq!(is_stored_name(&name), sanitize_name(&name) == name);
        }

        #[test]
        fn sanitize_name_is_safe_and_idempotent(upload in interesting_name()) {
            let name = sanitize_name(&upload);
            prop_assert!(!name.is_empty() && name != "." && name != "..");
            prop_assert!(!name.contains(['/', '\\', '\0']));
            prop_assert!(!name.chars().any(char::is_control));
            prop_assert!(name.len() <= MAX_NAME_BYTES);
            prop_assert!(!name.to_ascii_lowercase().starts_with(TEMPORARY_PREFIX));
            prop_assert!(is_nfc(&name));
            prop_assert_eq!(sanitize_name(&name), name.clone());
            let components: Vec<_> = Path::new(&name).components().collect();
            prop_assert_eq!(components.len(), 1);
            prop_assert!(matches!(components[0], Component::Normal(_)));
        }

        #[test]
        fn numbered_names_are_stored_names(upload in interesting_name(), n in 1u32..100_000) {
            let name = sanitize_name(&upload);
            let numbered = numbered_name(&name, n);
            prop_assert!(numbered.len() <= MAX_NAME_BYTES);
            prop_assert_eq!(sanitize_name(&numbered), numbered.clone());
            prop_assert_ne!(numbered, name);
        }
    }
}
