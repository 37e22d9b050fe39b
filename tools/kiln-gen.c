/*
 * kiln-gen.c - the synthetic model generator: writes GGUF models of a supported architecture (llama,
 * qwen2, qwen3, gemma2, gemma3, phi3, smollm3, and the mixtures of experts qwen3moe, gpt-oss and llama with
 * --experts) and any shape, with deterministic random weights in any supported weight type, plus a small byte-level
 * BPE tokenizer, or the tokenizer of a real model read from its Hugging Face tokenizer.json (--tokenizer-json; alone
 * it makes a vocabulary-only GGUF, as kiln's grammar benchmarks use for the Qwen3 and Llama 3 vocabularies).
 *
 * Speed work needs models shaped like real ones (Llama-3.2-1B, Qwen2.5-0.5B, ...) but does not depend
 * on weight values, and tests need tiny models of every architecture and weight type. This tool makes
 * both without downloading anything. The same arguments and seed always give a byte-identical file:
 * every weight row is drawn from its own RNG stream (seed, tensor name, row), so the result does not
 * depend on the thread count.
 *
 * File conventions follow llama.cpp's (metadata keys, tensor names, ne[0] = row length); see usage()
 * for the options. The tokenizer is GPT-2 style byte-level BPE ("gpt2", with the pre-tokenizer of the
 * family's real models: "llama-bpe" or "qwen2"): the 256 byte characters (token id = byte value), the
 * tokens of BPE merges learned on a small built-in English text, control tokens (<|begin_of_text|>,
 * <|end_of_text|>, <|eot_id|>, ...) and <|reserved_N|> filler (type unused) up to the vocab size.
 * A tokenizer.json is read by kiln's own loader (src/text/tok_tj_load.c) and converted as llama.cpp's
 * converter does (see load_tokenizer_json).
 */
#include "base/base.h"
#include "gguf_write.h"
#include "tensor/dtype.h"
#include "text/tok_tj.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- configuration ----------------------------------------------------------------------------- */

typedef struct gen_cfg {
    const char *arch;                                                /* see archs[] */
    const char *name;                                                /* general.name */
    int64_t vocab, dim, layers, heads, kv_heads, ffn, head_dim, ctx; /* head_dim 0: dim / heads */
    int tied;                                                        /* 1 tied (no output.weight), 0 untied */
    double rope_base;
    double norm_eps; /* 0: the architecture's default */
    int llama3_rope; /* write rope_freqs.weight (llama3 rope scaling) */
    double rope_factor, rope_low, rope_high;
    int64_t rope_orig_ctx;
    const char *rope_scaling; /* rope.scaling.type "linear" or "yarn" (factor, original context above), "longrope"
                                (phi3: rope_factors_long/short tensors), or NULL */
    int64_t swa;              /* attention.sliding_window (gemma2, gemma3) */
    double attn_softcap, final_softcap; /* gemma2 soft-capping (0: the architecture's default) */
    double scale;                       /* multiplies every random matrix (0: 1) */
    kn_dtype type;
    bool k_m; /* --type Q4_K_M / Q5_K_M: type is Q4_K / Q5_K, with llama.cpp's Q6_K matrices of that mix */
    uint64_t seed;
    int64_t experts, experts_used, expert_ffn; /* mixture of experts (0: dense); expert_ffn 0: --ffn */
    bool expert_typed;    /* the expert matrices are of expert_type, not of --type (the gpt-oss presets: */
    kn_dtype expert_type; /* MXFP4, as gpt-oss files hold them; --expert-type) */
    int pooling;          /* {arch}.pooling_type: 0 none (not written), 1 mean, 2 cls, 3 last (embedding models) */
    bool add_eos;         /* tokenizer.ggml.add_eos_token (decoder embedders pool the appended EOS) */
} gen_cfg;

/* The architectures kiln-gen writes, and what their files hold beyond the llama layout. */
typedef struct arch_info {
    const char *name;
    bool qkv_bias, qk_norm; /* attn_{q,k,v}.bias; attn_{q,k}_norm.weight */
    bool post_norms;        /* gemma: post_attention_norm, post_ffw_norm */
    bool fused;             /* phi3: attn_qkv and ffn_up holding gate and up */
    bool head_dim_keys;     /* always write attention.key_length / value_length */
    const char *pre;        /* the default tokenizer.ggml.pre */
    double norm_eps;        /* the default RMSNorm epsilon */
    bool moe;               /* every layer a mixture of experts: --experts is needed (qwen3moe, gpt-oss) */
    bool oss;               /* gpt-oss: attn_output.bias, attn_sinks, post_attention_norm before the FFN, expert
                               biases, a sliding window (default 128) on the even layers */
    bool encoder;           /* bert, nomic-bert: a WordPiece vocabulary, token types, LayerNorms with biases,
                               post-norm blocks, no output head; bert: position embeddings, q/k/v and FFN
                               biases, a plain FFN; nomic-bert (fused): attn_qkv, a gated FFN, RoPE */
} arch_info;

static const arch_info archs[] = {
    {.name = "llama", .pre = "llama-bpe", .norm_eps = 1e-5},
    {.name = "qwen2", .qkv_bias = true, .pre = "qwen2", .norm_eps = 1e-6},
    {.name = "qwen3", .qk_norm = true, .head_dim_keys = true, .pre = "qwen2", .norm_eps = 1e-6},
    {.name = "gemma2", .post_norms = true, .head_dim_keys = true, .pre = "llama-bpe", .norm_eps = 1e-6},
    {.name = "gemma3",
     .qk_norm = true,
     .post_norms = true,
     .head_dim_keys = true,
     .pre = "llama-bpe",
     .norm_eps = 1e-6},
    {.name = "phi3", .fused = true, .pre = "llama-bpe", .norm_eps = 1e-5},
    {.name = "smollm3", .pre = "llama-bpe", .norm_eps = 1e-6},
    {.name = "qwen3moe", .qk_norm = true, .head_dim_keys = true, .pre = "qwen2", .norm_eps = 1e-6, .moe = true},
    {.name = "gpt-oss",
     .qkv_bias = true,
     .head_dim_keys = true,
     .pre = "qwen2",
     .norm_eps = 1e-6,
     .moe = true,
     .oss = true},
    {.name = "bert", .qkv_bias = true, .encoder = true, .norm_eps = 1e-12},
    {.name = "nomic-bert", .fused = true, .encoder = true, .norm_eps = 1e-12},
};

static const arch_info *find_arch(const char *name) {
    for (size_t i = 0; i < KN_ARRAY_LEN(archs); i++)
        if (strcmp(archs[i].name, name) == 0) return &archs[i];
    return NULL;
}

typedef struct preset {
    const char *name;
    const char *desc;
    gen_cfg cfg;
} preset;

#define MXFP4_EXPERTS .expert_typed = true, .expert_type = KN_MXFP4
#define L3ROPE        .llama3_rope = 1, .rope_factor = 32, .rope_low = 1, .rope_high = 4, .rope_orig_ctx = 8192

