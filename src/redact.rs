//! Secrets in text, replaced by `[REDACTED:<kind>]`: pure functions, and a [`Stream`]
//! across a message streamed in chunks. The rules are the issuers' published formats,
//! one regular expression so a text is scanned once; a rule that finds its secret by
//! what precedes it (a key name, a URL's user part) replaces only the secret.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::LazyLock;

use regex::Regex;

/// A kind of secret, with its id in `[REDACTED:<id>]` and in reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    AwsAccessKeyId,
    AwsSecretAccessKey,
    GithubToken,
    AnthropicApiKey,
    OpenaiApiKey,
    SlackToken,
    StripeSecretKey,
    GoogleApiKey,
    PrivateKey,
    UrlPassword,
    Jwt,
}

impl Kind {
    /// Every kind, in the order of [`Kind::id`]'s table in README.
    pub const ALL: [Kind; 11] = [
        Kind::AwsAccessKeyId,
        Kind::AwsSecretAccessKey,
        Kind::GithubToken,
        Kind::AnthropicApiKey,
        Kind::OpenaiApiKey,
        Kind::SlackToken,
        Kind::StripeSecretKey,
        Kind::GoogleApiKey,
        Kind::PrivateKey,
        Kind::UrlPassword,
        Kind::Jwt,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Kind::AwsAccessKeyId => "aws-access-key-id",
            Kind::AwsSecretAccessKey => "aws-secret-access-key",
            Kind::GithubToken => "github-token",
            Kind::AnthropicApiKey => "anthropic-api-key",
            Kind::OpenaiApiKey => "openai-api-key",
            Kind::SlackToken => "slack-token",
            Kind::StripeSecretKey => "stripe-secret-key",
            Kind::GoogleApiKey => "google-api-key",
            Kind::PrivateKey => "private-key",
            Kind::UrlPassword => "url-password",
            Kind::Jwt => "jwt",
        }
    }

    /// The name of the capture group of [`RULES`] that holds this kind's secret.
    fn group(self) -> &'static str {
        match self {
            Kind::AwsAccessKeyId => "aws_id",
            Kind::AwsSecretAccessKey => "aws_secret",
            Kind::GithubToken => "github",
            Kind::AnthropicApiKey => "anthropic",
            Kind::OpenaiApiKey => "openai",
            Kind::SlackToken => "slack",
            Kind::StripeSecretKey => "stripe",
            Kind::GoogleApiKey => "google",
            Kind::PrivateKey => "private_key",
            Kind::UrlPassword => "url_password",
            Kind::Jwt => "jwt",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

/// The longest secret a [`Stream`] holds back for (an 8,192-bit RSA PEM block).
pub const LONGEST: usize = 8 * 1024;

/// How much further back than [`LONGEST`] a stream may cut, to cut after a space.
const WORD_SLACK: usize = 1024;

/// One alternative per kind; where two could start at the same place the earlier
/// wins, so Anthropic's `sk-ant-` comes before OpenAI's `sk-`.
static RULES: LazyLock<Regex> = LazyLock::new(|| {
    let rules = [
        // PEM: the whole block; one cut short (a truncated paste, a stream that
        // ended) up to where its base64 body ends.
        r"(?P<private_key>-----BEGIN[ A-Z0-9]*PRIVATE KEY-----(?:[\s\S]*?-----END[ A-Z0-9]*PRIVATE KEY-----|[A-Za-z0-9+/=\s]*))",
        r"\b(?P<aws_id>(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z2-7]{16})\b",
        // By its key name, in any case and with `_`, `-` or nothing between the
        // words, then `:` or `=` and an optional quote.
        r#"(?i:aws[_\-]?secret(?:[_\-]?access)?[_\-]?key)["']?\s*(?:=|:|=>)\s*["']?(?P<aws_secret>[A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)"#,
        r"\b(?P<github>gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{22,255})",
        r"\b(?P<anthropic>sk-ant-[A-Za-z0-9_\-]{20,})",
        r"\b(?P<openai>sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,})",
        r"\b(?P<slack>xox[abposre]-[A-Za-z0-9\-]{10,}|xapp-[0-9]-[A-Za-z0-9\-]{10,})",
        r"\b(?P<stripe>[sr]k_(?:live|test)_[A-Za-z0-9]{20,})",
        r"\b(?P<google>AIza[0-9A-Za-z_\-]{35})",
        // `scheme://user:password@host`: the password alone.
        r#"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/?#@\[\]"'<>]+:(?P<url_password>[^\s/?#@"'<>]+)@"#,
        r"\b(?P<jwt>eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,})",
    ];
    Regex::new(&rules.join("|")).expect("the redaction rules compile")
});

/// One secret found: its kind and where it is, in bytes of the text searched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub kind: Kind,
    pub range: Range<usize>,
    /// What the rule read to find it, with any name before it: a stream holds it back whole.
    pub read: Range<usize>,
}

