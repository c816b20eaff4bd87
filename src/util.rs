//! Small helpers every layer may use: they depend on nothing else in shepherd.
//!
//! `net` is the one loopback rule (servers' binds and `Host` checks, the
//! HTTP clients' proxy bypass, token discovery all ask it).

pub mod base64;
pub mod dirs;
pub mod fs;
pub mod json;
pub mod names;
pub mod net;
#[cfg(test)]
pub mod rng;
pub mod sha256;
pub mod sync;
pub mod time;
