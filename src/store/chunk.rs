//! A run of consecutive events kept as one row of the `events` table: the frames end to end in
//! one blob, and beside it each frame's length (`u32`, little-endian), or nothing when the run is
//! one frame. One row per run, not per event, is what makes recording cheap: SQLite's cost is
//! mostly per row (a B-tree insert, its index entry), and the writer turns a burst of hundreds of
//! events into one row (`docs/benchmarks.md`, issue #17).
//!
//! The blob is LZ4-compressed when that makes it smaller ([`Codec`]).
//!
//! Pure: encoding, splitting and trimming, tested here; the writer and the reads in `sqlite.rs`
//! use them.

use std::ops::Range;

/// Bytes of frames a run holds at most before the writer starts the next: replay reads a run
/// whole, so this bounds what one read of a resume point costs beyond what it returns; 64 KiB is
/// also the SSE stream's batch (`daemon/bus.rs`).
pub(super) const RUN_MAX_BYTES: usize = 64 * 1024;

/// How a run's frames are kept (the `codec` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Codec {
    /// The frames as they are (version 1's rows, and runs that do not shrink).
    Plain = 0,
    /// LZ4 block format, preceded by the frames' length (u32, little-endian).
    Lz4 = 1,
}

/// The most a run's frames may decode to: the largest frame (the agent's 64 MiB line bound, with
/// its SSE framing) after a full run. A stored length above it is a damaged row, not an
/// allocation to attempt.
const DECODED_MAX: usize = 64 * 1024 * 1024 + 2 * RUN_MAX_BYTES;

/// The frames as stored: LZ4 when that is smaller (JSON frames shrink about tenfold, and SQLite's
/// cost is mostly the bytes it writes, twice), else as they are.
pub(super) fn encode(frames: &[u8]) -> (Codec, Vec<u8>) {
    if frames.len() <= DECODED_MAX {
        let packed = lz4_flex::block::compress_prepend_size(frames);
        if packed.len() < frames.len() {
            return (Codec::Lz4, packed);
        }
    }
    (Codec::Plain, frames.to_vec())
}

/// The frames of a stored run; `None` for an unknown codec or a damaged blob.
pub(super) fn decode(codec: i64, blob: Vec<u8>) -> Option<Vec<u8>> {
    match codec {
        0 => Some(blob),
        1 => {
            let (len, packed) = blob.split_first_chunk::<4>()?;
            let len = u32::from_le_bytes(*len) as usize;
            if len > DECODED_MAX {
                return None;
            }
            lz4_flex::block::decompress(packed, len).ok().filter(|f| f.len() == len)
        }
        _ => None,
    }
}

/// A run being built by the writer: ids `first..=last`, all present.
#[derive(Debug)]
pub(super) struct RunBuilder {
    pub(super) first: u64,
    pub(super) last: u64,
    pub(super) frames: Vec<u8>,
    sizes: Vec<u8>,
}

impl RunBuilder {
    /// A run starting with event `id`.
    pub(super) fn new(id: u64, frame: &[u8]) -> RunBuilder {
        // Sized for a full run (and a typical last frame past it), so filling it never copies.
        let frames = Vec::with_capacity(frame.len().max(RUN_MAX_BYTES + 4096));
        let mut run = RunBuilder { first: id, last: id, frames, sizes: Vec::new() };
        run.restart(id, frame);
        run
    }

    /// Whether event `id` continues this run (the next id, and room left).
    pub(super) fn takes(&self, id: u64) -> bool {
        id == self.last + 1 && self.frames.len() < RUN_MAX_BYTES
    }

    /// Starts the next run with event `id` in this one's buffers, once this one is written: a
    /// burst that fills several runs allocates their buffers once.
    pub(super) fn restart(&mut self, id: u64, frame: &[u8]) {
        self.frames.clear();
        self.frames.extend_from_slice(frame);
        self.sizes.clear();
        self.sizes.extend_from_slice(&size_bytes(frame.len()));
        (self.first, self.last) = (id, id);
    }

    pub(super) fn push(&mut self, id: u64, frame: &[u8]) {
        debug_assert!(id == self.last + 1, "a run's ids are consecutive");
        self.frames.extend_from_slice(frame);
        self.sizes.extend_from_slice(&size_bytes(frame.len()));
        self.last = id;
    }

    /// The lengths column: `None` for a single frame (the blob is the frame).
    pub(super) fn sizes(&self) -> Option<&[u8]> {
        (self.last > self.first).then_some(&self.sizes[..])
    }
}

