//! Tiny random-weight GGUF models for smoke decodes: a GGUF v3 writer (and the reader its
//! tests and `smoke` use to check a file), and the two architectures the M-RoPE case needs:
//! `qwen2vl` (M-RoPE, `n_pos_per_embd` 4, sections [2,3,3,0]) and its classical-RoPE control
//! `qwen2` with the very same weights. Deterministic for a seed, well under 1 MB.

use pinforge_base::error::{Error, IoContext, Result};
use pinforge_base::fsx;
use std::collections::BTreeMap;
use std::path::Path;

/// GGUF metadata value types (the subset pinforge writes).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// GGUF type 4.
    U32(u32),
    /// GGUF type 5.
    I32(i32),
    /// GGUF type 6.
    F32(f32),
    /// GGUF type 7.
    Bool(bool),
    /// GGUF type 8.
    Str(String),
    /// GGUF type 9 of type 5.
    ArrI32(Vec<i32>),
    /// GGUF type 9 of type 6.
    ArrF32(Vec<f32>),
    /// GGUF type 9 of type 8.
    ArrStr(Vec<String>),
}

/// A tensor: name, shape (ne0 first, innermost), F32 data.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// GGUF tensor name (`blk.0.attn_q.weight`).
    pub name: String,
    /// Dimensions, innermost first (GGUF order).
    pub dims: Vec<u64>,
    /// Values, row-major in GGUF order.
    pub data: Vec<f32>,
}

/// A GGUF file in memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gguf {
    /// Metadata in key order.
    pub kv: BTreeMap<String, Value>,
    /// Tensors in file order.
    pub tensors: Vec<Tensor>,
}

const ALIGN: usize = 32;
const GGML_TYPE_F32: u32 = 0;

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

