//! A connection of its own to a server, outside the server's one shared connection: for the few
//! things that must not wait behind, or interleave with, the lock traffic on it (a cluster's slot
//! map, the group's first-sight look, an operator's mark). Its own module so that those callers
//! need not import the `server` that depends on them.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError};

/// A connection of its own to `client`'s server, made and answering within `timeout`: for work
/// outside a server's one shared connection and its health check (a cluster's slot map, the
/// first-sight look, an operator's mark), a few times in a process's life.
pub(crate) async fn connect_once(
    client: &redis::Client,
    timeout: Duration,
) -> Result<MultiplexedConnection, RedisError> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}