/* One preset per entry (the formatter would put one field per line). */
/* clang-format off */
static const preset presets[] = {
    {"stories15m", "llama2.c stories15M shape (untied, vocab 32000)",
     {.arch = "llama", .vocab = 32000, .dim = 288, .layers = 6, .heads = 6, .kv_heads = 6, .ffn = 768,
      .ctx = 256, .tied = 0, .rope_base = 10000}},
    {"llama-3.2-1b", "Llama-3.2-1B shape (GQA 32/8, tied, llama3 rope scaling)",
     {.arch = "llama", .vocab = 128256, .dim = 2048, .layers = 16, .heads = 32, .kv_heads = 8, .ffn = 8192,
      .ctx = 131072, .tied = 1, .rope_base = 500000, L3ROPE}},
    {"qwen2.5-0.5b", "Qwen2.5-0.5B shape (GQA 14/2, QKV bias, tied)",
     {.arch = "qwen2", .vocab = 151936, .dim = 896, .layers = 24, .heads = 14, .kv_heads = 2, .ffn = 4864,
      .ctx = 32768, .tied = 1, .rope_base = 1e6}},
    {"qwen3-0.6b", "Qwen3-0.6B shape (GQA 16/8, head_dim 128, q/k norm, tied)",
     {.arch = "qwen3", .vocab = 151936, .dim = 1024, .layers = 28, .heads = 16, .kv_heads = 8, .head_dim = 128,
      .ffn = 3072, .ctx = 40960, .tied = 1, .rope_base = 1e6}},
    {"tiny-llama", "test model: llama, dim 256, 2 layers, GQA 8/2, untied, llama3 rope scaling",
     {.arch = "llama", .vocab = 512, .dim = 256, .layers = 2, .heads = 8, .kv_heads = 2, .ffn = 512,
      .ctx = 512, .tied = 0, .rope_base = 10000, .llama3_rope = 1, .rope_factor = 8, .rope_low = 1,
      .rope_high = 4, .rope_orig_ctx = 128}},
    {"tiny-llama-plain", "test model: llama, dim 256, 2 layers, GQA 8/2, tied, plain rope",
     {.arch = "llama", .vocab = 512, .dim = 256, .layers = 2, .heads = 8, .kv_heads = 2, .ffn = 512,
      .ctx = 512, .tied = 1, .rope_base = 10000}},
    {"tiny-qwen2", "test model: qwen2, dim 256, 2 layers, GQA 8/2, QKV bias, tied",
     {.arch = "qwen2", .vocab = 512, .dim = 256, .layers = 2, .heads = 8, .kv_heads = 2, .ffn = 512,
      .ctx = 512, .tied = 1, .rope_base = 1e6}},
    {"tiny-qwen3", "test model: qwen3, dim 256, 2 layers, GQA 4/2, head_dim 128 (q is 512 wide), q/k norm, tied",
     {.arch = "qwen3", .vocab = 512, .dim = 256, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 128,
      .ffn = 512, .ctx = 512, .tied = 1, .rope_base = 1e6}},
    {"gemma3-4b", "Gemma-3-4B shape (GQA 8/4, head_dim 256, 5 local (window 1024) : 1 global, linear rope x8, tied)",
     {.arch = "gemma3", .vocab = 262208, .dim = 2560, .layers = 34, .heads = 8, .kv_heads = 4, .head_dim = 256,
      .ffn = 10240, .ctx = 131072, .tied = 1, .rope_base = 1e6, .swa = 1024, .rope_scaling = "linear",
      .rope_factor = 8}},
    {"phi3-mini", "Phi-3.5-mini shape (32 heads, fused QKV and gate-up, LongRoPE from 4096, untied)",
     {.arch = "phi3", .vocab = 32064, .dim = 3072, .layers = 32, .heads = 32, .kv_heads = 32, .ffn = 8192,
      .ctx = 131072, .tied = 0, .rope_base = 10000, .rope_scaling = "longrope", .rope_orig_ctx = 4096}},
    {"tiny-gemma2", "test model: gemma2, dim 256, 2 layers (sliding window 8, then global), GQA 4/2, soft-caps",
     {.arch = "gemma2", .vocab = 512, .dim = 256, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 64,
      .ffn = 512, .ctx = 512, .tied = 1, .rope_base = 10000, .swa = 8}},
    {"tiny-gemma3", "test model: gemma3, dim 256, 6 layers (5 with sliding window 8, 1 global), GQA 4/2, q/k norm",
     {.arch = "gemma3", .vocab = 512, .dim = 256, .layers = 6, .heads = 4, .kv_heads = 2, .head_dim = 64,
      .ffn = 512, .ctx = 512, .tied = 1, .rope_base = 1e6, .swa = 8, .rope_scaling = "linear", .rope_factor = 8}},
    {"tiny-phi3", "test model: phi3, dim 256, 2 layers, GQA 8/2, fused tensors, LongRoPE from 64, untied",
     {.arch = "phi3", .vocab = 512, .dim = 256, .layers = 2, .heads = 8, .kv_heads = 2, .ffn = 512,
      .ctx = 512, .tied = 0, .rope_base = 10000, .rope_scaling = "longrope", .rope_orig_ctx = 64}},
    {"qwen3-30b-a3b", "Qwen3-30B-A3B shape (48 layers, GQA 32/4, 128 experts of 768, 8 per token, untied)",
     {.arch = "qwen3moe", .vocab = 151936, .dim = 2048, .layers = 48, .heads = 32, .kv_heads = 4, .head_dim = 128,
      .ffn = 6144, .experts = 128, .experts_used = 8, .expert_ffn = 768, .ctx = 40960, .tied = 0,
      .rope_base = 1e6}},
    {"tiny-qwen3moe", "test model: qwen3moe, dim 256, 2 layers, GQA 4/2, 16 experts of 256, 4 per token",
     {.arch = "qwen3moe", .vocab = 512, .dim = 256, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 64,
      .ffn = 512, .experts = 16, .experts_used = 4, .expert_ffn = 256, .ctx = 512, .tied = 1, .rope_base = 1e6}},
    {"gpt-oss-20b", "gpt-oss-20b shape (24 layers, GQA 64/8, head_dim 64, 32 experts of 2880, 4 per token, YaRN, MXFP4 experts)",
     {.arch = "gpt-oss", .vocab = 201088, .dim = 2880, .layers = 24, .heads = 64, .kv_heads = 8, .head_dim = 64,
      .ffn = 2880, .experts = 32, .experts_used = 4, .expert_ffn = 2880, .ctx = 131072, .tied = 0,
      .rope_base = 150000, .swa = 128, .rope_scaling = "yarn", .rope_factor = 32, MXFP4_EXPERTS,
      .rope_orig_ctx = 4096}},
    {"tiny-gptoss", "test model: gpt-oss, dim 256, 2 layers (window 8, full), GQA 8/2, 8 MXFP4 experts of 256, 4 per token",
     {.arch = "gpt-oss", .vocab = 512, .dim = 256, .layers = 2, .heads = 8, .kv_heads = 2, .head_dim = 32,
      .ffn = 256, .experts = 8, .experts_used = 4, .expert_ffn = 256, .ctx = 512, .tied = 0, .rope_base = 150000,
      .swa = 8, .rope_scaling = "yarn", .rope_factor = 4, .rope_orig_ctx = 64, MXFP4_EXPERTS}},
    {"tiny-mixtral", "test model: llama with 8 experts of 256, 2 per token (Mixtral), dim 256, 2 layers, GQA 8/2",
     {.arch = "llama", .vocab = 512, .dim = 256, .layers = 2, .heads = 8, .kv_heads = 2, .ffn = 256,
      .experts = 8, .experts_used = 2, .ctx = 512, .tied = 0, .rope_base = 1e6}},
    {"tiny-bert", "test model: bert encoder, dim 64, 2 layers, 4 heads, ffn 128, WordPiece vocab 512, mean pooling",
     {.arch = "bert", .vocab = 512, .dim = 64, .layers = 2, .heads = 4, .kv_heads = 4, .ffn = 128, .ctx = 128,
      .pooling = 1}},
    {"tiny-nomic-bert", "test model: nomic-bert encoder (RoPE, fused qkv, gated FFN), dim 64, 2 layers, mean pooling",
     {.arch = "nomic-bert", .vocab = 512, .dim = 64, .layers = 2, .heads = 4, .kv_heads = 4, .ffn = 128, .ctx = 256,
      .rope_base = 1000, .pooling = 1}},
    {"tiny-qwen3-embedding", "test model: qwen3 embedder (last-token pooling, EOS appended), dim 256, 2 layers",
     {.arch = "qwen3", .vocab = 512, .dim = 256, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 64, .ffn = 512,
      .ctx = 512, .rope_base = 1000000, .tied = 1, .pooling = 3, .add_eos = true}},
    {"qwen3-embedding-0.6b", "Qwen3-Embedding-0.6B shape (qwen3-0.6b with last-token pooling, EOS appended)",
     {.arch = "qwen3", .vocab = 151936, .dim = 1024, .layers = 28, .heads = 16, .kv_heads = 8, .head_dim = 128,
      .ffn = 3072, .ctx = 32768, .rope_base = 1000000, .tied = 1, .pooling = 3, .add_eos = true}},
};
/* clang-format on */

static const kn_dtype weight_types[] = {KN_F32,  KN_F16,  KN_BF16, KN_Q4_0, KN_Q4_1, KN_Q5_0,   KN_Q5_1,   KN_Q8_0,
                                        KN_Q4_K, KN_Q5_K, KN_Q6_K, KN_Q2_K, KN_Q3_K, KN_IQ4_NL, KN_IQ4_XS, KN_MXFP4};

static void usage(FILE *f) {
    fprintf(f, "usage: kiln-gen --preset NAME [options] -o out.gguf\n"
               "       kiln-gen --arch A --vocab V --dim D --layers L --heads H --kv-heads KV\n"
               "                --ffn F [options] -o out.gguf\n"
               "       kiln-gen --tokenizer-json tokenizer.json [--pre NAME] [--vocab V] -o vocab.gguf\n"
               "Writes a GGUF model with deterministic random weights and a byte-level BPE tokenizer.\n"
               "Options given after or without --preset override the preset's values.\n"
               "  --arch A          llama, qwen2, qwen3, gemma2, gemma3, phi3, smollm3, qwen3moe, gpt-oss, bert or\n"
               "                    nomic-bert (encoders: a WordPiece vocabulary of their own, no output head)\n"
               "                    (llama.cpp's GGUF layout of each)\n"
               "  --scale S         multiply every random matrix (embeddings included) by S, for peaked logits\n"
               "  --type T          weight type of 2-D matrices (default Q8_0): F32 F16 BF16 Q4_0 Q4_1 Q5_0\n"
               "                    Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS MXFP4, or Q4_K_M / Q5_K_M\n"
               "                    (Q4_K / Q5_K with Q6_K where llama.cpp's files of that name have it); a\n"
               "                    matrix whose row length is not a multiple of T's block falls back to Q8_0\n"
               "                    (or F16). Norms and biases are always F32.\n"
               "  --seed N          RNG seed (default 1); same arguments + seed = byte-identical file\n"
               "  --head-dim HD     per-head dimension (default dim/heads)\n"
               "  --ctx N           context_length (default 2048)\n"
               "  --tied|--untied   share token_embd as the output matrix, or write output.weight\n"
               "  --rope-base B     rope.freq_base (default 10000)\n"
               "  --norm-eps E      RMSNorm epsilon (default 1e-5 llama, 1e-6 qwen)\n"
               "  --llama3-rope     write rope_freqs.weight for llama3 rope scaling (factor 32, low 1, high 4,\n"
               "                    original context 8192 unless given below)\n"
               "  --rope-factor F --rope-low F --rope-high F --rope-orig-ctx N   llama3 scaling parameters\n"
               "  --no-llama3-rope  no llama3 rope scaling (overrides a preset)\n"
               "  --rope-scaling T  linear or yarn (rope.scaling.type, with --rope-factor and, for yarn,\n"
               "                    --rope-orig-ctx), longrope (phi3: long and short factors from --rope-orig-ctx\n"
               "                    to --ctx), or none\n"
               "  --sliding-window N   attention.sliding_window (gemma2, gemma3; gpt-oss: the window of the even\n"
               "                    layers, default 128)\n"
               "  --attn-softcap C --final-softcap C   gemma2 soft-capping (default 50 and 30)\n"
               "  --name S          general.name (default: the preset or arch)\n"
               "  --chat-template FILE   store FILE's text as tokenizer.chat_template\n"
               "  --pre NAME        tokenizer.ggml.pre (default: qwen2 for qwen2/qwen3, else llama-bpe;\n"
               "                    with --tokenizer-json: detected from its pre-tokenizer)\n"
               "  --tokenizer-json FILE   take the tokenizer from a Hugging Face tokenizer.json of a byte-level\n"
               "                    BPE model (and the tokenizer_config.json beside it, when present: BOS, EOS,\n"
               "                    padding, add_bos_token) instead of the built-in one; the vocabulary is\n"
               "                    padded with unused tokens up to the model's --vocab. Without --preset or\n"
               "                    --arch the output is vocabulary-only\n"
               "  --vocab-only      write the tokenizer alone (no tensors), like llama.cpp's ggml-vocab files\n"
               "  --threads N       quantization threads (default: all cores)\n"
               "  --experts N       a mixture of N experts in every layer (llama: Mixtral; qwen3moe needs it)\n"
               "  --experts-used K  experts per token (top-k routing)\n"
               "  --expert-ffn F    hidden width of one expert (default: --ffn)\n"
               "  --expert-type T   weight type of the expert matrices (default: --type; the gpt-oss presets:\n"
               "                    MXFP4, as gpt-oss files hold them)\n"
               "  --fast            quantize only 64 rows per matrix and repeat them (rows chosen per row's RNG\n"
               "                    stream): real-shaped files for speed measurements in minutes\n"
               "  --pooling P       {arch}.pooling_type of an embedding model: mean, cls, last or none\n"
               "  --add-eos         tokenizer.ggml.add_eos_token = true (decoder embedders pool the EOS)\n"
               "  --list-presets    print the presets and exit\n"
               "Presets:");
    for (size_t i = 0; i < KN_ARRAY_LEN(presets); i++) fprintf(f, " %s", presets[i].name);
    fprintf(f, "\n");
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kiln-gen: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) die("out of memory");
    return p;
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = xcalloc(1, n);
    memcpy(p, s, n);
    return p;
}

