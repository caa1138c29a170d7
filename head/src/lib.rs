//! The superfluid head.
#![forbid(unsafe_code)]
