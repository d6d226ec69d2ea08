//! placeholder
mod common;
