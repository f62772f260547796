//! MIME types of attachments: the extension's guess, overruled by magic bytes for the
//! image types models accept, and by a look at the bytes when the extension says
//! nothing; pure, it looks only at the name and bytes it is given.

/// How much of a file the type is judged from: the same everywhere (an upload, a
/// full read, and `send`'s check, which reads only this much), so a file gets one
/// type whoever looks. Git judges text against binary from its first 8000 bytes.
pub const SNIFF_BYTES: usize = 8192;

const OCTET_STREAM: &str = "application/octet-stream";
const SVG: &str = "image/svg+xml";
const TEXT: &str = "text/plain";

/// The MIME type of an attachment named `name` with contents `bytes`.
///
/// The extension decides, except for images: PNG, JPEG, GIF, WebP and BMP bytes are
/// that image type whatever the name says, and a name that claims `image/*` for bytes
/// that are none of those gets `application/octet-stream`, so an image block only ever
/// carries real image bytes. SVG is the exception: it is XML text, never an image
/// block, so it keeps its type.
///
/// When the extension gives no type, or only `application/octet-stream` (no extension
/// at all, as in `README`, `LICENSE` or `notes`, or one nobody registered), the bytes
/// decide: text is `text/plain`, anything else `application/octet-stream`. Otherwise a
/// plain text file would reach the model as a base64 blob it cannot read.
///
/// Only the first [`SNIFF_BYTES`] of `bytes` are looked at.
pub fn mime_for(name: &str, bytes: &[u8]) -> String {
    mime_from_head(name, bytes, bytes.len() as u64)
}

/// [`mime_for`] from the start of a file alone: `head` holds at least the first
/// `min(size, SNIFF_BYTES)` bytes of a file of `size` bytes. Gives what `mime_for` gives
/// for the whole file.
pub fn mime_from_head(name: &str, head: &[u8], size: u64) -> String {
    let bytes = &head[..head.len().min(SNIFF_BYTES)];
    let cut = size > bytes.len() as u64;
    if let Some(image) = sniff_image(bytes) {
        return image.to_owned();
    }
    // The table's own text, lower-cased, is the essence a parsed `Mime` gives (the
    // table has no parameters, but a few capitals: `application/PowerShell`); parsing
    // it only to print it back cost more than the rest of the guess.
    let guess = std::path::Path::new(name)
        .extension()
        .and_then(|ext| ext.to_str())
        .and_then(|ext| mime_guess::from_ext(ext).first_raw());
    let image = |g: &str| g.get(..6).is_some_and(|t| t.eq_ignore_ascii_case("image/"));
    match guess {
        Some(guess) if image(guess) && !guess.eq_ignore_ascii_case(SVG) => OCTET_STREAM.to_owned(),
        Some(guess) if !guess.eq_ignore_ascii_case(OCTET_STREAM) => guess.to_ascii_lowercase(),
        _ if looks_like_text(bytes, cut) => TEXT.to_owned(),
        _ => OCTET_STREAM.to_owned(),
    }
}

/// Non-empty UTF-8 with no NUL and no other control character than the ones text uses
/// (tab, line feed, form feed, carriage return, and escape for coloured terminal logs).
///
/// UTF-8 alone is not enough: any run of ASCII control bytes is valid UTF-8, and binary
/// formats full of them (with no NUL) would otherwise be sent as text. An empty file
/// says nothing, so it stays binary. When `bytes` is only the start of the file (`cut`),
/// a character the cut split in two is not held against it.
fn looks_like_text(bytes: &[u8], cut: bool) -> bool {
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        // `error_len() == None`: the bytes end inside a character that may be whole.
        Err(e) if cut && e.error_len().is_none() => {
            std::str::from_utf8(&bytes[..e.valid_up_to()]).expect("valid up to this point")
        }
        Err(_) => return false,
    };
    !text.is_empty() && text.chars().all(is_text_char)
}

fn is_text_char(c: char) -> bool {
    !c.is_ascii_control() || matches!(c, '\t' | '\n' | '\x0c' | '\r' | '\x1b')
}

/// The image type whose signature `bytes` start with, if any.
fn sniff_image(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else if is_bmp(bytes) {
        Some("image/bmp")
    } else {
        None
    }
}

