//! Lock files: the sha256 of every generated model and every data file.
//!
//! `data/models.lock` pins the ONNX files that `dlas zoo export-all` writes
//! into `.cache/models` (they are regenerated, never committed);
//! `data/files.lock` pins every other file under `data/`.

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::path::Path;

const MODELS_LOCK: &str = "data/models.lock";
const FILES_LOCK: &str = "data/files.lock";
const HEADER: &str =
    "# sha256  path; checked by `cargo xtask verify`, rewritten by `cargo xtask verify --update`\n";

pub fn verify(root: &Path, update: bool) -> Result<()> {
    let cache = root.join(".cache/models");
    let models = crate::dlas_output(
        root,
        &[
            "zoo",
            "export-all",
            "--out",
            cache.to_str().context("cache path is not UTF-8")?,
        ],
    )?;
    let files = hash_data_files(root)?;
    let mut failures = Vec::new();
    for (lock, content) in [(MODELS_LOCK, models), (FILES_LOCK, files)] {
        let path = root.join(lock);
        let expected = format!("{HEADER}{content}");
        if update {
            std::fs::write(&path, &expected).with_context(|| format!("cannot write {lock}"))?;
            eprintln!("wrote {lock}");
            continue;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        for line in diff(&committed, &expected) {
            failures.push(format!("{lock}: {line}"));
        }
    }
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("{f}");
        }
        bail!(
            "{} hash mismatches; if the change is intended, run `cargo xtask verify --update` and commit the lock files",
            failures.len()
        );
    }
    if !update {
        eprintln!("verified {MODELS_LOCK} and {FILES_LOCK}");
    }
    Ok(())
}

/// Lines of `expected` missing from `committed` and vice versa.
fn diff(committed: &str, expected: &str) -> Vec<String> {
    let c: Vec<&str> = committed.lines().filter(|l| !l.starts_with('#')).collect();
    let e: Vec<&str> = expected.lines().filter(|l| !l.starts_with('#')).collect();
    let mut out: Vec<String> = e
        .iter()
        .filter(|l| !c.contains(l))
        .map(|l| format!("expected {l}"))
        .collect();
    out.extend(
        c.iter()
            .filter(|l| !e.contains(l))
            .map(|l| format!("locked   {l}")),
    );
    out
}

/// `sha256  path` for every file under data/ except the lock files, sorted by path.
fn hash_data_files(root: &Path) -> Result<String> {
    let mut paths = Vec::new();
    collect(&root.join("data"), &mut paths)?;
    paths.sort();
    let mut out = String::new();
    for path in paths {
        let rel = path
            .strip_prefix(root)?
            .to_string_lossy()
            .replace('\\', "/");
        if rel == MODELS_LOCK || rel == FILES_LOCK {
            continue;
        }
        let bytes = std::fs::read(&path).with_context(|| format!("cannot read {rel}"))?;
        out += &format!("{}  {rel}\n", hex::encode(Sha256::digest(&bytes)));
    }
    Ok(out)
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}
