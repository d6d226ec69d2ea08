//! The nodes: where bytes go to Redis. Every connection to a server lives here (the shared one
//! per server, the subscriber's, the short-lived ones of slot maps, first sight and marks), with
//! the Lua scripts, the health check and the Redis Cluster routing. What a node answers is
//! handed up as plain data ([`Reply`](crate::Reply), a health check's observation) for the
//! protocol to judge, so that the rules never see a connection.

pub(crate) mod census;
pub(crate) mod clock_estimate;
pub(crate) mod commands;
pub(crate) mod connect;
pub(crate) mod endpoint;
pub(crate) mod fields;
pub(crate) mod health;
pub(crate) mod inspect;
pub(crate) mod mark;
pub(crate) mod node;
pub(crate) mod node_error;
pub(crate) mod receipts;
pub(crate) mod replica_acks;
pub(crate) mod replicated;
pub(crate) mod request;
pub(crate) mod run_ids;
pub(crate) mod scripts;
pub(crate) mod sentinels;
pub(crate) mod server;
pub(crate) mod shards;
pub(crate) mod shared_reading;
pub(crate) mod stragglers;
pub(crate) mod subscriber;
pub(crate) mod urls;
pub(crate) mod vouch;
