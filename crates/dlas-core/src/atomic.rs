//! Whole-file writes that never leave a half-written file behind.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` through a temporary file in the same folder and a
/// rename, so a reader (or a crash) sees either the old file or the new one.
/// `path` must be a regular file or absent; a symbolic link is followed and
/// its target replaced (`crate::regular_file`).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let path = &crate::regular_file::resolve_output(path)?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create folder {}", dir.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    // Temporary files are created private (0600); artifacts are ordinary files.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))
            .with_context(|| format!("cannot set permissions of {}", path.display()))?;
    }
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .with_context(|| format!("cannot write {}", path.display()))?;
    tmp.persist(path)
        .with_context(|| format!("cannot move the new {} into place", path.display()))?;
    Ok(())
}

/// Like [`write_atomic`], but leaves the file untouched when its content is
/// already `bytes`, so regenerating an unchanged artifact keeps its mtime.
pub fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<bool> {
    // Resolved before reading: reading a device such as /dev/full never ends.
    let path = &crate::regular_file::resolve_output(path)?;
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    write_atomic(path, bytes)?;
    Ok(true)
}
