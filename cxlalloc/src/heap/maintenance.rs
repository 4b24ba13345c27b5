//! Huge-block maintenance on a cadence of its own (docs/design.md §7.4): a thread that drops this
//! process's stale huge mappings every period, for a process that reads huge blocks without
//! allocating or freeing any, whose mappings would otherwise pin blocks other processes freed
//! until its next huge operation.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{Heap, HeapInner};
use crate::error::MaintenanceError;

/// A running maintenance thread ([`Heap::maintain_huge`]). Dropping it stops the thread and
/// waits for it (at most one pass). The thread holds the heap weakly: it ends by itself once
/// every [`Heap`] of the instance is gone.
#[derive(Debug)]
pub struct HugeMaintenance {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl HugeMaintenance {
    /// Starts the thread for `heap`, one pass every `every`.
    pub(super) fn start(heap: &Heap, every: Duration) -> Result<Self, MaintenanceError> {
        let view = heap.mem().huge().ok_or(MaintenanceError::NoHugeHeap)?;
        if !view.in_own_process() {
            return Err(MaintenanceError::ForeignProcess);
        }
        let weak: Weak<HeapInner> = Arc::downgrade(&heap.inner);
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("cxlalloc-huge".into())
            .spawn(move || loop {
                match stopped.recv_timeout(every) {
                    Err(RecvTimeoutError::Timeout) => {}
                    // Stopped, or the handle is gone.
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                // Only for the pass: a Heap kept here would keep the instance open.
                let Some(inner) = weak.upgrade() else { return };
                Heap { inner }.drop_stale_huge();
            })
            .map_err(|e| MaintenanceError::Spawn(e.kind()))?;
        Ok(Self { stop: Some(stop), thread: Some(thread) })
    }
}

impl Drop for HugeMaintenance {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            // A pass that panicked has nothing left to clean up; the join only waits.
            let _ = t.join();
        }
    }
}
