//! Events read back from the SSE bytes the bus writes (`bus.rs`: `frame`, `idless_frame`), for the
//! doors that re-frame them (the ACP door sends each event as a JSON-RPC message).
//!
//! The bus serialises an event once, as a complete SSE frame, and every stream (live, replayed
//! from the ring, or from the history) carries those exact bytes. A door that needs the event's
//! parts reads a marked batch ([`Marked::pieces`]): an event the bus published comes with its
//! [`Shape`], the offsets noted as the frame was written, so nothing is searched; anything else
//! (the stream's own notices, frames the ring started with from the history) is read back out of
//! its bytes with [`EventFrame::read`]: the layout is fixed by the bus, so the parts are found by
//! position and a few byte searches, without parsing the JSON again.
//!
//! Why it is unambiguous: the event's data is one valid JSON value, and in JSON a `"` inside a
//! string is always escaped, so the envelope's own keys after the data (`,"promptId":"…"`,
//! `,"originatorClientId":"…"`) can be told from anything inside it: a candidate is accepted only
//! if what follows it is exactly one JSON string ending where the envelope's tail begins.

/// What a frame of a stream is.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// An event: with an id (published on the bus) or without (stream-local notices:
    /// `replay_complete`, `slow_client_warning`, `client_evicted`, …).
    Event(EventFrame<'a>),
    /// `retry: …` or a `: heartbeat` comment: nothing to forward but liveness.
    Keepalive,
    /// Bytes that are none of the bus's frames (never produced by this daemon).
    Unknown,
}

/// One event's parts, borrowed from its frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFrame<'a> {
    /// The event id; `None` for a stream-local notice.
    pub id: Option<u64>,
    /// The event type (`session_update`, `permission_request`, …).
    pub kind: &'a str,
    /// The event's data: one JSON value, byte for byte as published.
    pub data: &'a [u8],
    /// The prompt the event belongs to, if any (JSON text of a string, quotes included: the bus
    /// wrote it from a `String`, so it is UTF-8; it is checked only where it is read as text).
    pub prompt_id: Option<&'a [u8]>,
    /// The client id of that prompt's sender, if any (JSON text of a string, quotes included).
    pub originator: Option<&'a [u8]>,
}

/// Where a published event's parts lie in its frame (byte offsets from the frame's start), noted
/// by the bus as it writes the frame and kept beside it in the ring. A stream that re-frames
/// events (the ACP door's lanes) takes the parts from here: the bus writes a frame once, and
/// reading it back would cost once per event per connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The event type (a word-sized field: with a one-byte `EventKind` here, copying shapes into
    /// a batch's marks stalled on store forwarding, 5.5% of the daemon's samples in `perf` against
    /// 1.4% with this).
    pub(super) kind: &'static str,
    pub(super) data: (u32, u32),
    /// The tags as JSON strings, quotes included; `(0, 0)` when the event has none.
    pub(super) prompt: (u32, u32),
    pub(super) originator: (u32, u32),
}

impl Shape {
    /// Event `id`'s parts in `frame`, the frame this shape was noted for. `Unknown` if the
    /// offsets do not fit it (never for a frame of the bus's).
    pub fn read(self, frame: &[u8], id: u64) -> Piece<'_> {
        let span = |(from, to): (u32, u32)| frame.get(from as usize..to as usize);
        let tag = |at: (u32, u32)| if at == (0, 0) { Some(None) } else { span(at).map(Some) };
        let parts = (span(self.data), tag(self.prompt), tag(self.originator));
        let (Some(data), Some(prompt_id), Some(originator)) = parts else { return Piece::Unknown };
        Piece::Event(EventFrame { id: Some(id), kind: self.kind, data, prompt_id, originator })
    }
}

/// One frame of a marked batch ([`Marked`]): where it ends in the batch, and, for an event
/// taken from the ring, its id and [`Shape`]. Stream-local frames (`retry`, heartbeats, notices)
/// have none and are read with [`EventFrame::read`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub end: usize,
    pub event: Option<(u64, Shape)>,
}

