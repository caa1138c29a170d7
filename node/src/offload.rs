//! Where a model's weights and KV cache live: how many layers llama.cpp
//! offloads to GPUs and how it splits them, the KV cache's type, and flash
//! attention.
//!
//! Every setting parses from the text its flag takes and prints back as the
//! same text, so a node passes them to its engine hosts as flags. A value
//! llama.cpp cannot take fails to parse with a message naming the choices.
//! On a build without a GPU backend llama.cpp has no device to offload to:
//! the layer and split settings then change nothing.

use std::fmt;
use std::str::FromStr;

#[cfg(test)]
mod tests;

/// Why an offload setting cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OffloadError {
    /// A value that is not one of the choices.
    #[error("{value:?} is not a {what}; choose one of: {choices}")]
    Unknown {
        /// What the value was meant to be.
        what: &'static str,
        /// The value given.
        value: String,
        /// The values accepted, comma-separated.
        choices: &'static str,
    },
    /// `--tensor-split` with a part that is not a non-negative number, or
    /// with no positive part.
    #[error("--tensor-split takes non-negative proportions, one per GPU, at least one above 0 (e.g. 3,1), got {0:?}")]
    TensorSplit(String),
    /// `--tensor-split` naming more GPUs than llama.cpp can use.
    #[error("--tensor-split names {given} GPUs; llama.cpp uses at most {MAX_DEVICES}")]
    TooManyDevices {
        /// Parts given.
        given: usize,
    },
    /// A quantized KV cache with flash attention off, which llama.cpp
    /// refuses: it keeps a quantized V cache only with flash attention.
    #[error("--kv-cache-type {0} needs flash attention (llama.cpp keeps a quantized V cache only with it); use --flash-attn auto or on, or --kv-cache-type f16")]
    QuantizedKvWithoutFlashAttn(KvCacheType),
    /// `--tensor-split`, which the llama.cpp binding this build uses
    /// (`llama-cpp-2`) cannot pass to llama.cpp.
    #[error("--tensor-split cannot be applied by this build (its llama.cpp binding has no setter for it); leave it out to let llama.cpp split by free memory, or pick one GPU with --split-mode none --main-gpu N")]
    TensorSplitUnsupported,
}

/// The most devices llama.cpp splits a model across.
pub const MAX_DEVICES: usize = 16;

/// How many of the model's layers go to the GPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GpuLayers {
    /// llama.cpp's default: every layer that the build has a GPU for.
    #[default]
    Auto,
    /// This many layers, the rest on the CPU.
    Count(u32),
}

impl FromStr for GpuLayers {
    type Err = OffloadError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("auto") {
            return Ok(GpuLayers::Auto);
        }
        s.parse()
            .map(GpuLayers::Count)
            .map_err(|_| OffloadError::Unknown {
                what: "number of GPU layers",
                value: s.to_owned(),
                choices: "auto, or a number of layers (0 keeps every layer on the CPU)",
            })
    }
}

impl fmt::Display for GpuLayers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuLayers::Auto => f.write_str("auto"),
            GpuLayers::Count(n) => write!(f, "{n}"),
        }
    }
}

/// For an enum whose values each have a name, from one list of them:
/// `as_str`, `FromStr` (any case; anything else is an error naming the
/// choices) and `Display`, so a setting prints back as its flag takes it.
macro_rules! named_choices {
    ($t:ident, $what:literal, { $($v:ident => $name:literal),+ $(,)? }) => {
        impl $t {
            /// Its name, as its flag takes it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($t::$v => $name),+
                }
            }
        }

        impl FromStr for $t {
            type Err = OffloadError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $(
                    if s.eq_ignore_ascii_case($name) {
                        return Ok($t::$v);
                    }
                )+
                Err(OffloadError::Unknown {
                    what: $what,
                    value: s.to_owned(),
                    choices: named_choices!(@join $($name),+),
                })
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
    (@join $first:literal $(, $rest:literal)*) => {
        concat!($first $(, ", ", $rest)*)
    };
}

/// How llama.cpp spreads the model over several GPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SplitMode {
    /// Whole layers (and their KV) per GPU: llama.cpp's default.
    #[default]
    Layer,
    /// Rows of each weight matrix across the GPUs (tensor parallelism where
    /// the backend supports it).
    Row,
    /// One GPU only, `--main-gpu`.
    None,
}

