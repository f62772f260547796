//! The shared encoding of one read (`SharedStr`) and the base64 encoder that makes it.
//! An encoding is made once per read and shared by `Arc`; nothing here reads a file.

use std::sync::Arc;

use super::Recycler;

/// An encoding shared by every block made from one read. It wraps the `String` the
/// encoding was made in, so sharing it costs no copy: an `Arc<str>` made from a
/// `String` copies every byte into a new allocation, which for a 16 MiB image is
/// 21 MB copied and a second buffer faulted in. An encoding made in a recycled buffer
/// gives that buffer back when the last block holding it is dropped.
#[derive(Clone)]
pub struct SharedStr(Arc<Kept>);

struct Kept {
    text: String,
    home: Option<Arc<Recycler>>,
}

impl Drop for Kept {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            home.give(std::mem::take(&mut self.text));
        }
    }
}

impl SharedStr {
    /// Whether both are the one buffer (not merely equal text).
    pub fn ptr_eq(a: &SharedStr, b: &SharedStr) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    /// The text as a `String`: moved out when this is its last holder, else copied
    /// into a string of exactly its length.
    pub fn into_string(self) -> String {
        match Arc::try_unwrap(self.0) {
            Ok(mut kept) => {
                // Moved out, the buffer is the caller's; nothing goes back to a recycler.
                kept.home = None;
                std::mem::take(&mut kept.text)
            }
            Err(shared) => String::from(shared.text.as_str()),
        }
    }

    /// The bytes the buffer holds, which for a recycled one may exceed its text.
    pub(crate) fn capacity(&self) -> usize {
        self.0.text.capacity()
    }

    /// `text`, to be given back to `home` once no block holds it.
    fn recycled(text: String, home: Arc<Recycler>) -> SharedStr {
        SharedStr(Arc::new(Kept {
            text,
            home: Some(home),
        }))
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
        &self.0.text
    }
}

impl std::fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl From<String> for SharedStr {
    fn from(text: String) -> SharedStr {
        SharedStr(Arc::new(Kept { text, home: None }))
    }
}

impl From<&str> for SharedStr {
    fn from(s: &str) -> SharedStr {
        SharedStr::from(s.to_owned())
    }
}

/// Standard base64 with padding, as the `base64` crate writes it, by a SIMD encoder
/// (picked at run time for the CPU): a large attachment's encoding is most of what a
/// dispatch or a restore spends its time on. The buffer comes from `recycler` when
/// there is one.
pub(crate) fn encode_base64(bytes: &[u8], recycler: Option<&Arc<Recycler>>) -> SharedStr {
    let base64 = base64_simd::STANDARD;
    match recycler {
        Some(home) => {
            let mut buffer = home.take(base64.encoded_length(bytes.len()));
            base64.encode_append(bytes, &mut buffer);
            SharedStr::recycled(buffer, home.clone())
        }
        None => base64.encode_to_string(bytes).into(),
    }
}
