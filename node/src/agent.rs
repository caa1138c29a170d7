//! The node agent: dials the head over Link F and serves generation streams.
