//! Protection settings: who may read the files the store creates (`Sharing`) and an
//! encrypted SQLite database's key (`DatabaseKey`, from a file, never a command line).
//! A key never shows and is zeroed when dropped.

use std::fmt;
use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};

/// Who may read and write what the store creates; existing files are never changed
/// (`verify` and `paths` warn about database files that allow more).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sharing {
    /// The owner only: files `0600`, folders `0700`, whatever the umask.
    #[default]
    Owner,
    /// The owner and the group: files `0660`, folders `2770` (set-group-ID, so what is
    /// made inside takes the folder's group), whatever the umask.
    Group,
}

impl Sharing {
    /// The permission bits of a file the store creates.
    pub fn file_mode(self) -> u32 {
        match self {
            Sharing::Owner => 0o600,
            Sharing::Group => 0o660,
        }
    }

    /// The mode of a folder the store creates.
    pub fn dir_mode(self) -> u32 {
        match self {
            Sharing::Owner => 0o700,
            Sharing::Group => 0o2770,
        }
    }

    /// The bits of `mode` that give access to someone this setting leaves out.
    pub fn excess(self, mode: u32) -> u32 {
        match self {
            Sharing::Owner => mode & 0o077,
            Sharing::Group => mode & 0o007,
        }
    }
}

/// The length of a key in bytes: SQLCipher's raw keys are 256 bits.
const KEY_BYTES: usize = 32;

/// More than any key file needs; a larger file is not read further.
const MAX_KEY_FILE: u64 = 4096;

/// The 256-bit key of an encrypted SQLite database, SQLCipher's raw key (no key
/// stretching per connection), read from a file of 64 hex digits. `Debug` shows no digit
/// of it; its bytes are zeroed when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseKey([u8; KEY_BYTES]);

impl DatabaseKey {
    /// The key a key file's text holds: 64 hex digits, whitespace around them allowed.
    pub fn from_hex(text: &str) -> std::result::Result<DatabaseKey, &'static str> {
        let digits = text.trim_ascii().as_bytes();
        if digits.len() != 2 * KEY_BYTES {
            return Err("it must hold exactly 64 hexadecimal digits (a 256-bit key)");
        }
        let mut key = [0u8; KEY_BYTES];
        for (byte, pair) in key.iter_mut().zip(digits.chunks_exact(2)) {
            let (Some(high), Some(low)) = (hex_value(pair[0]), hex_value(pair[1])) else {
                key.fill(0);
                return Err("it must hold only hexadecimal digits (0-9, a-f)");
            };
            *byte = high << 4 | low;
        }
        Ok(DatabaseKey(key))
    }

    /// Reads the key file at `path` (`Error::KeyFile`, or `BadKeyFile` if no key).
    pub fn read_file(path: &Path) -> Result<DatabaseKey> {
        let unreadable = |cause| Error::KeyFile {
            path: path.to_owned(),
            cause,
        };
        let file = std::fs::File::open(path).map_err(unreadable)?;
        let meta = file.metadata().map_err(unreadable)?;
        if !meta.is_file() {
            return Err(Error::BadKeyFile {
                path: path.to_owned(),
                reason: "it is not a regular file",
            });
        }
        let mut bytes = Vec::with_capacity(2 * KEY_BYTES + 1);
        file.take(MAX_KEY_FILE + 1)
            .read_to_end(&mut bytes)
            .map_err(unreadable)?;
        let parsed = std::str::from_utf8(&bytes)
            .map_err(|_| "it must hold only hexadecimal digits (0-9, a-f)")
            .and_then(DatabaseKey::from_hex);
        bytes.fill(0);
        parsed.map_err(|reason| Error::BadKeyFile {
            path: path.to_owned(),
            reason,
        })
    }

    /// A new random key, from the kernel's generator: the probe's, and the tests'.
    #[cfg(any(test, feature = "probe", feature = "testkit"))]
    pub fn generate() -> std::io::Result<DatabaseKey> {
        let mut key = [0u8; KEY_BYTES];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
        Ok(DatabaseKey(key))
    }

    /// The key as SQLCipher reads a raw key, for `db` only: keep it from any log.
    #[cfg_attr(not(feature = "encryption"), allow(dead_code))]
    pub(crate) fn sqlcipher_literal(&self) -> Secret {
        let mut text = String::with_capacity(2 * KEY_BYTES + 3);
        text.push_str("x'");
        for byte in self.0 {
            text.push(char::from(HEX[usize::from(byte >> 4)]));
            text.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
        text.push('\'');
        Secret(text)
    }

    /// The key as a key file holds it, for a test or the probe that writes one.
    #[cfg(any(test, feature = "probe", feature = "testkit"))]
    pub fn to_hex(&self) -> Secret {
        let literal = self.sqlcipher_literal();
        Secret(literal.0[2..literal.0.len() - 1].to_owned())
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

impl fmt::Debug for DatabaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DatabaseKey(***)")
    }
}

