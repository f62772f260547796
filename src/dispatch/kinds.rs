//! Which files go to a model as inline images and which as text: judged from the MIME
//! type and the stored name alone, never from a path or a root.

/// The image types vision models accept inline. A BMP is still stored as an image,
/// but goes to the model as a file: an `image_url` of BMP fails a whole OpenAI request.
pub(super) fn is_image(mime: &str) -> bool {
    matches!(
        mime,
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    )
}

/// Text files: `text/*`, the structured text types, and common source files.
pub(super) fn is_text(mime: &str, name: &str) -> bool {
    const TYPES: &[&str] = &[
        "application/json",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/javascript",
        "application/x-javascript",
        "application/typescript",
        "application/x-sh",
        "application/x-shellscript",
        "application/sql",
        "application/csv",
        "application/x-python",
        "application/x-httpd-php",
        "image/svg+xml",
    ];
    // Common source and text files, by lower-cased extension.
    const EXTENSIONS: &str = "\
        rs py js mjs cjs ts tsx jsx go c h cc cpp hpp java kt kts rb sh bash zsh fish \
        toml yaml yml ini cfg conf md markdown csv tsv sql json jsonl xml html htm css \
        scss txt log swift php pl lua r scala cs fs hs ml ex exs erl clj vue svelte \
        gradle properties env tex rst diff patch proto graphql dockerfile makefile";
    if mime.starts_with("text/")
        || TYPES.contains(&mime)
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
    {
        return true;
    }
    let lower = name.to_lowercase();
    let ext = lower.rsplit_once('.').map_or(lower.as_str(), |(_, e)| e);
    EXTENSIONS.split(' ').any(|e| e == ext)
}