/// A stream's batch with its frames marked: what a re-framing stream reads instead of the bare
/// SSE bytes (`Subscription::into_marked`).
#[derive(Debug, Clone, Default)]
pub struct Marked {
    pub bytes: bytes::Bytes,
    /// One per frame, in order; empty for a stream that is not marked.
    pub marks: Vec<Mark>,
}

impl Marked {
    /// The batch's frames read: an event by its shape, anything else from its bytes (a mark
    /// without an event may cover several stream-local frames: `retry` and a notice).
    pub fn pieces(&self) -> impl Iterator<Item = Piece<'_>> + '_ {
        let mut start = 0;
        self.marks.iter().flat_map(move |m| {
            let bytes = self.bytes.get(start..m.end).unwrap_or_default();
            start = m.end;
            let shaped = m.event.map(|(id, shape)| shape.read(bytes, id));
            let read = shaped.is_none().then(|| split(bytes).map(EventFrame::read));
            shaped.into_iter().chain(read.into_iter().flatten())
        })
    }
}

/// `,"_meta":{"serverTimestamp":` — the start of every id'd frame's tail.
const TAIL: &[u8] = br#","_meta":{"serverTimestamp":"#;
const PROMPT_KEY: &[u8] = br#","promptId":"#;
const ORIGINATOR_KEY: &[u8] = br#","originatorClientId":"#;

impl<'a> EventFrame<'a> {
    /// The parts of `frame` (one frame, its blank line included or not).
    pub fn read(frame: &'a [u8]) -> Piece<'a> {
        let frame = frame.strip_suffix(b"\n\n").unwrap_or(frame);
        if frame.starts_with(b":") || frame.starts_with(b"retry:") {
            return Piece::Keepalive;
        }
        let parsed = if frame.starts_with(b"id: ") { with_id(frame) } else { without_id(frame) };
        parsed.map_or(Piece::Unknown, Piece::Event)
    }

    /// [`EventFrame::prompt_id`] without its quotes (ids the daemon mints need no escapes).
    pub fn prompt_id_text(&self) -> Option<&'a str> {
        self.prompt_id.map(unquote).and_then(|p| std::str::from_utf8(p).ok())
    }

    /// Whether the event's prompt was sent by `client` (client ids are `[A-Za-z0-9._:-]`, so the
    /// tag's text needs no unescaping). Bytes are compared: this runs per update per connection.
    pub fn is_from(&self, client: &str) -> bool {
        self.originator.is_some_and(|o| unquote(o) == client.as_bytes())
    }
}

fn unquote(s: &[u8]) -> &[u8] {
    s.strip_prefix(b"\"").and_then(|s| s.strip_suffix(b"\"")).unwrap_or(s)
}

/// The blank line that ends a frame (a searcher built once).
static FRAME_END: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\n\n"));

/// Cuts `batch` (what a stream yields: whole frames, each ending with a blank line) into frames.
pub(super) fn split(batch: &[u8]) -> impl Iterator<Item = &[u8]> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= batch.len() {
            return None;
        }
        let end = FRAME_END.find(&batch[at..]).map_or(batch.len(), |n| at + n + 2);
        let frame = &batch[at..end];
        at = end;
        Some(frame)
    })
}

/// `text` up to the first `\n` after `prefix`, and the rest after that `\n`.
fn line<'a>(text: &'a [u8], prefix: &[u8]) -> Option<(&'a [u8], &'a [u8])> {
    let rest = text.strip_prefix(prefix)?;
    let end = memchr::memchr(b'\n', rest)?;
    Some((&rest[..end], &rest[end + 1..]))
}

