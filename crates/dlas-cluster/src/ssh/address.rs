//! Which board and how to reach it: `[user@]addr[:port]` and
//! `device=[user@]addr[:port]` from `--host`, the `ssh` options a submission
//! is allowed (`--identity`, `--ssh-option`, `--connect-timeout`), and the
//! characters a remote path may use. Pure parsing and checking: nothing here
//! connects.

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `[user@]addr[:port]`: one board. IPv6 addresses go in brackets.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Destination {
    pub user: Option<String>,
    pub addr: String,
    pub port: u16,
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(user) = &self.user {
            write!(f, "{user}@")?;
        }
        if self.addr.contains(':') {
            write!(f, "[{}]:{}", self.addr, self.port)
        } else {
            write!(f, "{}:{}", self.addr, self.port)
        }
    }
}

impl std::str::FromStr for Destination {
    type Err = String;
    fn from_str(text: &str) -> Result<Destination, String> {
        let bad = |why: &str| format!("`{text}` is not [user@]addr[:port]: {why}");
        let (user, rest) = match text.rsplit_once('@') {
            Some((user, rest)) => (Some(user), rest),
            None => (None, text),
        };
        if let Some(user) = user
            && (user.is_empty()
                || !user
                    .chars()
                    .all(|c| c.is_alphanumeric() || "._-".contains(c)))
        {
            return Err(bad(
                "the user name is empty or has characters other than letters, digits, `.`, `_` and `-`",
            ));
        }
        let (addr, port) = if let Some(bracketed) = rest.strip_prefix('[') {
            let (addr, after) = bracketed
                .split_once(']')
                .ok_or_else(|| bad("an IPv6 address needs its closing `]`"))?;
            match after {
                "" => (addr, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (addr, Some(port)),
                    None => return Err(bad("write [addr]:port")),
                },
            }
        } else {
            match rest.split_once(':') {
                Some((addr, port)) => (addr, Some(port)),
                None => (rest, None),
            }
        };
        if addr.is_empty()
            || addr.starts_with('-')
            || !addr
                .chars()
                .all(|c| c.is_alphanumeric() || ".-_:%".contains(c))
        {
            return Err(bad(
                "the address is empty, starts with `-` or has characters not found in host names and IP addresses",
            ));
        }
        let port = match port {
            None => 22,
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => return Err(bad(&format!("port `{p}` is not a number from 1 to 65535"))),
            },
        };
        Ok(Destination {
            user: user.map(String::from),
            addr: addr.to_string(),
            port,
        })
    }
}

/// `device=[user@]addr[:port]` from `--host`: a board that runs `device`'s
/// shards. A device may have several boards; its shards go round-robin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshHost {
    pub device: String,
    pub destination: Destination,
}

impl std::str::FromStr for SshHost {
    type Err = String;
    fn from_str(text: &str) -> Result<SshHost, String> {
        let (device, destination) = text
            .split_once('=')
            .filter(|(d, _)| !d.trim().is_empty())
            .ok_or_else(|| format!("`{text}` is not device=[user@]addr[:port]"))?;
        Ok(SshHost {
            device: device.trim().to_string(),
            destination: destination.trim().parse()?,
        })
    }
}

/// How `ssh` is called: what `--identity`, `--ssh-option` and
/// `--connect-timeout` say. `BatchMode=yes` is always on, so a board that
/// wants a password fails at once instead of waiting for one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transport {
    pub identity: Option<PathBuf>,
    /// `Key=Value` options passed with `-o`, before the defaults, so they win.
    pub options: Vec<String>,
    pub connect_timeout_s: u64,
}

/// Options the coordinator's connection handling depends on.
const RESERVED: [&str; 5] = [
    "BatchMode",
    "ControlMaster",
    "ControlPath",
    "ControlPersist",
    "ConnectTimeout",
];

impl Transport {
    /// Checks `--ssh-option` values and the timeout.
    pub(crate) fn check(&self) -> Result<()> {
        for option in &self.options {
            let valid = option.split_once('=').is_some_and(|(k, v)| {
                !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric()) && !v.is_empty()
            });
            if !valid {
                bail!(
                    "--ssh-option `{option}` is not Key=Value (e.g. StrictHostKeyChecking=accept-new)"
                );
            }
            let key = option.split('=').next().unwrap_or_default();
            if let Some(own) = RESERVED.iter().find(|r| r.eq_ignore_ascii_case(key)) {
                bail!(
                    "--ssh-option `{option}`: dlas sets {own} itself (one batch-mode connection per board); \
                     use --connect-timeout for the timeout"
                );
            }
        }
        if self.connect_timeout_s == 0 {
            bail!("--connect-timeout must be at least 1 second");
        }
        if let Some(identity) = &self.identity
            && !identity.is_file()
        {
            bail!("--identity {} is not a file", identity.display());
        }
        Ok(())
    }
}

/// Characters allowed in remote paths: they appear in shell commands, so
/// anything a shell would interpret is refused rather than escaped twice.
pub(crate) fn check_remote_path(what: &str, path: &str) -> Result<()> {
    if path.is_empty()
        || !path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/+".contains(c))
    {
        bail!(
            "{what} `{path}` may only use letters, digits and `._-/+` (relative paths start at the login's home folder)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hosts() {
        let h: SshHost = "hikey970-cpu=linaro@10.0.0.5".parse().unwrap();
        assert_eq!(h.device, "hikey970-cpu");
        assert_eq!(h.destination.user.as_deref(), Some("linaro"));
        assert_eq!(h.destination.port, 22);
        assert_eq!(h.destination.to_string(), "linaro@10.0.0.5:22");
        let h: SshHost = "host=root@127.0.0.1:2222".parse().unwrap();
        assert_eq!(h.destination.port, 2222);
        let h: SshHost = "host=[::1]:2022".parse().unwrap();
        assert_eq!(h.destination.addr, "::1");
        assert_eq!(h.destination.to_string(), "[::1]:2022");
        let h: SshHost = "host=board".parse().unwrap();
        assert_eq!((h.destination.user, h.destination.port), (None, 22));
        for bad in [
            "host",
            "=pi@x",
            "host=",
            "host=@x",
            "host=pi@x:port",
            "host=pi@x:0",
            "host=pi@x:70000",
            "host=-oProxyCommand=x",
            "host=pi@x y",
            "host=[::1",
            "host=[::1]2022",
        ] {
            let error = bad.parse::<SshHost>().unwrap_err();
            assert!(error.contains('`'), "{bad}: {error}");
        }
    }

    #[test]
    fn checks_transport_options() {
        let transport = |options: &[&str]| Transport {
            identity: None,
            options: options.iter().map(|s| s.to_string()).collect(),
            connect_timeout_s: 5,
        };
        assert!(
            transport(&["StrictHostKeyChecking=accept-new"])
                .check()
                .is_ok()
        );
        for bad in [
            "StrictHostKeyChecking",
            "=x",
            "Key=",
            "Proxy Command=x",
            "batchmode=no",
            "ControlPath=/tmp/x",
        ] {
            let error = transport(&[bad]).check().unwrap_err().to_string();
            assert!(error.contains(bad), "{error}");
        }
    }

    #[test]
    fn checks_remote_paths() {
        assert!(check_remote_path("x", "dlas/.cache/a-b_c+1.onnx").is_ok());
        for bad in ["", "a b", "a;rm", "$HOME/x", "~/x", "a'b"] {
            assert!(check_remote_path("x", bad).is_err(), "{bad}");
        }
    }
}
