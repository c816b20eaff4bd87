//! Failover (in progress).
