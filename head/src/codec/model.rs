//! [`ModelCodec`]: one model's vocabulary and chat template.

use super::{ChatMessage, ChatTemplate, CodecError};
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use std::path::Path;
use superfluid_proto::TokenId;

/// The GGUF metadata key holding the Jinja chat template.
const TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// A model as the head needs it: tokenizer and chat template, no weights.
///
/// `LlamaModel` is `Send + Sync` (llama-cpp-2 declares it so; a vocab-only
/// model is immutable once loaded), so a codec can be shared across tasks.
pub struct ModelCodec {
    id: String,
    model: LlamaModel,
    template: Result<ChatTemplate, String>,
    n_tokens: u32,
    path: std::path::PathBuf,
    embedding: Option<EmbeddingShape>,
}

/// How an embedding model pools, and the length of its vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddingShape {
    /// The pooling its GGUF names.
    pub pooling: superfluid_proto::Pooling,
    /// The length of each vector.
    pub dimensions: u32,
}

impl std::fmt::Debug for ModelCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelCodec")
            .field("id", &self.id)
            .field("n_tokens", &self.n_tokens)
            .field("template", &self.template.as_ref().map(|_| "ok"))
            .finish_non_exhaustive()
    }
}

impl ModelCodec {
    /// Loads the vocabulary and chat template of the GGUF file at `path`.
    /// The model's id is its file name without `.gguf`.
    pub fn load(backend: &LlamaBackend, path: &Path) -> Result<ModelCodec, CodecError> {
        if !path.is_file() {
            return Err(CodecError::NotFound {
                path: path.to_path_buf(),
            });
        }
        let params = LlamaModelParams::default().with_vocab_only(true);
        let model =
            LlamaModel::load_from_file(backend, path, &params).map_err(|e| CodecError::Load {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        let n_tokens = u32::try_from(model.vocab().n_tokens()).unwrap_or(0);
        let id = superfluid_proto::model_id_from_path(path);
        let mut codec = ModelCodec {
            id,
            model,
            template: Err(String::new()),
            n_tokens,
            path: path.to_path_buf(),
            embedding: None,
        };
        codec.embedding = codec.read_embedding_shape();
        codec.template = match codec.model.meta_val_str(TEMPLATE_KEY) {
            Ok(source) => {
                let vocab = codec.model.vocab();
                let bos = codec.special_text(vocab.bos());
                let eos = codec.special_text(vocab.eos());
                ChatTemplate::new(&source, &bos, &eos)
            }
            Err(_) => Err(format!("the GGUF has no {TEMPLATE_KEY} metadata")),
        };
        if let Err(reason) = &codec.template {
            tracing::warn!(model = %codec.id, %reason, "chat template unusable");
        }
        Ok(codec)
    }

    /// Whether this model computes embeddings, by the rule nodes apply too
    /// ([`superfluid_proto::embedding_pooling`]), and their length.
    pub fn embedding(&self) -> Option<EmbeddingShape> {
        self.embedding
    }

    fn read_embedding_shape(&self) -> Option<EmbeddingShape> {
        let arch = self.model.meta_val_str("general.architecture").ok()?;
        let pooling = self
            .model
            .meta_val_str(&superfluid_proto::embed::pooling_key(&arch))
            .ok();
        let pooling = superfluid_proto::embedding_pooling(&arch, pooling.as_deref())?;
        let dimensions = self
            .model
            .meta_val_str(&format!("{arch}.embedding_length"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        Some(EmbeddingShape {
            pooling,
            dimensions,
        })
    }

    /// Tokenizes text to embed it: special-token markup is not parsed (the
    /// text is the client's), and the model's own start and end tokens
    /// (BERT's `[CLS]` and `[SEP]`) are added as it asks.
    pub fn tokenize_for_embedding(&self, text: &str) -> Vec<TokenId> {
        self.model
            .vocab()
            .tokenize(text.as_bytes(), true, false)
            .into_iter()
            .filter_map(|t| u32::try_from(t.0).ok())
            .collect()
    }

    /// The id clients name this model by.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The GGUF file the codec was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The GGUF file's metadata as llama.cpp reads it: each key with its
    /// value as text (arrays are summarized, not listed).
    pub fn metadata(&self) -> Vec<(String, String)> {
        (0..self.model.meta_count())
            .filter_map(|i| {
                let key = self.model.meta_key_by_index(i).ok()?;
                let value = self.model.meta_val_str_by_index(i).ok()?;
                Some((key, value))
            })
            .collect()
    }

    /// The source of the model's chat template, if its GGUF has one.
    pub fn template_source(&self) -> Option<String> {
        self.model.meta_val_str(TEMPLATE_KEY).ok()
    }

    /// The number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> u32 {
        self.n_tokens
    }

    /// Renders the chat template for `messages` with the assistant turn opened.
    pub fn render_chat(&self, messages: &[ChatMessage]) -> Result<String, CodecError> {
        let template = self
            .template
            .as_ref()
            .map_err(|reason| CodecError::NoTemplate {
                model: self.id.clone(),
                reason: reason.clone(),
            })?;
        template
            .render(messages)
            .map_err(|reason| CodecError::Template {
                model: self.id.clone(),
                reason,
            })
    }

    /// Tokenizes text, parsing special tokens such as `<|im_start|>`. A BOS
    /// token is put first if the vocabulary asks for one and the text does
    /// not already start with it.
    pub fn tokenize(&self, text: &str) -> Vec<TokenId> {
        let vocab = self.model.vocab();
        let mut tokens = vocab.tokenize(text.as_bytes(), false, true);
        let bos = vocab.bos();
        if vocab.should_add_bos() && self.valid(bos) && tokens.first() != Some(&bos) {
            tokens.insert(0, bos);
        }
        tokens
            .into_iter()
            .filter_map(|t| u32::try_from(t.0).ok())
            .collect()
    }

    /// Tokenizes text as plain text: special-token markup is not parsed and
    /// no BOS is added. For tests and token counting.
    pub fn tokenize_plain(&self, text: &str) -> Vec<TokenId> {
        self.model
            .vocab()
            .tokenize(text.as_bytes(), false, false)
            .into_iter()
            .filter_map(|t| u32::try_from(t.0).ok())
            .collect()
    }

    /// The bytes a generated token stands for. Control tokens (such as
    /// end-of-turn markers) give no bytes, nor do ids outside the vocabulary.
    pub fn piece(&self, token: TokenId) -> Vec<u8> {
        let Ok(raw) = i32::try_from(token) else {
            return Vec::new();
        };
        let token = LlamaToken(raw);
        if !self.valid(token) {
            return Vec::new();
        }
        self.model.vocab().token_to_piece(token, false, None)
    }

    /// Whether the token ends generation (EOS, end of turn, ...).
    pub fn is_eog(&self, token: TokenId) -> bool {
        let Ok(raw) = i32::try_from(token) else {
            return false;
        };
        let token = LlamaToken(raw);
        self.valid(token) && self.model.vocab().is_eog(token)
    }

    /// Whether llama.cpp may be asked about this token without aborting.
    fn valid(&self, token: LlamaToken) -> bool {
        u32::try_from(token.0).is_ok_and(|t| t < self.n_tokens)
    }

    /// The text of a special token (BOS/EOS), or "" if the model has none.
    fn special_text(&self, token: LlamaToken) -> String {
        if !self.valid(token) {
            return String::new();
        }
        let bytes = self.model.vocab().token_to_piece(token, true, None);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}
