//! The Debian packages the test suite needs besides Rust: which are missing,
//! one line saying how to install them, `cargo xtask setup --system` to
//! install them, and the tests `cargo xtask test` skips without them.
//!
//! A test that needs a missing tool fails (it never passes without doing its
//! work), so on a developer's machine `cargo xtask test` leaves it out with a
//! nextest filter and nextest counts it as skipped; under `.ci/run`
//! ([`REQUIRE`] is set) nothing may be left out.

use anyhow::{Result, bail};
use std::path::Path;
use std::process::Command;

/// Set by `.ci/run`: every package must be present and no test skipped.
pub const REQUIRE: &str = "DLAS_REQUIRE_SYSTEM_PACKAGES";

/// A package, how to tell it is installed, and what needs it.
pub struct Need {
    pub package: &'static str,
    /// The programs the tests run, for the message.
    pub tools: &'static str,
    pub present: fn() -> bool,
    /// `(nextest binary id, test name)` of every test that needs it.
    pub tests: &'static [(&'static str, &'static str)],
}

const CLUSTER: &str = "dlas-cli::cluster";
const CHROMIUM: &str = "dlas-report::report_page_in_chromium";

pub const NEEDS: &[Need] = &[
    Need {
        package: "slurm-wlm",
        tools: "slurmctld, slurmd",
        present: || on_path("slurmctld") && on_path("slurmd"),
        tests: &[(CLUSTER, "slurm_cluster_runs_and_merges_a_study")],
    },
    Need {
        package: "openssh-server",
        tools: "/usr/sbin/sshd",
        present: || Path::new("/usr/sbin/sshd").is_file(),
        tests: &[(CLUSTER, "ssh_boards_run_resume_and_merge_a_study")],
    },
    Need {
        package: "openssh-client",
        tools: "ssh, ssh-keygen",
        present: || on_path("ssh") && on_path("ssh-keygen"),
        tests: &[(CLUSTER, "ssh_boards_run_resume_and_merge_a_study")],
    },
    Need {
        package: "chromium",
        tools: "chromium",
        present: || {
            std::env::var_os("CHROMIUM").is_some()
                || on_path("chromium")
                || on_path("chromium-browser")
        },
        tests: &[
            (
                CHROMIUM,
                "every_figure_and_section_of_the_report_page_renders",
            ),
            (CHROMIUM, "a_broken_or_missing_figure_is_caught"),
        ],
    },
    Need {
        package: "python3-pip",
        tools: "python3 -m pip, for `cargo xtask setup`",
        present: || {
            Command::new("python3")
                .args(["-m", "pip", "--version"])
                .output()
                .is_ok_and(|o| o.status.success())
        },
        tests: &[],
    },
    Need {
        package: "python3-venv",
        tools: "python3 -m venv, for `cargo xtask setup --tvm`",
        present: || {
            Command::new("python3")
                .args(["-c", "import ensurepip, venv"])
                .output()
                .is_ok_and(|o| o.status.success())
        },
        tests: &[],
    },
    Need {
        package: "nix-bin",
        tools: "nix-instantiate, for the flake step",
        present: || on_path("nix-instantiate"),
        tests: &[],
    },
];

/// The needs whose package is not installed.
pub fn missing() -> Vec<&'static Need> {
    NEEDS.iter().filter(|n| !(n.present)()).collect()
}

/// One line: what is missing and how to install it.
pub fn missing_line(missing: &[&Need]) -> String {
    let listed: Vec<String> = missing
        .iter()
        .map(|n| format!("{} ({})", n.package, n.tools))
        .collect();
    let packages: Vec<&str> = missing.iter().map(|n| n.package).collect();
    format!(
        "missing system packages: {}; install them with `sudo apt-get install {}` \
         (or, as root, `cargo xtask setup --system`)",
        listed.join(", "),
        packages.join(" ")
    )
}

/// The tests that cannot run without the missing packages, in order, once each.
pub fn skipped_tests(missing: &[&Need]) -> Vec<(&'static str, &'static str)> {
    let mut tests: Vec<(&str, &str)> = Vec::new();
    for need in missing {
        for test in need.tests {
            if !tests.contains(test) {
                tests.push(*test);
            }
        }
    }
    tests
}

/// A nextest filter expression leaving `tests` out, if there are any.
pub fn exclusion_filter(tests: &[(&str, &str)]) -> Option<String> {
    if tests.is_empty() {
        return None;
    }
    let terms: Vec<String> = tests
        .iter()
        .map(|(binary, test)| format!("(binary_id(={binary}) & test(={test}))"))
        .collect();
    Some(format!("not ({})", terms.join(" | ")))
}

/// `cargo xtask setup --system`: installs the missing packages with apt-get
/// when run as root; otherwise says which command to run.
pub fn install() -> Result<()> {
    let missing = missing();
    if missing.is_empty() {
        eprintln!("system packages: all present");
        return Ok(());
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root {
        bail!("{} (apt-get needs root)", missing_line(&missing));
    }
    let packages: Vec<&str> = missing.iter().map(|n| n.package).collect();
    eprintln!("installing {}", packages.join(" "));
    crate::commands::run(Command::new("apt-get").args(["update", "-qq"]))?;
    crate::commands::run(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&packages)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    let still = self::missing();
    if !still.is_empty() {
        bail!("after apt-get install: {}", missing_line(&still));
    }
    Ok(())
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_packages_are_one_line_naming_the_install_command() {
        let missing: Vec<&Need> = NEEDS
            .iter()
            .filter(|n| ["slurm-wlm", "chromium"].contains(&n.package))
            .collect();
        assert_eq!(
            missing_line(&missing),
            "missing system packages: slurm-wlm (slurmctld, slurmd), chromium (chromium); \
             install them with `sudo apt-get install slurm-wlm chromium` \
             (or, as root, `cargo xtask setup --system`)"
        );
    }

    #[test]
    fn the_tests_of_missing_packages_are_filtered_out_once_each() {
        let ssh: Vec<&Need> = NEEDS
            .iter()
            .filter(|n| n.package.starts_with("openssh"))
            .collect();
        let tests = skipped_tests(&ssh);
        assert_eq!(
            tests,
            [(CLUSTER, "ssh_boards_run_resume_and_merge_a_study")]
        );
        assert_eq!(
            exclusion_filter(&tests).unwrap(),
            "not ((binary_id(=dlas-cli::cluster) & test(=ssh_boards_run_resume_and_merge_a_study)))"
        );
        assert_eq!(exclusion_filter(&[]), None);
    }

    /// A renamed test would silently stop being filtered (and then fail for
    /// want of its tool), so every named test must exist where it is said to.
    #[test]
    fn every_filtered_test_exists() {
        let root = crate::project_root();
        let tvm = crate::setup::TVM_TESTS.iter();
        for (binary, test) in NEEDS.iter().flat_map(|n| n.tests).chain(tvm) {
            {
                let (krate, file) = binary.split_once("::").unwrap();
                let path = root
                    .join("crates")
                    .join(krate)
                    .join(format!("tests/{file}.rs"));
                let source = std::fs::read_to_string(&path).unwrap();
                assert!(
                    source.contains(&format!("fn {test}()")),
                    "{} has no test {test}",
                    path.display()
                );
            }
        }
    }
}
