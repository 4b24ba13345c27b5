//! The host table (docs/design.md §8.6): which kernels ("domains") use a heap, whether an
//! operator declared one dead, and when each last showed a sign of life.
//!
//! A holder's pid means something only to the kernel that issued it, so a process judges a
//! holder from its `/proc` only when the holder's host entry names the process's own domain.
//! A holder of any other domain is alive until that domain is declared dead
//! ([`HostTable::declare_dead`], run by an operator once the host is known down); then every
//! holder of it is dead, on every host.
//!
//! The entry protocol itself (claim, declare, release, heartbeat) is `crate::protocol::host`,
//! model-checked by loom; this module adds the allocator's view: names, `/proc`, the mCAS port.
//!
//! Registration is lock-free: a process scans the table for a live entry of its domain and
//! otherwise claims a free one with one CAS. Two processes of one domain registering at once
//! may claim two entries; that is harmless, because liveness compares domains, not indices, and
//! declaring a host dead declares every live entry of its domain dead.

use crate::coherence::hwcc::{Hw, McasPort};
pub(crate) use crate::identity::{name_of, name_words};
use crate::persist::shared::HostEntry;
use crate::protocol::host as protocol;
use crate::protocol::HwWord;
use crate::sync::Ordering;
use crate::word::{Holder, HostWord};

/// The heap's host table, as this process reaches it.
#[derive(Clone, Copy)]
pub(crate) struct HostTable<'a> {
    entries: &'a [HostEntry],
    /// No-HWcc model: every write of an entry goes through the mCAS unit.
    port: Option<&'a McasPort>,
}

/// What the table says about one entry (for tools).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HostRecord {
    /// The entry's index: the host id of `cxlalloc recover --host`.
    pub id: u16,
    /// The entry's state.
    pub word: HostWord,
    /// Wall-clock seconds of its last heartbeat.
    pub heartbeat: u64,
    /// Wall-clock seconds at which it registered.
    pub registered: u64,
    /// Its name, as it wrote it.
    pub name: String,
}

/// Why a host could not be declared dead ([`HostTable::declare_dead`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeclareError {
    /// No such entry, or the entry is free.
    NoSuchHost,
    /// The entry is the caller's own domain: a process cannot declare itself dead.
    OwnHost,
    /// The entry now names another domain (this one: its fingerprint) than the operator named:
    /// it was freed and claimed again since the operator read it.
    Reused(u64),
}

