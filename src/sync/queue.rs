//! A bounded queue: many senders that never wait (a full queue is the sender's to handle), one
//! receiver. An ACP connection holds three for its life (`door`: its own messages, the lanes
//! attached, each lane's deferred answers).
//!
//! Not tokio's `mpsc`: its channel is about 800 bytes before the first message (a cache-padded
//! header and a first block of 32 slots, kept), 2.4 KiB of an idle `/acp` connection's 8 KiB of
//! heap (issue #46). This one is a mutex-guarded `VecDeque`, allocated as items arrive and given
//! back once drained, and an atomic count the receiver reads before it takes the lock, so polling
//! an empty queue takes no lock (a lane looks at its deferred answers whenever its converted batch
//! runs out, on the `/acp` relay's path).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;

use super::lock;

/// Gives a drained queue's room back; a queue still holding anything keeps it. What waits for a
/// client that may sit idle for hours (a connection's queues, a lane's batch) holds no slots then.
pub fn give_back_drained<T>(queue: &mut VecDeque<T>) {
    if queue.is_empty() && queue.capacity() > 0 {
        *queue = VecDeque::new();
    }
}

/// What a queue's senders and its receiver share.
struct Inner<T> {
    bound: usize,
    items: Mutex<VecDeque<T>>,
    /// `items`' length, written under its lock, read without it.
    len: AtomicUsize,
    senders: AtomicUsize,
    receiver_alive: AtomicBool,
    waker: AtomicWaker,
}

/// A queue of at most `bound` items.
pub fn bounded<T>(bound: usize) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Inner {
        bound,
        items: Mutex::new(VecDeque::new()),
        len: AtomicUsize::new(0),
        senders: AtomicUsize::new(1),
        receiver_alive: AtomicBool::new(true),
        waker: AtomicWaker::new(),
    });
    (Sender(shared.clone()), Receiver(shared))
}

/// Why an item was not queued; it is handed back.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused<T> {
    /// `bound` items wait.
    Full(T),
    /// The receiver is gone.
    Closed(T),
}

pub struct Sender<T>(Arc<Inner<T>>);

impl<T> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender").field("len", &self.0.len.load(Ordering::Relaxed)).finish_non_exhaustive()
    }
}

impl<T> Sender<T> {
    /// Queues `item` now, or hands it back.
    pub fn try_send(&self, item: T) -> Result<(), Refused<T>> {
        {
            let mut items = lock(&self.0.items);
            // Read under the lock the receiver's drop takes, so nothing is queued after it drained.
            if !self.0.receiver_alive.load(Ordering::Acquire) {
                return Err(Refused::Closed(item));
            }
            if items.len() >= self.0.bound {
                return Err(Refused::Full(item));
            }
            items.push_back(item);
            self.0.len.store(items.len(), Ordering::Release);
        }
        self.0.waker.wake();
        Ok(())
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.0.senders.fetch_add(1, Ordering::Relaxed);
        Sender(self.0.clone())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        // The last sender gone: a waiting receiver wakes to see the end.
        if self.0.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.waker.wake();
        }
    }
}

pub struct Receiver<T>(Arc<Inner<T>>);

impl<T> std::fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver").field("len", &self.0.len.load(Ordering::Relaxed)).finish_non_exhaustive()
    }
}

