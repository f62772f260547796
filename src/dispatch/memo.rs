//! The memo: successful reads shared across dispatches, within a byte budget, least
//! recently used evicted first. It keeps reads; it never reads a file itself.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use super::Prepared;
use crate::attachments::AttachmentUri;

/// The restore memo's default budget: 64 MiB of encoded content.
pub const DEFAULT_MEMO_BUDGET: u64 = 64 * 1024 * 1024;

/// Successful reads shared across the dispatches of one turn (normal delivery and
/// drains) or one restore. A cheap handle: clones share one memo.
///
/// A failed read is never kept, so the next dispatch reads the file again. Successes
/// are kept up to a budget of encoded bytes, least recently used evicted first, so a
/// long history cannot pile every file up in memory; a file evicted and needed again
/// is read again, and its blocks carry the path of that new read. Within one message
/// duplicates always share one read and one encoding, whatever the budget.
#[derive(Debug, Clone)]
pub struct Memo {
    inner: Arc<Mutex<Lru>>,
}

#[derive(Debug)]
struct Lru {
    budget: u64,
    used: u64,
    /// Bumped on every use, so the smallest tick is the least recently used entry.
    tick: u64,
    /// foldhash, not SipHash: a restore looks every reference up here, and the keys are
    /// the store's own URIs (no one picks them to collide).
    entries: HashMap<AttachmentUri, Entry, foldhash::fast::RandomState>,
    by_age: BTreeMap<u64, AttachmentUri>,
}

#[derive(Debug)]
struct Entry {
    prepared: Arc<Prepared>,
    cost: u64,
    tick: u64,
}

impl Default for Memo {
    fn default() -> Memo {
        Memo::new()
    }
}

impl Memo {
    /// A memo with the default budget, [`DEFAULT_MEMO_BUDGET`].
    pub fn new() -> Memo {
        Memo::with_budget(DEFAULT_MEMO_BUDGET)
    }

    /// A memo that keeps at most `budget` bytes of encoded content. A budget of 0
    /// keeps nothing across messages.
    pub fn with_budget(budget: u64) -> Memo {
        Memo {
            inner: Arc::new(Mutex::new(Lru {
                budget,
                used: 0,
                tick: 0,
                entries: Default::default(),
                by_age: BTreeMap::new(),
            })),
        }
    }

    pub fn budget(&self) -> u64 {
        self.lock().budget
    }

    /// Encoded bytes held now; never more than the budget.
    pub fn used(&self) -> u64 {
        self.lock().used
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a successful read of `uri` is held.
    pub fn contains(&self, uri: &AttachmentUri) -> bool {
        self.lock().entries.contains_key(uri)
    }

    /// The held read of `uri`, marked as just used.
    pub(super) fn get(&self, uri: &AttachmentUri) -> Option<Arc<Prepared>> {
        let mut lru = self.lock();
        lru.tick += 1;
        let tick = lru.tick;
        let Lru {
            entries, by_age, ..
        } = &mut *lru;
        let entry = entries.get_mut(uri)?;
        // The key moves to its new age rather than being copied there.
        let key = by_age.remove(&entry.tick).unwrap_or_else(|| uri.clone());
        entry.tick = tick;
        by_age.insert(tick, key);
        Some(entry.prepared.clone())
    }

    /// Keeps a successful read, evicting the least recently used entries to make room.
    /// A read larger than the whole budget is not kept at all.
    pub(super) fn insert(&self, uri: &AttachmentUri, prepared: Arc<Prepared>) {
        let cost = prepared.content.held_bytes();
        let mut lru = self.lock();
        if cost > lru.budget {
            return;
        }
        if let Some(old) = lru.entries.remove(uri) {
            lru.by_age.remove(&old.tick);
            lru.used -= old.cost;
        }
        while lru.used + cost > lru.budget {
            let Some((_, victim)) = lru.by_age.pop_first() else {
                break;
            };
            if let Some(old) = lru.entries.remove(&victim) {
                lru.used -= old.cost;
            }
        }
        lru.tick += 1;
        let tick = lru.tick;
        lru.used += cost;
        lru.by_age.insert(tick, uri.clone());
        lru.entries.insert(
            uri.clone(),
            Entry {
                prepared,
                cost,
                tick,
            },
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        // A panic while holding this lock cannot leave a half-made entry (each change
        // is made before `used` is), so a poisoned memo is still sound to use.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}
