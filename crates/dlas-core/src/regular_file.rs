//! The files `dlas` reads and writes (results, samples, environment
//! records, tuning logs and best-of files, figures, tables) must be regular
//! files, or not exist yet when written. Each such path is resolved once, where it enters the program
//! (a `--out`, a default under the project), and the resolved path is the
//! one every file of that run is derived from.
//!
//! A device, a FIFO, a socket or a folder is refused with one line naming
//! it: reading `/dev/full` as a results file never ends, and replacing
//! `/dev/null` with a CSV file breaks the machine. A symbolic link is
//! followed, once and for every file of the run: the results go to its
//! target, and the samples and environment files beside the target, never
//! beside the link (a link to a missing file is refused). Writes replace
//! the target through a rename in the target's folder, so the link stays a
//! link and points at the new file.

use anyhow::{Context, Result, bail};
use std::fs::{File, FileType};
use std::path::{Path, PathBuf};

/// The absolute path `dlas` writes for `path`: its link target when it is
/// a symbolic link, itself otherwise. Errors when it exists and is not a
/// regular file, or is a link to nothing.
pub fn resolve_output(path: &Path) -> Result<PathBuf> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            let target = std::fs::canonicalize(path).with_context(|| {
                format!(
                    "{} is a symbolic link to {}, which does not exist; dlas follows a link \
                     only to an existing regular file: create the file or name another",
                    path.display(),
                    std::fs::read_link(path)
                        .map_or_else(|_| "?".into(), |t| t.display().to_string())
                )
            })?;
            let meta = std::fs::metadata(&target)
                .with_context(|| format!("cannot read {}", target.display()))?;
            refuse_irregular(path, meta.file_type(), Some(&target))?;
            Ok(target)
        }
        Ok(meta) => {
            refuse_irregular(path, meta.file_type(), None)?;
            std::fs::canonicalize(path)
                .with_context(|| format!("cannot resolve {}", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => absent(path),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// A path that does not exist yet: its folder resolved (links in the folder
/// followed) and its name kept.
fn absent(path: &Path) -> Result<PathBuf> {
    let Some(name) = path.file_name() else {
        bail!(
            "{} names no file; give the path of a file to write",
            path.display()
        );
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    match std::fs::canonicalize(&parent) {
        Ok(dir) if dir.is_dir() => Ok(dir.join(name)),
        Ok(dir) => bail!(
            "{} cannot be written: {} is not a folder",
            path.display(),
            dir.display()
        ),
        // A folder still to be made (created when the file is written).
        Err(_) => Ok(std::path::absolute(path)
            .with_context(|| format!("cannot resolve {}", path.display()))?),
    }
}

/// Refuses `file` (opened at `path`) unless it is a regular file: checked on
/// the open file, so nothing swapped in after [`resolve_output`] is read or
/// written.
pub fn check(file: &File, path: &Path) -> Result<()> {
    let meta = file
        .metadata()
        .with_context(|| format!("cannot read {}", path.display()))?;
    refuse_irregular(path, meta.file_type(), None)
}

/// Reads the regular file at `path`; a device, FIFO or folder is refused
/// before anything is read (reading `/dev/zero` would never end).
pub fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = File::open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} is {}, not a regular file",
                path.display(),
                describe(meta.file_type())
            ),
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    std::io::Read::read_to_end(&mut file, &mut bytes)?;
    Ok(bytes)
}

/// [`read`] as UTF-8 text.
pub fn read_to_string(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read(path)?).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} is not UTF-8 text (byte {} is not)",
                path.display(),
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

fn refuse_irregular(path: &Path, kind: FileType, target: Option<&Path>) -> Result<()> {
    if kind.is_file() {
        return Ok(());
    }
    let what = describe(kind);
    match target {
        Some(target) => bail!(
            "{} is a symbolic link to {}, which is {what}, not a regular file: \
             dlas writes results, samples, environment, tuning and report files \
             only as regular files; name a file",
            path.display(),
            target.display()
        ),
        None => bail!(
            "{} is {what}, not a regular file: dlas writes results, samples, environment, \
             tuning and report files only as regular files; name a file",
            path.display()
        ),
    }
}

fn describe(kind: FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_char_device() {
            return "a character device";
        }
        if kind.is_block_device() {
            return "a block device";
        }
        if kind.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    if kind.is_dir() {
        "a folder"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("mkfifo runs");
        assert!(status.success());
    }

    #[test]
    fn regular_and_absent_files_resolve_to_absolute_paths() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.csv");
        assert_eq!(
            resolve_output(&file).unwrap(),
            dir.path().canonicalize().unwrap().join("a.csv")
        );
        std::fs::write(&file, "x").unwrap();
        assert_eq!(resolve_output(&file).unwrap(), file.canonicalize().unwrap());
        let deep = dir.path().join("new/folder/b.csv");
        assert!(resolve_output(&deep).unwrap().ends_with("new/folder/b.csv"));
    }

    #[cfg(unix)]
    #[test]
    fn devices_fifos_and_folders_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe.csv");
        mkfifo(&fifo);
        let err = resolve_output(&fifo).unwrap_err().to_string();
        assert!(
            err.contains("is a FIFO (named pipe), not a regular file"),
            "{err}"
        );
        let err = resolve_output(Path::new("/dev/null"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/dev/null is a character device"), "{err}");
        let err = resolve_output(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is a folder"), "{err}");
        let null = File::open("/dev/null").unwrap();
        let err = check(&null, Path::new("/dev/null"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("character device"), "{err}");
        let err = read_to_string(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert!(
            err.to_string().contains("/dev/zero is a character device"),
            "{err}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn links_are_followed_to_regular_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("real.csv");
        std::fs::write(&target, "x").unwrap();
        let link = dir.path().join("link.csv");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(
            resolve_output(&link).unwrap(),
            target.canonicalize().unwrap()
        );
        let dangling = dir.path().join("dangling.csv");
        std::os::unix::fs::symlink(dir.path().join("missing.csv"), &dangling).unwrap();
        let err = format!("{:#}", resolve_output(&dangling).unwrap_err());
        assert!(err.contains("which does not exist"), "{err}");
        let to_device = dir.path().join("null.csv");
        std::os::unix::fs::symlink("/dev/null", &to_device).unwrap();
        let err = resolve_output(&to_device).unwrap_err().to_string();
        assert!(
            err.contains("is a symbolic link to /dev/null, which is a character device"),
            "{err}"
        );
    }
}
