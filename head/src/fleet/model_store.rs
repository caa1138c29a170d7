//! The head's model files, as nodes match and fetch them: each by its id,
//! its content's sha256 and its length.
//!
//! A node names a file it fetches by sha256 alone, so the head only ever
//! reads the files it was started with, whatever a node asks for.

use std::path::{Path, PathBuf};

use superfluid_link::hash_cache::sha256_file_cached;
use superfluid_proto::{model_id_from_path, ModelDescription, ModelOffer};

/// One of the head's model files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFile {
    /// The model id (the file stem).
    pub id: String,
    /// The sha256 of the content, lowercase hex.
    pub sha256: String,
    /// The length in bytes.
    pub size: u64,
    /// Where the head reads it.
    pub path: PathBuf,
}

/// The head's model files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelStore {
    files: Vec<ModelFile>,
}

impl ModelStore {
    /// The store of `files` as they are.
    pub fn new(files: Vec<ModelFile>) -> Self {
        Self { files }
    }

    /// Hashes each of `paths` (or reads the hash recorded beside it; see
    /// [`superfluid_link::hash_cache`]), recording new hashes in
    /// `fallback_dir` where a file's own directory is read-only. Blocking:
    /// call it off the async threads.
    ///
    /// # Errors
    /// The path that could not be read, and the I/O error.
    pub fn hash(
        paths: &[PathBuf],
        fallback_dir: Option<&Path>,
    ) -> Result<Self, (PathBuf, std::io::Error)> {
        let files = paths
            .iter()
            .map(|path| {
                let hashed =
                    sha256_file_cached(path, fallback_dir).map_err(|e| (path.clone(), e))?;
                tracing::info!(model = %path.display(), sha256 = %hashed.sha256, size = hashed.size, "model file");
                Ok(ModelFile {
                    id: model_id_from_path(path),
                    sha256: hashed.sha256,
                    size: hashed.size,
                    path: path.clone(),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { files })
    }

    /// The file whose content has this sha256, if the head has it.
    pub fn by_sha256(&self, sha256: &str) -> Option<&ModelFile> {
        self.files.iter().find(|f| f.sha256 == sha256)
    }

    /// The models as the welcome offers them to nodes.
    pub fn offers(&self) -> Vec<ModelOffer> {
        self.files
            .iter()
            .map(|f| ModelOffer {
                id: f.id.clone(),
                sha256: f.sha256.clone(),
                size: f.size,
            })
            .collect()
    }

    /// The models as nodes' models must match them: id and sha256.
    pub fn descriptions(&self) -> Vec<ModelDescription> {
        self.files
            .iter()
            .map(|f| ModelDescription {
                id: f.id.clone(),
                ctx: 0,
                slots: 0,
                sha256: f.sha256.clone(),
                ..Default::default()
            })
            .collect()
    }
}
