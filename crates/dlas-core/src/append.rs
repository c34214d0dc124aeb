//! Append-only files of whole lines (a results CSV, its samples JSON lines):
//! an exclusive lock while one process writes, recovery of a last line cut
//! by a crash or a full disk, and rollback of a write that failed.
//!
//! A file only ever holds whole lines, each ending in a newline, except
//! for a last line that a crash or a full disk cut short. Opening a file
//! for appending repairs that tail: a last line that is complete but for
//! its newline gets the newline, any other unterminated tail is cut off.
//! A failed write is cut back to the last complete line at once, so a
//! full disk leaves the file as it was before the failed record.

use anyhow::{Context, Result, bail};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Where an appender's bytes go: a file, or in tests a writer that fails
/// part-way, as a full disk does.
pub trait Sink: Write + Send {
    /// Cuts the file back to `len` bytes.
    fn truncate(&mut self, len: u64) -> std::io::Result<()>;
    /// Waits until the written bytes are on disk.
    fn sync(&mut self) -> std::io::Result<()>;
}

impl Sink for File {
    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        self.set_len(len)
    }

    fn sync(&mut self) -> std::io::Result<()> {
        self.sync_data()
    }
}

/// A file opened with [`lock`]: this process holds its exclusive lock
/// until the value is dropped.
pub struct Locked {
    pub file: File,
    pub path: PathBuf,
    /// Whether opening created the file.
    pub created: bool,
}

/// Opens `path` for reading and appending under an exclusive lock,
/// creating it (and its folder) when `create` is set; `None` when it does
/// not exist and `create` is not set. Another process holding the lock is
/// a one-line error naming the file, so two runs never write one file.
pub fn lock(path: &Path, create: bool) -> Result<Option<Locked>> {
    if create && let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create folder {}", dir.display()))?;
    }
    loop {
        let (file, created) = match OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(create)
            .open(path)
        {
            Ok(file) => (file, create),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => (
                OpenOptions::new()
                    .read(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("cannot open {}", path.display()))?,
                false,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("cannot open {}", path.display())),
        };
        crate::regular_file::check(&file, path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => bail!(
                "{} is being written by another process (it holds the file's lock); \
                 wait until it ends, or write to another file",
                path.display()
            ),
            Err(TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", path.display()));
            }
        }
        // The holder may have removed or replaced the file while this
        // process waited to lock it; then the lock belongs to a file no
        // longer at `path`, and the one there now is opened instead.
        if is_at(&file, path) {
            return Ok(Some(Locked {
                file,
                path: path.to_path_buf(),
                created,
            }));
        }
    }
}

