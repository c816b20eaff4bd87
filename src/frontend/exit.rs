//! The process exit codes, one meaning each: 0 for success, 1 for a runtime
//! failure, 2 for a usage or configuration error. Only `frontend` maps
//! errors to them (see its module doc).

/// Exit codes, one meaning each.
pub(super) const EXIT_OK: i32 = 0;
pub(super) const EXIT_FAILURE: i32 = 1;
pub(super) const EXIT_USAGE: i32 = 2;
