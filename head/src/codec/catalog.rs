//! [`Catalog`]: the models the head serves, by id.

use super::{CodecError, ModelCodec};
use llama_cpp_2::llama_backend::LlamaBackend;
use std::path::PathBuf;
use std::sync::Arc;

/// The models the head serves. Each id names one [`ModelCodec`].
#[derive(Debug, Default)]
pub struct Catalog {
    models: Vec<Arc<ModelCodec>>,
}

impl Catalog {
    /// A catalog of already loaded codecs; fails if two share an id.
    pub fn new(models: Vec<ModelCodec>) -> Result<Catalog, CodecError> {
        let mut catalog = Catalog::default();
        for model in models {
            if catalog.get(model.id()).is_some() {
                return Err(CodecError::DuplicateId {
                    id: model.id().to_owned(),
                });
            }
            catalog.models.push(Arc::new(model));
        }
        Ok(catalog)
    }

    /// Loads the codec of every GGUF file in `paths`.
    pub fn load(
        backend: &LlamaBackend,
        paths: impl IntoIterator<Item = PathBuf>,
    ) -> Result<Catalog, CodecError> {
        let models = paths
            .into_iter()
            .map(|path| ModelCodec::load(backend, &path))
            .collect::<Result<Vec<_>, _>>()?;
        Catalog::new(models)
    }

    /// The codec of the model with this id.
    pub fn get(&self, id: &str) -> Option<&Arc<ModelCodec>> {
        self.models.iter().find(|m| m.id() == id)
    }

    /// The served model ids, in the order they were given.
    pub fn ids(&self) -> Vec<String> {
        self.models.iter().map(|m| m.id().to_owned()).collect()
    }

    /// All served codecs.
    pub fn models(&self) -> &[Arc<ModelCodec>] {
        &self.models
    }

    /// Whether no model is served.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }
}
