//! Where the `redis-server` and `redis-cli` binaries are, overridable by environment variables
//! so a developer or CI can test against another Redis build without touching code.

use std::env;
use std::fmt;
use std::path::{Path, PathBuf};

/// Environment variable naming the `redis-server` binary to run.
pub const SERVER_ENV: &str = "REDLOCK_REDIS_SERVER";
/// Environment variable naming the `redis-cli` binary to run.
pub const CLI_ENV: &str = "REDLOCK_REDIS_CLI";

/// One of the two Redis binaries this crate runs, as named in
/// [`LaunchError::BinaryNotFound`](crate::LaunchError::BinaryNotFound): one error for both, whose
/// message says which binary is missing, which package installs it and which variable points to
/// it. Its `Display` is the binary's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RedisBinary {
    /// `redis-server`.
    Server,
    /// `redis-cli`.
    Cli,
}

impl RedisBinary {
    /// The binary's usual name, as looked up on `PATH`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Server => "redis-server",
            Self::Cli => "redis-cli",
        }
    }

    /// The Debian/Ubuntu package that installs it.
    #[must_use]
    pub fn package(self) -> &'static str {
        match self {
            Self::Server => "redis-server",
            Self::Cli => "redis-tools",
        }
    }

    /// The environment variable that names the binary to run instead
    /// ([`SERVER_ENV`] or [`CLI_ENV`]).
    #[must_use]
    pub fn env(self) -> &'static str {
        match self {
            Self::Server => SERVER_ENV,
            Self::Cli => CLI_ENV,
        }
    }
}

impl fmt::Display for RedisBinary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The `redis-server` to run: `$REDLOCK_REDIS_SERVER` if set and non-empty, else `redis-server`
/// looked up on `PATH` when it is spawned.
///
/// This does not check that the binary exists; starting a node does, and reports a missing one as
/// [`LaunchError::BinaryNotFound`](crate::LaunchError::BinaryNotFound), whose message says how
/// to install it.
pub fn server_binary() -> PathBuf {
    from_env(SERVER_ENV).unwrap_or_else(|| PathBuf::from(RedisBinary::Server.name()))
}

/// The `redis-cli` to run for a node whose server is `server`: `$REDLOCK_REDIS_CLI` if set, else
/// the `redis-cli` next to `server` if `server` is a path and one is there (so pointing
/// `REDLOCK_REDIS_SERVER` at a source build is enough), else `redis-cli` on `PATH`.
pub(crate) fn cli_binary(server: &Path) -> PathBuf {
    if let Some(cli) = from_env(CLI_ENV) {
        return cli;
    }
    server
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(RedisBinary::Cli.name()))
        .filter(|cli| cli.is_file())
        .unwrap_or_else(|| PathBuf::from(RedisBinary::Cli.name()))
}

fn from_env(name: &str) -> Option<PathBuf> {
    env::var_os(name)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
}
