//! What a board needs and what it already has: the binary, the study, the
//! device specifications, `models.lock`, the model files of its host
//! shards and the ONNX Runtime library, each hashed once; on the board,
//! only missing or different files are copied, to a temporary name of this
//! connection's own (boards may share a home folder over NFS) that is
//! renamed once its hash is checked there. A shard whose board lost its
//! results is seeded with the rows fetched before.

use super::address::check_remote_path;
use super::session::{Assignment, Session, parent};
use crate::config::SubmitConfig;
use crate::shell::{quote, words};
use anyhow::{Context, Result, anyhow, bail};
use dlas_core::results::samples_path;
use dlas_core::{Combination, Study};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;

/// The model files boards read, given by the caller so that the coordinator
/// builds no runtime (`dlas-cli` answers with the runner's model store).
pub trait ModelFiles {
    /// The file a host combination reads, resolved (generated if absent)
    /// and hash-checked. Asked for every host combination of every board, so
    /// an implementation checks each file once and remembers it.
    fn path(&mut self, study: &Study, combination: &Combination) -> Result<PathBuf>;
}

/// A file the board needs, where it goes (relative to the remote folder)
/// and its sha256.
#[derive(Debug, Clone)]
pub(super) struct Upload {
    pub(super) local: PathBuf,
    pub(super) remote: String,
    pub(super) sha256: String,
}

/// What every board needs: the binary, the study and the device specifications.
pub(super) fn common_uploads(study: &Study, config: &SubmitConfig) -> Result<Vec<Upload>> {
    let study_file = study
        .path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow!("{} has no file name", study.path.display()))?;
    check_remote_path("the study file name", study_file)?;
    let upload = |local: PathBuf, remote: String| Upload {
        local,
        remote,
        sha256: String::new(),
    };
    let mut files = vec![
        upload(config.dlas.clone(), "bin/dlas".into()),
        upload(
            config.study_path.clone(),
            format!("data/studies/{study_file}"),
        ),
    ];
    let devices_dir = config.project_root.join("data/devices");
    let mut specs: Vec<PathBuf> = std::fs::read_dir(&devices_dir)
        .with_context(|| format!("cannot read {}", devices_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    specs.sort();
    for spec in specs {
        let name = spec
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        check_remote_path("a device specification", name)?;
        files.push(upload(spec.clone(), format!("data/devices/{name}")));
    }
    // The calibration the CPU device model is fitted to: `dlas` reads it
    // with the specifications.
    for name in ["host.toml", "host-layers.csv"] {
        let path = devices_dir.join("measured").join(name);
        if path.is_file() {
            files.push(upload(path, format!("data/devices/measured/{name}")));
        }
    }
    Ok(files)
}

/// `models.lock` and the model files the host combinations read, at the
/// paths the board's `dlas run` looks for them: zoo models under `.cache/`,
/// a study's own models relative to the study file, which sits in
/// `data/studies/`.
pub(super) fn model_uploads(
    study: &Study,
    config: &SubmitConfig,
    models: &mut dyn ModelFiles,
    combinations: &[Combination],
) -> Result<Vec<Upload>> {
    let mut files = vec![Upload {
        local: config.project_root.join("data/models.lock"),
        remote: "data/models.lock".into(),
        sha256: String::new(),
    }];
    let users: Vec<(PathBuf, &Path)> = study
        .onnx_models
        .iter()
        .map(|m| (study.onnx_model_path(m), m.path.as_path()))
        .collect();
    let mut locals: Vec<PathBuf> = Vec::new();
    for c in combinations {
        let path = models.path(study, c)?;
        if !locals.contains(&path) {
            locals.push(path);
        }
    }
    for local in locals {
        let remote = match users.iter().find(|(path, _)| path == &local) {
            Some((_, written)) => {
                if written.is_absolute() {
                    bail!(
                        "onnx_model file {} has an absolute path in {}; a board gets the file at the \
                         same path relative to the study file, so give a relative path",
                        written.display(),
                        study.path.display()
                    );
                }
                normalise(&Path::new("data/studies").join(written)).ok_or_else(|| {
                    anyhow!(
                        "onnx_model file {} in {} lies too many folders above the study file for a board's copy",
                        written.display(),
                        study.path.display()
                    )
                })?
            }
            None => local
                .strip_prefix(&config.project_root)
                .map(|p| p.display().to_string())
                .map_err(|_| anyhow!("model {} is outside the project", local.display()))?,
        };
        check_remote_path("a model path", &remote)?;
        files.push(Upload {
            local,
            remote,
            sha256: String::new(),
        });
    }
    Ok(files)
}

/// `a/b/../c` → `a/c`; `None` when the path climbs above its start.
fn normalise(path: &Path) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_str()?),
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.join("/"))
}

pub(super) fn sha256_file(path: &Path) -> Result<String> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok(hex::encode(hasher.finalize()))
}