/// `BM` alone starts too much ordinary text, so the DIB header's size must also be one
/// of the known header sizes.
fn is_bmp(bytes: &[u8]) -> bool {
    let Some(header) = bytes.get(14..18) else {
        return false;
    };
    let dib_size = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    bytes.starts_with(b"BM") && matches!(dib_size, 12 | 40 | 52 | 56 | 64 | 108 | 124)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0";

    fn check(name: &str, bytes: &[u8], expected: &str) {
        assert_eq!(mime_for(name, bytes), expected, "mime_for({name:?}, ..)");
    }

    /// The guess reads `mime_guess`'s table text directly; it must give what parsing
    /// that text into a `Mime` gave, capitals in the table and the name included.
    #[test]
    fn the_table_text_gives_what_a_parsed_mime_gave() {
        let parsed = |name: &str| match mime_guess::from_path(name).first() {
            Some(g) if g.type_() == mime_guess::mime::IMAGE && g.essence_str() != SVG => {
                OCTET_STREAM.to_owned()
            }
            Some(g) if g.essence_str() != OCTET_STREAM => g.essence_str().to_owned(),
            _ => OCTET_STREAM.to_owned(), // binary bytes below: the sniff says octet-stream
        };
        for ext in [
            "psc1", "xlsm", "XLAM", "txt", "svg", "SVG", "png", "jpg", "bin", "json", "md", "pdf",
            "zip", "html", "ts", "rs", "exe", "nope",
        ] {
            let name = format!("file.{ext}");
            assert_eq!(mime_for(&name, b"\0\x01\x02"), parsed(&name), "{name}");
        }
    }

    #[test]
    fn magic_bytes_win_for_images() {
        check("photo.jpg", PNG, "image/png");
        check("photo.png", PNG, "image/png");
        check("notes.txt", PNG, "image/png");
        check("noext", b"\xff\xd8\xff\xe0\0\x10JFIF", "image/jpeg");
        check("a.gif", b"GIF89a\x01\0\x01\0", "image/gif");
        check("a.bin", b"RIFF\x24\0\0\0WEBPVP8 ", "image/webp");
        let mut bmp = b"BM\0\0\0\0\0\0\0\0\x36\0\0\0\x28\0\0\0".to_vec();
        bmp.extend_from_slice(&[0; 8]);
        check("a.bmp", &bmp, "image/bmp");
    }

    #[test]
    fn image_extensions_without_image_bytes_are_binary() {
        check("fake.png", b"just some text", OCTET_STREAM);
        check("fake.jpg", b"", OCTET_STREAM);
        check(
            "BMW notes.bmp",
            b"BMW is a car maker, not a bitmap",
            OCTET_STREAM,
        );
    }

    #[test]
    fn svg_keeps_its_type_so_dispatch_sends_it_as_text() {
        check(
            "drawing.svg",
            b"<svg xmlns='http://www.w3.org/2000/svg'/>",
            SVG,
        );
    }

    #[test]
    fn other_types_come_from_the_extension() {
        check("notes.txt", b"hello", "text/plain");
        check("BMW notes.txt", b"BMW is a car maker", "text/plain");
        check("report.pdf", b"%PDF-1.7", "application/pdf");
        check("data.json", b"{}", "application/json");
    }

    #[test]
    fn text_with_no_known_extension_is_plain_text() {
        check("README", b"# Project\n\nRead me.\n", TEXT);
        check("LICENSE", "Copyright © 2024\r\n".as_bytes(), TEXT);
        check("notes", "tab\there, ünïcödé, 日本語\x0c".as_bytes(), TEXT);
        check("build.log", b"\x1b[31merror\x1b[0m: failed\n", TEXT);
        check("x.unknownext", b"hello", TEXT);
        // `.bin` maps to application/octet-stream itself: the bytes still decide.
        check("dump.bin", b"plain words", TEXT);
    }

    #[test]
    fn binary_with_no_known_extension_stays_binary() {
        check("data", b"\x00\x01\x02\xff\xfe binary", OCTET_STREAM);
        check("nul", b"text with a \0 in it", OCTET_STREAM);
        check("latin1", b"caf\xe9", OCTET_STREAM);
        check("bells.bin", &[0x07; 64], OCTET_STREAM);
        check("x.unknownext", b"\x7fELF\x02\x01", OCTET_STREAM);
        check("empty", b"", OCTET_STREAM);
    }

    #[test]
    fn the_type_is_judged_from_the_first_bytes_alone() {
        // A character split by the cut still reads as text; what lies past the cut,
        // even a NUL, does not count.
        let mut split = vec![b'a'; SNIFF_BYTES - 1];
        split.extend_from_slice("é and more".as_bytes());
        check("README", &split, TEXT);
        let mut late_nul = vec![b'a'; SNIFF_BYTES];
        late_nul.extend_from_slice(b"\0\x01");
        check("README", &late_nul, TEXT);
        // A whole file that ends inside a character is not text.
        let mut broken = vec![b'a'; 10];
        broken.push(0xc3);
        check("README", &broken, OCTET_STREAM);
        let mut early_nul = vec![b'a'; 100];
        early_nul.push(0);
        early_nul.extend_from_slice(&[b'a'; SNIFF_BYTES]);
        check("README", &early_nul, OCTET_STREAM);
    }

    proptest::proptest! {
        // Each case is up to 8 KiB of bytes: a few dozen cases cover the cut well.
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// The head of a file, however much more of it is given, types it as the
        /// whole file does.
        #[test]
        fn a_head_gives_the_whole_files_type(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![proptest::num::u8::ANY, 0x20u8..0x7f, 0x80u8..0xc0],
                0..(SNIFF_BYTES + 64),
            ),
            extra in 0usize..64,
            name in proptest::sample::select(vec!["README", "a.txt", "a.png", "a.bin", "x.svg"]),
        ) {
            let whole = mime_for(name, &bytes);
            let head = &bytes[..bytes.len().min(SNIFF_BYTES + extra)];
            proptest::prop_assert_eq!(mime_from_head(name, head, bytes.len() as u64), whole);
        }
    }

    #[test]
    fn the_text_rule_never_overrules_an_extension_or_an_image() {
        // An image extension on text is still refused as an image, not turned into text.
        check("fake.png", b"just some text", OCTET_STREAM);
        check("report.pdf", b"not really a pdf", "application/pdf");
        check("README", PNG, "image/png");
    }
}
