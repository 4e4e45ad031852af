//! The router's usage queue (docs/rules/router.md §5 "Usage", docs/decisions.md §19): a bounded
//! in-memory list the request path appends one [`UsageRecord`] to under a short lock, drained
//! by one writer (`jobs::router::spawn_usage_writer`) every second or as soon as a batch is
//! full. A request wakes nobody, except the one that fills a batch. A full queue drops the
//! record (counted in `quota_patrol_router_usage_dropped_total`).
//! Must not: block, write to the database, or log a record.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

use crate::core::router::UsageRecord;

/// Records the queue holds at most (contract: 8192; more are dropped and counted).
pub const USAGE_QUEUE_CAPACITY: usize = 8192;
/// Records that make a batch: the request that queues the batch's last record wakes the writer.
pub const USAGE_BATCH: usize = 128;

/// The bounded queue between the request path and the usage writer.
#[derive(Debug)]
pub struct UsageQueue {
    rows: Mutex<Vec<UsageRecord>>,
    capacity: usize,
    batch: usize,
    /// Wakes the reader: a full batch, the close, or every record when `eager`.
    wake: Notify,
    /// Set by [`UsageQueue::close`] (under the `rows` lock); pushes are refused from then on.
    closed: AtomicBool,
    /// Wake the reader on every record (a reader that takes them one by one: tests).
    eager: AtomicBool,
}

impl UsageQueue {
    /// An open, empty queue of at most `capacity` records; the reader is woken at each
    /// `batch`-th record (`batch` ≥ 1).
    pub fn new(capacity: usize, batch: usize) -> Self {
        Self {
            rows: Mutex::new(Vec::with_capacity(batch.min(capacity))),
            capacity,
            batch: batch.max(1),
            wake: Notify::new(),
            closed: AtomicBool::new(false),
            eager: AtomicBool::new(false),
        }
    }

    /// Appends `record`; `false` (the record dropped) when the queue is full or closed.
    pub fn push(&self, record: UsageRecord) -> bool {
        let len = {
            let mut rows = self.rows.lock().expect("usage queue lock");
            if rows.len() >= self.capacity || self.closed.load(Ordering::Relaxed) {
                return false;
            }
            rows.push(record);
            rows.len()
        };
        if len % self.batch == 0 || self.eager.load(Ordering::Relaxed) {
            self.wake.notify_one();
        }
        true
    }

    /// Moves every queued record into `out` (appended, oldest first) and says whether the
    /// queue was closed before the move: then nothing more will ever come.
    pub fn drain_into(&self, out: &mut Vec<UsageRecord>) -> bool {
        let mut rows = self.rows.lock().expect("usage queue lock");
        let closed = self.closed.load(Ordering::Relaxed);
        if out.is_empty() {
            std::mem::swap(&mut *rows, out);
        } else {
            out.append(&mut rows);
        }
        closed
    }

    /// Waits for a full batch, the close, or (eager) any record. A wake given while nobody
    /// waited is kept for the next call.
    pub async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Closes the queue: later pushes are refused; the reader is woken to drain the rest.
    pub fn close(&self) {
        {
            let _rows = self.rows.lock().expect("usage queue lock");
            self.closed.store(true, Ordering::Relaxed);
        }
        self.wake.notify_one();
    }

    /// Records queued now (tests).
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.rows.lock().expect("usage queue lock").len()
    }
}

/// Reads the records one by one, in order, instead of the writer (tests, tools): the queue
/// wakes it on every record.
#[derive(Debug)]
pub struct UsageReceiver {
    queue: std::sync::Arc<UsageQueue>,
    taken: VecDeque<UsageRecord>,
    buf: Vec<UsageRecord>,
}

impl UsageReceiver {
    /// A reader of `queue` (switches the queue to waking on every record).
    pub fn new(queue: std::sync::Arc<UsageQueue>) -> Self {
        queue.eager.store(true, Ordering::Relaxed);
        Self {
            queue,
            taken: VecDeque::new(),
            buf: Vec::new(),
        }
    }

    /// The next record without waiting; `Err` when none is queued.
    pub fn try_recv(&mut self) -> Result<UsageRecord, tokio::sync::mpsc::error::TryRecvError> {
        if let Some(r) = self.taken.pop_front() {
            return Ok(r);
        }
        let closed = self.queue.drain_into(&mut self.buf);
        self.taken.extend(self.buf.drain(..));
        match self.taken.pop_front() {
            Some(r) => Ok(r),
            None if closed => Err(tokio::sync::mpsc::error::TryRecvError::Disconnected),
            None => Err(tokio::sync::mpsc::error::TryRecvError::Empty),
        }
    }

    /// The next record; `None` once the queue is closed and empty.
    pub async fn recv(&mut self) -> Option<UsageRecord> {
        loop {
            match self.try_recv() {
                Ok(r) => return Some(r),
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => return None,
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => self.queue.woken().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::router::Api;

    fn record(i: u64) -> UsageRecord {
        UsageRecord {
            at: chrono::DateTime::UNIX_EPOCH,
            api: Api::ChatCompletions,
            requested_model: "m".into(),
            pool: None,
            model: None,
            account: None,
            session_key_hash: None,
            ok: true,
            status: 200,
            prompt_tokens: i,
            completion_tokens: 0,
            cached_tokens: 0,
            attempts: 1,
            duration_ms: 1,
            ttfb_ms: None,
        }
    }

    #[tokio::test]
    async fn a_full_batch_wakes_the_reader_and_a_full_queue_drops() {
        let q = UsageQueue::new(5, 2);
        assert!(q.push(record(0)));
        let mut out = Vec::new();
        // One record: no wake is pending (a pending one resolves at the first poll).
        assert!(
            futures_util::FutureExt::now_or_never(q.woken()).is_none(),
            "a single record wakes nobody"
        );
        assert!(q.push(record(1)));
        q.woken().await; // the second record filled a batch
        assert!(!q.drain_into(&mut out));
        assert_eq!(
            out.iter().map(|r| r.prompt_tokens).collect::<Vec<_>>(),
            [0, 1]
        );
        for i in 2..7 {
            assert!(q.push(record(i)));
        }
        assert!(
            !q.push(record(7)),
            "the sixth queued record is over capacity"
        );
        assert_eq!(q.queued(), 5);
        q.close();
        assert!(!q.push(record(8)), "a closed queue refuses");
        out.clear();
        assert!(q.drain_into(&mut out), "the drain sees the close");
        assert_eq!(out.len(), 5);
    }

    #[tokio::test]
    async fn the_receiver_reads_records_one_by_one_then_ends_at_the_close() {
        let q = std::sync::Arc::new(UsageQueue::new(100, 50));
        let mut rx = UsageReceiver::new(q.clone());
        assert!(rx.try_recv().is_err());
        let waiting = tokio::spawn(async move {
            let first = rx.recv().await.map(|r| r.prompt_tokens);
            (first, rx)
        });
        q.push(record(7));
        let (first, mut rx) = waiting.await.unwrap();
        assert_eq!(first, Some(7), "an eager queue wakes on every record");
        q.push(record(8));
        q.close();
        assert_eq!(rx.recv().await.map(|r| r.prompt_tokens), Some(8));
        assert!(rx.recv().await.is_none());
    }
}
