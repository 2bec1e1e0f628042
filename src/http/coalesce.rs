//! One socket write for several HTTP/2 DATA frames (`docs/benchmarks.md`, "HTTP/2 beside
//! HTTP/1.1").
//!
//! The h2 crate writes each DATA frame with its own `writev` and flushes after each: a frame is at
//! most the client's `SETTINGS_MAX_FRAME_SIZE`, 16 KiB in every browser, curl, Node.js and hyper, so
//! an event stream's 64 KiB batch left as four socket writes, each a loopback transmit and a
//! wake-up of the reader, where HTTP/1.1 writes it once. [`Coalesce`] sits between h2 and the
//! connection's IO and gathers those frames:
//!
//! - A **DATA frame** (h2 hands its header and payload in one vectored write) is copied into a
//!   buffer, and the flush h2 asks for right after it is **deferred**: h2 goes on to its next frame
//!   in the same pass, which lands in the buffer too. So is any write of a **full frame** (at least
//!   [`FULL_FRAME`] bytes: h2 cut it at the frame size, so more is likely queued behind it).
//! - A short **one-slice write** is h2's own buffer: control frames, and DATA frames too small for
//!   h2 to chain (it copies them in beside the control frames). It is kept behind what is already
//!   buffered, to keep the order, but never defers the flush after it: h2 writes that buffer at the
//!   pass's last flush too, and a deferral there ends the pass with nothing left to write the bytes
//!   (a vote's answer then waited for the connection's next event, up to seconds, after a relay:
//!   `votes_on_the_connection_of_a_relayed_stream_are_answered` in `tests/it/http2.rs`).
//! - The buffer is written at the first flush with nothing written since, which is how h2 ends every
//!   pass of its connection (`Prioritize::poll_complete` flushes when it has no frame left), before
//!   it would pass [`H2_COALESCE_BYTES`], and before a shutdown.
//! - **One yield before a pass's short frames go out.** When a pass ends with only short DATA frames
//!   buffered (no full frame: not a stream's large batch), the task wakes itself and yields once
//!   before writing them. One update fanned out to many streams wakes every stream's task; each
//!   queues its frame and wakes the connection's, which tokio runs next (its LIFO slot), so without
//!   the yield a connection of 125 streams wrote 125 times, one frame a pass. After the yield the
//!   streams already woken have queued theirs, and they leave in one write (`docs/benchmarks.md`,
//!   "one write per stream in an HTTP/2 fan-out").
//! - **Nothing is left unsent**: every poll of an h2 connection (`proto::Connection::poll`, h2 0.4)
//!   that has nothing more to read ends in `Streams::poll_complete`, whose loop ends in a flush once
//!   no frame is left to write; a connection that closes ends in a shutdown. DATA frames are written
//!   only inside that loop, so a flush deferred after one is always followed by one of the two
//!   within the same poll, or by the yield, which wakes the task for the next. A control frame
//!   (SETTINGS, a vote's answer's HEADERS) never defers the flush after it: h2 also writes them
//!   outside that loop (its handshake flushes its SETTINGS and then waits to read), where nothing
//!   would follow a deferred flush; deferring them stalled new connections until a timeout.
//!   (Waking the task on each deferral as a safety net was measured: it cost the gain back in
//!   spurious polls and tripled the resident memory a 1000-stream burst left behind,
//!   `docs/benchmarks.md`.) The integration tests over h2 (`tests/it/http2.rs`) would hang on a
//!   change of that rule in a future h2.
//! - Short control frames pass straight through when nothing is buffered, so a request/response
//!   exchange is not delayed.
//! - The buffer is allocated when a frame is kept and freed once written: an idle connection holds
//!   none (#46).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most the buffer holds before it is written: one event stream's 64 KiB batch (`H2_SEND_BUFFER`)
/// cut into 16 KiB frames, with their headers and a frame of another stream, leaves in one write.
pub(super) const H2_COALESCE_BYTES: usize = 96 * 1024;

