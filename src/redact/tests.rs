//! Each kind with a credential made fresh for the run in its issuer's format (no fixed
//! example a rule could be fitted to), alone, inside prose, and split across streamed
//! chunks; and ordinary text that must survive byte for byte.

use super::*;

/// Random bytes from the standard library's randomly keyed hasher: enough for test
/// credentials, with no dependency.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0x5eed);
        Rng(h.finish() | 1)
    }

    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn pick(&mut self, alphabet: &str, n: usize) -> String {
        let chars: Vec<char> = alphabet.chars().collect();
        (0..n)
            .map(|_| chars[(self.next() % chars.len() as u64) as usize])
            .collect()
    }
}

const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const B64URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// A fresh credential of `kind`, as it would appear in text: the secret itself, and
/// the text around it that the rule reads (a key name, a URL) when there is any.
fn fresh(kind: Kind, rng: &mut Rng) -> (String, String) {
    let secret = match kind {
        Kind::AwsAccessKeyId => format!("AKIA{}", rng.pick("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)),
        Kind::AwsSecretAccessKey => rng.pick(&format!("{ALNUM}/+"), 40),
        Kind::GithubToken => match rng.next() % 2 {
            0 => format!("ghp_{}", rng.pick(ALNUM, 36)),
            _ => format!("github_pat_{}_{}", rng.pick(ALNUM, 22), rng.pick(ALNUM, 59)),
        },
        Kind::AnthropicApiKey => format!("sk-ant-api03-{}AA", rng.pick(B64URL, 93)),
        Kind::OpenaiApiKey => format!("sk-proj-{}", rng.pick(B64URL, 156)),
        Kind::SlackToken => format!(
            "xoxb-{}-{}-{}",
            rng.pick("0123456789", 12),
            rng.pick("0123456789", 13),
            rng.pick(ALNUM, 24)
        ),
        Kind::StripeSecretKey => format!("sk_live_{}", rng.pick(ALNUM, 99)),
        Kind::GoogleApiKey => format!("AIza{}", rng.pick(B64URL, 35)),
        Kind::PrivateKey => {
            let body: Vec<String> = (0..25).map(|_| rng.pick(B64, 64)).collect();
            format!(
                "-----BEGIN RSA PRIVATE KEY-----\n{}\n-----END RSA PRIVATE KEY-----",
                body.join("\n")
            )
        }
        Kind::UrlPassword => rng.pick(ALNUM, 20),
        Kind::Jwt => format!(
            "eyJ{}.eyJ{}.{}",
            rng.pick(B64URL, 33),
            rng.pick(B64URL, 60),
            rng.pick(B64URL, 43)
        ),
    };
    let around = match kind {
        Kind::AwsSecretAccessKey => format!("AWS_SECRET_ACCESS_KEY={secret}"),
        Kind::UrlPassword => format!("postgres://app:{secret}@db.internal:5432/prod"),
        _ => secret.clone(),
    };
    (secret, around)
}

#[test]
fn every_kind_is_found_alone_and_in_prose_and_only_the_secret_goes() {
    let mut rng = Rng::new();
    for kind in Kind::ALL {
        for _ in 0..20 {
            let (secret, around) = fresh(kind, &mut rng);
            let text = format!("here it is: {around}\nand the rest of the line.");
            let found = find(&text);
            assert_eq!(found.len(), 1, "{kind}: {text}");
            assert_eq!(found[0].kind, kind, "{text}");
            assert_eq!(&text[found[0].range.clone()], secret, "{kind}");
            let out = redact(&text);
            assert!(!out.contains(&secret), "{kind}: {out}");
            assert!(out.contains(&format!("[REDACTED:{}]", kind.id())), "{out}");
            assert!(
                out.starts_with("here it is: ") && out.ends_with("\nand the rest of the line.")
            );
            let kept = around.replace(&secret, &format!("[REDACTED:{}]", kind.id()));
            assert!(out.contains(&kept), "{kind}: only the secret goes: {out}");
        }
    }
}

#[test]
fn anthropics_keys_are_not_taken_for_openais() {
    let mut rng = Rng::new();
    let (key, _) = fresh(Kind::AnthropicApiKey, &mut rng);
    assert_eq!(redact(&key), "[REDACTED:anthropic-api-key]");
}

#[test]
fn ordinary_text_survives_byte_for_byte() {
    let texts = [
        "01a24c59-bf0b-77c9-940d-a3f39f842e3c",
        "commit 202eb88a1c9f4e0b2d7c6e5f4a3b2c1d0e9f8a7b",
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "aGVsbG8gd29ybGQsIHRoaXMgaXMgYmFzZTY0IHRoYXQgaXMgbm90IGEga2V5Cg==",
        "Please enter your password, then press enter.",
        "see https://example.com/docs/page?x=1#part and ssh://git@example.com/repo.git",
        "http://localhost:8080/path and user@example.com",
        "the task-scheduler and sk-learn are not keys; nor is AKIA alone",
        "password: hunter2 is prose, not a URL",
        "café, naïve, 日本語, emoji 🎉",
        "",
    ];
    for text in texts {
        assert!(find(text).is_empty(), "{text}: {:?}", find(text));
        assert!(matches!(redact(text), Cow::Borrowed(t) if t == text));
    }
}

#[test]
fn a_secret_split_across_streamed_chunks_is_found_whole() {
    let mut rng = Rng::new();
    for kind in Kind::ALL {
        let (secret, around) = fresh(kind, &mut rng);
        let text = format!(
            "{}{around} and then more text{}",
            "x ".repeat(9000),
            " y".repeat(9000)
        );
        let whole = redact(&text).into_owned();
        // Every place the secret could be cut, in chunks of a few sizes.
        for size in [1, 7, 64, 1000, 5000] {
            let mut stream = Stream::default();
            let mut out = String::new();
            let mut at = 0;
            while at < text.len() {
                let mut end = (at + size).min(text.len());
                while !text.is_char_boundary(end) {
                    end += 1;
                }
                out.push_str(&stream.push(&text[at..end]));
                at = end;
            }
            out.push_str(&stream.finish());
            assert_eq!(out, whole, "{kind}, chunks of {size}");
            assert!(!out.contains(&secret));
        }
    }
}

#[test]
fn a_stream_holds_back_at_most_the_longest_secret() {
    let mut stream = Stream::default();
    let mut written = 0;
    for _ in 0..100 {
        written += stream.push(&"word ".repeat(1000)).len();
    }
    assert!(
        100 * 5000 - written < 2 * LONGEST,
        "held back {}",
        100 * 5000 - written
    );
    assert_eq!(written + stream.finish().len(), 100 * 5000);
}

#[test]
fn a_private_key_cut_short_is_still_redacted() {
    let mut rng = Rng::new();
    let (key, _) = fresh(Kind::PrivateKey, &mut rng);
    let cut = &key[..key.len() / 2];
    assert_eq!(redact(cut), "[REDACTED:private-key]");
}
