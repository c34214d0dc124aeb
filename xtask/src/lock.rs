//! Lock files: the sha256 of every generated model and every data file.
//!
//! `data/models.lock` pins the ONNX files that `dlas zoo export-all` writes
//! into `.cache/models` (they are regenerated, never committed);
//! `data/files.lock` pins every other file under `data/`.
//!
//! A model may have more than one locked line: the int8 QDQ files take
//! their scales from calibration ranges that tract computes with its f32
//! kernels, which round differently with AVX-512 and with AVX2, so a scale
//! can differ in its last bit between machines. Each such build is listed
//! (with a comment saying which CPU made it), and a generated file must
//! match one of its path's lines; `--update` writes this machine's lines only.

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::path::Path;

const MODELS_LOCK: &str = "data/models.lock";
const FILES_LOCK: &str = "data/files.lock";
const HEADER: &str =
    "# sha256  path; checked by `cargo xtask verify`, rewritten by `cargo xtask verify --update`\n";

pub fn verify(root: &Path, update: bool) -> Result<()> {
    let cache = root.join(".cache/models");
    let models = crate::commands::dlas_output(
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
        let mismatches = if lock == MODELS_LOCK {
            diff_variants(&committed, &expected)
        } else {
            diff(&committed, &expected)
        };
        for line in mismatches {
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

/// Like [`diff`], but a path may have several locked lines, and a generated
/// line matches if its hash is any of them.
fn diff_variants(committed: &str, expected: &str) -> Vec<String> {
    let split = |l: &str| {
        l.split_once("  ")
            .map(|(h, p)| (h.to_string(), p.to_string()))
    };
    let mut locked: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (hash, path) in committed
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(split)
    {
        locked.entry(path).or_default().push(hash);
    }
    let generated: Vec<(String, String)> = expected
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(split)
        .collect();
    let mut out: Vec<String> = generated
        .iter()
        .filter(|(hash, path)| !locked.get(path).is_some_and(|h| h.contains(hash)))
        .map(|(hash, path)| format!("expected {hash}  {path}"))
        .collect();
    for (path, hashes) in &locked {
        if !generated.iter().any(|(_, p)| p == path) {
            out.extend(hashes.iter().map(|h| format!("locked   {h}  {path}")));
        }
    }
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

/// The files under `dir`, except those in a `*.partial` folder: an
/// unfinished TVM tuning (git-ignored, moved into place when it ends), whose
/// files a lock must not name, as a clean checkout never has them.
fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            if path.extension().is_some_and(|e| e == "partial") {
                continue;
            }
            collect(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unfinished_tuning_is_not_locked() {
        let root = tempfile::tempdir().unwrap();
        let tvm = root.path().join("data/results/s/tuning/tvm");
        std::fs::create_dir_all(tvm.join("net-b1.partial")).unwrap();
        std::fs::create_dir_all(tvm.join("done-b1")).unwrap();
        std::fs::write(tvm.join("net-b1.partial/database_workload.json"), "x").unwrap();
        std::fs::write(tvm.join("done-b1/tuning.json"), "{}").unwrap();
        let lock = hash_data_files(root.path()).unwrap();
        assert!(
            lock.contains("data/results/s/tuning/tvm/done-b1/tuning.json"),
            "{lock}"
        );
        assert!(!lock.contains(".partial"), "{lock}");
    }

    #[test]
    fn a_model_matches_any_of_its_locked_builds_and_nothing_else() {
        let locked = "# header\naaa  m/x.onnx\nbbb  m/x.onnx\nccc  m/y.onnx\n";
        assert!(diff_variants(locked, "bbb  m/x.onnx\nccc  m/y.onnx\n").is_empty());
        assert!(diff_variants(locked, "aaa  m/x.onnx\nccc  m/y.onnx\n").is_empty());
        assert_eq!(
            diff_variants(locked, "ddd  m/x.onnx\nccc  m/y.onnx\n"),
            vec!["expected ddd  m/x.onnx"]
        );
        assert_eq!(
            diff_variants(locked, "aaa  m/x.onnx\n"),
            vec!["locked   ccc  m/y.onnx"]
        );
    }
}
