//! The environment record: what machine and software produced a results
//! file. Its id (a hash of its content) is the `source` of every row, so a
//! number can always be traced to the machine, toolchain and protocol.
//!
//! Core holds the saved record (its fields, id and file name), so crates
//! that only read results (the coordinator, the report) need not build the
//! runner; `dlas_runner::environment` fills it in on the machine that runs.

use anyhow::Result;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub cpu_model: String,
    pub cpu_flags: Vec<String>,
    pub logical_cpus: usize,
    pub frequency_governor: String,
    pub os: String,
    pub kernel: String,
    pub rustc: String,
    pub dlas_version: String,
    pub tract_version: String,
    pub ort_crate_version: String,
    /// ONNX Runtime build information and library hash, or why it is absent.
    pub onnxruntime: String,
    /// OpenVINO's version and library, or why it is absent; records
    /// written before OpenVINO was measured have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openvino: Option<String>,
    /// Apache TVM's version and interpreter, when the run had TVM rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tvm: Option<String>,
    /// The last commit that changed the code (crates, manifests, toolchain,
    /// build flags), with `-dirty` if that code has uncommitted changes.
    /// Commits of results alone leave it unchanged, so a campaign that
    /// commits its rows as it goes keeps one record.
    pub git_revision: String,
    /// 1-minute load average when the run started. Records written before
    /// December 2026 have it; newer ones leave it out, because it made every
    /// invocation a new record: the load is kept per configuration, with
    /// steal time and clock, beside its samples (`docs/protocol.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_average: Option<String>,
    /// The measurement protocol, as `key=value` pairs.
    pub protocol: Vec<(String, String)>,
}

impl Environment {
    /// `env-` and the first 12 hex digits of the sha256 of the record's JSON.
    pub fn id(&self) -> String {
        let json = serde_json::to_vec(self).expect("the record serialises");
        format!("env-{}", &hex::encode(Sha256::digest(&json))[..12])
    }

    /// Writes `<dir>/<id>.json` (atomically) and returns its path.
    pub fn save(&self, dir: &Path) -> Result<PathBuf> {
        let path = dir.join(format!("{}.json", self.id()));
        let mut json = serde_json::to_string_pretty(self)?;
        json.push('\n');
        crate::atomic::write_if_changed(&path, json.as_bytes())?;
        Ok(path)
    }

    /// Whether `other` describes the same kind of machine: the same CPU
    /// model, instruction-set flags and logical CPUs. A device model
    /// calibrated on one machine is validated only on rows measured on
    /// such a machine.
    pub fn same_machine(&self, other: &Environment) -> bool {
        self.cpu_model == other.cpu_model
            && self.cpu_flags == other.cpu_flags
            && self.logical_cpus == other.logical_cpus
    }

    /// Reads the record at `path`. A record saved as `<id>.json` must
    /// still have that id: rows name their environment by it, so a record
    /// edited after the rows were measured no longer describes them.
    pub fn load(path: &Path) -> Result<Environment> {
        let text = crate::regular_file::read_to_string(path).map_err(|e| {
            anyhow::anyhow!("cannot read environment record {}: {e}", path.display())
        })?;
        let record: Environment = serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{} is not an environment record: {e}", path.display()))?;
        let named = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if named.starts_with("env-") && named != record.id() {
            anyhow::bail!(
                "{}: the record's content hashes to {}, not to the id {named} its name gives; \
                 it was changed after its rows were measured, so it no longer describes them \
                 (restore it from git, or measure again)",
                path.display(),
                record.id()
            );
        }
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Environment {
        Environment {
            cpu_model: "cpu".into(),
            cpu_flags: vec!["avx2".into()],
            logical_cpus: 4,
            frequency_governor: "performance".into(),
            os: "linux".into(),
            kernel: "6.1".into(),
            rustc: "rustc 1.90".into(),
            dlas_version: "0.1.0".into(),
            tract_version: "0.23.9".into(),
            ort_crate_version: "2.0.0-rc.15".into(),
            onnxruntime: "none".into(),
            openvino: None,
            tvm: None,
            git_revision: "abc".into(),
            load_average: None,
            protocol: vec![("runs".into(), "3".into())],
        }
    }

    #[test]
    fn id_depends_on_content_only() {
        let a = record();
        let b = a.clone();
        assert_eq!(a.id(), b.id());
        let mut c = a.clone();
        c.protocol[0].1 = "4".into();
        assert_ne!(a.id(), c.id());
        assert!(a.id().starts_with("env-") && a.id().len() == 16);
        let dir = tempfile::tempdir().unwrap();
        let path = a.save(dir.path()).unwrap();
        assert_eq!(path, dir.path().join(format!("{}.json", a.id())));
        assert_eq!(Environment::load(&path).unwrap(), a);
    }

    #[test]
    fn a_record_whose_content_no_longer_hashes_to_its_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = record().save(dir.path()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("\"cpu\"", "\"cpu | x\"")).unwrap();
        let err = Environment::load(&path).unwrap_err().to_string();
        assert!(err.contains("the record's content hashes to env-"), "{err}");
        assert!(
            err.contains(&format!("not to the id {}", record().id())),
            "{err}"
        );
    }

    #[test]
    fn records_with_a_load_average_keep_their_id() {
        // Records written before the field became optional name the rows
        // of committed results files: their ids must not change.
        let mut old = record();
        old.load_average = Some("1.60".into());
        let json = serde_json::to_string(&old).unwrap();
        assert!(json.contains("\"load_average\":\"1.60\""));
        let read: Environment = serde_json::from_str(&json).unwrap();
        assert_eq!(read.id(), old.id());
        let new = serde_json::to_string(&record()).unwrap();
        assert!(!new.contains("load_average"));
    }
}