#[cfg(unix)]
fn is_at(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

#[cfg(not(unix))]
fn is_at(_file: &File, path: &Path) -> bool {
    path.exists()
}

/// An open append-only line file.
pub struct LineFile {
    path: PathBuf,
    sink: Box<dyn Sink>,
    /// The length of the file's complete lines: where a failed write is cut back to.
    len: u64,
}

impl LineFile {
    /// Reads `locked` and repairs its tail: an unterminated last line that
    /// `complete` accepts gets its newline, any other is cut off. Returns
    /// the file, its text after the repair, and a warning line saying what
    /// was repaired, if anything was.
    pub fn open(
        mut locked: Locked,
        complete: impl Fn(&str) -> bool,
    ) -> Result<(LineFile, String, Option<String>)> {
        let path = locked.path.clone();
        let mut bytes = Vec::new();
        locked
            .file
            .read_to_end(&mut bytes)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let mut file = LineFile {
            path,
            len: bytes.len() as u64,
            sink: Box::new(locked.file),
        };
        let mut warning = None;
        if !bytes.is_empty() && !bytes.ends_with(b"\n") {
            let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let tail = &bytes[keep..];
            match std::str::from_utf8(tail).ok().filter(|line| complete(line)) {
                Some(_) => {
                    file.append(b"\n")?;
                    bytes.push(b'\n');
                    warning = Some(format!(
                        "{}: its last line lacked its newline; the line is complete and kept",
                        file.path.display()
                    ));
                }
                None => {
                    warning = Some(format!(
                        "{}: dropped its partial last line ({} bytes, `{}…`), \
                         cut short by a crash or a full disk",
                        file.path.display(),
                        tail.len(),
                        String::from_utf8_lossy(tail)
                            .chars()
                            .take(40)
                            .collect::<String>()
                    ));
                    file.truncate(keep as u64)?;
                    bytes.truncate(keep);
                }
            }
        }
        let text = String::from_utf8(bytes)
            .with_context(|| format!("{} is not UTF-8 text", file.path.display()))?;
        Ok((file, text, warning))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The length of the file's complete lines.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `bytes` (whole lines) and waits until they are on disk. On
    /// failure (a full disk) the file is cut back to what it held before.
    pub fn append(&mut self, bytes: &[u8]) -> Result<()> {
        let written = self.sink.write_all(bytes).and_then(|()| self.sink.sync());
        match written {
            Ok(()) => {
                self.len += bytes.len() as u64;
                Ok(())
            }
            Err(e) => match self.sink.truncate(self.len).and_then(|()| self.sink.sync()) {
                Ok(()) => Err(e).with_context(|| {
                    format!(
                        "cannot append to {}; it was cut back to its last complete line",
                        self.path.display()
                    )
                }),
                Err(cut) => Err(e).with_context(|| {
                    format!(
                        "cannot append to {}, nor cut it back to its last complete line ({cut}); \
                         the next run drops the partial line",
                        self.path.display()
                    )
                }),
            },
        }
    }

    /// Cuts the file back to `len` bytes, which must end a line.
    pub fn truncate(&mut self, len: u64) -> Result<()> {
        self.sink
            .truncate(len)
            .and_then(|()| self.sink.sync())
            .with_context(|| format!("cannot cut {} back to {len} bytes", self.path.display()))?;
        self.len = len;
        Ok(())
    }

    /// Replaces where the bytes go, keeping the length: how tests put a
    /// failing writer in place of the file.
    #[cfg(test)]
    pub(crate) fn set_sink(&mut self, sink: Box<dyn Sink>) {
        self.sink = sink;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A file that accepts `room` more bytes, then fails as a full disk does.
    pub(crate) struct FullDisk {
        pub file: File,
        pub room: usize,
    }

    impl Write for FullDisk {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::StorageFull));
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            self.file.write(&buf[..n])
        }

        fn flush(&mut self) -> std::io::Result<()> {
            self.file.flush()
        }
    }

    impl Sink for FullDisk {
        fn truncate(&mut self, len: u64) -> std::io::Result<()> {
            self.file.set_len(len)
        }

        fn sync(&mut self) -> std::io::Result<()> {
            self.file.sync_data()
        }
    }

    pub(crate) fn full_disk(path: &Path, room: usize) -> Box<dyn Sink> {
        let file = OpenOptions::new().append(true).open(path).unwrap();
        Box::new(FullDisk { file, room })
    }

    fn open(path: &Path) -> (LineFile, String, Option<String>) {
        LineFile::open(lock(path, true).unwrap().unwrap(), |l| l.ends_with('}')).unwrap()
    }

    #[test]
    fn a_complete_last_line_gets_its_newline_and_a_cut_one_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        std::fs::write(&path, "{1}\n{2}").unwrap();
        let (_, text, warning) = open(&path);
        assert_eq!(text, "{1}\n{2}\n");
        assert!(
            warning
                .unwrap()
                .contains("a.jsonl: its last line lacked its newline")
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{1}\n{2}\n");
        std::fs::write(&path, "{1}\n{2").unwrap();
        let (_, text, warning) = open(&path);
        assert_eq!(text, "{1}\n");
        let warning = warning.unwrap();
        assert!(
            warning.contains("a.jsonl: dropped its partial last line (2 bytes, `{2…`)"),
            "{warning}"
        );
        let (_, _, warning) = open(&path);
        assert_eq!(warning, None);
    }

    #[test]
    fn a_failed_write_is_cut_back_and_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        let (mut file, _, _) = open(&path);
        file.append(b"{1}\n").unwrap();
        file.set_sink(full_disk(&path, 2));
        let err = format!("{:#}", file.append(b"{2}\n").unwrap_err());
        assert!(
            err.contains("cannot append to ") && err.contains("a.jsonl; it was cut back"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{1}\n");
    }

    #[test]
    fn a_second_writer_is_refused_while_the_first_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.csv");
        let first = lock(&path, true).unwrap().unwrap();
        assert!(first.created);
        let err = lock(&path, true).err().unwrap().to_string();
        assert!(
            err.contains("a.csv is being written by another process"),
            "{err}"
        );
        drop(first);
        let second = lock(&path, false).unwrap().unwrap();
        assert!(!second.created);
        assert!(lock(&dir.path().join("none.csv"), false).unwrap().is_none());
    }
}