static int64_t parse_int(const char *opt, const char *v, int64_t lo, int64_t hi) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 0);
    if (errno || end == v || *end || x < lo || x > hi)
        die("%s: '%s' is not an integer from %lld to %lld", opt, v, (long long)lo, (long long)hi);
    return x;
}

static double parse_double(const char *opt, const char *v) {
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || x <= 0) die("%s: '%s' is not a positive number", opt, v);
    return x;
}

static kn_dtype parse_type(const char *opt, const char *v) {
    for (size_t i = 0; i < KN_ARRAY_LEN(weight_types); i++)
        if (strcasecmp(v, kn_dtype_name((int32_t)weight_types[i])) == 0) return weight_types[i];
    die("%s: unknown weight type '%s' (F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL "
        "IQ4_XS MXFP4)",
        opt, v);
}

/* llama.cpp's general.file_type (LLAMA_FTYPE_*) for a model whose matrices are all of type t. */
static uint32_t file_type_of(kn_dtype t) {
    switch (t) {
        case KN_F32: return 0;
        case KN_F16: return 1;
        case KN_Q4_0: return 2;
        case KN_Q4_1: return 3;
        case KN_Q8_0: return 7;
        case KN_Q5_0: return 8;
        case KN_Q5_1: return 9;
        case KN_Q4_K: return 14; /* Q4_K_S */
        case KN_Q5_K: return 16; /* Q5_K_S */
        case KN_Q6_K: return 18;
        case KN_Q2_K: return 10;
        case KN_Q3_K: return 11; /* Q3_K_S */
        case KN_IQ4_NL: return 25;
        case KN_IQ4_XS: return 30;
        case KN_MXFP4: return 38; /* MXFP4_MOE */
        case KN_BF16: return 32;
        default: return 0;
    }
}

/* ---- deterministic random numbers -------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* Natural log of a positive, finite, normal x using only IEEE +, -, *, / (no libm), so that the
 * generated weights are the same bits on every machine and libm version: x = m * 2^e with m in
 * [sqrt(1/2), sqrt(2)], log(m) = 2 atanh(t) with t = (m - 1) / (m + 1), |t| <= 0.172, whose series to
 * t^13 is accurate to about 1e-12. */
static double det_log(double x) {
    uint64_t b;
    memcpy(&b, &x, 8);
    int e = (int)((b >> 52) & 0x7FF) - 1023;
    b = (b & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull;
    double m;
    memcpy(&m, &b, 8);
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e++;
    }
    double t = (m - 1.0) / (m + 1.0), t2 = t * t;
    double s =
        t *
        (2.0 + t2 * (2.0 / 3 + t2 * (2.0 / 5 + t2 * (2.0 / 7 + t2 * (2.0 / 9 + t2 * (2.0 / 11 + t2 * (2.0 / 13)))))));
    return s + (double)e * 0.69314718055994530942;
}

/* Fills x[0..n) with gaussian samples of the given mean and std from the stream identified by
 * (key, row): Marsaglia's polar form of Box-Muller over splitmix64, in double precision with only
 * correctly rounded operations (det_log, sqrt), so the result is bit-reproducible everywhere. */
static void gaussian_row(uint64_t key, int64_t row, float mean, float std, float *x, int64_t n) {
    uint64_t s = key ^ ((uint64_t)row * 0xD1B54A32D192ED03ull);
    splitmix64(&s);
    for (int64_t i = 0; i < n; i += 2) {
        double u, v, q;
        do {
            uint64_t r = splitmix64(&s);
            u = (double)(int32_t)(uint32_t)(r >> 32) * (1.0 / 2147483648.0); /* [-1, 1) */
            v = (double)(int32_t)(uint32_t)r * (1.0 / 2147483648.0);
            q = u * u + v * v;
        } while (q >= 1.0 || q == 0.0);
        double f = sqrt(-2.0 * det_log(q) / q) * (double)std;
        x[i] = (float)((double)mean + u * f);
        if (i + 1 < n) x[i + 1] = (float)((double)mean + v * f);
    }
}

/* ---- tensors ----------------------------------------------------------------------------------- */

/* Rows per matrix that --fast quantizes; every other row repeats one of them. */
#define FAST_POOL 64

typedef struct gen_tensor {
    char name[96];
    uint32_t n_dims;
    int64_t ne[3];
    kn_dtype type;
    float mean, std;     /* gaussian parameters */
    const float *values; /* fixed values instead (rope_freqs), [ne[0]] */
    uint8_t *pool;       /* --fast: FAST_POOL rows already in the tensor's type; row r is a copy of one */
    uint64_t key;        /* RNG stream key */
    const kn_type_traits *tr;
    uint64_t row_bytes;
    int *fail; /* set when a worker could not allocate */
} gen_tensor;

/* kn_gguf_fill_fn: generates rows [row0, row0+n) and converts them to the tensor's type. Rows are
 * independent, so they are spread over threads without changing the result. */
static kiln_status fill_tensor(void *user, int64_t row0, int64_t n, void *dst) {
    const gen_tensor *t = user;
    const int64_t ne0 = t->ne[0];
    if (t->pool) { /* --fast: each row a copy of a pool row chosen by the row's own stream */
        for (int64_t r = 0; r < n; r++) {
            uint64_t st = t->key ^ ((uint64_t)(row0 + r) * 0xD1B54A32D192ED03ull);
            const uint64_t k = splitmix64(&st) % FAST_POOL;
            memcpy((uint8_t *)dst + (uint64_t)r * t->row_bytes, t->pool + k * t->row_bytes, t->row_bytes);
        }
        return KILN_OK;
    }
    int failed = 0;
    /* threads only pay off for big chunks (and spin-waiting costs on a busy machine) */
    const bool par = (uint64_t)n * (uint64_t)ne0 >= ((uint64_t)1 << 20);
#pragma omp parallel if (par) reduction(| : failed)
    {
        float *buf = t->type == KN_F32 ? NULL : malloc((size_t)ne0 * sizeof(float));
        if (t->type != KN_F32 && !buf) failed = 1;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n; r++) {
            if (failed) continue;
            uint8_t *out = (uint8_t *)dst + (uint64_t)r * t->row_bytes;
            float *x = t->type == KN_F32 ? (float *)(void *)out : buf;
            if (t->values) memcpy(x, t->values, (size_t)ne0 * sizeof(float));
            else gaussian_row(t->key, row0 + r, t->mean, t->std, x, ne0);
            if (t->type != KN_F32) t->tr->from_float(x, out, ne0);
        }
        free(buf);
    }
    if (failed) return kn_error(KILN_ERR_NOMEM, "out of memory generating '%s'", t->name);
    return KILN_OK;
}

typedef struct fallback_note {
    int64_t row_len;
    kn_dtype to;
    int count;
} fallback_note;

typedef struct gen_state {
    gen_cfg cfg;
    gen_tensor *t;
    int n, cap;
    float *rope_freqs;
    float *rope_long, *rope_short; /* longrope factors, [head_dim / 2] each */
    fallback_note notes[16];
    int n_notes;
    uint64_t total_bytes;
} gen_state;

/* A tensor of ne0 x ne1 (ne1 0: a vector) x ne2 (0: none; the experts of a MoE tensor); a matrix is
 * of mtype (or the fallback type when its rows are not whole blocks of mtype), else F32. */