impl Session<'_> {
    /// Creates the remote folders, checks the architecture, and copies the
    /// files that are missing or differ, verifying each by sha256 there.
    pub(super) fn prepare(&self, files: &[Upload], assignments: &[Assignment]) -> Result<()> {
        let mut dirs: Vec<String> = files
            .iter()
            .map(|f| parent(&f.remote))
            .chain(assignments.iter().map(|a| parent(&a.remote_results)))
            .collect();
        dirs.sort();
        dirs.dedup();
        let probed: Vec<String> = files
            .iter()
            .map(|f| f.remote.clone())
            .chain(assignments.iter().map(|a| a.remote_results.clone()))
            .collect();
        let script = format!(
            "set -e; mkdir -p {root}; cd {root}; uname -m; mkdir -p {dirs}; \
             for f in {probed}; do if [ -f \"$f\" ]; then sha256sum \"$f\"; fi; done",
            root = quote(self.root),
            dirs = words(&dirs),
            probed = words(&probed),
        );
        let output = String::from_utf8_lossy(&self.output(
            "inspecting the remote folder",
            &script,
            Stdio::null(),
        )?)
        .into_owned();
        let mut lines = output.lines();
        let arch = lines.next().unwrap_or_default().trim().to_string();
        let present: HashMap<String, String> = lines
            .filter_map(|l| {
                let (hash, path) = l.split_once(char::is_whitespace)?;
                Some((
                    path.trim().trim_start_matches('*').to_string(),
                    hash.to_string(),
                ))
            })
            .collect();
        let mut send: Vec<&Upload> = Vec::new();
        for file in files {
            let family = elf_arch(&file.local);
            if let Some(built) = family
                && built != arch_family(&arch)
            {
                if file.remote == "bin/dlas" {
                    bail!(
                        "{} is a {arch} board, but {} is built for {built}; build dlas for the board \
                         (e.g. cargo build --release --target aarch64-unknown-linux-gnu) and pass it with --dlas",
                        self.destination,
                        file.local.display()
                    );
                }
                self.say(&format!(
                    "not copying {} (built for {built}, the board is {arch}); its combinations run only \
                     if the board has its own copy at {}/{}",
                    file.local.display(),
                    self.root,
                    file.remote
                ));
                continue;
            }
            if present.get(&file.remote) != Some(&file.sha256) {
                send.push(file);
            }
        }
        // A shard fetched earlier whose board lost its results (a wiped or
        // replaced board) starts from the rows fetched, not from nothing.
        let mut seeds = Vec::new();
        for a in assignments {
            if !present.contains_key(&a.remote_results) && a.local_results.exists() {
                seeds.push(Upload {
                    local: a.local_results.clone(),
                    remote: a.remote_results.clone(),
                    sha256: sha256_file(&a.local_results)?,
                });
                let samples = samples_path(&a.local_results);
                if samples.exists() {
                    seeds.push(Upload {
                        sha256: sha256_file(&samples)?,
                        local: samples,
                        remote: samples_path(Path::new(&a.remote_results))
                            .display()
                            .to_string(),
                    });
                }
            }
        }
        send.extend(seeds.iter());
        if send.is_empty() {
            self.say(&format!("{arch}; all {} files already there", files.len()));
            return Ok(());
        }
        let bytes: u64 = send
            .iter()
            .filter_map(|f| std::fs::metadata(&f.local).ok())
            .map(|m| m.len())
            .sum();
        let mut names: Vec<&str> = send.iter().take(4).map(|f| f.remote.as_str()).collect();
        let more = format!("and {} more", send.len().saturating_sub(4));
        if send.len() > 4 {
            names.push(&more);
        }
        self.say(&format!(
            "{arch}; copying {} of {} files ({:.1} MB): {}",
            send.len(),
            files.len() + seeds.len(),
            bytes as f64 / 1e6,
            names.join(", ")
        ));
        let part = |f: &Upload| format!("{}.{}.part", f.remote, self.tag);
        for file in &send {
            let source = std::fs::File::open(&file.local)
                .with_context(|| format!("cannot read {}", file.local.display()))?;
            let script = format!("cat > {}", quote(&format!("{}/{}", self.root, part(file))));
            self.output(
                &format!("copying {}", file.remote),
                &script,
                Stdio::from(source),
            )?;
        }
        let checks: Vec<String> = send
            .iter()
            .map(|f| format!("{}  {}", f.sha256, part(f)))
            .collect();
        let moves: Vec<String> = send
            .iter()
            .map(|f| format!("mv -f {} {}", quote(&part(f)), quote(&f.remote)))
            .collect();
        let script = format!(
            "set -e; cd {}; printf '%s\\n' {} | sha256sum -c - 1>&2; {}; chmod 755 bin/dlas",
            quote(self.root),
            words(&checks),
            moves.join("; ")
        );
        self.output("checking the copied files' sha256", &script, Stdio::null())?;
        Ok(())
    }
}

/// The architecture an ELF file is built for, in `uname -m`'s families.
fn elf_arch(path: &Path) -> Option<&'static str> {
    let mut header = [0u8; 20];
    std::fs::File::open(path)
        .ok()?
        .read_exact(&mut header)
        .ok()?;
    if &header[..4] != b"\x7fELF" {
        return None;
    }
    let machine = match header[5] {
        1 => u16::from_le_bytes([header[18], header[19]]),
        _ => u16::from_be_bytes([header[18], header[19]]),
    };
    Some(match machine {
        0x03 => "x86",
        0x3e => "x86_64",
        0x28 => "arm",
        0xb7 => "aarch64",
        0xf3 => "riscv64",
        _ => return None,
    })
}

/// `uname -m` reduced to the families of [`elf_arch`].
fn arch_family(uname: &str) -> &str {
    match uname {
        "x86_64" | "amd64" => "x86_64",
        "aarch64" | "arm64" => "aarch64",
        "i386" | "i486" | "i586" | "i686" => "x86",
        m if m.starts_with("arm") => "arm",
        m => m,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_paths() {
        assert_eq!(
            normalise(Path::new("data/studies/../../models/m.onnx")).as_deref(),
            Some("models/m.onnx")
        );
        assert_eq!(normalise(Path::new("data/studies/../../../m.onnx")), None);
    }

    #[test]
    fn reads_architectures() {
        let exe = std::env::current_exe().unwrap();
        assert_eq!(
            elf_arch(&exe).map(|a| a == arch_family(std::env::consts::ARCH)),
            Some(true)
        );
        assert_eq!(arch_family("armv7l"), "arm");
        assert_eq!(arch_family("arm64"), "aarch64");
    }
}
