//! The shared encoding of one read (`SharedStr`) and the base64 encoder that makes it.
//! An encoding is made once per read and shared by `Arc`; nothing here reads a file.

use std::sync::Arc;

/// An encoding shared by every block made from one read. It wraps the `String` the
/// encoding was made in, so sharing it costs no copy: an `Arc<str>` made from a
/// `String` copies every byte into a new allocation, which for a 16 MiB image is
/// 21 MB copied and a second buffer faulted in.
#[derive(Clone)]
pub struct SharedStr(Arc<String>);

impl SharedStr {
    /// Whether both are the one buffer (not merely equal text).
    pub fn ptr_eq(a: &SharedStr, b: &SharedStr) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    /// The text as a `String`: moved out when this is its last holder, else copied
    /// into a string of exactly its length.
    pub fn into_string(self) -> String {
        Arc::try_unwrap(self.0).unwrap_or_else(|shared| String::from(shared.as_str()))
    }

    /// The bytes the buffer holds.
    pub(crate) fn capacity(&self) -> usize {
        self.0.capacity()
    }
}

impl PartialEq for SharedStr {
    fn eq(&self, other: &SharedStr) -> bool {
        **self == **other
    }
}

impl Eq for SharedStr {}

impl std::ops::Deref for SharedStr {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl std::fmt::Display for SharedStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

impl From<String> for SharedStr {
    fn from(text: String) -> SharedStr {
        SharedStr(Arc::new(text))
    }
}

impl From<&str> for SharedStr {
    fn from(s: &str) -> SharedStr {
        SharedStr::from(s.to_owned())
    }
}

/// Standard base64 with padding, as the `base64` crate writes it, by a SIMD encoder
/// (picked at run time for the CPU): a large attachment's encoding is most of what a
/// dispatch or a restore spends its time on.
pub(crate) fn encode_base64(bytes: &[u8]) -> SharedStr {
    base64_simd::STANDARD.encode_to_string(bytes).into()
}
