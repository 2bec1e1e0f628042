//! The snapshot store on disk, under the state directory's `changes/` (never in a workspace, never
//! in a user's `.git`): file contents by their SHA-256 (`objects/ab/cdef…`) and manifests by their
//! id (`manifests/<id>`), each LZ4-compressed when that is smaller, written to a temp file and
//! renamed into place, so a reader never sees half a file.
//!
//! Not synced: a killed daemon loses nothing (the page cache has it), an operating system crash may
//! lose the newest objects, as the store's own `synchronous=NORMAL` may lose the newest commits;
//! a rewind then names the files it could not restore. Objects nothing refers to any more go in
//! [`Objects::collect`], once they are older than its grace, so a snapshot being taken (which
//! refreshes the time of every object it reuses) never loses one.

use std::collections::HashSet;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::manifest::{Digest, Manifest, digest, hex, parse_hex};

/// How an object is kept: its first byte.
const RAW: u8 = 0;
const LZ4: u8 = 1;

/// What [`Objects::collect`] removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Collected {
    pub manifests: usize,
    pub blobs: usize,
}

#[derive(Debug)]
pub(super) struct Objects {
    blobs: PathBuf,
    manifests: PathBuf,
}

fn private_dir(path: &Path) -> io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(path)
}

/// Writes `bytes` (with its codec byte) to `path` through a temp file beside it.
fn write_object(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let compressed = lz4_flex::compress_prepend_size(bytes);
    let (codec, body) = if compressed.len() < bytes.len() { (LZ4, &compressed[..]) } else { (RAW, bytes) };
    let dir = path.parent().ok_or_else(|| io::Error::other("an object path has a folder"))?;
    private_dir(dir)?;
    let temp = dir.join(format!(".{}.tmp", uuid::Uuid::new_v4()));
    let result = (|| {
        let mut file = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp)?;
        file.write_all(&[codec])?;
        file.write_all(body)?;
        fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

fn read_object(path: &Path) -> io::Result<Vec<u8>> {
    let bytes = fs::read(path)?;
    let damaged = || io::Error::new(io::ErrorKind::InvalidData, format!("{} is damaged", path.display()));
    match bytes.split_first() {
        Some((&RAW, body)) => Ok(body.to_vec()),
        Some((&LZ4, body)) => lz4_flex::decompress_size_prepended(body).map_err(|_| damaged()),
        _ => Err(damaged()),
    }
}

/// Sets `path`'s modification time to now: the object is in use again (see [`Objects::collect`]).
fn touch(path: &Path) -> io::Result<()> {
    fs::File::options().append(true).open(path)?.set_modified(SystemTime::now())
}

impl Objects {
    pub(super) fn open(dir: &Path) -> io::Result<Objects> {
        let objects = Objects { blobs: dir.join("objects"), manifests: dir.join("manifests") };
        private_dir(&objects.blobs)?;
        private_dir(&objects.manifests)?;
        Ok(objects)
    }

    fn blob_path(&self, d: &Digest) -> PathBuf {
        let h = hex(d);
        self.blobs.join(&h[..2]).join(&h[2..])
    }

    /// Keeps `content` under its digest `d` (already there: its time refreshed).
    pub(super) fn put_blob(&self, d: &Digest, content: &[u8]) -> io::Result<()> {
        let path = self.blob_path(d);
        match touch(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => write_object(&path, content),
            Err(e) => Err(e),
        }
    }

    /// The content whose digest is `d`, checked against it.
    pub(super) fn blob(&self, d: &Digest) -> io::Result<Vec<u8>> {
        let content = read_object(&self.blob_path(d))?;
        if digest(&content) != *d {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("object {} is damaged", hex(d))));
        }
        Ok(content)
    }

    /// Keeps `m`; returns its id.
    pub(super) fn put_manifest(&self, m: &Manifest) -> io::Result<String> {
        let id = m.id();
        let path = self.manifests.join(&id);
        match touch(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => write_object(&path, &m.encode())?,
            Err(e) => return Err(e),
        }
        Ok(id)
    }

    pub(super) fn manifest(&self, id: &str) -> io::Result<Manifest> {
        if parse_hex(id).is_none() {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no such snapshot"));
        }
        let bytes = read_object(&self.manifests.join(id))?;
        Manifest::decode(&bytes)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("snapshot {id} is damaged")))
    }

    /// Removes the manifests not in `keep` and the contents no kept manifest names, each only once
    /// it is older than `grace` (a snapshot under way may be about to name it).
    pub(super) fn collect(&self, keep: &HashSet<String>, grace: Duration) -> io::Result<Collected> {
        let old = |path: &Path| {
            fs::symlink_metadata(path)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > grace))
        };
        let mut used: HashSet<Digest> = HashSet::new();
        let mut done = Collected::default();
        for entry in fs::read_dir(&self.manifests)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if keep.contains(&name) {
                match self.manifest(&name) {
                    Ok(m) => used.extend(m.entries.values().map(|e| e.digest)),
                    // Unreadable: what it named cannot be told, so nothing is removed at all.
                    Err(e) => return Err(e),
                }
            } else if old(&entry.path()) && fs::remove_file(entry.path()).is_ok() {
                done.manifests += 1;
            }
        }
        for shard in fs::read_dir(&self.blobs)? {
            let shard = shard?;
            if !shard.file_type()?.is_dir() {
                continue;
            }
            let prefix = shard.file_name().to_string_lossy().into_owned();
            for entry in fs::read_dir(shard.path())? {
                let entry = entry?;
                let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
                let named = parse_hex(&name).is_some_and(|d| used.contains(&d));
                if !named && old(&entry.path()) && fs::remove_file(entry.path()).is_ok() {
                    done.blobs += 1;
                }
            }
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::super::manifest::{Entry, Kind};
    use super::*;

    #[test]
    fn contents_and_manifests_round_trip_compressed_or_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let objects = Objects::open(dir.path()).expect("open");
        let text = b"hello hello hello hello hello hello hello hello".repeat(20);
        let noise: Vec<u8> = (0..=255u8).collect();
        for content in [&text[..], &noise[..], b""] {
            let d = digest(content);
            objects.put_blob(&d, content).expect("put");
            objects.put_blob(&d, content).expect("put again: it is there");
            assert_eq!(objects.blob(&d).expect("read"), content);
        }
        let on_disk = fs::read(objects.blob_path(&digest(&text))).expect("raw");
        assert_eq!(on_disk[0], LZ4, "repetitive text is kept compressed");
        assert!(on_disk.len() < text.len() / 4);
        assert_eq!(fs::read(objects.blob_path(&digest(&noise))).expect("raw")[0], RAW);
        let mut m = Manifest::default();
        m.entries.insert("a".into(), Entry { kind: Kind::File, size: 1, digest: digest(b"a") });
        let id = objects.put_manifest(&m).expect("put manifest");
        assert_eq!(objects.manifest(&id).expect("read manifest"), m);
        assert_eq!(
            objects.manifest("../../etc/passwd").map_err(|e| e.kind()).err(),
            Some(io::ErrorKind::NotFound)
        );
    }

    #[test]
    fn a_damaged_content_is_an_error_not_wrong_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let objects = Objects::open(dir.path()).expect("open");
        let d = digest(b"original");
        objects.put_blob(&d, b"original").expect("put");
        fs::write(objects.blob_path(&d), [RAW, b'x']).expect("damage it");
        assert_eq!(objects.blob(&d).map_err(|e| e.kind()).err(), Some(io::ErrorKind::InvalidData));
        fs::write(objects.blob_path(&d), [7u8]).expect("an unknown codec");
        assert!(objects.blob(&d).is_err());
    }

    #[test]
    fn collection_keeps_what_a_kept_manifest_names_and_anything_recent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let objects = Objects::open(dir.path()).expect("open");
        let put = |text: &[u8]| {
            let d = digest(text);
            objects.put_blob(&d, text).expect("put");
            d
        };
        let (kept, dropped) = (put(b"kept"), put(b"dropped"));
        let manifest = |d: Digest| {
            let mut m = Manifest::default();
            m.entries.insert("f".into(), Entry { kind: Kind::File, size: 4, digest: d });
            objects.put_manifest(&m).expect("put manifest")
        };
        let (keep_id, drop_id) = (manifest(kept), manifest(dropped));
        let keep: HashSet<String> = [keep_id.clone()].into();
        let recent = objects.collect(&keep, Duration::from_secs(3600)).expect("collect");
        assert_eq!(recent, Collected::default(), "nothing is old enough yet");
        let done = objects.collect(&keep, Duration::ZERO).expect("collect");
        assert_eq!(done, Collected { manifests: 1, blobs: 1 });
        assert!(objects.manifest(&keep_id).is_ok() && objects.manifest(&drop_id).is_err());
        assert!(objects.blob(&kept).is_ok() && objects.blob(&dropped).is_err());
    }
}