/// A write at least this long is a frame cut at the smallest frame size HTTP/2 allows (RFC 9113
/// §4.2: 16 KiB, every client's default), so more data is likely queued behind it.
const FULL_FRAME: usize = 16 * 1024;

/// An HTTP/2 frame's header (RFC 9113 §4.1).
const FRAME_HEADER: usize = 9;

/// The IO under an HTTP/2 connection, gathering its DATA frames (see the module's comment).
#[derive(Debug)]
pub(super) struct Coalesce<I> {
    inner: I,
    /// Bytes accepted but not yet written to `inner`, and how many of them are written already.
    buf: Vec<u8>,
    sent: usize,
    /// A chained DATA frame or a full frame was kept and no flush has been deferred since: the next
    /// flush may wait for the next frame.
    defer: bool,
    /// The buffer holds a full frame: a stream's large batch, written at the end of its pass without
    /// a yield.
    full: bool,
    /// The pass that ended with short frames buffered yielded once before writing them (see
    /// [`Coalesce::poll_flush`]): the next end of a pass writes.
    yielded: bool,
}

impl<I> Coalesce<I> {
    pub(super) fn new(inner: I) -> Coalesce<I> {
        Coalesce { inner, buf: Vec::new(), sent: 0, defer: false, full: false, yielded: false }
    }

    /// Copies a write of `len` bytes into the buffer. Only a chained DATA frame (`data`) or a full
    /// frame lets the flush after it wait: h2 writes those inside the loop that ends in one more
    /// flush. A short one-slice write is h2's own buffer (control frames, and DATA frames too small
    /// to chain, which h2 copies in), which it may write at that last flush itself: deferring it
    /// would end the pass with the bytes held and nothing to write them.
    fn keep(&mut self, bufs: &[io::IoSlice<'_>], len: usize, data: bool) {
        if self.buf.capacity() == 0 {
            self.buf.reserve_exact(H2_COALESCE_BYTES);
        }
        for b in bufs {
            self.buf.extend_from_slice(b);
        }
        self.defer = data || len >= FULL_FRAME;
        self.full |= len >= FULL_FRAME;
    }
}

impl<I: AsyncWrite + Unpin> Coalesce<I> {
    /// Writes the whole buffer, then frees it.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.buf.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.buf = Vec::new();
        self.sent = 0;
        self.defer = false;
        self.full = false;
        self.yielded = false;
        Poll::Ready(Ok(()))
    }

