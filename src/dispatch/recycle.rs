//! Encoding buffers kept for reuse once the last block sharing them is dropped, so
//! the next dispatch or restore encodes into memory the process already has rather
//! than into pages the allocator just gave back to the kernel and must fault in again
//! (for a restore that encodes a few MiB, those faults cost more than the encoding).
//! It never keeps more than its limit, never keeps a small buffer (the allocator
//! reuses those itself), and never hands out a buffer with old text still in it.

use std::sync::{Arc, Mutex, MutexGuard};

/// Buffers under this many bytes are left to the allocator.
const SMALLEST: usize = 64 * 1024;

/// A bounded set of empty-to-be encoding buffers, shared by the encodings made from it:
/// each one comes back when the last block holding it is dropped.
#[derive(Debug)]
pub struct Recycler {
    limit: usize,
    free: Mutex<Free>,
}

#[derive(Debug, Default)]
struct Free {
    buffers: Vec<String>,
    /// The capacity of `buffers`, summed.
    held: usize,
}

impl Recycler {
    /// A recycler that keeps at most `limit` bytes of buffers while they are unused.
    pub fn new(limit: usize) -> Arc<Recycler> {
        Arc::new(Recycler {
            limit,
            free: Mutex::new(Free::default()),
        })
    }

    /// An empty buffer with room for `len` bytes: the smallest kept buffer that fits
    /// and is not more than twice as large, else a new one.
    pub fn take(&self, len: usize) -> String {
        if len >= SMALLEST {
            let mut free = self.free();
            let fits = free
                .buffers
                .iter()
                .enumerate()
                .filter(|(_, b)| b.capacity() >= len && b.capacity() / 2 <= len)
                .min_by_key(|(_, b)| b.capacity())
                .map(|(at, _)| at);
            if let Some(at) = fits {
                let mut buffer = free.buffers.swap_remove(at);
                free.held -= buffer.capacity();
                buffer.clear();
                return buffer;
            }
        }
        String::with_capacity(len)
    }

    /// Keeps `buffer` for a later [`Recycler::take`] when it fits under the limit;
    /// frees it otherwise.
    pub fn give(&self, buffer: String) {
        let capacity = buffer.capacity();
        if capacity < SMALLEST {
            return;
        }
        let mut free = self.free();
        if free.held + capacity <= self.limit {
            free.held += capacity;
            free.buffers.push(buffer);
        }
    }

    /// How many bytes of unused buffers are kept now.
    pub fn held(&self) -> usize {
        self.free().held
    }

    fn free(&self) -> MutexGuard<'_, Free> {
        // A panic elsewhere while the lock was held cannot leave the list half-changed
        // in a way that matters: at worst `held` overstates what is kept.
        self.free
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_given_back_is_taken_again_empty() {
        let r = Recycler::new(1 << 20);
        let mut b = r.take(100_000);
        b.push_str(&"x".repeat(100_000));
        let at = b.as_ptr();
        r.give(b);
        assert!(r.held() >= 100_000);
        let again = r.take(90_000);
        assert_eq!(again.as_ptr(), at, "the same buffer");
        assert!(again.is_empty(), "no old text");
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn it_keeps_no_more_than_its_limit_and_no_small_buffers() {
        let r = Recycler::new(300_000);
        for _ in 0..4 {
            r.give(String::with_capacity(100_000));
        }
        assert!(r.held() <= 300_000, "{}", r.held());
        let held = r.held();
        r.give(String::with_capacity(1000));
        assert_eq!(r.held(), held, "a small buffer is left to the allocator");
    }

    #[test]
    fn a_much_larger_buffer_is_not_spent_on_a_small_encoding() {
        let r = Recycler::new(1 << 30);
        r.give(String::with_capacity(10 << 20));
        let small = r.take(100_000);
        assert!(small.capacity() < 1 << 20);
        assert_eq!(r.held(), 10 << 20, "the large buffer is still kept");
    }
}