impl Gguf {
    /// Serialize (GGUF v3, little-endian, 32-byte aligned tensor data).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend(b"GGUF");
        out.extend(3u32.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.kv.len() as u64).to_le_bytes());
        for (k, v) in &self.kv {
            put_str(&mut out, k);
            match v {
                Value::U32(x) => {
                    out.extend(4u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Value::I32(x) => {
                    out.extend(5u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Value::F32(x) => {
                    out.extend(6u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Value::Bool(b) => {
                    out.extend(7u32.to_le_bytes());
                    out.push(u8::from(*b));
                }
                Value::Str(s) => {
                    out.extend(8u32.to_le_bytes());
                    put_str(&mut out, s);
                }
                Value::ArrI32(a) => {
                    out.extend(9u32.to_le_bytes());
                    out.extend(5u32.to_le_bytes());
                    out.extend((a.len() as u64).to_le_bytes());
                    for x in a {
                        out.extend(x.to_le_bytes());
                    }
                }
                Value::ArrF32(a) => {
                    out.extend(9u32.to_le_bytes());
                    out.extend(6u32.to_le_bytes());
                    out.extend((a.len() as u64).to_le_bytes());
                    for x in a {
                        out.extend(x.to_le_bytes());
                    }
                }
                Value::ArrStr(a) => {
                    out.extend(9u32.to_le_bytes());
                    out.extend(8u32.to_le_bytes());
                    out.extend((a.len() as u64).to_le_bytes());
                    for s in a {
                        put_str(&mut out, s);
                    }
                }
            }
        }
        let mut offset = 0usize;
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            out.extend((t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(GGML_TYPE_F32.to_le_bytes());
            out.extend((offset as u64).to_le_bytes());
            offset += (t.data.len() * 4).div_ceil(ALIGN) * ALIGN;
        }
        out.resize(out.len().div_ceil(ALIGN) * ALIGN, 0);
        for t in &self.tensors {
            let start = out.len();
            for x in &t.data {
                out.extend(x.to_le_bytes());
            }
            let len = out.len() - start;
            out.resize(start + len.div_ceil(ALIGN) * ALIGN, 0);
        }
        out
    }

    /// Parse a GGUF v3 file written with the types above (and check its structure).
    pub(crate) fn from_bytes(b: &[u8]) -> std::result::Result<Gguf, String> {
        let mut r = Reader { b, at: 0 };
        if r.take(4)? != b"GGUF" {
            return Err("not a GGUF file (bad magic)".into());
        }
        let version = r.u32()?;
        if version != 3 {
            return Err(format!("GGUF version {version}, expected 3"));
        }
        let n_tensors = r.u64()? as usize;
        let n_kv = r.u64()? as usize;
        let mut kv = BTreeMap::new();
        for _ in 0..n_kv {
            let key = r.string()?;
            let ty = r.u32()?;
            let v = match ty {
                4 => Value::U32(r.u32()?),
                5 => Value::I32(r.u32()? as i32),
                6 => Value::F32(f32::from_bits(r.u32()?)),
                7 => Value::Bool(r.take(1)?[0] != 0),
                8 => Value::Str(r.string()?),
                9 => {
                    let et = r.u32()?;
                    let n = r.u64()? as usize;
                    match et {
                        5 => Value::ArrI32(
                            (0..n)
                                .map(|_| r.u32().map(|x| x as i32))
                                .collect::<Result<_, _>>()?,
                        ),
                        6 => Value::ArrF32(
                            (0..n)
                                .map(|_| r.u32().map(f32::from_bits))
                                .collect::<Result<_, _>>()?,
                        ),
                        8 => Value::ArrStr((0..n).map(|_| r.string()).collect::<Result<_, _>>()?),
                        other => return Err(format!("array of type {other} not supported")),
                    }
                }
                other => return Err(format!("value type {other} not supported")),
            };
            kv.insert(key, v);
        }
        let mut infos = Vec::new();
        for _ in 0..n_tensors {
            let name = r.string()?;
            let nd = r.u32()? as usize;
            let dims: Vec<u64> = (0..nd).map(|_| r.u64()).collect::<Result<_, _>>()?;
            let ty = r.u32()?;
            if ty != GGML_TYPE_F32 {
                return Err(format!("tensor {name}: type {ty}, only F32 is read"));
            }
            let off = r.u64()? as usize;
            infos.push((name, dims, off));
        }
        let data_start = r.at.div_ceil(ALIGN) * ALIGN;
        let mut tensors = Vec::new();
        for (name, dims, off) in infos {
            if off % ALIGN != 0 {
                return Err(format!("tensor {name}: unaligned offset {off}"));
            }
            let n: u64 = dims.iter().product();
            let start = data_start + off;
            let end = start + n as usize * 4;
            let bytes = b
                .get(start..end)
                .ok_or(format!("tensor {name}: data out of range"))?;
            let data = bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            tensors.push(Tensor { name, dims, data });
        }
        Ok(Gguf { kv, tensors })
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> std::result::Result<&[u8], String> {
        let s = self
            .b
            .get(self.at..self.at + n)
            .ok_or_else(|| format!("truncated at byte {}", self.at))?;
        self.at += n;
        Ok(s)
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self) -> std::result::Result<u64, String> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
    fn string(&mut self) -> std::result::Result<String, String> {
        let n = self.u64()? as usize;
        if n > 1 << 20 {
            return Err(format!("string of {n} bytes at {}", self.at));
        }
        String::from_utf8(self.take(n)?.to_vec()).map_err(|e| e.to_string())
    }
}

/// Architectures `model tiny` can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// M-RoPE (`n_pos_per_embd` 4): triggers llama.cpp issue #20093 on restore.
    Qwen2vl,
    /// Classical RoPE: the control, same weights.
    Qwen2,
}

impl Arch {
    /// Parse an arch name.
    pub fn parse(s: &str) -> Result<Arch> {
        match s {
            "qwen2vl" => Ok(Arch::Qwen2vl),
            "qwen2" => Ok(Arch::Qwen2),
            other => Err(Error::input(
                format!("--arch {other}"),
                "unknown architecture; expected qwen2vl (M-RoPE) or qwen2 (classical RoPE control)",
            )),
        }
    }
    /// GGUF `general.architecture`.
    pub fn name(&self) -> &'static str {
        match self {
            Arch::Qwen2vl => "qwen2vl",
            Arch::Qwen2 => "qwen2",
        }
    }
}

/// Sizes of the tiny model (DESIGN §1: 2 layers, n_embd 64, 4 heads, sections [2,3,3,0]).
pub(crate) const N_LAYER: u64 = 2;
/// Embedding width.
pub(crate) const N_EMBD: u64 = 64;
/// Attention heads (head size 16, so M-RoPE sections sum to 8 = 16/2).
pub(crate) const N_HEAD: u64 = 4;
/// Feed-forward width.
pub(crate) const N_FF: u64 = 128;
/// Training context.
pub(crate) const N_CTX: u32 = 256;

/// The vocabulary: `<unk>`, `<s>`, `</s>`, the 256 byte tokens, and 21 pieces: 280 tokens,
/// SentencePiece style (`▁` marks a word start), so llama.cpp's SPM tokenizer accepts it.
pub(crate) fn vocab() -> (Vec<String>, Vec<f32>, Vec<i32>) {
    let mut tokens = vec!["<unk>".to_string(), "<s>".to_string(), "</s>".to_string()];
    let mut types = vec![2, 3, 3]; // UNKNOWN, CONTROL, CONTROL
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6); // BYTE
    }
    let pieces = [
        "▁", "▁the", "▁a", "e", "t", "o", "n", "s", "r", "h", "l", "d", "▁to", "▁of", "▁in",
        "▁and", "in", "er", "an", "▁is", "▁it",
    ];
    for p in pieces {
        tokens.push(p.to_string());
        types.push(1); // NORMAL
    }
    let scores = (0..tokens.len())
        .map(|i| if i < 259 { 0.0 } else { -(i as f32 - 259.0) })
        .collect();
    (tokens, scores, types)
}

/// xorshift64*: deterministic weights for a seed, no dependency.
struct Rng(u64);
impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Build the tiny model for `arch` and `seed`.
pub fn tiny(arch: Arch, seed: u64) -> Gguf {
    let (tokens, scores, types) = vocab();
    let n_vocab = tokens.len() as u64;
    let kv = metadata(arch, seed, tokens, scores, types);
    let tensors = weights(seed, n_vocab);
    Gguf { kv, tensors }
}

/// The model's key-value metadata: hyperparameters and the tokenizer.
fn metadata(
    arch: Arch,
    seed: u64,
    tokens: Vec<String>,
    scores: Vec<f32>,
    types: Vec<i32>,
) -> BTreeMap<String, Value> {
    let a = arch.name();
    let mut kv = BTreeMap::new();
    kv.insert("general.architecture".into(), Value::Str(a.into()));
    kv.insert(
        "general.name".into(),
        Value::Str(format!("pinforge tiny {a} seed {seed}")),
    );
    kv.insert("general.alignment".into(), Value::U32(ALIGN as u32));
    kv.insert(format!("{a}.context_length"), Value::U32(N_CTX));
    kv.insert(format!("{a}.embedding_length"), Value::U32(N_EMBD as u32));
    kv.insert(format!("{a}.block_count"), Value::U32(N_LAYER as u32));
    kv.insert(format!("{a}.feed_forward_length"), Value::U32(N_FF as u32));
    kv.insert(
        format!("{a}.attention.head_count"),
        Value::U32(N_HEAD as u32),
    );
    kv.insert(
        format!("{a}.attention.head_count_kv"),
        Value::U32(N_HEAD as u32),
    );
    kv.insert(
        format!("{a}.attention.layer_norm_rms_epsilon"),
        Value::F32(1e-6),
    );
    kv.insert(format!("{a}.rope.freq_base"), Value::F32(10000.0));
    if arch == Arch::Qwen2vl {
        kv.insert(
            format!("{a}.rope.dimension_sections"),
            Value::ArrI32(vec![2, 3, 3, 0]),
        );
    }
    kv.insert("tokenizer.ggml.model".into(), Value::Str("llama".into()));
    kv.insert("tokenizer.ggml.tokens".into(), Value::ArrStr(tokens));
    kv.insert("tokenizer.ggml.scores".into(), Value::ArrF32(scores));
    kv.insert("tokenizer.ggml.token_type".into(), Value::ArrI32(types));
    kv.insert("tokenizer.ggml.bos_token_id".into(), Value::U32(1));
    kv.insert("tokenizer.ggml.eos_token_id".into(), Value::U32(2));
    kv.insert("tokenizer.ggml.unknown_token_id".into(), Value::U32(0));
    kv.insert("tokenizer.ggml.add_bos_token".into(), Value::Bool(true));
    kv
}

/// The weights: the seed alone decides them.
fn weights(seed: u64, n_vocab: u64) -> Vec<Tensor> {
    // Same weights for both architectures.
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let t = |name: &str, dims: &[u64], scale: f32, rng: &mut Rng| Tensor {
        name: name.into(),
        dims: dims.to_vec(),
        data: (0..dims.iter().product::<u64>())
            .map(|_| rng.next_f32() * scale)
            .collect(),
    };
    let ones = |name: &str, n: u64| Tensor {
        name: name.into(),
        dims: vec![n],
        data: vec![1.0; n as usize],
    };
    let mut tensors = vec![
        t("token_embd.weight", &[N_EMBD, n_vocab], 0.5, &mut rng),
        ones("output_norm.weight", N_EMBD),
        t("output.weight", &[N_EMBD, n_vocab], 0.3, &mut rng),
    ];
    for i in 0..N_LAYER {
        let p = format!("blk.{i}");
        tensors.push(ones(&format!("{p}.attn_norm.weight"), N_EMBD));
        for m in ["q", "k", "v"] {
            tensors.push(t(
                &format!("{p}.attn_{m}.weight"),
                &[N_EMBD, N_EMBD],
                0.2,
                &mut rng,
            ));
            tensors.push(t(&format!("{p}.attn_{m}.bias"), &[N_EMBD], 0.05, &mut rng));
        }
        tensors.push(t(
            &format!("{p}.attn_output.weight"),
            &[N_EMBD, N_EMBD],
            0.2,
            &mut rng,
        ));
        tensors.push(ones(&format!("{p}.ffn_norm.weight"), N_EMBD));
        tensors.push(t(
            &format!("{p}.ffn_gate.weight"),
            &[N_EMBD, N_FF],
            0.2,
            &mut rng,
        ));
        tensors.push(t(
            &format!("{p}.ffn_up.weight"),
            &[N_EMBD, N_FF],
            0.2,
            &mut rng,
        ));
        tensors.push(t(
            &format!("{p}.ffn_down.weight"),
            &[N_FF, N_EMBD],
            0.2,
            &mut rng,
        ));
    }
    tensors
}

/// Write the tiny model to `path` atomically.
pub fn write_tiny(arch: Arch, seed: u64, path: &Path) -> Result<u64> {
    let bytes = tiny(arch, seed).to_bytes();
    fsx::write_atomic(path, &bytes)?;
    Ok(bytes.len() as u64)
}

/// Read a GGUF file's architecture (to label smoke results).
pub fn architecture(path: &Path) -> Result<String> {
    // A model is an input: missing or special (a FIFO would hang the smoke) is exit 2.
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut pinforge_base::fsx::open_regular(path, "model file", true)?,
        &mut bytes,
    )
    .at("read", path)?;
    // Only the header is needed, but the files are tiny; a full parse also validates them.
    match Gguf::from_bytes(&bytes) {
        Ok(g) => match g.kv.get("general.architecture") {
            Some(Value::Str(s)) => Ok(s.clone()),
            _ => Err(Error::input(
                path.display(),
                "GGUF file has no general.architecture",
            )),
        },
        // Not written by pinforge (quantized, other types): llama.cpp will judge it.
        Err(_) if bytes.starts_with(b"GGUF") => Ok("unknown".into()),
        Err(e) => Err(Error::input(
            path.display(),
            format!("not a GGUF model: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_model_round_trips_through_the_reader() {
        let g = tiny(Arch::Qwen2vl, 7);
        let bytes = g.to_bytes();
        assert!(bytes.len() < 1_000_000, "{} bytes", bytes.len());
        let back = Gguf::from_bytes(&bytes).expect("parse");
        assert_eq!(back, g);
        assert_eq!(
            back.kv.get("qwen2vl.rope.dimension_sections"),
            Some(&Value::ArrI32(vec![2, 3, 3, 0]))
        );
    }

    #[test]
    fn same_seed_same_bytes_other_seed_other_weights() {
        assert_eq!(
            tiny(Arch::Qwen2, 1).to_bytes(),
            tiny(Arch::Qwen2, 1).to_bytes()
        );
        assert_ne!(
            tiny(Arch::Qwen2, 1).tensors[0].data,
            tiny(Arch::Qwen2, 2).tensors[0].data
        );
    }

    #[test]
    fn control_has_the_same_weights_and_no_mrope_sections() {
        let vl = tiny(Arch::Qwen2vl, 3);
        let c = tiny(Arch::Qwen2, 3);
        assert_eq!(vl.tensors, c.tensors);
        assert!(!c.kv.keys().any(|k| k.contains("dimension_sections")));
        assert_eq!(
            c.kv.get("general.architecture"),
            Some(&Value::Str("qwen2".into()))
        );
    }

    #[test]
    fn vocab_is_spm_shaped_with_byte_fallback() {
        let (tokens, scores, types) = vocab();
        assert_eq!(tokens.len(), 280);
        assert_eq!(scores.len(), 280);
        assert_eq!(types.len(), 280);
        assert_eq!(tokens[3], "<0x00>");
        assert_eq!(tokens[258], "<0xFF>");
        assert!(tokens.iter().any(|t| t == "▁"));
    }

    #[test]
    fn tensor_data_is_aligned_and_reader_rejects_garbage() {
        let bytes = tiny(Arch::Qwen2, 1).to_bytes();
        assert_eq!(bytes.len() % ALIGN, 0);
        assert!(Gguf::from_bytes(b"GGUX").is_err());
        assert!(Gguf::from_bytes(&bytes[..100]).is_err());
    }
}