impl Drop for DatabaseKey {
    fn drop(&mut self) {
        zero(&mut self.0);
    }
}

/// Text that holds a key: shown as `***`, zeroed when dropped.
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        let mut bytes = std::mem::take(&mut self.0).into_bytes();
        zero(&mut bytes);
    }
}

/// Zeroes `bytes` in a way the optimizer keeps, though the memory is about to be freed.
fn zero(bytes: &mut [u8]) {
    bytes.fill(0);
    std::hint::black_box(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";

    #[test]
    fn a_key_is_64_hex_digits_and_nothing_else() {
        let key = DatabaseKey::from_hex(&format!("{HEX_KEY}\n")).unwrap();
        assert_eq!(
            key.sqlcipher_literal().expose(),
            format!("x'{}'", HEX_KEY.to_lowercase())
        );
        assert_eq!(key.to_hex().expose(), HEX_KEY.to_lowercase());
        for bad in [
            "",
            &HEX_KEY[..62],
            &format!("{HEX_KEY}00"),
            &format!("{}zz", &HEX_KEY[..62]),
            &format!("{} {}", &HEX_KEY[..32], &HEX_KEY[32..]),
            "my secret passphrase",
        ] {
            assert!(DatabaseKey::from_hex(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_key_never_shows() {
        let key = DatabaseKey::from_hex(HEX_KEY).unwrap();
        let shown = format!("{key:?} {:?} {:?}", key.sqlcipher_literal(), key.to_hex());
        assert!(!shown.to_lowercase().contains("aabbcc"), "{shown}");
        let config = crate::Config {
            key: Some(key),
            ..crate::Config::in_dir(Path::new("/nowhere"))
        };
        assert!(!format!("{config:?}").contains("aabbcc"));
    }

    #[test]
    fn a_key_file_that_does_not_hold_a_key_is_refused_and_a_missing_one_is_unreadable() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("key");
        std::fs::write(&good, format!("{HEX_KEY}\n")).unwrap();
        assert_eq!(
            DatabaseKey::read_file(&good).unwrap(),
            DatabaseKey::from_hex(HEX_KEY).unwrap()
        );
        let bad = dir.path().join("bad");
        std::fs::write(&bad, "hunter2\n").unwrap();
        let err = DatabaseKey::read_file(&bad).unwrap_err();
        assert!(matches!(err, Error::BadKeyFile { .. }), "{err:?}");
        assert!(err.is_refused());
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let err = DatabaseKey::read_file(dir.path()).unwrap_err();
        assert!(matches!(err, Error::BadKeyFile { .. }), "{err:?}");
        let err = DatabaseKey::read_file(&dir.path().join("missing")).unwrap_err();
        assert!(matches!(err, Error::KeyFile { .. }), "{err:?}");
        assert!(!err.is_refused());
    }

    #[test]
    fn sharing_names_the_modes_and_what_is_too_wide() {
        assert_eq!(
            (Sharing::Owner.file_mode(), Sharing::Owner.dir_mode()),
            (0o600, 0o700)
        );
        assert_eq!(
            (Sharing::Group.file_mode(), Sharing::Group.dir_mode()),
            (0o660, 0o2770)
        );
        assert_eq!(Sharing::Owner.excess(0o644), 0o044);
        assert_eq!(Sharing::Owner.excess(0o600), 0);
        assert_eq!(Sharing::Group.excess(0o660), 0);
        assert_eq!(Sharing::Group.excess(0o664), 0o004);
    }
}