static gen_tensor *add3_typed(gen_state *g, const char *name, int64_t ne0, int64_t ne1, int64_t ne2, bool matrix,
                              kn_dtype mtype) {
    if (g->n == g->cap) die("internal: too many tensors");
    gen_tensor *t = &g->t[g->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = ne2 > 0 ? 3 : ne1 > 0 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 > 0 ? ne1 : 1;
    t->ne[2] = ne2 > 0 ? ne2 : 1;
    t->key = fnv1a(name) ^ (g->cfg.seed * 0x9E3779B97F4A7C15ull);
    kn_dtype type = KN_F32;
    if (matrix) {
        type = mtype;
        const kn_type_traits *tr = kn_type_traits_get((int32_t)type);
        if (!tr) die("weight type %s is not supported by this build", kn_dtype_name((int32_t)type));
        if (ne0 % tr->block_size != 0) {
            type = ne0 % 32 == 0 ? KN_Q8_0 : KN_F16;
            int k = 0;
            while (k < g->n_notes && (g->notes[k].row_len != ne0 || g->notes[k].to != type)) k++;
            if (k == g->n_notes && k < (int)KN_ARRAY_LEN(g->notes)) {
                g->notes[k].row_len = ne0;
                g->notes[k].to = type;
                g->n_notes++;
            }
            if (k < (int)KN_ARRAY_LEN(g->notes)) g->notes[k].count++;
        }
        t->mean = 0;
        t->std = (float)(g->cfg.scale > 0 ? g->cfg.scale : 1.0) / sqrtf((float)ne0);
    }
    t->type = type;
    t->tr = kn_type_traits_get((int32_t)type);
    if (!t->tr || !t->tr->from_float)
        die("type %s has no reference quantizer in this build", kn_dtype_name((int32_t)type));
    t->row_bytes = kn_row_bytes(type, ne0);
    return t;
}

/* The type of matrix `name` in a Q4_K_M (Q5_K_M) file, as llama.cpp's quantizer picks it: Q6_K for the
 * output matrix (the token embedding when it is tied), and for attn_v and ffn_down (dense or experts)
 * of the first and last eighth of the layers and every third layer between; a fused attn_qkv one
 * step up (Q5_K; Q6_K); with 8 experts (Mixtral) attn_output in Q5_K; c->type (Q4_K; Q5_K) for the rest. */
static kn_dtype mix_type(const gen_cfg *c, const char *name) {
    if (strcmp(name, "output.weight") == 0 || (c->tied && strcmp(name, "token_embd.weight") == 0)) return KN_Q6_K;
    int layer, end = 0;
    if (sscanf(name, "blk.%d.%n", &layer, &end) != 1 || end == 0) return c->type;
    const char *t = name + end;
    if (strncmp(t, "attn_qkv.", 9) == 0) return c->type == KN_Q4_K ? KN_Q5_K : KN_Q6_K;
    if (strncmp(t, "attn_output.", 12) == 0 && c->experts == 8) return c->type == KN_Q4_K ? KN_Q5_K : c->type;
    if (strncmp(t, "attn_v.", 7) != 0 && strncmp(t, "ffn_down.", 9) != 0 && strncmp(t, "ffn_down_exps.", 14) != 0)
        return c->type;
    const int64_t n = c->layers;
    const bool more = layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2;
    return more ? KN_Q6_K : c->type;
}

static gen_tensor *add3(gen_state *g, const char *name, int64_t ne0, int64_t ne1, int64_t ne2, bool matrix) {
    return add3_typed(g, name, ne0, ne1, ne2, matrix, g->cfg.k_m ? mix_type(&g->cfg, name) : g->cfg.type);
}

/* The experts' stack of matrix `name` (ne0 x ne1 each): of --expert-type when given, else as add3 types it. */
static void add_experts(gen_state *g, const char *name, int64_t ne0, int64_t ne1) {
    if (g->cfg.expert_typed) add3_typed(g, name, ne0, ne1, g->cfg.experts, true, g->cfg.expert_type);
    else add3(g, name, ne0, ne1, g->cfg.experts, true);
}

static gen_tensor *add(gen_state *g, const char *name, int64_t ne0, int64_t ne1, bool matrix) {
    return add3(g, name, ne0, ne1, 0, matrix);
}

static void add_norm(gen_state *g, const char *name, int64_t n) {
    gen_tensor *t = add(g, name, n, 0, false);
    t->mean = 1.0f;
    t->std = 0.1f;
}

static gen_tensor *add_bias(gen_state *g, const char *name, int64_t n) {
    gen_tensor *t = add(g, name, n, 0, false);
    t->mean = 0.0f;
    t->std = 0.1f;
    return t;
}

/* llama.cpp's converter (LlamaModel, rope_type "llama3"): per rotary frequency pair i the divisor
 * 1 (high frequencies), factor (low frequencies) or 1 / ((1 - smooth) / factor + smooth) between. */
static float *llama3_rope_freqs(const gen_cfg *c, int64_t hd) {
    float *f = xcalloc((size_t)(hd / 2), sizeof(float));
    const double low_wavelen = (double)c->rope_orig_ctx / c->rope_low;
    const double high_wavelen = (double)c->rope_orig_ctx / c->rope_high;
    for (int64_t i = 0; i < hd / 2; i++) {
        float freq = 1.0f / powf((float)c->rope_base, (float)(2 * i) / (float)hd);
        double wavelen = 2.0 * M_PI / (double)freq;
        double v;
        if (wavelen < high_wavelen) v = 1.0;
        else if (wavelen > low_wavelen) v = c->rope_factor;
        else {
            double smooth = ((double)c->rope_orig_ctx / wavelen - c->rope_low) / (c->rope_high - c->rope_low);
            v = 1.0 / ((1.0 - smooth) / c->rope_factor + smooth);
        }
        f[i] = (float)v;
    }
    return f;
}

/* LongRoPE factors of a phi3 file (rope_factors_short / _long.weight, [hd/2]): deterministic values
 * shaped like Phi-3.5's, near 1 for the short context and rising from 1 to about the context ratio
 * over the low frequencies for the long one. */
static void longrope_factors(gen_state *g, int64_t hd) {
    const gen_cfg *c = &g->cfg;
    const int64_t n = hd / 2;
    const double ratio = (double)c->ctx / (double)c->rope_orig_ctx;
    g->rope_short = xcalloc((size_t)n, sizeof(float));
    g->rope_long = xcalloc((size_t)n, sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        const double t = n > 1 ? (double)i / (double)(n - 1) : 0.0;
        g->rope_short[i] = (float)(1.0 + 0.05 * t);
        g->rope_long[i] = (float)(1.0 + (ratio - 1.0) * t * t);
    }
}

/* An encoder's tensors (bert, nomic-bert), as llama.cpp's converter names them: the input
 * embeddings (tokens, 2 token types, bert's positions, a LayerNorm), then per layer attention (bert:
 * q, k, v with biases; nomic-bert: attn_qkv), the output projection (bert: with a bias), its
 * LayerNorm, the FFN (bert: up and down with biases; nomic-bert: gate, up, down) and the layer's
 * output LayerNorm. No output norm, no output head. */
static void build_encoder_tensors(gen_state *g, const arch_info *ai) {
    const gen_cfg *c = &g->cfg;
    const int64_t qd = c->heads * c->head_dim, kvd = c->kv_heads * c->head_dim;
    const bool bert = !ai->fused;
    g->cap = (int)(c->layers * 24 + 8);
    g->t = xcalloc((size_t)g->cap, sizeof *g->t);
    char nm[96];
    add(g, "token_embd.weight", c->dim, c->vocab, true);
    add(g, "token_types.weight", c->dim, 2, false)->std = 0.5f;
    if (bert) add(g, "position_embd.weight", c->dim, c->ctx, false)->std = 0.5f;
    add_norm(g, "token_embd_norm.weight", c->dim);
    add_bias(g, "token_embd_norm.bias", c->dim);
#define NM(fmt) (snprintf(nm, sizeof nm, "blk.%d." fmt, (int)l), nm)
    for (int64_t l = 0; l < c->layers; l++) {
        if (bert) {
            add(g, NM("attn_q.weight"), c->dim, qd, true);
            add_bias(g, NM("attn_q.bias"), qd);
            add(g, NM("attn_k.weight"), c->dim, kvd, true);
            add_bias(g, NM("attn_k.bias"), kvd);
            add(g, NM("attn_v.weight"), c->dim, kvd, true);
            add_bias(g, NM("attn_v.bias"), kvd);
        } else {
            add(g, NM("attn_qkv.weight"), c->dim, qd + 2 * kvd, true);
        }
        add(g, NM("attn_output.weight"), qd, c->dim, true);
        if (bert) add_bias(g, NM("attn_output.bias"), c->dim);
        add_norm(g, NM("attn_output_norm.weight"), c->dim);
        add_bias(g, NM("attn_output_norm.bias"), c->dim);
        if (!bert) add(g, NM("ffn_gate.weight"), c->dim, c->ffn, true);
        add(g, NM("ffn_up.weight"), c->dim, c->ffn, true);
        if (bert) add_bias(g, NM("ffn_up.bias"), c->ffn);
        add(g, NM("ffn_down.weight"), c->ffn, c->dim, true);
        if (bert) add_bias(g, NM("ffn_down.bias"), c->dim);
        add_norm(g, NM("layer_output_norm.weight"), c->dim);
        add_bias(g, NM("layer_output_norm.bias"), c->dim);
    }
#undef NM
}

static void build_tensors(gen_state *g) {
    const gen_cfg *c = &g->cfg;
    const arch_info *ai = find_arch(c->arch);
    if (ai->encoder) {
        build_encoder_tensors(g, ai);
        return;
    }
    const int64_t hd = c->head_dim, qd = c->heads * hd, kvd = c->kv_heads * hd;
    const bool gptoss = ai->oss;
    g->cap = (int)(c->layers * 24 + 8);
    g->t = xcalloc((size_t)g->cap, sizeof *g->t);
    char nm[96];
    add(g, "token_embd.weight", c->dim, c->vocab, true);
    if (c->llama3_rope) {
        g->rope_freqs = llama3_rope_freqs(c, hd);
        gen_tensor *t = add(g, "rope_freqs.weight", hd / 2, 0, false);
        t->values = g->rope_freqs;
    }
    if (c->rope_scaling && strcmp(c->rope_scaling, "longrope") == 0) {
        longrope_factors(g, hd);
        add(g, "rope_factors_long.weight", hd / 2, 0, false)->values = g->rope_long;
        add(g, "rope_factors_short.weight", hd / 2, 0, false)->values = g->rope_short;
    }
#define NM(fmt) (snprintf(nm, sizeof nm, "blk.%d." fmt, (int)l), nm)
    for (int64_t l = 0; l < c->layers; l++) {
        add_norm(g, NM("attn_norm.weight"), c->dim);
        if (ai->fused) {
            add(g, NM("attn_qkv.weight"), c->dim, qd + 2 * kvd, true); /* q, k, v rows in that order */
        } else {
            add(g, NM("attn_q.weight"), c->dim, qd, true);
            add(g, NM("attn_k.weight"), c->dim, kvd, true);
            add(g, NM("attn_v.weight"), c->dim, kvd, true);
        }
        if (ai->qkv_bias) {
            add_bias(g, NM("attn_q.bias"), qd);
            add_bias(g, NM("attn_k.bias"), kvd);
            add_bias(g, NM("attn_v.bias"), kvd);
        }
        if (ai->qk_norm) {
            add_norm(g, NM("attn_q_norm.weight"), hd);
            add_norm(g, NM("attn_k_norm.weight"), hd);
        }
        add(g, NM("attn_output.weight"), qd, c->dim, true);
        if (gptoss) {
            add_bias(g, NM("attn_output.bias"), c->dim);
            add_bias(g, NM("attn_sinks.weight"), c->heads)->std = 1.0f;
        }
        if (ai->post_norms) add_norm(g, NM("post_attention_norm.weight"), c->dim);
        add_norm(g, gptoss ? NM("post_attention_norm.weight") : NM("ffn_norm.weight"), c->dim);
        if (c->experts) {
            /* the router stays F32, as llama.cpp's quantizer leaves it; its logits are spread wider than
             * a plain matrix's (std 8 rather than 1 for unit inputs), as trained routers' are, so that
             * quantization rarely changes which experts a token goes to */
            gen_tensor *r = add(g, NM("ffn_gate_inp.weight"), c->dim, c->experts, false);
            r->std = 8.0f / sqrtf((float)c->dim);
            add_experts(g, NM("ffn_gate_exps.weight"), c->dim, c->expert_ffn);
            add_experts(g, NM("ffn_up_exps.weight"), c->dim, c->expert_ffn);
            add_experts(g, NM("ffn_down_exps.weight"), c->expert_ffn, c->dim);
            if (gptoss) {
                add_bias(g, NM("ffn_gate_inp.bias"), c->experts);
                add(g, NM("ffn_gate_exps.bias"), c->expert_ffn, c->experts, false)->std = 0.1f;
                add(g, NM("ffn_up_exps.bias"), c->expert_ffn, c->experts, false)->std = 0.1f;
                add(g, NM("ffn_down_exps.bias"), c->dim, c->experts, false)->std = 0.1f;
            }
            continue;
        }
        if (ai->fused) {
            add(g, NM("ffn_up.weight"), c->dim, 2 * c->ffn, true); /* gate rows, then up rows */
        } else {
            add(g, NM("ffn_gate.weight"), c->dim, c->ffn, true);
            add(g, NM("ffn_up.weight"), c->dim, c->ffn, true);
        }
        add(g, NM("ffn_down.weight"), c->ffn, c->dim, true);
        if (ai->post_norms) add_norm(g, NM("post_ffw_norm.weight"), c->dim);
    }
#undef NM
    add_norm(g, "output_norm.weight", c->dim);
    if (!c->tied) add(g, "output.weight", c->dim, c->vocab, true);
}

/* ---- tokenizer --------------------------------------------------------------------------------- */

/* The text the BPE merges are learned from (written for this tool). */
static const char corpus[] =
    "Once upon a time, there was a little girl named Lily. She lived in a small house near the woods "
    "with her mother and her father. Every morning she went outside to play in the garden. She liked to "
    "look at the flowers and the birds, and she liked to run in the grass with her dog, Max.\n"
    "One day, Lily saw a big red ball under a tree. \"What is this?\" she asked. Her mother smiled and "
    "said, \"It is a ball. You can play with it, but you have to share it with your friends.\" Lily was "
    "very happy. She took the ball and ran to the park to find her friends Tom and Sara.\n"
    "Tom and Sara were playing in the sand. They wanted to build a castle, but the sand was too dry. "
    "Lily said, \"Let us play with my ball instead!\" They played all day long. They threw the ball "
    "high into the sky and they laughed and laughed. When the sun went down, they were tired but happy.\n"
    "The next day it was raining. Lily could not go outside, so she sat by the window and looked at "
    "the rain. She felt sad. Then her father came into the room with a book. \"Do you want me to read "
    "you a story?\" he asked. Lily nodded. The story was about a brave little bird who wanted to fly "
    "over the mountains. The bird was small, but it was strong and it never gave up. At the end of the "
    "story the bird found a new home, and it made many new friends.\n"
    "Lily loved the story. She thought about the bird all day. In the evening, the rain stopped and "
    "the sky was full of stars. Lily went to bed and she dreamed that she could fly, just like the "
    "little bird. She flew over the house, over the park and over the woods, and she was not afraid.\n"
    "The model reads the text, one token at a time, and it writes the next word. It is fast because "
    "the weights are small and the numbers are simple. This is a test of the engine, the tokenizer and "
    "the server: 1, 2, 3, 10, 42, 100, 2024. Can you count to ten? One, two, three, four, five, six, "
    "seven, eight, nine, ten!\n";

/* GPT-2's byte-to-unicode map: the UTF-8 text of the character standing for byte b. */
static void byte_char(int b, char out[4]) {
    int cp;
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
        cp = b;
    } else {
        int n = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

typedef struct word {
    int32_t *sym;
    int n;
    int count;
} word;

typedef struct pair_w {
    int32_t a, b;
    int count;
} pair_w;

static int cmp_pair(const void *x, const void *y) {
    const pair_w *p = x, *q = y;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    if (p->b != q->b) return p->b < q->b ? -1 : 1;
    return 0;
}

static int char_class(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return 1;
    if (c >= '0' && c <= '9') return 2;
    if (c == ' ' || c == '\n' || c == '\t') return 0;
    return 3;
}

typedef struct vocab {
    char **tok;
    int32_t *type;
    int n; /* tokens so far */
    char **merges;
    int n_merges;
    int32_t bos, eos, eot, pad; /* -1: none */
} vocab;

static bool word_eq(const word *w, const char *s, int len) {
    if (w->n != len) return false;
    for (int q = 0; q < len; q++)
        if (w->sym[q] != (uint8_t)s[q]) return false;
    return true;
}

/* Splits the corpus like GPT-2's pre-tokenizer (optional leading space + a run of letters, digits or
 * punctuation; whitespace runs) and collects the distinct words with their counts. */
static int split_words(word *words, int cap) {
    int n = 0;
    const char *s = corpus;
    size_t len = strlen(corpus);
    for (size_t i = 0; i < len;) {
        size_t j = i;
        unsigned char c = (unsigned char)s[i];
        if (c == ' ' && i + 1 < len && char_class((unsigned char)s[i + 1]) != 0) j++;
        int cls = char_class((unsigned char)s[j]);
        size_t k = j + 1;
        while (k < len && char_class((unsigned char)s[k]) == cls && (cls != 0 || s[k] == s[j])) k++;
        int wl = (int)(k - i);
        int w = 0;
        while (w < n && !word_eq(&words[w], &s[i], wl)) w++;
        if (w == n) {
            if (n == cap) die("internal: corpus has too many words");
            words[n].sym = xcalloc((size_t)wl, sizeof(int32_t));
            for (int q = 0; q < wl; q++) words[n].sym[q] = (uint8_t)s[i + (size_t)q];
            words[n].n = wl;
            words[n].count = 0;
            n++;
        }
        words[w].count++;
        i = k;
    }
    return n;
}

static int find_token(const vocab *v, const char *s) {
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->tok[i], s) == 0) return i;
    return -1;
}

