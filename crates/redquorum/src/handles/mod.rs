//! What callers hold and read: the builder and its defaults, the held lock and the guard that
//! keeps it alive, the blocking API, the status of a resource, the error type and the telemetry
//! an application receives. The public types are exported at the crate root; `defaults` and
//! `blocking` are public modules there too.

pub mod blocking;
pub(crate) mod config;
pub mod defaults;
pub(crate) mod error;
pub(crate) mod hold;
pub(crate) mod lock;
pub(crate) mod status;
pub(crate) mod telemetry;
