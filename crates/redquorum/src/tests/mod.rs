//! Tests of the whole crate that need its internals (an injected clock shift), against real
//! servers. The integration tests in `crates/redquorum/tests/` use the public API only.

mod paused_client;