fn size_bytes(len: usize) -> [u8; 4] {
    // A frame is at most the agent's line bound (64 MiB) plus its SSE framing: it fits a u32.
    u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes()
}

/// The byte ranges of a run's frames within its blob, in id order, given its lengths column and
/// how many ids it covers; `None` when the row is not a well-formed run (a damaged database).
pub(super) fn split(frames_len: usize, sizes: Option<&[u8]>, count: u64) -> Option<Vec<Range<usize>>> {
    let Some(sizes) = sizes else {
        #[allow(clippy::single_range_in_vec_init)] // one range: the whole blob is the one frame
        return (count == 1).then(|| vec![0..frames_len]);
    };
    if sizes.len() % 4 != 0 || (sizes.len() / 4) as u64 != count {
        return None;
    }
    let mut out = Vec::with_capacity(sizes.len() / 4);
    let mut at = 0usize;
    for len in sizes.chunks_exact(4) {
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let end = at.checked_add(len).filter(|end| *end <= frames_len)?;
        out.push(at..end);
        at = end;
    }
    (at == frames_len).then_some(out)
}

/// A run with ids `first..=last` cut so that it starts at `from` (retention): the new lengths
/// column and where the kept frames start in the blob. `None` when nothing would be cut or the
/// row is not a well-formed run.
pub(super) fn trim_front(
    first: u64,
    last: u64,
    frames_len: usize,
    sizes: Option<&[u8]>,
    from: u64,
) -> Option<(Option<Vec<u8>>, usize)> {
    if from <= first || from > last {
        return None;
    }
    let ranges = split(frames_len, sizes, last - first + 1)?;
    let skip = (from - first) as usize;
    let start = ranges[skip].start;
    let kept = &sizes?[skip * 4..];
    Some(((kept.len() > 4).then(|| kept.to_vec()), start))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(frames: &[&[u8]]) -> RunBuilder {
        let mut r = RunBuilder::new(10, frames[0]);
        for (i, f) in frames.iter().enumerate().skip(1) {
            r.push(10 + i as u64, f);
        }
        r
    }

    #[test]
    fn a_run_of_one_frame_has_no_lengths_and_splits_back_whole() {
        let r = run(&[b"id: 10\n\n"]);
        assert_eq!((r.first, r.last, r.sizes()), (10, 10, None));
        assert_eq!(split(r.frames.len(), r.sizes(), 1), Some(std::iter::once(0..8).collect()));
        // One frame claimed to cover two ids is not a run.
        assert_eq!(split(8, None, 2), None);
    }

    #[test]
    fn a_run_splits_back_into_its_frames() {
        let r = run(&[b"aa", b"", b"cccc"]);
        assert_eq!((r.first, r.last), (10, 12));
        let ranges = split(r.frames.len(), r.sizes(), 3).expect("well-formed");
        let frames: Vec<&[u8]> = ranges.into_iter().map(|x| &r.frames[x]).collect();
        assert_eq!(frames, [&b"aa"[..], b"", b"cccc"]);
    }

    #[test]
    fn a_damaged_run_is_refused() {
        let r = run(&[b"aa", b"bbb"]);
        let sizes = r.sizes().expect("two frames").to_vec();
        assert_eq!(split(r.frames.len(), Some(&sizes), 3), None, "fewer lengths than ids");
        assert_eq!(split(r.frames.len() + 1, Some(&sizes), 2), None, "bytes left over");
        assert_eq!(split(r.frames.len() - 1, Some(&sizes), 2), None, "a frame past the end");
        assert_eq!(split(r.frames.len(), Some(&sizes[..7]), 2), None, "a torn length");
        let huge = [u32::MAX.to_le_bytes(), 1u32.to_le_bytes()].concat();
        assert_eq!(split(5, Some(&huge), 2), None, "a length past the end");
    }

    #[test]
    fn a_restarted_run_is_a_new_run_in_the_old_buffers() {
        let mut r = run(&[b"aa", b"bbb", b"c"]);
        let buffer = r.frames.as_ptr();
        r.restart(20, b"dddd");
        let fresh = RunBuilder::new(20, b"dddd");
        assert_eq!((r.first, r.last, &r.frames, r.sizes()), (fresh.first, fresh.last, &fresh.frames, None));
        assert_eq!(r.frames.as_ptr(), buffer, "the same buffer");
        r.push(21, b"e");
        let mut fresh = fresh;
        fresh.push(21, b"e");
        assert_eq!((r.last, &r.frames, r.sizes()), (fresh.last, &fresh.frames, fresh.sizes()));
        assert_eq!(r.sizes(), Some(&[4, 0, 0, 0, 1, 0, 0, 0][..]));
    }

    #[test]
    fn a_run_takes_the_next_id_until_it_is_full() {
        let mut r = run(&[b"a"]);
        assert!(r.takes(11));
        assert!(!r.takes(12), "an id skipped");
        assert!(!r.takes(10), "an id repeated");
        // The documented 64 KiB, written out rather than read from the constant, so a changed
        // bound fails here.
        let documented = 65_536;
        let big = vec![b'x'; documented - 1];
        r.push(11, &big);
        assert_eq!(r.frames.len(), documented);
        assert!(!r.takes(12), "full at 64 KiB");
        let mut r = run(&[b"a"]);
        r.push(11, &big[..documented - 2]);
        assert!(r.takes(12), "room for one more byte");
    }

    #[test]
    fn frames_that_shrink_are_kept_as_lz4_and_decode_back() {
        let frames: Vec<u8> = (0..200)
            .flat_map(|i| {
                format!("id: {i}\nevent: session_update\ndata: {{\"text\":\"token {i}\"}}\n\n").into_bytes()
            })
            .collect();
        let (codec, blob) = encode(&frames);
        assert_eq!(codec, Codec::Lz4);
        assert!(blob.len() * 4 < frames.len(), "{} of {} bytes", blob.len(), frames.len());
        assert_eq!(decode(codec as i64, blob), Some(frames));
        // Bytes that do not shrink are kept as they are.
        let (codec, blob) = encode(b"x");
        assert_eq!((codec, &blob[..]), (Codec::Plain, &b"x"[..]));
        assert_eq!(decode(codec as i64, blob), Some(b"x".to_vec()));
    }

    #[test]
    fn a_damaged_or_unknown_encoding_is_refused() {
        let (_, mut blob) = encode(&[b'a'; 1000]);
        assert_eq!(decode(2, blob.clone()), None, "an unknown codec");
        assert_eq!(decode(1, blob[..3].to_vec()), None, "no length");
        let mut huge = blob.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(1, huge), None, "a length past the bound is not allocated");
        blob[..4].copy_from_slice(&999u32.to_le_bytes());
        assert_eq!(decode(1, blob), None, "a length the data does not fill");
    }

    /// The decode bound, at its exact limit: a frame at the agent's line bound (64 MiB) after a
    /// full run decodes; one byte more is a damaged row, refused before any allocation. Zeros, so
    /// the blobs are small (LZ4 packs 64 MiB of them in about 260 KiB).
    #[test]
    fn runs_up_to_the_decode_bound_are_kept_compressed_and_one_byte_more_is_refused() {
        // 64 MiB + 2 × 64 KiB, written out rather than read from the constant.
        let documented = 64 * 1024 * 1024 + 2 * 65_536;
        let at_bound = vec![0u8; documented];
        let (codec, blob) = encode(&at_bound);
        assert_eq!(codec, Codec::Lz4, "compressed up to the bound");
        assert_eq!(decode(codec as i64, blob.clone()).map(|f| f.len()), Some(documented));
        let over = vec![0u8; documented + 1];
        let (codec, plain) = encode(&over);
        assert_eq!((codec, plain.len()), (Codec::Plain, documented + 1), "past the bound: kept plain");
        // A compressed row that claims (and holds) one byte more than the bound: refused.
        let packed = lz4_flex::block::compress_prepend_size(&over);
        assert_eq!(decode(Codec::Lz4 as i64, packed), None);
    }

    #[test]
    fn trimming_keeps_the_tail_of_a_run() {
        let r = run(&[b"aa", b"b", b"cccc"]);
        let (len, sizes) = (r.frames.len(), r.sizes());
        // From 11: two frames stay, starting at byte 2.
        let (kept, start) = trim_front(10, 12, len, sizes, 11).expect("cut");
        let kept = kept.expect("two frames keep lengths");
        assert_eq!(start, 2);
        assert_eq!(split(len - start, Some(&kept), 2), Some(vec![0..1, 1..5]));
        // From 12: one frame stays, which needs no lengths.
        assert_eq!(trim_front(10, 12, len, sizes, 12), Some((None, 3)));
        // Nothing to cut, or everything: not a trim.
        assert_eq!(trim_front(10, 12, len, sizes, 10), None);
        assert_eq!(trim_front(10, 12, len, sizes, 13), None);
        assert_eq!(trim_front(10, 12, len, sizes, 9), None);
    }
}
