//! What callers hold and read: the builder, the held lock and the guard that keeps it alive,
//! leader election, the blocking API and the status of a resource. The public types are exported
//! at the crate root; `blocking` is a public module there too.

pub mod blocking;
pub(crate) mod config;
pub(crate) mod election;
pub(crate) mod hold;
pub(crate) mod lock;
pub(crate) mod redlock;
pub(crate) mod request;
pub(crate) mod settings;
pub(crate) mod shared;
pub(crate) mod status;
