//! A snapshot's content: every file of a workspace (its path relative to the workspace, what it
//! is, its size and its content's SHA-256), sorted by path. Content-addressed: the SHA-256 of its
//! encoding is its id, so two snapshots of an unchanged workspace are one manifest on disk.

use std::collections::BTreeMap;

use sha2::{Digest as _, Sha256};

/// A SHA-256.
pub type Digest = [u8; 32];

/// What a manifest entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A regular file whose content the store keeps (`digest` is its content's).
    File,
    /// A regular file with an execute bit; its content is kept.
    Executable,
    /// A symlink; `digest` is its target's (the bytes `readlink` gives), which the store keeps.
    Symlink,
    /// A regular file larger than the snapshot's per-file bound: its content is not kept, and
    /// `digest` stands for its stat (size, times, inode), so a change still shows.
    Oversized,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::File => 0,
            Kind::Executable => 1,
            Kind::Symlink => 2,
            Kind::Oversized => 3,
        }
    }

    fn from_code(code: u8) -> Option<Kind> {
        [Kind::File, Kind::Executable, Kind::Symlink, Kind::Oversized].into_iter().find(|k| k.code() == code)
    }

    /// Whether the store holds this entry's content (so it can be shown and restored).
    pub fn kept(self) -> bool {
        self != Kind::Oversized
    }
}

/// One file of a manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry {
    pub kind: Kind,
    pub size: u64,
    pub digest: Digest,
}

/// Every file of a workspace at one moment, by path (relative, `/`-separated, UTF-8).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    pub entries: BTreeMap<String, Entry>,
}

/// The first bytes of an encoded manifest: a format a later version may change.
const MAGIC: &[u8; 8] = b"MDSNAP1\n";

impl Manifest {
    /// The bytes kept on disk (before compression): the magic, then per entry the path's length
    /// (u32 LE), the path, the kind, the size (u64 LE) and the digest.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAGIC.len() + self.entries.len() * 80);
        out.extend_from_slice(MAGIC);
        for (path, e) in &self.entries {
            out.extend_from_slice(&(path.len() as u32).to_le_bytes());
            out.extend_from_slice(path.as_bytes());
            out.push(e.kind.code());
            out.extend_from_slice(&e.size.to_le_bytes());
            out.extend_from_slice(&e.digest);
        }
        out
    }

    /// [`Manifest::encode`]'s inverse; `None` for bytes it did not write (a damaged file).
    pub fn decode(bytes: &[u8]) -> Option<Manifest> {
        let mut rest = bytes.strip_prefix(MAGIC.as_slice())?;
        let mut entries = BTreeMap::new();
        while !rest.is_empty() {
            let (len, tail) = rest.split_first_chunk::<4>()?;
            let len = u32::from_le_bytes(*len) as usize;
            if tail.len() < len + 1 + 8 + 32 {
                return None;
            }
            let path = std::str::from_utf8(&tail[..len]).ok()?.to_owned();
            let kind = Kind::from_code(tail[len])?;
            let size = u64::from_le_bytes(tail[len + 1..len + 9].try_into().ok()?);
            let digest: Digest = tail[len + 9..len + 41].try_into().ok()?;
            entries.insert(path, Entry { kind, size, digest });
            rest = &tail[len + 41..];
        }
        Some(Manifest { entries })
    }

    /// The manifest's id: the hex SHA-256 of its encoding.
    pub fn id(&self) -> String {
        hex(&Sha256::digest(self.encode()).into())
    }
}

/// Lowercase hex of a digest.
pub(super) fn hex(digest: &Digest) -> String {
    use std::fmt::Write as _;
    digest.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A digest from 64 lowercase hex digits.
pub(super) fn parse_hex(text: &str) -> Option<Digest> {
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in text.as_bytes().chunks(2).enumerate() {
        out[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

/// The SHA-256 of `bytes`.
pub(super) fn digest(bytes: &[u8]) -> Digest {
    Sha256::digest(bytes).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: Kind, size: u64, byte: u8) -> Entry {
        Entry { kind, size, digest: [byte; 32] }
    }

    #[test]
    fn a_manifest_round_trips_and_its_id_follows_its_content() {
        let mut m = Manifest::default();
        m.entries.insert("a.txt".into(), entry(Kind::File, 3, 1));
        m.entries.insert("bin/run".into(), entry(Kind::Executable, 10, 2));
        m.entries.insert("link".into(), entry(Kind::Symlink, 5, 3));
        m.entries.insert("ünï/big.iso".into(), entry(Kind::Oversized, 1 << 40, 4));
        let bytes = m.encode();
        assert_eq!(Manifest::decode(&bytes), Some(m.clone()));
        let id = m.id();
        assert_eq!(id.len(), 64);
        assert_eq!(Manifest::decode(&bytes).map(|d| d.id()), Some(id.clone()));
        m.entries.get_mut("a.txt").expect("a").size = 4;
        assert_ne!(m.id(), id, "a changed entry is another manifest");
        assert_eq!(Manifest::default().id(), hex(&digest(MAGIC)), "the empty workspace");
    }

    #[test]
    fn damaged_bytes_decode_to_nothing() {
        let mut m = Manifest::default();
        m.entries.insert("a".into(), entry(Kind::File, 1, 9));
        let bytes = m.encode();
        for cut in [0, 4, MAGIC.len() + 2, bytes.len() - 1] {
            assert_eq!(Manifest::decode(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut bad_kind = bytes.clone();
        bad_kind[MAGIC.len() + 4 + 1] = 9;
        assert_eq!(Manifest::decode(&bad_kind), None);
        assert_eq!(Manifest::decode(MAGIC), Some(Manifest::default()));
    }

    #[test]
    fn hex_digests_round_trip_and_nothing_else_parses() {
        let d = digest(b"x");
        assert_eq!(parse_hex(&hex(&d)), Some(d));
        for bad in ["", "ab", &"A".repeat(64), &"g".repeat(64), &"0".repeat(63)] {
            assert_eq!(parse_hex(bad), None, "{bad}");
        }
    }
}