/// `id: N\nevent: K\ndata: {"id":N,"v":1,"type":"K","data":D[,"promptId":P][,"originatorClientId":O],"_meta":{"serverTimestamp":T}}`
fn with_id(frame: &[u8]) -> Option<EventFrame<'_>> {
    let (id_text, rest) = line(frame, b"id: ")?;
    let (kind, rest) = line(rest, b"event: ")?;
    let body = rest.strip_prefix(b"data: ")?;
    let id = decimal(id_text)?;
    let kind = kind_text(kind)?;
    // The head repeats the id and the type: `{"id":N,"v":1,"type":"K","data":`.
    let after_head = body
        .strip_prefix(br#"{"id":"#)?
        .strip_prefix(id_text)?
        .strip_prefix(br#","v":1,"type":""#)?
        .strip_prefix(kind.as_bytes())?
        .strip_prefix(br#"","data":"#)?;
    // The tail, read from the end: `,"_meta":{"serverTimestamp":DIGITS}}`.
    let before_brackets = after_head.strip_suffix(b"}}")?;
    let digits = before_brackets.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let mut middle = before_brackets[..before_brackets.len() - digits].strip_suffix(TAIL)?;
    let originator = take_tag(&mut middle, ORIGINATOR_KEY);
    let prompt_id = take_tag(&mut middle, PROMPT_KEY);
    Some(EventFrame { id: Some(id), kind, data: middle, prompt_id, originator })
}

/// The event id's digits as the bus writes them (no sign, no spaces) as a number.
fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        if !d.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// The event type as text: `session_update`, the type of nearly every frame, is recognised
/// without a UTF-8 check.
fn kind_text(kind: &[u8]) -> Option<&str> {
    const UPDATE: &str = "session_update";
    if kind == UPDATE.as_bytes() { Some(UPDATE) } else { std::str::from_utf8(kind).ok() }
}

/// `event: K\ndata: {"data":D,"type":"K","v":1}` (serde_json writes an object's keys sorted).
fn without_id(frame: &[u8]) -> Option<EventFrame<'_>> {
    let (kind, rest) = line(frame, b"event: ")?;
    let kind = kind_text(kind)?;
    let body = rest.strip_prefix(b"data: ")?.strip_prefix(br#"{"data":"#)?;
    let tail = [br#","type":""#.as_slice(), kind.as_bytes(), br#"","v":1}"#].concat();
    let data = body.strip_suffix(tail.as_slice())?;
    Some(EventFrame { id: None, kind, data, prompt_id: None, originator: None })
}

/// Takes `key` and the JSON string after it off the end of `middle`, if that is how it ends. Reads
/// from the end, so the cost is the tag's length, not the event's.
fn take_tag<'a>(middle: &mut &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let open = last_string_start(middle)?;
    let before = middle[..open].strip_suffix(key)?;
    let text = &middle[open..];
    *middle = before;
    Some(text)
}

/// Where the JSON string `s` ends with starts (its opening `"`), if `s` ends with one: in JSON every
/// `"` inside a string is escaped, so the opening quote is the first one before the closing quote
/// that an even number of backslashes precedes.
fn last_string_start(s: &[u8]) -> Option<usize> {
    let (b'"', inner) = s.split_last().map(|(last, rest)| (*last, rest))? else { return None };
    let mut end = inner.len();
    loop {
        let at = memchr::memrchr(b'"', &inner[..end])?;
        let backslashes = inner[..at].iter().rev().take_while(|&&b| b == b'\\').count();
        if backslashes % 2 == 0 {
            return Some(at);
        }
        end = at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_read_as_its_digits_and_nothing_else_is_one() {
        assert_eq!(decimal(b"0"), Some(0));
        assert_eq!(decimal(b"42"), Some(42));
        assert_eq!(decimal(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(decimal(b"18446744073709551616"), None, "past u64");
        for not in [&b""[..], b"+1", b"-1", b"1 ", b"1a", b"\xff"] {
            assert_eq!(decimal(not), None, "{not:?}");
        }
        assert_eq!(kind_text(b"session_update"), Some("session_update"));
        assert_eq!(kind_text(b"turn_complete"), Some("turn_complete"));
        assert_eq!(kind_text(b"\xff"), None);
    }
}