static const char *const specials[] = {
    "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
    "<|end_header_id|>", "<|im_start|>",    "<|im_end|>",
};

/* Builds the vocabulary: 256 byte tokens (id = byte value), then tokens from up to
 * n_vocab - 256 - specials BPE merges learned on the corpus, then the control tokens, then filler. */
static void build_vocab(vocab *v, int64_t n_vocab) {
    const int n_spec = (int)KN_ARRAY_LEN(specials);
    v->tok = xcalloc((size_t)n_vocab, sizeof(char *));
    v->type = xcalloc((size_t)n_vocab, sizeof(int32_t));
    v->merges = xcalloc((size_t)n_vocab, sizeof(char *));
    for (int b = 0; b < 256; b++) {
        char c[4];
        byte_char(b, c);
        v->tok[b] = xstrdup(c);
        v->type[b] = 1; /* normal */
    }
    v->n = 256;
    int max_merges = (int)(n_vocab - 256 - n_spec);
    word words[1024];
    int n_words = split_words(words, (int)KN_ARRAY_LEN(words));
    size_t max_pairs = 0;
    for (int w = 0; w < n_words; w++) max_pairs += (size_t)words[w].n;
    pair_w *pairs = xcalloc(max_pairs, sizeof *pairs);
    while (v->n_merges < max_merges) {
        size_t np = 0;
        for (int w = 0; w < n_words; w++)
            for (int i = 0; i + 1 < words[w].n; i++)
                pairs[np++] = (pair_w){words[w].sym[i], words[w].sym[i + 1], words[w].count};
        if (np == 0) break;
        qsort(pairs, np, sizeof *pairs, cmp_pair);
        pair_w best = {0, 0, 0};
        for (size_t i = 0; i < np;) {
            size_t j = i;
            int cnt = 0;
            while (j < np && pairs[j].a == pairs[i].a && pairs[j].b == pairs[i].b) cnt += pairs[j++].count;
            if (cnt > best.count) best = (pair_w){pairs[i].a, pairs[i].b, cnt};
            i = j;
        }
        const char *sa = v->tok[best.a], *sb = v->tok[best.b];
        size_t la = strlen(sa), lb = strlen(sb);
        char *joined = xcalloc(1, la + lb + 1);
        memcpy(joined, sa, la);
        memcpy(joined + la, sb, lb + 1);
        int id = find_token(v, joined);
        if (id < 0) {
            id = v->n++;
            v->tok[id] = joined;
            v->type[id] = 1;
        } else {
            free(joined);
        }
        char *m = xcalloc(1, la + lb + 2);
        memcpy(m, sa, la);
        m[la] = ' ';
        memcpy(m + la + 1, sb, lb + 1);
        v->merges[v->n_merges++] = m;
        for (int w = 0; w < n_words; w++) {
            int o = 0;
            for (int i = 0; i < words[w].n; i++) {
                if (i + 1 < words[w].n && words[w].sym[i] == best.a && words[w].sym[i + 1] == best.b) {
                    words[w].sym[o++] = id;
                    i++;
                } else {
                    words[w].sym[o++] = words[w].sym[i];
                }
            }
            words[w].n = o;
        }
    }
    free(pairs);
    for (int w = 0; w < n_words; w++) free(words[w].sym);
    for (int s = 0; s < n_spec; s++) {
        v->tok[v->n] = xstrdup(specials[s]);
        v->type[v->n] = 3; /* control */
        v->n++;
    }
    v->bos = find_token(v, "<|begin_of_text|>");
    v->eos = find_token(v, "<|end_of_text|>");
    v->eot = find_token(v, "<|eot_id|>");
    v->pad = -1;
    for (int r = 0; v->n < n_vocab; r++) {
        char buf[48];
        snprintf(buf, sizeof buf, "<|reserved_%d|>", r);
        v->tok[v->n] = xstrdup(buf);
        v->type[v->n] = 5; /* unused */
        v->n++;
    }
}

/* A WordPiece vocabulary as GGUF files hold it (a word-initial piece with a leading U+2581, a
 * continuation piece bare): [PAD] [UNK] [CLS] [SEP] [MASK] (control), then every lowercase letter,
 * digit and ASCII punctuation mark both word-initial and as a continuation (so every such text has
 * a spelling), then the corpus's distinct lowercased words, word-initial, then "[unused<n>]" filler. */
static void build_wordpiece_vocab(vocab *v, int64_t n_vocab) {
    static const char *const wp_specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    v->tok = xcalloc((size_t)n_vocab, sizeof(char *));
    v->type = xcalloc((size_t)n_vocab, sizeof(int32_t));
    v->n = 0;
    for (size_t i = 0; i < KN_ARRAY_LEN(wp_specials); i++) {
        v->tok[v->n] = xstrdup(wp_specials[i]);
        v->type[v->n++] = 3; /* control */
    }
    char buf[64];
    for (int pass = 0; pass < 2; pass++)
        for (int ch = '!'; ch <= '~' && v->n < n_vocab; ch++) {
            if (ch >= 'A' && ch <= 'Z') continue;
            snprintf(buf, sizeof buf, "%s%c", pass == 0 ? "\xe2\x96\x81" : "", ch);
            v->tok[v->n] = xstrdup(buf);
            v->type[v->n++] = 1;
        }
    for (const char *p = corpus; *p && v->n < n_vocab;) {
        while (*p && !((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))) p++;
        int len = 0;
        char w[48] = "\xe2\x96\x81";
        while (((p[len] >= 'a' && p[len] <= 'z') || (p[len] >= 'A' && p[len] <= 'Z')) && len < 40) {
            w[3 + len] = (char)(p[len] | 0x20);
            len++;
        }
        w[3 + len] = 0;
        p += len;
        if (len > 1 && find_token(v, w) < 0) {
            v->tok[v->n] = xstrdup(w);
            v->type[v->n++] = 1;
        }
    }
    for (int r = 0; v->n < n_vocab; r++) {
        snprintf(buf, sizeof buf, "[unused%d]", r);
        v->tok[v->n] = xstrdup(buf);
        v->type[v->n++] = 5; /* unused */
    }
    v->bos = v->eos = v->eot = v->pad = -1;
}

static void free_vocab(vocab *v) {
    for (int i = 0; i < v->n; i++) free(v->tok[i]);
    for (int i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tok);
    free(v->type);
    free(v->merges);
}

/* ---- a Hugging Face tokenizer.json --------------------------------------------------------------- */

/* Byte-level BPE tokenizers write every byte as one character of GPT-2's byte-to-unicode map (a
 * space is 'Ġ'), both in model.vocab and model.merges, which is also how GGUF stores them: the
 * texts are copied as they are. The map is used to check them: a normal token must consist of map
 * characters only, and all 256 single-byte tokens must exist, or the file is not byte-level BPE. */

