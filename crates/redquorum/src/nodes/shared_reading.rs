//! A reading that runs as a task of its own, its answer shared by every request that waits for
//! it, so that a round that gives up does not cancel it: a Redis Cluster node's slot map
//! ([`shards`](crate::nodes::shards) invariant 5), a Sentinel node's view
//! ([`sentinels`](crate::nodes::sentinels) invariant 4).

use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};

use crate::nodes::node_error::NodeError;

/// A reading under way, shared by every request that waits for it.
pub(crate) type SharedReading<T> = Shared<BoxFuture<'static, Result<Arc<T>, NodeError>>>;

/// `read`, started as a task of its own; a task that panicked fails as `what` (`reading the slot
/// map`) did.
pub(crate) fn spawn<T: Send + Sync + 'static>(
    read: impl Future<Output = Result<Arc<T>, NodeError>> + Send + 'static,
    what: &'static str,
) -> SharedReading<T> {
    let task = tokio::spawn(read);
    async move {
        task.await
            .unwrap_or_else(|e| Err(NodeError::Server(format!("{what} failed: {e}"))))
    }
    .boxed()
    .shared()
}