/// Wall-clock seconds now (Unix time); 0 if the clock is before 1970.
pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl<'a> HostTable<'a> {
    /// The table at `entries`, written through `port` in the no-HWcc model.
    pub(crate) fn new(entries: &'a [HostEntry], port: Option<&'a McasPort>) -> Self {
        Self { entries, port }
    }

    fn hw(&self, word: &'a crate::sync::AtomicU64) -> Hw<'a> {
        Hw::new(word, self.port)
    }

    /// Entry `id`'s state; `None` for a free entry or an index beyond the table.
    pub(crate) fn get(&self, id: u16) -> Option<HostWord> {
        let e = self.entries.get(usize::from(id))?;
        protocol::judge(&self.hw(&e.word))
    }

    /// Entry `i`'s state word, as the protocol reaches it.
    fn word(&self, i: usize) -> Hw<'a> {
        self.hw(&self.entries[i].word)
    }

    /// The live entry of `domain` (a raw [`crate::identity::domain`]) for the calling process,
    /// claimed if the domain has none: its index, or `None` when every entry is taken.
    pub(crate) fn register(&self, domain: u64, name: &str) -> Option<u16> {
        let n = self.entries.len();
        let (id, claimed) = protocol::register(n, |i| self.word(i), HostWord::fingerprint(domain))?;
        if claimed {
            self.write_advice(&self.entries[id], name_words(name));
        }
        let id = id as u16;
        self.beat(id, now_secs());
        Some(id)
    }

    /// [`HostTable::register`] without the search for a live entry of `domain` first: claims
    /// the first free entry, or joins a live entry of `domain` met before it
    /// ([`protocol::claim`]). For a fresh table, where the search would read every entry to
    /// find none; elsewhere it may give a domain a second entry, which is harmless (liveness
    /// compares domains, not indices).
    pub(crate) fn claim(&self, domain: u64, name: &str) -> Option<u16> {
        let n = self.entries.len();
        let (id, claimed) = protocol::claim(n, |i| self.word(i), HostWord::fingerprint(domain))?;
        if claimed {
            self.write_advice(&self.entries[id], name_words(name));
        }
        let id = id as u16;
        self.beat(id, now_secs());
        Some(id)
    }

    fn write_advice(&self, e: &'a HostEntry, name: [u64; 4]) {
        // Relaxed: advice for tools, which tolerate a stale or half-written name.
        self.hw(&e.registered).store(now_secs(), Ordering::Relaxed);
        for (w, v) in e.name.iter().zip(name) {
            self.hw(w).store(v, Ordering::Relaxed);
        }
    }

    /// Records a sign of life of host `id` at wall-clock second `now`.
    pub(crate) fn beat(&self, id: u16, now: u64) {
        if let Some(e) = self.entries.get(usize::from(id)) {
            protocol::beat(&self.hw(&e.heartbeat), now);
        }
    }

    /// Whether `holder` is alive, as a process of domain `domain` (raw) judges it: a holder of
    /// a host declared dead is dead; one of the caller's own domain is judged from `/proc`;
    /// any other (another domain, or an entry this table cannot read) is alive.
    pub(crate) fn holder_alive(&self, holder: Holder, domain: u64) -> bool {
        match self.get(holder.host) {
            Some(w) if w.dead => false,
            Some(w) if w.domain == HostWord::fingerprint(domain) => crate::identity::is_alive_here(holder),
            _ => true,
        }
    }

    /// Whether `holder` belongs to the caller's own domain (so its liveness is judged here).
    pub(crate) fn is_local(&self, holder: Holder, domain: u64) -> bool {
        self.get(holder.host).is_some_and(|w| w.domain == HostWord::fingerprint(domain))
    }

    /// Declares host `id`, of domain fingerprint `named` (as the operator read it), dead, and
    /// with it every other live entry of that domain: from now on every holder of it, on any
    /// host, is dead. Returns the ids so declared. Refused for a free entry, for an entry that
    /// names another domain than `named` (reused since), and for the caller's own domain
    /// (`domain`, raw). Declaring an already dead host again succeeds. Only entries of `named`
    /// are ever declared: the CASes compare against it, so an entry reused between the check
    /// and the CAS is left alone.
    pub(crate) fn declare_dead(&self, id: u16, named: u64, domain: u64) -> Result<Vec<u16>, DeclareError> {
        let target = self.get(id).ok_or(DeclareError::NoSuchHost)?;
        if target.domain != named {
            return Err(DeclareError::Reused(target.domain));
        }
        if named == HostWord::fingerprint(domain) {
            return Err(DeclareError::OwnHost);
        }
        let n = self.entries.len();
        Ok(protocol::declare_dead(n, |i| self.word(i), named).into_iter().map(|i| i as u16).collect())
    }

    /// Frees entry `id`, declared dead, once nothing names it any more (the caller checked):
    /// false if it is not (any longer) in that state.
    pub(crate) fn release(&self, id: u16) -> bool {
        self.entries.get(usize::from(id)).is_some_and(|e| protocol::release(&self.hw(&e.word)))
    }

    /// Every claimed entry.
    pub(crate) fn records(&self) -> Vec<HostRecord> {
        (0..self.entries.len() as u16)
            .filter_map(|id| {
                let word = self.get(id)?;
                let e = &self.entries[usize::from(id)];
                // Relaxed: advice (see the field contract of HostEntry).
                let load = |w: &'a crate::sync::AtomicU64| self.hw(w).load(Ordering::Relaxed);
                let name = name_of(e.name.each_ref().map(load));
                Some(HostRecord { id, word, heartbeat: load(&e.heartbeat), registered: load(&e.registered), name })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::AtomicU64;

    fn table(n: usize) -> Vec<HostEntry> {
        (0..n)
            .map(|_| {
                HostEntry::from_words(
                    AtomicU64::new(0),
                    AtomicU64::new(0),
                    AtomicU64::new(0),
                    [const { AtomicU64::new(0) }; 4],
                )
            })
            .collect()
    }

    #[test]
    fn a_domain_registers_once() {
        let e = table(4);
        let t = HostTable::new(&e, None);
        assert_eq!(t.register(10, "a"), Some(0));
        assert_eq!(t.register(20, "b"), Some(1));
        assert_eq!(t.register(10, "a"), Some(0));
    }

    #[test]
    fn a_full_table_refuses_a_new_domain_but_not_a_known_one() {
        let e = table(2);
        let t = HostTable::new(&e, None);
        assert_eq!(t.register(10, "a"), Some(0));
        assert_eq!(t.register(20, "b"), Some(1));
        assert_eq!(t.register(30, "c"), None);
        assert_eq!(t.register(20, "b"), Some(1));
    }

    #[test]
    fn a_foreign_holder_is_alive_until_its_host_is_declared_dead() {
        let e = table(4);
        let t = HostTable::new(&e, None);
        let mine = crate::identity::domain();
        let other = mine ^ 0x1234_5678_0000;
        let foreign = t.register(other, "b").map_or(0, |id| id);
        // A pid that surely names nothing in this /proc.
        let h = Holder { pid: (1 << 22) - 2, host: foreign, start: 7 };
        assert!(t.holder_alive(h, mine));
        assert_eq!(t.declare_dead(foreign, HostWord::fingerprint(other), mine), Ok(vec![foreign]));
        assert!(!t.holder_alive(h, mine));
    }

    #[test]
    fn a_holder_of_a_free_or_unknown_entry_is_alive() {
        let e = table(2);
        let t = HostTable::new(&e, None);
        let mine = crate::identity::domain();
        assert!(t.holder_alive(Holder { pid: (1 << 22) - 2, host: 1, start: 7 }, mine));
        assert!(t.holder_alive(Holder { pid: (1 << 22) - 2, host: 900, start: 7 }, mine));
    }

    #[test]
    #[cfg_attr(miri, ignore = "miri cannot read /proc")]
    fn a_local_holder_is_judged_from_proc() {
        let e = table(2);
        let t = HostTable::new(&e, None);
        let mine = crate::identity::domain();
        let id = t.register(mine, "me").map_or(u16::MAX, |id| id);
        let me = crate::identity::current(id);
        assert!(t.holder_alive(me, mine));
        assert!(!t.holder_alive(Holder { start: me.start.wrapping_add(99).max(1), ..me }, mine));
    }

    #[test]
    fn declaring_covers_every_entry_of_the_domain_but_never_ones_own() {
        let e = table(4);
        let t = HostTable::new(&e, None);
        let other = HostWord { domain: HostWord::fingerprint(77), dead: false };
        // Two entries of one domain, as a registration race leaves them.
        e[1].word.store(other.pack(), Ordering::Relaxed);
        e[3].word.store(other.pack(), Ordering::Relaxed);
        assert_eq!(t.register(5, "me"), Some(0));
        let me = HostWord::fingerprint(5);
        assert_eq!(t.declare_dead(0, me, 5), Err(DeclareError::OwnHost));
        assert_eq!(t.declare_dead(2, other.domain, 5), Err(DeclareError::NoSuchHost));
        assert_eq!(t.declare_dead(1, other.domain, 5), Ok(vec![1, 3]));
        assert!(t.get(3).is_some_and(|w| w.dead));
        assert!(t.get(0).is_some_and(|w| !w.dead));
    }

    #[test]
    fn a_dead_entry_is_never_joined_and_is_freed_by_release() {
        let e = table(3);
        let t = HostTable::new(&e, None);
        assert_eq!(t.register(7, "x"), Some(0));
        assert_eq!(t.declare_dead(0, HostWord::fingerprint(7), 5), Ok(vec![0]));
        // The same domain coming back (a reused pid namespace id) gets a live entry of its own.
        assert_eq!(t.register(7, "x"), Some(1));
        assert!(!t.release(1), "a live entry is not released");
        assert!(t.release(0));
        assert_eq!(t.get(0), None);
    }

    #[test]
    fn an_entry_reused_by_another_domain_is_not_declared_by_its_old_name() {
        let e = table(3);
        let t = HostTable::new(&e, None);
        let (gone, innocent) = (HostWord::fingerprint(7), HostWord::fingerprint(8));
        assert_eq!(t.register(7, "gone"), Some(0));
        assert_eq!(t.declare_dead(0, gone, 5), Ok(vec![0]));
        assert!(t.release(0));
        // Entry 0 is claimed again, by another host; an operator repeats `recover --host 0`
        // with the name it read before.
        assert_eq!(t.register(8, "innocent"), Some(0));
        assert_eq!(t.declare_dead(0, gone, 5), Err(DeclareError::Reused(innocent)));
        assert!(t.get(0).is_some_and(|w| !w.dead), "the innocent host stays live");
    }

    #[test]
    fn names_round_trip_and_are_cut_at_a_character() {
        assert_eq!(name_of(name_words("pod-guest-1")), "pod-guest-1");
        let long = "é".repeat(20);
        let cut = name_of(name_words(&long));
        assert_eq!(cut, "é".repeat(16));
    }
}