/* The byte character c (UTF-8 at s, *n bytes) stands for, or -1 when it is none. */
static int map_char_byte(const unsigned char *s, size_t avail, size_t *n) {
    static int inv[324]; /* code point -> byte + 1 */
    static bool ready;
    if (!ready) {
        for (int b = 0; b < 256; b++) {
            char c[4];
            byte_char(b, c);
            const unsigned char *u = (const unsigned char *)c;
            int cp = u[0] < 0x80 ? u[0] : ((u[0] & 0x1F) << 6) | (u[1] & 0x3F);
            inv[cp] = b + 1;
        }
        ready = true;
    }
    int cp;
    if (s[0] < 0x80) {
        cp = s[0];
        *n = 1;
    } else if ((s[0] & 0xE0) == 0xC0 && avail >= 2 && (s[1] & 0xC0) == 0x80) {
        cp = ((s[0] & 0x1F) << 6) | (s[1] & 0x3F);
        *n = 2;
    } else {
        *n = 1;
        return -1;
    }
    return cp < (int)KN_ARRAY_LEN(inv) ? inv[cp] - 1 : -1;
}

static bool is_byte_text(const char *s) {
    size_t len = strlen(s), n;
    if (len == 0) return false;
    for (size_t i = 0; i < len; i += n)
        if (map_char_byte((const unsigned char *)s + i, len - i, &n) < 0) return false;
    return true;
}

/* The pre-tokenizer regexes of the two byte-level BPE families kiln-gen recognizes, as their
 * tokenizer.json files write them (JSON-unescaped), and their tokenizer.ggml.pre names. */
static const struct {
    const char *regex, *pre;
} known_splits[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "llama-bpe"},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "qwen2"},
};

/* The bytes of file path (NUL-terminated; *len without the NUL); NULL when it does not exist and
 * !required. */
static char *read_bytes(const char *path, bool required, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (required) die("cannot open '%s'", path);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *p = xcalloc(1, cap);
    for (;;) {
        if (n + 1 >= cap) {
            if (cap > ((size_t)1 << 30)) die("'%s' is too large", path);
            cap *= 2;
            char *q = realloc(p, cap);
            if (!q) die("out of memory");
            p = q;
        }
        size_t k = fread(p + n, 1, cap - 1 - n, f);
        n += k;
        if (k == 0) break;
    }
    if (ferror(f)) die("cannot read '%s'", path);
    fclose(f);
    p[n] = 0;
    *len = n;
    return p;
}

/* Fills v from the tokenizer.json at path (and the tokenizer_config.json beside it, when there is
 * one), read by kiln's own tokenizer.json loader (kn_tokenizer_load_hf): tokens by id (ids nobody
 * names become "[PAD<id>]" of type unused), merges in order (written "a b" whether the file has
 * strings or pairs), added tokens of type control (special) or user-defined (the others, e.g.
 * Qwen3's "<think>"). BOS / EOS / padding come from tokenizer_config.json, else from the
 * post-processor's template; add_bos from the config's add_bos_token, else whether a BOS is added by
 * the template or named by the config; *pre is set from the Split regex when NULL. Anything else
 * than byte-level BPE is refused. */
static void load_tokenizer_json(vocab *v, const char *path, const char **pre, bool *add_bos) {
    size_t jl, cl = 0;
    char *json = read_bytes(path, true, &jl);
    char *cfg_path = xcalloc(1, strlen(path) + 32);
    strcpy(cfg_path, path);
    char *slash = strrchr(cfg_path, '/');
    strcpy(slash ? slash + 1 : cfg_path, "tokenizer_config.json");
    char *cfg = read_bytes(cfg_path, false, &cl);
    kn_tokenizer *t;
    if (kn_tokenizer_load_hf(json, jl, cfg, cl, &t) != KILN_OK) die("%s: %s", path, kn_error_msg());
    const kn_tj *tj = t->tj;
    bool byte_pre = false;
    for (int i = 0; i < tj->n_pre; i++) byte_pre |= tj->pre[i].type == KN_TJP_BYTELEVEL;
    if (tj->model != KN_TJ_BPE) die("%s: model.type is not BPE", path);
    if (!byte_pre && t->kind != KN_TOK_BPE)
        die("%s: no ByteLevel pre-tokenizer or decoder: not a byte-level BPE tokenizer", path);
    for (int b = 0; b < 256; b++) {
        char c[4];
        byte_char(b, c);
        if (t->byte_tok[b] < 0) die("%s: no token for byte 0x%02x ('%s')", path, b, c);
    }
    v->n = t->n_vocab;
    v->tok = xcalloc((size_t)v->n, sizeof(char *));
    v->type = xcalloc((size_t)v->n, sizeof(int32_t));
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const kn_tok_info *ti = &t->tok[id];
        const char *s = t->text + ti->text_off;
        if (ti->text_len && memchr(s, 0, ti->text_len)) die("%s: token %d holds a NUL byte", path, id);
        if (ti->attr & (KN_ATTR_CONTROL | KN_ATTR_USER_DEFINED | KN_ATTR_NORMAL | KN_ATTR_UNKNOWN | KN_ATTR_BYTE)) {
            char *text = xcalloc(1, ti->text_len + 1);
            memcpy(text, s, ti->text_len);
            v->tok[id] = text;
            v->type[id] = tj->added[id] == 2 ? 3 : tj->added[id] == 1 ? 4 : 1; /* control, user-defined, normal */
            if (v->type[id] == 1 && !is_byte_text(text))
                die("%s: token '%s' (id %d) is not byte-level text", path, text, id);
        } else {
            char buf[32];
            snprintf(buf, sizeof buf, "[PAD%d]", id);
            v->tok[id] = xstrdup(buf);
            v->type[id] = 5; /* unused */
        }
    }
    v->merges = xcalloc(t->n_merges ? t->n_merges : 1, sizeof(char *));
    for (uint32_t i = 0; i < t->n_merges; i++) {
        const char *m = t->merge_text + t->merge_off[i];
        uint32_t an = t->merge_a_len[i], n = t->merge_len[i];
        if (memchr(m, ' ', an) || memchr(m + an + 1, ' ', n - an - 1))
            die("%s: merge %u is not a pair of texts without spaces", path, i);
        char *joined = xcalloc(1, n + 1);
        memcpy(joined, m, n);
        v->merges[v->n_merges++] = joined;
    }
    if (!*pre) {
        for (size_t i = 0; tj->split_regex && i < KN_ARRAY_LEN(known_splits); i++)
            if (strcmp(tj->split_regex, known_splits[i].regex) == 0) *pre = known_splits[i].pre;
        if (!*pre) die("%s: the pre-tokenizer is not one kiln-gen recognizes: give --pre NAME", path);
    }
    v->bos = t->bos;
    v->eos = t->eos;
    v->eot = -1;
    v->pad = t->pad;
    *add_bos = tj->cfg_add_bos >= 0 ? tj->cfg_add_bos == 1 : (tj->n_pre_ids > 0 || tj->cfg_bos_named);
    if (v->eos < 0)
        fprintf(stderr,
                "kiln-gen: %s: no EOS token named (eos_token in tokenizer_config.json); kiln will look one up "
                "by its text\n",
                path);
    fprintf(stderr, "kiln-gen: %s: %d tokens, %d merges, pre '%s', bos %d (%s), eos %d%s\n", path, v->n, v->n_merges,
            *pre, v->bos, *add_bos ? "added" : "not added", v->eos, cfg ? "" : " (no tokenizer_config.json)");
    kn_tokenizer_free(t);
    free(cfg_path);
    free(json);
    free(cfg);
}

/* Pads v with "[PAD<id>]" tokens of type unused up to n tokens (a model's vocab_size). */
static void pad_vocab(vocab *v, int64_t n) {
    if (n <= v->n) return;
    char **tok = realloc(v->tok, (size_t)n * sizeof *tok);
    int32_t *type = realloc(v->type, (size_t)n * sizeof *type);
    if (!tok || !type) die("out of memory");
    v->tok = tok;
    v->type = type;
    for (; v->n < n; v->n++) {
        char buf[32];
        snprintf(buf, sizeof buf, "[PAD%d]", v->n);
        v->tok[v->n] = xstrdup(buf);
        v->type[v->n] = 5;
    }
}

/* ---- main -------------------------------------------------------------------------------------- */

/* --pooling: mean, cls, last or none (GGUF's pooling_type 1, 2, 3, 0). */
static int parse_pooling(const char *opt, const char *v) {
    static const char *const names[] = {"none", "mean", "cls", "last"};
    for (int i = 0; i < (int)KN_ARRAY_LEN(names); i++)
        if (strcmp(v, names[i]) == 0) return i;
    die("%s: '%s' is not mean, cls, last or none", opt, v);
    return 0;
}

static void check(kiln_status st) {
    if (st) die("%s", kn_error_msg()[0] ? kn_error_msg() : kiln_status_str(st));
}

/* Writes v's tokenizer.ggml.* metadata (and the chat template read from tmpl_path, when given,
 * whose text is returned for the caller to free). */
static char *write_tokenizer(kn_gguf_writer *w, const vocab *v, const char *pre, bool add_bos, bool add_eos,
                             const char *tmpl_path) {
    check(kn_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"));
    check(kn_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre));
    check(kn_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, (uint64_t)v->n));
    check(kn_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", KN_GGUF_INT32, v->type, (uint64_t)v->n));
    check(
        kn_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, (uint64_t)v->n_merges));
    if (v->bos >= 0) check(kn_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos));
    if (v->eos >= 0) check(kn_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos));
    if (v->eot >= 0) check(kn_gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)v->eot));
    if (v->pad >= 0) check(kn_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->pad));
    check(kn_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", add_bos));
    check(kn_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", add_eos));
    char *tmpl = NULL;
    if (tmpl_path) {
        tmpl = read_bytes(tmpl_path, true, &(size_t){0});
        check(kn_gguf_writer_set_str(w, "tokenizer.chat_template", tmpl));
    }
    return tmpl;
}

/* The tokenizer metadata of a WordPiece vocabulary (build_wordpiece_vocab): [CLS] and [SEP] are added
 * around every text, as BERT does. */
static void write_wordpiece(kn_gguf_writer *w, const vocab *v) {
    check(kn_gguf_writer_set_str(w, "tokenizer.ggml.model", "bert"));
    check(kn_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, (uint64_t)v->n));
    check(kn_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", KN_GGUF_INT32, v->type, (uint64_t)v->n));
    check(kn_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 0));
    check(kn_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 1));
    check(kn_gguf_writer_set_u32(w, "tokenizer.ggml.cls_token_id", 2));
    check(kn_gguf_writer_set_u32(w, "tokenizer.ggml.seperator_token_id", 3));
    check(kn_gguf_writer_set_u32(w, "tokenizer.ggml.mask_token_id", 4));
    check(kn_gguf_writer_set_u32(w, "tokenizer.ggml.token_type_count", 2));
    check(kn_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true));
    check(kn_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false));
}

