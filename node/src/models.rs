//! The models a node serves now: one engine per loaded model, changed when
//! the head places a model on the node or takes it off (see
//! `agent/place.rs`).
//!
//! Each change bumps a counter that the control stream's writer watches, so
//! the head hears of every load and unload in a
//! [`superfluid_proto::ModelsReport`]. An unloaded engine is dropped from the
//! set at once (no new generation reaches it) and freed when its last
//! running generation, which holds it too, ends.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use superfluid_link::sync::lock;
use superfluid_proto::{ModelDescription, ModelOffer};
use tokio::sync::watch;

use crate::engine::Engine;
use crate::model_cache::ModelCache;

/// Starts an engine for a model file. Called on a blocking thread: loading
/// reads the whole file.
pub trait Loader: Send + Sync + 'static {
    /// Loads the file at `path` and serves it as model `id`.
    ///
    /// # Errors
    /// Why the model could not be loaded, for the head and the node's log.
    fn load(&self, id: &str, path: &Path) -> Result<Arc<dyn Engine>, String>;
}

/// One loaded model.
struct Loaded {
    engine: Arc<dyn Engine>,
    description: ModelDescription,
}

/// The node's loaded models, and how to load more.
pub struct ModelSet {
    loaded: Mutex<Vec<Loaded>>,
    /// Files by sha256 this node loaded before (or was started with), so
    /// that loading one again needs no fetch.
    files: Mutex<HashMap<String, PathBuf>>,
    /// Model ids being loaded now: a second `Load` for one waits for nothing.
    loading: Mutex<HashSet<String>>,
    changes: watch::Sender<u64>,
    loader: Option<Arc<dyn Loader>>,
    cache: Option<ModelCache>,
}

impl std::fmt::Debug for ModelSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSet")
            .field("models", &self.descriptions())
            .finish_non_exhaustive()
    }
}

impl ModelSet {
    /// No model yet. With a `loader` and a `cache` the node loads the
    /// models the head places on it (fetching files into `cache`); without,
    /// it refuses them and serves only what it is given.
    pub fn new(loader: Option<Arc<dyn Loader>>, cache: Option<ModelCache>) -> Self {
        Self {
            loaded: Mutex::new(Vec::new()),
            files: Mutex::new(HashMap::new()),
            loading: Mutex::new(HashSet::new()),
            changes: watch::channel(0).0,
            loader,
            cache,
        }
    }

    /// A set serving `engine` alone, which cannot load more.
    pub fn single(engine: Arc<dyn Engine>, sha256: Option<String>) -> Self {
        let set = Self::new(None, None);
        set.insert(engine, sha256, None);
        set
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Loaded>> {
        lock(&self.loaded)
    }

    /// Adds (or replaces) the engine for its model. `sha256` fills in the
    /// file's hash where the engine does not know it; `path` is remembered
    /// so that a later load of the same file needs no fetch.
    pub fn insert(&self, engine: Arc<dyn Engine>, sha256: Option<String>, path: Option<PathBuf>) {
        let mut description = engine.info().model.clone();
        if description.sha256.is_empty() {
            description.sha256 = sha256.unwrap_or_default();
        }
        if let Some(path) = path.filter(|_| !description.sha256.is_empty()) {
            lock(&self.files).insert(description.sha256.clone(), path);
        }
        {
            let mut loaded = self.lock();
            loaded.retain(|l| l.description.id != description.id);
            loaded.push(Loaded {
                engine,
                description,
            });
        }
        self.changes.send_modify(|n| *n += 1);
    }

    /// Takes the model `id` out of the set; whether it was there.
    pub fn remove(&self, id: &str) -> bool {
        let removed = {
            let mut loaded = self.lock();
            let before = loaded.len();
            loaded.retain(|l| l.description.id != id);
            loaded.len() != before
        };
        if removed {
            self.changes.send_modify(|n| *n += 1);
        }
        removed
    }

    /// Unloads every model whose engine can no longer serve (see
    /// [`Engine::failure`]), saying why.
    pub fn drop_failed(&self) {
        let failed: Vec<(String, String)> = self
            .lock()
            .iter()
            .filter_map(|l| Some((l.description.id.clone(), l.engine.failure()?)))
            .collect();
        for (id, why) in failed {
            tracing::error!(model = %id, "unloading model {id}: {why}");
            self.remove(&id);
        }
    }

    /// The engine serving model `id`, if it is loaded.
    pub fn engine(&self, id: &str) -> Option<Arc<dyn Engine>> {
        self.lock()
            .iter()
            .find(|l| l.description.id == id)
            .map(|l| l.engine.clone())
    }

    /// Every loaded engine, oldest first.
    pub fn engines(&self) -> Vec<Arc<dyn Engine>> {
        self.lock().iter().map(|l| l.engine.clone()).collect()
    }

    /// The loaded models as a hello or a report lists them.
    pub fn descriptions(&self) -> Vec<ModelDescription> {
        self.lock().iter().map(|l| l.description.clone()).collect()
    }

    /// Whether model `id` is loaded.
    pub fn contains(&self, id: &str) -> bool {
        self.lock().iter().any(|l| l.description.id == id)
    }

    /// Notified on every load and unload.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The loader, if this node loads models the head places.
    pub(crate) fn loader(&self) -> Option<&Arc<dyn Loader>> {
        self.loader.as_ref()
    }

    /// The cache files the head places here are fetched into, if any.
    pub(crate) fn cache(&self) -> Option<&ModelCache> {
        self.cache.as_ref()
    }

    /// A file this node already has for `offer`: one it loaded before, or a
    /// verified file in its cache.
    pub(crate) fn file_for(&self, offer: &ModelOffer) -> Option<PathBuf> {
        let known = lock(&self.files).get(&offer.sha256).cloned();
        known
            .filter(|p| p.is_file())
            .or_else(|| self.cache.as_ref()?.cached(offer))
    }

    /// The sha256 of every model file this node has: those it loaded, and
    /// the verified files in its cache (at most
    /// [`superfluid_proto::placement::MAX_ON_DISK`]).
    pub fn on_disk(&self) -> Vec<String> {
        let mut hashes: Vec<String> = lock(&self.files).keys().cloned().collect();
        if let Some(dir) = self.cache.as_ref().map(ModelCache::dir) {
            let cached = std::fs::read_dir(dir).into_iter().flatten().flatten();
            for entry in cached {
                let name = entry.file_name();
                let Some(hash) = name.to_str().and_then(|n| n.strip_suffix(".gguf")) else {
                    continue;
                };
                if hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                    hashes.push(hash.to_owned());
                }
            }
        }
        hashes.sort();
        hashes.dedup();
        hashes.truncate(superfluid_proto::placement::MAX_ON_DISK);
        hashes
    }

    /// Marks `id` as loading; `false` if it already is.
    pub(crate) fn start_loading(&self, id: &str) -> bool {
        lock(&self.loading).insert(id.to_owned())
    }

    /// Ends what [`ModelSet::start_loading`] began.
    pub(crate) fn done_loading(&self, id: &str) {
        lock(&self.loading).remove(id);
    }
}
