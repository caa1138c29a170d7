//! The bytes a context's KV cache takes.
//!
//! llama.cpp allocates, per layer, one K row and one V row for every cell
//! of the context (every slot's tokens), in the cache's type. The binding
//! (`llama-cpp-2`) has no call that returns the size of that buffer (only
//! one that prints it to the log), so the engine computes it from the
//! context's cell count and the model's shape, the way llama.cpp lays the
//! cache out.

use llama_cpp_2::model::LlamaModel;

use crate::offload::KvCacheType;

/// What one cell of the KV cache holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvShape {
    /// Layers with a KV cache.
    pub layers: u64,
    /// Values of a K row: the key head size times the KV heads.
    pub k_values: u64,
    /// Values of a V row: the value head size times the KV heads.
    pub v_values: u64,
}

impl KvShape {
    /// The shape of `model`'s cache; `None` for a recurrent model, whose
    /// state is not a KV cache of this shape.
    pub fn of(model: &LlamaModel) -> Option<KvShape> {
        if model.is_recurrent() {
            return None;
        }
        let heads = u64::from(model.n_head());
        let kv_heads = u64::from(model.n_head_kv());
        let embd = u64::try_from(model.n_embd()).ok()?;
        let default_head = embd.checked_div(heads)?;
        // Models whose head size is not n_embd / n_head (Gemma) say so.
        let head_size = |key: &str| {
            let arch = model.meta_val_str("general.architecture").ok()?;
            model
                .meta_val_str(&format!("{arch}.attention.{key}"))
                .ok()?
                .parse::<u64>()
                .ok()
        };
        Some(KvShape {
            layers: u64::from(model.n_layer()),
            k_values: head_size("key_length").unwrap_or(default_head) * kv_heads,
            v_values: head_size("value_length").unwrap_or(default_head) * kv_heads,
        })
    }

    /// Bytes of `cells` cells with keys and values of type `kv`; `None` if
    /// a row is not a whole number of the type's blocks (llama.cpp refuses
    /// such a cache) or the sum overflows.
    pub fn bytes(&self, cells: u32, kv: KvCacheType) -> Option<u64> {
        let row = kv
            .row_bytes(self.k_values)?
            .checked_add(kv.row_bytes(self.v_values)?)?;
        row.checked_mul(self.layers)?.checked_mul(u64::from(cells))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M: 30 layers, 3 KV heads of 64.
    const SMOL: KvShape = KvShape {
        layers: 30,
        k_values: 192,
        v_values: 192,
    };

    #[test]
    fn f16_takes_two_bytes_a_value() {
        assert_eq!(
            SMOL.bytes(4096, KvCacheType::F16),
            Some(4096 * 30 * 2 * 192 * 2)
        );
    }

    #[test]
    fn q8_0_takes_about_half_of_f16_and_q4_0_about_a_quarter() {
        let f16 = SMOL.bytes(4096, KvCacheType::F16).expect("f16") as f64;
        let q8 = SMOL.bytes(4096, KvCacheType::Q8_0).expect("q8_0") as f64;
        let q4 = SMOL.bytes(4096, KvCacheType::Q4_0).expect("q4_0") as f64;
        assert!((q8 / f16 - 8.5 / 16.0).abs() < 1e-9, "{}", q8 / f16);
        assert!((q4 / f16 - 4.5 / 16.0).abs() < 1e-9, "{}", q4 / f16);
    }

    #[test]
    fn rows_that_split_blocks_have_no_size() {
        let odd = KvShape {
            k_values: 100,
            ..SMOL
        };
        assert_eq!(odd.bytes(16, KvCacheType::Q4_0), None);
        assert!(odd.bytes(16, KvCacheType::F16).is_some());
    }
}