/* --vocab-only (or --tokenizer-json without a model shape): a GGUF with the tokenizer and no
 * tensors, like llama.cpp's ggml-vocab-*.gguf files. general.architecture is --arch, else the
 * family the pre-tokenizer belongs to. The vocabulary is padded to --vocab when given. */
static int write_vocab_only(const gen_cfg *c, const char *out, const char *tok_json, const char *pre,
                            const char *tmpl_path, bool vocab_given) {
    vocab v;
    memset(&v, 0, sizeof v);
    bool add_bos = true;
    if (tok_json) {
        load_tokenizer_json(&v, tok_json, &pre, &add_bos);
    } else {
        if (!c->vocab) die("--vocab-only without --tokenizer-json needs --vocab or --preset");
        if (c->vocab < 256 + (int64_t)KN_ARRAY_LEN(specials))
            die("--vocab must be at least %d", 256 + (int)KN_ARRAY_LEN(specials));
        build_vocab(&v, c->vocab);
    }
    if (vocab_given) {
        if (c->vocab < v.n) die("--vocab %lld is below the tokenizer's %d tokens", (long long)c->vocab, v.n);
        pad_vocab(&v, c->vocab);
    }
    const char *arch = c->arch;
    if (!pre) pre = arch && strcmp(arch, "llama") != 0 ? "qwen2" : "llama-bpe";
    if (!arch) arch = strcmp(pre, "qwen2") == 0 ? "qwen2" : "llama";
    kn_gguf_writer *w;
    check(kn_gguf_writer_create(&w));
    check(kn_gguf_writer_set_str(w, "general.architecture", arch));
    check(kn_gguf_writer_set_str(w, "general.name", c->name ? c->name : arch));
    char *tmpl = write_tokenizer(w, &v, pre, add_bos, false, tmpl_path);
    check(kn_gguf_writer_write(w, out));
    fprintf(stderr, "kiln-gen: wrote %s: vocabulary only (%s, pre %s), %d tokens, %d merges\n", out, arch, pre, v.n,
            v.n_merges);
    kn_gguf_writer_free(w);
    free(tmpl);
    free_vocab(&v);
    return 0;
}

int main(int argc, char **argv) {
    gen_cfg c;
    memset(&c, 0, sizeof c);
    c.ctx = 2048;
    c.tied = -1;
    c.rope_base = 10000;
    c.type = KN_Q8_0;
    c.seed = 1;
    c.rope_factor = 32;
    c.rope_low = 1;
    c.rope_high = 4;
    c.rope_orig_ctx = 8192;
    const char *out = NULL, *tmpl_path = NULL, *preset_name = NULL, *pre = NULL, *tok_json = NULL;
    int threads = 0;
    bool vocab_only = false, vocab_given = false, fast = false;

    /* the preset first, so that every other option overrides it wherever it appears */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--preset") == 0 && i + 1 < argc) preset_name = argv[i + 1];
        if (strcmp(argv[i], "--list-presets") == 0) {
            for (size_t p = 0; p < KN_ARRAY_LEN(presets); p++) printf("%-18s %s\n", presets[p].name, presets[p].desc);
            return 0;
        }
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        }
    }
    if (preset_name) {
        size_t p = 0;
        while (p < KN_ARRAY_LEN(presets) && strcmp(presets[p].name, preset_name) != 0) p++;
        if (p == KN_ARRAY_LEN(presets)) die("unknown preset '%s' (see --list-presets)", preset_name);
        c = presets[p].cfg;
        c.type = KN_Q8_0;
        c.seed = 1;
        c.name = presets[p].name;
    }
    const int64_t BIG = (int64_t)1 << 31;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VAL() (v ? (i++, v) : (die("%s needs a value", a), v))
        if (strcmp(a, "--preset") == 0) VAL();
        else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) out = VAL();
        else if (strcmp(a, "--arch") == 0) c.arch = VAL();
        else if (strcmp(a, "--name") == 0) c.name = VAL();
        else if (strcmp(a, "--vocab") == 0) c.vocab = parse_int(a, VAL(), 1, BIG), vocab_given = true;
        else if (strcmp(a, "--dim") == 0) c.dim = parse_int(a, VAL(), 1, 1 << 20);
        else if (strcmp(a, "--layers") == 0) c.layers = parse_int(a, VAL(), 1, 4096);
        else if (strcmp(a, "--heads") == 0) c.heads = parse_int(a, VAL(), 1, 4096);
        else if (strcmp(a, "--kv-heads") == 0) c.kv_heads = parse_int(a, VAL(), 1, 4096);
        else if (strcmp(a, "--ffn") == 0) c.ffn = parse_int(a, VAL(), 1, 1 << 22);
        else if (strcmp(a, "--head-dim") == 0) c.head_dim = parse_int(a, VAL(), 2, 1 << 16);
        else if (strcmp(a, "--ctx") == 0) c.ctx = parse_int(a, VAL(), 1, BIG - 1);
        else if (strcmp(a, "--tied") == 0) c.tied = 1;
        else if (strcmp(a, "--untied") == 0) c.tied = 0;
        else if (strcmp(a, "--rope-base") == 0) c.rope_base = parse_double(a, VAL());
        else if (strcmp(a, "--norm-eps") == 0) c.norm_eps = parse_double(a, VAL());
        else if (strcmp(a, "--llama3-rope") == 0) c.llama3_rope = 1;
        else if (strcmp(a, "--no-llama3-rope") == 0) c.llama3_rope = 0;
        else if (strcmp(a, "--rope-factor") == 0) c.rope_factor = parse_double(a, VAL());
        else if (strcmp(a, "--rope-low") == 0) c.rope_low = parse_double(a, VAL());
        else if (strcmp(a, "--rope-high") == 0) c.rope_high = parse_double(a, VAL());
        else if (strcmp(a, "--rope-orig-ctx") == 0) c.rope_orig_ctx = parse_int(a, VAL(), 1, BIG);
        else if (strcmp(a, "--rope-scaling") == 0) c.rope_scaling = VAL();
        else if (strcmp(a, "--sliding-window") == 0) c.swa = parse_int(a, VAL(), 0, BIG - 1);
        else if (strcmp(a, "--attn-softcap") == 0) c.attn_softcap = parse_double(a, VAL());
        else if (strcmp(a, "--final-softcap") == 0) c.final_softcap = parse_double(a, VAL());
        else if (strcmp(a, "--scale") == 0) c.scale = parse_double(a, VAL());
        else if (strcmp(a, "--type") == 0) {
            const char *tv = VAL();
            const bool q4 = strcasecmp(tv, "Q4_K_M") == 0, q5 = strcasecmp(tv, "Q5_K_M") == 0;
            c.k_m = q4 || q5;
            c.type = q4 ? KN_Q4_K : q5 ? KN_Q5_K : parse_type(a, tv);
        } else if (strcmp(a, "--expert-type") == 0) c.expert_type = parse_type(a, VAL()), c.expert_typed = true;
        else if (strcmp(a, "--seed") == 0) c.seed = (uint64_t)parse_int(a, VAL(), 0, INT64_MAX);
        else if (strcmp(a, "--chat-template") == 0) tmpl_path = VAL();
        else if (strcmp(a, "--pre") == 0) pre = VAL();
        else if (strcmp(a, "--tokenizer-json") == 0) tok_json = VAL();
        else if (strcmp(a, "--vocab-only") == 0) vocab_only = true;
        else if (strcmp(a, "--threads") == 0) threads = (int)parse_int(a, VAL(), 1, 1024);
        else if (strcmp(a, "--experts") == 0) c.experts = parse_int(a, VAL(), 0, 1024);
        else if (strcmp(a, "--experts-used") == 0) c.experts_used = parse_int(a, VAL(), 1, 1024);
        else if (strcmp(a, "--expert-ffn") == 0) c.expert_ffn = parse_int(a, VAL(), 1, 1 << 22);
        else if (strcmp(a, "--fast") == 0) fast = true;
        else if (strcmp(a, "--pooling") == 0) c.pooling = parse_pooling(a, VAL());
        else if (strcmp(a, "--add-eos") == 0) c.add_eos = true;
        else {
            usage(stderr);
            die("unknown option '%s'", a);
        }
