//! The head's one router, shared by the listener (cache events, load
//! reports, joins and leaves) and every generation (tickets).

use crate::routing::Router;
use std::sync::{Arc, Mutex, MutexGuard};
use superfluid_link::sync::lock;

/// The router behind a mutex. Cheap to clone; clones share one router.
/// [`SharedRouter::lock`] is the only way in, so every caller takes the
/// lock the same way.
#[derive(Debug, Clone)]
pub(crate) struct SharedRouter {
    router: Arc<Mutex<Router>>,
}

impl SharedRouter {
    pub(crate) fn new(router: Router) -> Self {
        Self {
            router: Arc::new(Mutex::new(router)),
        }
    }

    /// Locks the router; a panic elsewhere while it was held leaves it
    /// usable (each of its updates leaves it consistent).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Router> {
        lock(&self.router)
    }
}
