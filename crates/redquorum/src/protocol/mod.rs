//! The protocol: the pure decisions. What a round's replies mean (a vote, a refusal, why it
//! failed), when a node that may have lost its data votes again, how long a lock is valid, which
//! fencing token to hand out, what a lock value or a marker says. Each is unit-tested without a
//! server, and the model checker (`crates/redquorum-model`) imports these very functions instead
//! of a copy.
//!
//! **The rule of this folder: nothing in it does I/O or imports from outside it.** Only `std`,
//! `crate::protocol` and pure dependencies (`crc16`): no Redis client, no Tokio, no async
//! functions, no network, files or processes, no state kept between calls (no mutex: what a rule
//! remembers is a plain value its caller keeps), no clock read (a caller reads `now` and passes
//! it in) and no random draws (a caller that needs a random id, for a lock value or a marker,
//! draws it and passes it in). The rest of the crate imports
//! from here; nothing here imports back (doc links to the public API aside).

// The folder is hidden from the public docs: its module docs are read in the source (or with
// `--document-private-items`), where their links to crate-private items resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub(crate) mod aliases;
pub(crate) mod cause;
pub mod coverage;
pub mod fencing;
pub mod first_sight;
pub(crate) mod lease;
pub mod mark;
pub mod marker;
pub mod quarantine;
pub mod quorum;
pub mod remedy;
pub(crate) mod reply;
pub(crate) mod rwlock;
pub(crate) mod slots;
pub mod succession;
pub mod validity;
pub mod value;