#undef VAL
    }
    if (!out) {
        usage(stderr);
        die("no output file (-o out.gguf)");
    }
    /* a tokenizer.json without a model shape, or --vocab-only: the tokenizer alone */
    if (tok_json && !c.arch) vocab_only = true;
    if (vocab_only) return write_vocab_only(&c, out, tok_json, pre, tmpl_path, vocab_given);
    if (!c.arch) die("no architecture: give --preset or --arch");
    const arch_info *ai = find_arch(c.arch);
    if (!ai)
        die("--arch: '%s' is not llama, qwen2, qwen3, gemma2, gemma3, phi3, smollm3, qwen3moe, gpt-oss, bert or "
            "nomic-bert",
            c.arch);
    if (ai->encoder && tok_json) die("--arch %s writes its own WordPiece vocabulary (no --tokenizer-json)", c.arch);
    if (ai->encoder && (c.experts || c.rope_scaling || c.llama3_rope))
        die("--arch %s has no experts and no RoPE scaling", c.arch);
    if (ai->encoder && c.kv_heads && c.kv_heads != c.heads) die("--arch %s needs --kv-heads = --heads", c.arch);
    if (ai->moe && !c.experts) die("--arch %s needs --experts N --experts-used K", c.arch);
    if (ai->oss && !c.swa) c.swa = 128;
    if (c.experts && !ai->moe && strcmp(c.arch, "llama") != 0 && strcmp(c.arch, "qwen3") != 0)
        die("--experts: %s has no experts", c.arch);
    if (!c.experts) c.experts_used = 0;
    if (c.experts && (!c.experts_used || c.experts_used > c.experts))
        die("--experts-used must be given and at most --experts (%lld)", (long long)c.experts);
    if (!c.expert_ffn) c.expert_ffn = c.ffn;
    if (c.rope_scaling && strcmp(c.rope_scaling, "none") == 0) c.rope_scaling = NULL;
    if (c.rope_scaling && strcmp(c.rope_scaling, "linear") != 0 && strcmp(c.rope_scaling, "yarn") != 0 &&
        strcmp(c.rope_scaling, "longrope") != 0)
        die("--rope-scaling: '%s' is not linear, yarn, longrope or none", c.rope_scaling);
    if (c.rope_scaling && strcmp(c.rope_scaling, "longrope") == 0 && !ai->fused)
        die("--rope-scaling longrope is written as phi3 files hold it (--arch phi3)");
    if (c.scale < 0) die("--scale must be positive");
    if ((!c.vocab && !tok_json) || !c.dim || !c.layers || !c.heads || !c.ffn)
        die("the shape is incomplete: --vocab, --dim, --layers, --heads and --ffn are needed");
    if (!c.kv_heads) c.kv_heads = c.heads;
    if (c.heads % c.kv_heads != 0)
        die("--heads %lld is not a multiple of --kv-heads %lld", (long long)c.heads, (long long)c.kv_heads);
    if (!c.head_dim) {
        if (c.dim % c.heads != 0)
            die("--dim %lld is not a multiple of --heads %lld (give --head-dim)", (long long)c.dim, (long long)c.heads);
        c.head_dim = c.dim / c.heads;
    }
    if (c.head_dim % 2 != 0) die("head_dim %lld must be even for rope", (long long)c.head_dim);
    if (!tok_json && !ai->encoder && c.vocab < 256 + (int64_t)KN_ARRAY_LEN(specials))
        die("--vocab must be at least %d (256 byte tokens + %d control tokens)", 256 + (int)KN_ARRAY_LEN(specials),
            (int)KN_ARRAY_LEN(specials));
    if (c.vocab > ((int64_t)1 << 24)) die("--vocab is too large");
    if (c.tied < 0) c.tied = 0;
    if (!c.norm_eps) c.norm_eps = ai->norm_eps;
    if (c.rope_scaling && strcmp(c.rope_scaling, "longrope") != 0 && !c.rope_factor) c.rope_factor = 8;
    if (c.rope_scaling && strcmp(c.rope_scaling, "linear") != 0 && !c.rope_orig_ctx) c.rope_orig_ctx = 4096;
    if (c.rope_scaling && strcmp(c.rope_scaling, "longrope") == 0 && c.rope_orig_ctx > c.ctx)
        die("--rope-orig-ctx %lld is larger than --ctx %lld", (long long)c.rope_orig_ctx, (long long)c.ctx);
    if (c.llama3_rope) {
        /* a preset without scaling leaves these at 0: use Llama 3.2's values */
        if (!c.rope_factor) c.rope_factor = 32;
        if (!c.rope_low) c.rope_low = 1;
        if (!c.rope_high) c.rope_high = 4;
        if (!c.rope_orig_ctx) c.rope_orig_ctx = 8192;
        if (c.rope_high <= c.rope_low) die("--rope-high must be greater than --rope-low");
    }
    if (!c.name) c.name = c.arch;
#ifdef _OPENMP
    if (threads > 0) omp_set_num_threads(threads);
#else
    (void)threads;
#endif

    double t0 = kn_now_ms();
    vocab v;
    memset(&v, 0, sizeof v);
    bool add_bos = true;
    if (tok_json) {
        load_tokenizer_json(&v, tok_json, &pre, &add_bos);
        if (!c.vocab) c.vocab = v.n;
        if (v.n > c.vocab)
            die("%s has %d tokens, more than the model's vocab of %lld (give --vocab %d or more)", tok_json, v.n,
                (long long)c.vocab, v.n);
        pad_vocab(&v, c.vocab);
    } else if (ai->encoder) {
        if (c.vocab < 200) die("--vocab must be at least 200 for a WordPiece vocabulary");
        build_wordpiece_vocab(&v, c.vocab);
    } else {
        build_vocab(&v, c.vocab);
    }
    gen_state g;
    memset(&g, 0, sizeof g);
    g.cfg = c;
    build_tensors(&g);

    kn_gguf_writer *w;
    check(kn_gguf_writer_create(&w));
    char key[128];
#define K(suffix) (snprintf(key, sizeof key, "%s.%s", c.arch, suffix), key)
    check(kn_gguf_writer_set_str(w, "general.architecture", c.arch));
    check(kn_gguf_writer_set_str(w, "general.name", c.name));
    check(kn_gguf_writer_set_u32(w, "general.file_type",
                                 !c.k_m              ? file_type_of(c.type)
                                 : c.type == KN_Q4_K ? 15 /* MOSTLY_Q4_K_M */
                                                     : 17 /* MOSTLY_Q5_K_M */));
    check(kn_gguf_writer_set_u32(w, "general.quantization_version", 2));
    check(kn_gguf_writer_set_u32(w, K("vocab_size"), (uint32_t)c.vocab));
    check(kn_gguf_writer_set_u32(w, K("context_length"), (uint32_t)c.ctx));
    check(kn_gguf_writer_set_u32(w, K("embedding_length"), (uint32_t)c.dim));
    check(kn_gguf_writer_set_u32(w, K("block_count"), (uint32_t)c.layers));
    check(kn_gguf_writer_set_u32(w, K("feed_forward_length"), (uint32_t)c.ffn));
    check(kn_gguf_writer_set_u32(w, K("attention.head_count"), (uint32_t)c.heads));
    check(kn_gguf_writer_set_u32(w, K("attention.head_count_kv"), (uint32_t)c.kv_heads));
    if (ai->encoder) {
        check(kn_gguf_writer_set_f32(w, K("attention.layer_norm_epsilon"), (float)c.norm_eps));
        check(kn_gguf_writer_set_bool(w, K("attention.causal"), false));
        if (ai->fused) check(kn_gguf_writer_set_f32(w, K("rope.freq_base"), (float)c.rope_base));
    } else {
        check(kn_gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), (float)c.norm_eps));
        check(kn_gguf_writer_set_f32(w, K("rope.freq_base"), (float)c.rope_base));
        check(kn_gguf_writer_set_u32(w, K("rope.dimension_count"), (uint32_t)c.head_dim));
    }
    if (c.pooling) check(kn_gguf_writer_set_u32(w, K("pooling_type"), (uint32_t)c.pooling));
    if (c.experts) {
        check(kn_gguf_writer_set_u32(w, K("expert_count"), (uint32_t)c.experts));
        check(kn_gguf_writer_set_u32(w, K("expert_used_count"), (uint32_t)c.experts_used));
        if (strcmp(c.arch, "llama") != 0)
            check(kn_gguf_writer_set_u32(w, K("expert_feed_forward_length"), (uint32_t)c.expert_ffn));
    }
    if (c.head_dim * c.heads != c.dim || ai->head_dim_keys) {
        check(kn_gguf_writer_set_u32(w, K("attention.key_length"), (uint32_t)c.head_dim));
        check(kn_gguf_writer_set_u32(w, K("attention.value_length"), (uint32_t)c.head_dim));
    }
    if (c.swa) check(kn_gguf_writer_set_u32(w, K("attention.sliding_window"), (uint32_t)c.swa));
    if (strcmp(c.arch, "gemma2") == 0) {
        check(kn_gguf_writer_set_f32(w, K("attn_logit_softcapping"), (float)(c.attn_softcap ? c.attn_softcap : 50)));
        check(kn_gguf_writer_set_f32(w, K("final_logit_softcapping"), (float)(c.final_softcap ? c.final_softcap : 30)));
    }
    if (c.rope_scaling && strcmp(c.rope_scaling, "longrope") == 0) {
        /* as llama.cpp's converter writes Phi-3: no scaling type, the factors as tensors, the magnitude
         * scale sqrt(1 + ln(ctx / orig) / ln(orig)) */
        const double ratio = (double)c.ctx / (double)c.rope_orig_ctx;
        const double attn = ratio > 1 ? sqrt(1 + log(ratio) / log((double)c.rope_orig_ctx)) : 1.0;
        check(kn_gguf_writer_set_u32(w, K("rope.scaling.original_context_length"), (uint32_t)c.rope_orig_ctx));
        check(kn_gguf_writer_set_f32(w, K("rope.scaling.attn_factor"), (float)attn));
    } else if (c.rope_scaling) {
        check(kn_gguf_writer_set_str(w, K("rope.scaling.type"), c.rope_scaling));
        check(kn_gguf_writer_set_f32(w, K("rope.scaling.factor"), (float)c.rope_factor));
        if (strcmp(c.rope_scaling, "yarn") == 0)
            check(kn_gguf_writer_set_u32(w, K("rope.scaling.original_context_length"), (uint32_t)c.rope_orig_ctx));
    }
#undef K
    /* the pre-tokenizer of the real models of each family (llama.cpp's names) */
    if (!pre) pre = ai->pre;
    char *tmpl = NULL;
    if (ai->encoder) write_wordpiece(w, &v);
    else tmpl = write_tokenizer(w, &v, pre, add_bos, c.add_eos, tmpl_path);

    uint64_t n_params = 0;
    for (int i = 0; i < g.n; i++) {
        gen_tensor *t = &g.t[i];
        n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2]);
        g.total_bytes += t->row_bytes * (uint64_t)(t->ne[1] * t->ne[2]);
        if (fast && t->type != KN_F32 && t->ne[1] * t->ne[2] > FAST_POOL) {
            uint8_t *pool = malloc(FAST_POOL * t->row_bytes);
            if (!pool) die("out of memory");
            check(fill_tensor(t, 0, FAST_POOL, pool));
            t->pool = pool;
        }
        check(kn_gguf_writer_add_tensor_fn(w, t->name, t->n_dims, t->ne, t->type, fill_tensor, t));
    }
    for (int k = 0; k < g.n_notes; k++)
        fprintf(stderr,
                "kiln-gen: note: %d matrices with row length %lld (not a multiple of the %s block of %d) "
                "are stored as %s\n",
                g.notes[k].count, (long long)g.notes[k].row_len, kn_dtype_name((int32_t)c.type),
                kn_type_traits_get((int32_t)c.type)->block_size, kn_dtype_name((int32_t)g.notes[k].to));
    check(kn_gguf_writer_write(w, out));
    double secs = (kn_now_ms() - t0) / 1000.0;
    fprintf(stderr,
            "kiln-gen: wrote %s: %s %lldd %lldL %lldH/%lldKV hd %lld ffn %lld vocab %lld (%d merges) %s, "
            "%d tensors, %.1fM params, %.1f MB of weights, %.1f s\n",
            out, c.arch, (long long)c.dim, (long long)c.layers, (long long)c.heads, (long long)c.kv_heads,
            (long long)c.head_dim, (long long)c.ffn, (long long)c.vocab, v.n_merges,
            !c.k_m              ? kn_dtype_name((int32_t)c.type)
            : c.type == KN_Q4_K ? "Q4_K_M"
                                : "Q5_K_M",
            g.n, (double)n_params / 1e6, (double)g.total_bytes / 1e6, secs);
    kn_gguf_writer_free(w);
    free(tmpl);
    free_vocab(&v);
    free(g.rope_freqs);
    free(g.rope_long);
    free(g.rope_short);
    for (int i = 0; i < g.n; i++) free(g.t[i].pool);
    free(g.t);
    return 0;
}