    /// One write, from `poll_write` (one slice) or `poll_write_vectored`.
    fn poll_put(&mut self, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let len = bufs.iter().map(|b| b.len()).sum::<usize>();
        if self.buf.len() + len > H2_COALESCE_BYTES {
            ready!(self.poll_drain(cx))?;
        }
        // Nothing buffered: a short control frame (one slice; a DATA frame is its header and its
        // payload) or a write as large as the whole buffer (a client that accepts large frames)
        // goes straight to the socket, uncopied.
        let data = bufs.iter().filter(|b| !b.is_empty()).count() > 1;
        if self.buf.is_empty() && (len >= H2_COALESCE_BYTES || (!data && len < FULL_FRAME)) {
            return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        }
        self.keep(bufs, len, data);
        Poll::Ready(Ok(len))
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Coalesce<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Coalesce<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_put(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_put(cx, bufs)
    }

    /// Vectored: h2 then hands a frame's header and its payload in one call, whatever the socket.
    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let room = this.buf.len() + FULL_FRAME + FRAME_HEADER <= H2_COALESCE_BYTES;
        if this.defer && room {
            // The next frame is likely already queued, and h2 writes it in this pass; if not, the
            // pass ends in a flush that finds nothing written since and writes the buffer.
            this.defer = false;
            return Poll::Ready(Ok(()));
        }
        if room && !this.full && !this.yielded && !this.buf.is_empty() {
            // The end of a pass with short frames only: let the other streams a publish woke queue
            // theirs first (see the module's comment). Woken now, the task runs after the tasks
            // already queued on this thread; the next end of a pass writes.
            this.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    use super::*;

    /// A socket that records each write it accepts, taking at most `room` bytes until it is given
    /// more (then it answers `Pending`, as a full socket does).
    #[derive(Default)]
    struct Socket {
        writes: Vec<Vec<u8>>,
        room: Option<usize>,
        flushes: usize,
        shut: bool,
    }

    impl AsyncRead for Socket {
        fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, _: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            Poll::Pending
        }
    }

    impl AsyncWrite for Socket {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            let n = buf.len().min(self.room.unwrap_or(usize::MAX));
            if n == 0 {
                return Poll::Pending;
            }
            if let Some(room) = &mut self.room {
                *room -= n;
            }
            self.writes.push(buf[..n].to_vec());
            Poll::Ready(Ok(n))
        }
        fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.flushes += 1;
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.shut = true;
            Poll::Ready(Ok(()))
        }
    }

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    /// What h2 does for one DATA frame: a vectored write of its header and payload, then a flush.
    /// The frame is accepted whole (a short count would leave h2 writing the rest, and a loop
    /// over frames that counts on progress would never end).
    fn frame(io: &mut Coalesce<Socket>, cx: &mut Context<'_>, payload: usize, fill: u8) -> usize {
        let header = [fill; 9];
        let body = vec![fill; payload];
        let bufs = [io::IoSlice::new(&header), io::IoSlice::new(&body)];
        let Poll::Ready(Ok(n)) = Pin::new(&mut *io).poll_write_vectored(cx, &bufs) else {
            panic!("the write was not accepted");
        };
        assert_eq!(n, 9 + payload, "the frame was not accepted whole");
        assert!(Pin::new(&mut *io).poll_flush(cx).is_ready());
        n
    }

    /// What h2 does with its own buffer (control frames, DATA frames too small to chain): one
    /// slice, accepted whole; the flush is the caller's.
    fn one_slice(io: &mut Coalesce<Socket>, cx: &mut Context<'_>, bytes: &[u8]) {
        let Poll::Ready(Ok(n)) = Pin::new(&mut *io).poll_write(cx, bytes) else {
            panic!("the write was not accepted");
        };
        assert_eq!(n, bytes.len(), "the write was not accepted whole");
    }

    /// h2's end of a pass: no frame left, one more flush.
    fn end_of_pass(io: &mut Coalesce<Socket>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(io).poll_flush(cx)
    }

    #[test]
    fn a_batch_cut_into_full_frames_leaves_in_one_write_at_the_end_of_its_pass_without_a_yield() {
        let (wakes, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        let mut io = Coalesce::new(Socket::default());
        for fill in 1..=3 {
            assert_eq!(frame(&mut io, &mut cx, FULL_FRAME, fill), FULL_FRAME + 9);
            assert!(io.inner.writes.is_empty(), "frame {fill} was written on its own");
        }
        assert_eq!(frame(&mut io, &mut cx, 100, 4), 109);
        assert!(io.inner.writes.is_empty(), "the last, shorter frame waits for the end of the pass");
        assert!(end_of_pass(&mut io, &mut cx).is_ready());
        assert_eq!(io.inner.writes.len(), 1);
        let written = &io.inner.writes[0];
        assert_eq!(written.len(), 3 * (FULL_FRAME + 9) + 109);
        // In order: each frame's bytes where h2 put them.
        assert_eq!((written[0], written[FULL_FRAME + 9], written[written.len() - 1]), (1, 2, 4));
        assert_eq!(io.inner.flushes, 1);
        assert_eq!(wakes.0.load(Ordering::SeqCst), 0, "no spurious wake-up");
        assert_eq!(io.buf.capacity(), 0, "the buffer is freed once written");
    }

    #[test]
    fn a_64_kib_batch_of_four_full_frames_leaves_in_one_write_at_the_end_of_the_pass() {
        let (_, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        let mut io = Coalesce::new(Socket::default());
        for fill in 1..=4 {
            frame(&mut io, &mut cx, FULL_FRAME, fill);
        }
        assert!(io.inner.writes.is_empty());
        assert!(Pin::new(&mut io).poll_flush(&mut cx).is_ready());
        assert_eq!(io.inner.writes.len(), 1);
        assert_eq!(io.inner.writes[0].len(), 4 * (FULL_FRAME + 9));
    }

    #[test]
    fn a_flush_with_nothing_written_since_the_deferred_one_writes_the_buffer() {
        let (_, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        let mut io = Coalesce::new(Socket::default());
        frame(&mut io, &mut cx, FULL_FRAME, 1);
        assert!(io.inner.writes.is_empty());
        // h2's end of pass: no frame left, one more flush.
        assert!(Pin::new(&mut io).poll_flush(&mut cx).is_ready());
        assert_eq!(io.inner.writes.concat().len(), FULL_FRAME + 9);
        assert_eq!(io.inner.flushes, 1);
    }

    #[test]
    fn short_control_frames_pass_straight_through_when_nothing_is_buffered() {
        let (wakes, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        let mut io = Coalesce::new(Socket::default());
        one_slice(&mut io, &mut cx, &[4; FULL_FRAME - 1]);
        assert_eq!(io.inner.writes.len(), 1, "a control frame is not held back");
        assert!(end_of_pass(&mut io, &mut cx).is_ready());
        assert_eq!(io.inner.flushes, 1);
        assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
        assert_eq!(io.buf.capacity(), 0, "nothing was copied");
    }

    /// One update fanned out to the streams of a connection: each stream's short DATA frame is
    /// held, the pass ends in one yield (the task woken once), and the frames the next pass adds
    /// leave with them in one write, in order; the pass after that yields again.
    #[test]
    fn short_data_frames_wait_one_yield_then_leave_together_in_one_write() {
        let (wakes, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        let mut io = Coalesce::new(Socket::default());
        frame(&mut io, &mut cx, 300, 1);
        assert!(end_of_pass(&mut io, &mut cx).is_pending(), "the first end of a pass yields");
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "and wakes its task for the next");
        assert!(io.inner.writes.is_empty());
        // The next pass: the frames the other streams queued meanwhile, and h2's own buffer
        // behind them (a control frame), written at the pass's last flush, which keeps its place.
        frame(&mut io, &mut cx, 300, 2);
        frame(&mut io, &mut cx, 300, 3);
        assert!(io.inner.writes.is_empty());
        one_slice(&mut io, &mut cx, &[5; 17]);
        assert!(end_of_pass(&mut io, &mut cx).is_ready());
        assert_eq!(io.inner.writes.len(), 1);
        let written = &io.inner.writes[0];
        assert_eq!(written.len(), 3 * 309 + 17);
        assert_eq!((written[0], written[309], written[618], written[written.len() - 1]), (1, 2, 3, 5));
        assert_eq!(io.inner.flushes, 1);
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "one yield for the pass");
        assert_eq!(io.buf.capacity(), 0, "the buffer is freed once written");
        frame(&mut io, &mut cx, 300, 6);
        assert!(end_of_pass(&mut io, &mut cx).is_pending(), "a new pass yields again");
        assert_eq!(wakes.0.load(Ordering::SeqCst), 2);
        assert!(end_of_pass(&mut io, &mut cx).is_ready());
        assert_eq!(io.inner.writes.len(), 2);
    }

    /// h2's own buffer written at a pass's last flush (a DATA frame too small to chain, copied in
    /// with a control frame: one slice) behind a held DATA frame: that flush is the end of the
    /// pass, so it yields and the next writes, never a deferral that leaves the bytes with
    /// nothing to write them (seen as a vote's answer held for seconds).
    #[test]
    fn a_one_slice_write_at_the_last_flush_is_not_deferred() {
        let (wakes, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        let mut io = Coalesce::new(Socket::default());
        frame(&mut io, &mut cx, 300, 1);
        one_slice(&mut io, &mut cx, &[7; 120]);
        assert!(io.inner.writes.is_empty(), "kept behind the held frame, in order");
        assert!(end_of_pass(&mut io, &mut cx).is_pending(), "the pass's last flush yields");
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "and wakes its task to write");
        assert!(end_of_pass(&mut io, &mut cx).is_ready());
        assert_eq!(io.inner.writes.len(), 1);
        assert_eq!(io.inner.writes[0].len(), 309 + 120);
        assert_eq!(io.inner.writes[0][309], 7);
    }

    /// Short frames that leave no room for another full frame are written at once, without a
    /// yield: one byte less and the pass yields.
    #[test]
    fn short_frames_filling_the_buffer_go_without_a_yield() {
        let (wakes, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        for (held, yields) in [
            (H2_COALESCE_BYTES - FULL_FRAME - FRAME_HEADER, true),
            (H2_COALESCE_BYTES - FULL_FRAME - FRAME_HEADER + 1, false),
        ] {
            let before = wakes.0.load(Ordering::SeqCst);
            let mut io = Coalesce::new(Socket::default());
            let mut left = held;
            while left > 0 {
                let payload = (FULL_FRAME - 1 - FRAME_HEADER).min(left - FRAME_HEADER);
                left -= frame(&mut io, &mut cx, payload, 1);
            }
            assert_eq!(end_of_pass(&mut io, &mut cx).is_pending(), yields, "{held} bytes held");
            assert_eq!(wakes.0.load(Ordering::SeqCst) - before, usize::from(yields));
            if yields {
                assert_eq!((io.inner.writes.len(), io.buf.len()), (0, held));
            } else {
                assert_eq!(io.inner.writes.len(), 1, "written whole, at the last frame's flush");
                assert_eq!(io.inner.writes[0].len(), held);
            }
        }
    }

    #[test]
    fn the_buffer_never_passes_its_bound_and_a_full_socket_holds_the_next_write_back() {
        let (_, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        let mut io = Coalesce::new(Socket::default());
        // Full frames without a shorter one: written in bounded gulps, never more than the bound.
        for fill in 0..10 {
            frame(&mut io, &mut cx, FULL_FRAME, fill);
            assert!(io.buf.len() <= H2_COALESCE_BYTES);
        }
        assert!(io.inner.writes.iter().all(|w| w.len() <= H2_COALESCE_BYTES));
        assert!(io.inner.writes.len() >= 2);
        // A socket with no room: the write that would pass the bound waits.
        io.inner.room = Some(0);
        let mut pending = false;
        for fill in 0..10 {
            let body = vec![fill; FULL_FRAME + 9];
            match Pin::new(&mut io).poll_write(&mut cx, &body) {
                Poll::Pending => {
                    pending = true;
                    break;
                }
                Poll::Ready(r) => assert_eq!(r.expect("accepted"), body.len()),
            }
            assert!(io.buf.len() <= H2_COALESCE_BYTES);
        }
        assert!(pending, "a full socket must hold the writer back");
        // Room again: a shutdown writes everything accepted, in order, then shuts.
        io.inner.room = None;
        let accepted = io.buf.len() - io.sent;
        let before = io.inner.writes.concat().len();
        assert!(Pin::new(&mut io).poll_shutdown(&mut cx).is_ready());
        assert_eq!(io.inner.writes.concat().len(), before + accepted);
        assert!(io.inner.shut);
    }

    /// The bounds in the protocol's own numbers, not the constants': a 16 384-byte frame (RFC 9113's
    /// default maximum) is held back, so is a one-slice write of 16 KiB, a control write a byte
    /// short of it is not, and four full frames with their headers fit one write.
    #[test]
    fn a_frame_of_the_default_maximum_size_is_gathered_and_four_fit_one_write() {
        let (wakes, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        let mut io = Coalesce::new(Socket::default());
        one_slice(&mut io, &mut cx, &[0; 16_383]);
        assert_eq!(io.inner.writes.len(), 1, "a byte short of 16 KiB goes at once");
        one_slice(&mut io, &mut cx, &[9; 16_384]);
        assert!(Pin::new(&mut io).poll_flush(&mut cx).is_ready());
        assert_eq!(io.inner.writes.len(), 1, "a one-slice write of 16 KiB is held back");
        assert!(end_of_pass(&mut io, &mut cx).is_ready());
        assert_eq!(io.inner.writes.len(), 2);
        assert_eq!(io.inner.writes[1].len(), 16_384);
        for fill in 1..=4 {
            frame(&mut io, &mut cx, 16_384, fill);
        }
        assert_eq!(io.inner.writes.len(), 2, "four full frames held back");
        frame(&mut io, &mut cx, 10, 5);
        assert!(end_of_pass(&mut io, &mut cx).is_ready());
        assert_eq!(io.inner.writes.len(), 3);
        assert_eq!(io.inner.writes[2].len(), 4 * 16_393 + 19);
        assert_eq!(wakes.0.load(Ordering::SeqCst), 0, "a pass with full frames does not yield");
    }

    /// A write that fills the buffer to exactly its bound is kept (nothing written yet), the
    /// allocation never grows past the bound, and the next write drains it first.
    #[test]
    fn a_write_that_fills_the_buffer_exactly_is_kept_and_the_allocation_stays_within_the_bound() {
        let (_, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        let mut io = Coalesce::new(Socket::default());
        let full = vec![1; FULL_FRAME + FRAME_HEADER];
        for _ in 0..5 {
            assert!(matches!(Pin::new(&mut io).poll_write(&mut cx, &full), Poll::Ready(Ok(_))));
            assert!(io.buf.capacity() <= H2_COALESCE_BYTES, "allocated {}", io.buf.capacity());
        }
        let rest = vec![2; H2_COALESCE_BYTES - io.buf.len()];
        assert!(matches!(Pin::new(&mut io).poll_write(&mut cx, &rest), Poll::Ready(Ok(_))));
        assert_eq!(io.buf.len(), H2_COALESCE_BYTES);
        assert!(io.inner.writes.is_empty(), "exactly full is not over the bound");
        assert!(io.buf.capacity() <= H2_COALESCE_BYTES, "allocated {}", io.buf.capacity());
        assert!(matches!(Pin::new(&mut io).poll_write(&mut cx, &[3]), Poll::Ready(Ok(1))));
        assert_eq!(io.inner.writes[0].len(), H2_COALESCE_BYTES, "drained before the next byte");
    }

    /// A flush after a full frame waits only while one more full frame and its header still fit:
    /// at one byte short of that room it writes.
    #[test]
    fn a_flush_defers_only_while_another_full_frame_fits() {
        let (_, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        for (held, written) in [
            (H2_COALESCE_BYTES - FULL_FRAME - FRAME_HEADER, 0),
            (H2_COALESCE_BYTES - FULL_FRAME - FRAME_HEADER + 1, 1),
        ] {
            let mut io = Coalesce::new(Socket::default());
            let first = vec![1; held - FULL_FRAME];
            let full = vec![2; FULL_FRAME];
            assert!(matches!(Pin::new(&mut io).poll_write(&mut cx, &first), Poll::Ready(Ok(_))));
            assert!(matches!(Pin::new(&mut io).poll_write(&mut cx, &full), Poll::Ready(Ok(_))));
            assert_eq!(io.buf.len(), held);
            assert!(Pin::new(&mut io).poll_flush(&mut cx).is_ready());
            assert_eq!(io.inner.writes.len(), written, "{held} bytes held");
        }
    }

    /// h2 hands a frame's header and payload in one call only to an IO that says it writes
    /// vectored; otherwise each would come alone and a 9-byte header would pass straight through.
    #[test]
    fn it_takes_vectored_writes_whatever_the_socket() {
        let io = Coalesce::new(Socket::default());
        assert!(io.is_write_vectored());
        assert!(!io.inner.is_write_vectored(), "the recording socket does not");
    }

    #[test]
    fn a_write_as_large_as_the_buffer_goes_straight_to_the_socket() {
        let (_, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        let mut io = Coalesce::new(Socket::default());
        let big = vec![7; H2_COALESCE_BYTES];
        assert!(matches!(Pin::new(&mut io).poll_write(&mut cx, &big), Poll::Ready(Ok(n)) if n == big.len()));
        assert_eq!(io.inner.writes.len(), 1);
        assert_eq!(io.buf.capacity(), 0);
    }
}
