//! Small helpers every layer may use: they depend on nothing else in shepherd.
//! The process-wide services live here too: `log` (debug output through
//! `redact`), `sys` (signals, process groups, the OS calls), `stop` (what a
//! signal stops) and `auth` (tokens, compared in constant time).
//!
//! `net` is the one loopback rule (servers' binds and `Host` checks, the
//! HTTP clients' proxy bypass, token discovery all ask it).

pub mod auth;
pub mod base64;
pub mod dirs;
pub mod fs;
pub mod json;
pub mod log;
pub mod names;
pub mod net;
pub mod redact;
#[cfg(test)]
pub mod rng;
pub mod sha256;
pub mod stop;
pub mod sync;
pub mod sys;
pub mod time;