named_choices!(SplitMode, "split mode", {
    Layer => "layer",
    Row => "row",
    None => "none",
});

/// The type llama.cpp stores the KV cache's keys and values in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KvCacheType {
    /// 16-bit floats: llama.cpp's default.
    #[default]
    F16,
    /// 8-bit blocks (8.5 bits a value): about half of f16's memory.
    Q8_0,
    /// 4-bit blocks (4.5 bits a value): about a quarter of f16's memory.
    Q4_0,
}

named_choices!(KvCacheType, "KV cache type", {
    F16 => "f16",
    Q8_0 => "q8_0",
    Q4_0 => "q4_0",
});

impl KvCacheType {
    /// Whether it is one of ggml's block-quantized types, which llama.cpp
    /// keeps in the V cache only with flash attention.
    pub fn is_quantized(self) -> bool {
        !matches!(self, KvCacheType::F16)
    }

    /// Bytes of `values` values of this type in a row, by ggml's block
    /// layout: f16 is 2 bytes a value; q8_0 and q4_0 store 32 values in a
    /// block of 34 and 18 bytes. `None` when `values` is not a whole number
    /// of blocks, which llama.cpp refuses.
    pub fn row_bytes(self, values: u64) -> Option<u64> {
        let (block, bytes) = match self {
            KvCacheType::F16 => (1, 2),
            KvCacheType::Q8_0 => (32, 34),
            KvCacheType::Q4_0 => (32, 18),
        };
        (values % block == 0).then(|| values / block * bytes)
    }
}

/// Whether llama.cpp computes attention with its fused flash attention.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FlashAttn {
    /// Where the device supports it (llama.cpp's default); always with a
    /// quantized KV cache, which needs it.
    #[default]
    Auto,
    /// Always.
    On,
    /// Never; a quantized KV cache is then refused.
    Off,
}

named_choices!(FlashAttn, "flash attention setting", {
    Auto => "auto",
    On => "on",
    Off => "off",
});

/// The share of the model each GPU takes, in llama.cpp's device order
/// (`--tensor-split 3,1`: three quarters on the first GPU).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TensorSplit(pub Vec<f32>);

impl FromStr for TensorSplit {
    type Err = OffloadError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<f32> = s
            .split([',', '/'])
            .map(|p| p.trim().parse::<f32>())
            .collect::<Result<_, _>>()
            .map_err(|_| OffloadError::TensorSplit(s.to_owned()))?;
        if parts.iter().any(|p| !p.is_finite() || *p < 0.0) || !parts.iter().any(|p| *p > 0.0) {
            return Err(OffloadError::TensorSplit(s.to_owned()));
        }
        if parts.len() > MAX_DEVICES {
            return Err(OffloadError::TooManyDevices { given: parts.len() });
        }
        Ok(TensorSplit(parts))
    }
}

impl fmt::Display for TensorSplit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, part) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{part}")?;
        }
        Ok(())
    }
}

/// Where a model's layers and KV cache go, and how attention is computed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Offload {
    /// Layers on the GPUs.
    pub gpu_layers: GpuLayers,
    /// How several GPUs share the model.
    pub split_mode: SplitMode,
    /// Each GPU's share; llama.cpp's own split (by free memory) when empty.
    pub tensor_split: TensorSplit,
    /// The GPU for the whole model with [`SplitMode::None`], and for
    /// intermediate results otherwise.
    pub main_gpu: u32,
    /// The type of both the K and the V cache.
    pub kv_cache_type: KvCacheType,
    /// Flash attention.
    pub flash_attn: FlashAttn,
}

impl Offload {
    /// Refuses settings llama.cpp would refuse when creating the context,
    /// or that this build cannot apply, with what to change.
    ///
    /// # Errors
    /// [`OffloadError::QuantizedKvWithoutFlashAttn`],
    /// [`OffloadError::TensorSplitUnsupported`].
    pub fn check(&self) -> Result<(), OffloadError> {
        if self.kv_cache_type.is_quantized() && self.flash_attn == FlashAttn::Off {
            return Err(OffloadError::QuantizedKvWithoutFlashAttn(
                self.kv_cache_type,
            ));
        }
        if !self.tensor_split.0.is_empty() {
            return Err(OffloadError::TensorSplitUnsupported);
        }
        Ok(())
    }
}