/// Every secret in `text`, in order, none overlapping.
pub fn find(text: &str) -> Vec<Found> {
    let mut found = Vec::new();
    for caps in RULES.captures_iter(text) {
        for kind in Kind::ALL {
            if let Some(m) = caps.name(kind.group()) {
                found.push(Found {
                    kind,
                    range: m.range(),
                    read: caps.get(0).expect("a match has a whole").range(),
                });
                break;
            }
        }
    }
    found
}

/// `text` with each secret replaced by `[REDACTED:<kind>]`; borrowed when none.
pub fn redact(text: &str) -> Cow<'_, str> {
    let found = find(text);
    if found.is_empty() {
        return Cow::Borrowed(text);
    }
    Cow::Owned(replaced(text, &found))
}

/// `text` with the secrets `found` in it replaced.
fn replaced(text: &str, found: &[Found]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for f in found {
        out.push_str(&text[at..f.range.start]);
        out.push_str("[REDACTED:");
        out.push_str(f.kind.id());
        out.push(']');
        at = f.range.end;
    }
    out.push_str(&text[at..]);
    out
}

/// The kind of each `[REDACTED:<kind>]` mark in `text`, in order: what a redaction
/// wrote, counted without the secrets it replaced.
pub fn marks(text: &str) -> impl Iterator<Item = Kind> + '_ {
    text.match_indices("[REDACTED:").filter_map(|(at, mark)| {
        let rest = &text[at + mark.len()..];
        let id = &rest[..rest.find(']')?];
        Kind::ALL.into_iter().find(|k| k.id() == id)
    })
}

/// A message streamed in chunks, redacted as a whole: each [`Stream::push`] gives back
/// the text that can be written now, holding back a tail of less than twice
/// [`LONGEST`] bytes (and any secret that reaches the end of what arrived, which may go on in the next
/// chunk), and [`Stream::finish`] gives back the rest once the message ended. So a
/// secret split across chunks is found whole.
#[derive(Debug, Default)]
pub struct Stream {
    pending: String,
}

impl Stream {
    /// Takes the next chunk; returns what can be written now, redacted.
    pub fn push(&mut self, chunk: &str) -> String {
        self.pending.push_str(chunk);
        // Scanned only once twice the tail has gathered, so each byte is scanned about
        // twice however small the chunks.
        if self.pending.len() < 2 * LONGEST {
            return String::new();
        }
        let found = find(&self.pending);
        let mut cut = self.pending.len() - LONGEST;
        while !self.pending.is_char_boundary(cut) {
            cut -= 1;
        }
        // Cut between words when there is a space near: what is written then ends a
        // word, as the store's sealed segments of a long message like to (a
        // segment is cut between words, `db::items`).
        if let Some(space) = self.pending[..cut].rfind(char::is_whitespace)
            && cut - space <= WORD_SLACK
        {
            cut = space + 1;
            while !self.pending.is_char_boundary(cut) {
                cut += 1;
            }
        }
        // A secret across the cut, or one that reaches the end (it may go on), is
        // held back whole, with what named it.
        for f in &found {
            let end = self.pending.len();
            if f.read.start < cut && (f.read.end > cut || f.read.end == end) {
                cut = f.read.start;
                break;
            }
        }
        let before: Vec<Found> = found
            .into_iter()
            .take_while(|f| f.read.end <= cut)
            .collect();
        let out = replaced(&self.pending[..cut], &before);
        self.pending.drain(..cut);
        out
    }

    /// The text still held back, redacted: the message ended.
    pub fn finish(self) -> String {
        redact(&self.pending).into_owned()
    }

    /// Whether text is held back.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(any(test, feature = "testkit"))]
pub mod fresh;
mod json;
pub use json::{Chunk, Streams, json_text, object, owned, payload, value};

#[cfg(test)]
mod tests;
