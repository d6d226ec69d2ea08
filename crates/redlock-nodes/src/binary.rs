//! Where the `redis-server` and `redis-cli` binaries are, overridable by environment variables
//! so a developer or CI can test against another Redis build without touching code.

use std::env;
use std::path::{Path, PathBuf};

/// Environment variable naming the `redis-server` binary to run.
pub const SERVER_ENV: &str = "REDLOCK_REDIS_SERVER";
/// Environment variable naming the `redis-cli` binary to run.
pub const CLI_ENV: &str = "REDLOCK_REDIS_CLI";

/// The `redis-server` to run: `$REDLOCK_REDIS_SERVER` if set and non-empty, else `redis-server`
/// looked up on `PATH` when it is spawned.
///
/// This does not check that the binary exists; starting a node does, and reports a missing one as
/// [`LaunchError::ServerNotFound`](crate::LaunchError::ServerNotFound), whose message says how to
/// install it.
pub fn server_binary() -> PathBuf {
    from_env(SERVER_ENV).unwrap_or_else(|| PathBuf::from("redis-server"))
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
        .map(|dir| dir.join("redis-cli"))
        .filter(|cli| cli.is_file())
        .unwrap_or_else(|| PathBuf::from("redis-cli"))
}

fn from_env(name: &str) -> Option<PathBuf> {
    env::var_os(name)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
}
