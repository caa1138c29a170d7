//! Hot state beside the database: which sessions are generating now.
//!
//! A generation holds a [`GenerationGuard`] for its session; while it is
//! held, appends from anyone else, trims and purges of that session are
//! refused as busy. Dropping the guard (the generation ended, failed or its
//! client went away) frees the session.

use std::sync::Arc;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use super::error::SessionError;
use super::types::SessionId;

/// The sessions being generated into, shared by the store and its writer.
#[derive(Debug, Default, Clone)]
pub struct Hot {
    generating: Arc<DashMap<SessionId, ()>>,
}

impl Hot {
    /// Marks `session` as generating, or says it already is.
    pub fn begin(&self, session: SessionId) -> Result<GenerationGuard, SessionError> {
        match self.generating.entry(session) {
            Entry::Occupied(_) => Err(SessionError::Busy { session }),
            Entry::Vacant(slot) => {
                slot.insert(());
                Ok(GenerationGuard {
                    session,
                    hot: self.clone(),
                })
            }
        }
    }

    /// Whether a generation holds `session`.
    pub fn is_generating(&self, session: SessionId) -> bool {
        self.generating.contains_key(&session)
    }

    /// Refuses with busy when a generation holds `session`.
    pub fn check_idle(&self, session: SessionId) -> Result<(), SessionError> {
        if self.is_generating(session) {
            Err(SessionError::Busy { session })
        } else {
            Ok(())
        }
    }
}

/// A generation's hold on its session; released on drop.
#[derive(Debug)]
pub struct GenerationGuard {
    session: SessionId,
    hot: Hot,
}

impl GenerationGuard {
    /// The session held.
    pub fn session(&self) -> SessionId {
        self.session
    }
}

impl Drop for GenerationGuard {
    fn drop(&mut self) {
        self.hot.generating.remove(&self.session);
    }
}