impl<T> Receiver<T> {
    /// The next item; `None` once it is empty and every sender is gone.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        if let Some(item) = self.try_recv() {
            return Poll::Ready(Some(item));
        }
        self.0.waker.register(cx.waker());
        // Looked at again after registering: an item queued in between has woken no one.
        if let Some(item) = self.try_recv() {
            return Poll::Ready(Some(item));
        }
        if self.0.senders.load(Ordering::Acquire) == 0 {
            // A sender's last item is queued before its drop, so this look misses nothing.
            return Poll::Ready(self.try_recv());
        }
        Poll::Pending
    }

    pub async fn recv(&mut self) -> Option<T> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The next item if one waits.
    pub fn try_recv(&mut self) -> Option<T> {
        if self.0.len.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut items = lock(&self.0.items);
        let item = items.pop_front();
        self.0.len.store(items.len(), Ordering::Release);
        // Drained: its room is given back (an idle connection holds none).
        give_back_drained(&mut items);
        item
    }

    pub fn is_empty(&self) -> bool {
        self.0.len.load(Ordering::Acquire) == 0
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let left = {
            let mut items = lock(&self.0.items);
            self.0.receiver_alive.store(false, Ordering::Release);
            self.0.len.store(0, Ordering::Release);
            std::mem::take(&mut *items)
        };
        // Dropped outside the lock: an item (a lane) may take other locks as it goes.
        drop(left);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Poll;

    use super::{Refused, bounded, give_back_drained};

    #[test]
    fn it_holds_at_most_its_bound_in_order_and_hands_the_rest_back() {
        let (tx, mut rx) = bounded(2);
        assert_eq!(tx.try_send(1), Ok(()));
        assert_eq!(tx.try_send(2), Ok(()));
        assert_eq!(tx.try_send(3), Err(Refused::Full(3)));
        assert!(!rx.is_empty());
        assert_eq!(rx.try_recv(), Some(1));
        assert_eq!(tx.try_send(4), Ok(()), "one taken, one room");
        assert_eq!(rx.try_recv(), Some(2));
        assert_eq!(rx.try_recv(), Some(4));
        assert_eq!(rx.try_recv(), None);
        assert!(rx.is_empty());
    }

    #[test]
    fn a_drained_queue_gives_its_room_back_and_a_busy_one_keeps_it() {
        let mut queue: VecDeque<u64> = (0..100).collect();
        give_back_drained(&mut queue);
        assert_eq!(queue.len(), 100, "a queue with messages keeps them");
        assert!(queue.capacity() >= 100);
        queue.clear();
        give_back_drained(&mut queue);
        assert_eq!(queue.capacity(), 0, "an idle lane holds no batch's worth of slots");
        queue.push_back(1);
        assert_eq!(queue.pop_front(), Some(1), "and the next batch allocates its own");
    }

    #[test]
    fn a_drained_queue_gives_its_room_back() {
        let (tx, mut rx) = bounded(64);
        for i in 0..40 {
            tx.try_send(i).expect("room");
        }
        assert!(super::lock(&rx.0.items).capacity() >= 40);
        while rx.try_recv().is_some() {}
        assert_eq!(super::lock(&rx.0.items).capacity(), 0);
    }

    #[test]
    fn a_sender_is_refused_once_the_receiver_is_gone_and_what_waited_is_dropped() {
        struct Counted(Arc<AtomicUsize>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = bounded(4);
        assert!(tx.try_send(Counted(dropped.clone())).is_ok());
        drop(rx);
        assert_eq!(dropped.load(Ordering::SeqCst), 1, "dropped with the receiver, not with the last sender");
        assert!(matches!(tx.try_send(Counted(dropped.clone())), Err(Refused::Closed(_))));
    }

    #[tokio::test]
    async fn a_waiting_receiver_wakes_for_an_item_and_ends_after_the_last_sender() {
        let (tx, mut rx) = bounded::<u32>(4);
        let second = tx.clone();
        let waiting = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(item) = rx.recv().await {
                got.push(item);
            }
            got
        });
        // Whether the task waits already or not, it must see both and then the end.
        tokio::task::yield_now().await;
        tx.try_send(7).expect("room");
        drop(tx);
        second.try_send(8).expect("room");
        drop(second);
        assert_eq!(waiting.await.expect("the receiver's task"), vec![7, 8]);
    }

    /// A waker that records whether it was woken.
    struct Woken(std::sync::atomic::AtomicBool);

    impl futures_util::task::ArcWake for Woken {
        fn wake_by_ref(this: &Arc<Self>) {
            this.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_waiting_receiver_is_woken_by_the_last_senders_drop_and_only_by_it() {
        let woken = Arc::new(Woken(std::sync::atomic::AtomicBool::new(false)));
        let waker = futures_util::task::waker(woken.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        let (tx, mut rx) = bounded::<u32>(1);
        let second = tx.clone();
        assert_eq!(rx.poll_recv(&mut cx), Poll::Pending);
        drop(second);
        assert!(!woken.0.load(Ordering::SeqCst), "a sender remains: nothing for the receiver to see");
        drop(tx);
        assert!(woken.0.load(Ordering::SeqCst), "the queue has ended: its receiver must look");
        assert_eq!(rx.poll_recv(&mut cx), Poll::Ready(None));
    }

    #[test]
    fn an_empty_queue_with_a_sender_is_pending_and_without_one_has_ended() {
        let (tx, mut rx) = bounded::<u32>(1);
        let waker = futures_util::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert_eq!(rx.poll_recv(&mut cx), Poll::Pending);
        tx.try_send(1).expect("room");
        drop(tx);
        assert_eq!(rx.poll_recv(&mut cx), Poll::Ready(Some(1)), "an item queued before the last sender left");
        assert_eq!(rx.poll_recv(&mut cx), Poll::Ready(None));
    }
}
