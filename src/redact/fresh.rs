//! Fresh credentials for tests (the crate's and, with `testkit`, the integration
//! tests'): each kind in its issuer's format, made at random for the run, so no rule
//! can be fitted to a fixed example.

use super::Kind;

/// Random bytes from the standard library's randomly keyed hasher: enough for test
/// credentials, with no dependency.
pub struct Rng(u64);

impl Default for Rng {
    fn default() -> Rng {
        Rng::new()
    }
}

impl Rng {
    pub fn new() -> Rng {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0x5eed);
        Rng(h.finish() | 1)
    }

    pub fn word(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn pick(&mut self, alphabet: &str, n: usize) -> String {
        let chars: Vec<char> = alphabet.chars().collect();
        (0..n)
            .map(|_| chars[(self.word() % chars.len() as u64) as usize])
            .collect()
    }
}

const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const B64URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// A fresh credential of `kind`, as it would appear in text: the secret itself, and
/// the text around it that the rule reads (a key name, a URL) when there is any.
pub fn fresh(kind: Kind, rng: &mut Rng) -> (String, String) {
    let secret = match kind {
        Kind::AwsAccessKeyId => format!("AKIA{}", rng.pick("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)),
        Kind::AwsSecretAccessKey => rng.pick(&format!("{ALNUM}/+"), 40),
        Kind::GithubToken => match rng.word() % 2 {
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
