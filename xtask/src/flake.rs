//! Offline checks of the Nix flake: it parses, every input is locked, and
//! its toolchain is the one `rust-toolchain.toml` pins.
//!
//! Evaluating the flake needs the network and Nix 2.18 or newer; CI can only
//! parse it (Debian 12 ships Nix 2.8).

use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;

pub fn check(root: &Path) -> Result<()> {
    let flake = std::fs::read_to_string(root.join("flake.nix")).context("cannot read flake.nix")?;
    match Command::new("nix-instantiate")
        .args(["--parse", "flake.nix"])
        .current_dir(root)
        .output()
    {
        Ok(out) if out.status.success() => eprintln!("flake.nix parses"),
        Ok(out) => bail!(
            "flake.nix does not parse:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(_)
            if std::env::var_os("CI").is_some()
                || std::env::var_os(crate::system::REQUIRE).is_some() =>
        {
            bail!("nix-instantiate is missing; .ci/run installs it with `apt-get install nix-bin`")
        }
        Err(_) => eprintln!(
            "nix-instantiate not found: flake.nix parse check skipped (apt-get install nix-bin)"
        ),
    }
    let lock: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("flake.lock")).context("cannot read flake.lock")?,
    )
    .context("flake.lock is not valid JSON")?;
    let nodes = lock["nodes"]
        .as_object()
        .context("flake.lock has no nodes")?;
    let root_inputs = nodes
        .get("root")
        .and_then(|r| r["inputs"].as_object())
        .context("flake.lock has no root inputs")?;
    for (name, node_ref) in root_inputs {
        let node_name = node_ref.as_str().unwrap_or(name);
        let locked = &nodes
            .get(node_name)
            .with_context(|| format!("flake.lock: input `{name}` has no node"))?["locked"];
        for field in ["rev", "narHash", "lastModified"] {
            if locked[field].is_null() {
                bail!("flake.lock: input `{name}` is not locked (no `{field}`)");
            }
        }
        if !flake.contains(&format!("{name}.url")) && !flake.contains(&format!("{name} = {{")) {
            bail!("flake.lock locks `{name}`, which flake.nix does not declare");
        }
    }
    if !flake.contains("fromRustupToolchainFile ./rust-toolchain.toml") {
        bail!("flake.nix must take its toolchain from ./rust-toolchain.toml");
    }
    let toolchain = std::fs::read_to_string(root.join("rust-toolchain.toml"))?;
    let table: toml::Table = toolchain
        .parse()
        .context("rust-toolchain.toml is not TOML")?;
    let channel = table["toolchain"]["channel"]
        .as_str()
        .context("rust-toolchain.toml has no toolchain.channel")?;
    let rustc = Command::new("rustc").arg("--version").output()?;
    let version = String::from_utf8_lossy(&rustc.stdout);
    if !version.starts_with(&format!("rustc {channel} ")) {
        bail!("rust-toolchain.toml pins {channel}, but this shell runs {version}");
    }
    eprintln!(
        "flake.lock: {} inputs locked; toolchain {channel} from rust-toolchain.toml",
        root_inputs.len()
    );
    Ok(())
}
