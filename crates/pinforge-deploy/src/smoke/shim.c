// pinforge smoke shim: a minimal, stable C ABI over the variant's own llama.h.
//
// Compiled by pinforge (through the `cc` crate) against the include/ folder of the build under
// test and linked to its libllama, so that version-specific structs (llama_batch,
// llama_context_params, ...) never cross into Rust. The Rust driver only sees the functions
// below, whose signatures use plain C types. Bump PF_ABI_VERSION when they change.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

// The device list needs ggml's backend API; a tree whose headers lack it (a minimal stub, an
// old ggml) still gets a shim, which then reports no devices.
#if defined(__has_include)
#if __has_include("ggml-backend.h")
#include "ggml-backend.h"
#define PF_HAVE_DEVICES 1
#endif
#endif

#define PF_ABI_VERSION 4

struct pf {
    struct llama_model *model;
    struct llama_context *ctx;
    const struct llama_vocab *vocab;
    int n_vocab;
};

static void pf_log_errors_only(enum ggml_log_level level, const char *text, void *user_data) {
    (void) user_data;
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) {
        fputs(text, stderr);
    }
}

int pf_abi_version(void) { return PF_ABI_VERSION; }

const char *pf_system_info(void) { return llama_print_system_info(); }

// The backend devices the engine registered, one per line: "kind\tname\tdescription", kind
// being cpu, gpu or accel (any other type, so that older and newer ggml headers both compile). A CUDA build on a machine without a driver registers no CUDA
// device (its backend finds none), which is how the smoke tells where the decode ran.
const char *pf_devices(void) {
    static char buf[4096];
    size_t used = 0;
    buf[0] = '\0';
#ifdef PF_HAVE_DEVICES
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        const char *kind = "accel";
        switch (ggml_backend_dev_type(dev)) {
            case GGML_BACKEND_DEVICE_TYPE_CPU: kind = "cpu"; break;
            case GGML_BACKEND_DEVICE_TYPE_GPU: kind = "gpu"; break;
            default: break;
        }
        int n = snprintf(buf + used, sizeof buf - used, "%s\t%s\t%s\n", kind,
                         ggml_backend_dev_name(dev), ggml_backend_dev_description(dev));
        if (n < 0 || (size_t) n >= sizeof buf - used) {
            buf[used] = '\0'; // drop the cut line: a partial device must not be read as one
            break;
        }
        used += (size_t) n;
    }
#endif
    return buf;
}

void *pf_load(const char *path, int n_gpu_layers, int n_ctx, int n_threads, int verbose,
              char *err, size_t err_len) {
    if (!verbose) {
        llama_log_set(pf_log_errors_only, NULL);
    }
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = n_gpu_layers;
    struct llama_model *model = llama_model_load_from_file(path, mp);
    if (model == NULL) {
        snprintf(err, err_len, "llama_model_load_from_file failed for %s", path);
        return NULL;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) n_ctx;
    cp.n_batch = (uint32_t) n_ctx;
    cp.n_ubatch = (uint32_t) n_ctx;
    cp.n_seq_max = 1;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (ctx == NULL) {
        snprintf(err, err_len, "llama_init_from_model failed");
        llama_model_free(model);
        return NULL;
    }
    struct pf *h = calloc(1, sizeof(struct pf));
    if (h == NULL) {
        snprintf(err, err_len, "out of memory");
        llama_free(ctx);
        llama_model_free(model);
        return NULL;
    }
    h->model = model;
    h->ctx = ctx;
    h->vocab = llama_model_get_vocab(model);
    h->n_vocab = llama_vocab_n_tokens(h->vocab);
    return h;
}

int pf_n_vocab(void *handle) { return ((struct pf *) handle)->n_vocab; }

// Tokenize with the model's own tokenizer (BOS added). Returns the count, or a negative value.
int pf_tokenize(void *handle, const char *text, int32_t *out, int max) {
    struct pf *h = handle;
    return llama_tokenize(h->vocab, text, (int32_t) strlen(text), out, max, true, false);
}

// Decode `n` tokens of sequence 0 at positions pos0..pos0+n-1; logits for the last one.
int pf_decode(void *handle, const int32_t *tokens, int n, int pos0) {
    struct pf *h = handle;
    struct llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = tokens[i];
        batch.pos[i] = pos0 + i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = (i == n - 1);
    }
    batch.n_tokens = n;
    int rc = llama_decode(h->ctx, batch);
    llama_batch_free(batch);
    return rc;
}

// Copy the last token's logits. Returns the number copied, or -1.
int pf_logits(void *handle, float *out, int max) {
    struct pf *h = handle;
    float *l = llama_get_logits_ith(h->ctx, -1);
    if (l == NULL) {
        return -1;
    }
    int n = h->n_vocab < max ? h->n_vocab : max;
    memcpy(out, l, (size_t) n * sizeof(float));
    return n;
}

size_t pf_state_size(void *handle) {
    return llama_state_seq_get_size(((struct pf *) handle)->ctx, 0);
}

size_t pf_state_get(void *handle, uint8_t *buf, size_t cap) {
    return llama_state_seq_get_data(((struct pf *) handle)->ctx, buf, cap, 0);
}

// Restore sequence 0; returns the bytes read (0 on failure), as llama_state_seq_set_data.
size_t pf_state_set(void *handle, const uint8_t *buf, size_t len) {
    return llama_state_seq_set_data(((struct pf *) handle)->ctx, buf, len, 0);
}

void pf_clear(void *handle) {
    llama_memory_clear(llama_get_memory(((struct pf *) handle)->ctx), true);
}

// Drop sequence 0's cells from position p0 on (the prompt cache keeps the common prefix of
// the restored state and re-decodes the rest, as llama.cpp's server does). 1 on success.
int pf_seq_rm(void *handle, int p0) {
    struct pf *h = handle;
    return llama_memory_seq_rm(llama_get_memory(h->ctx), 0, p0, -1) ? 1 : 0;
}

// 1 when the memory of this context can shift positions (K-shift), as the server asks
// before a context shift; M-RoPE models must answer 0 (llama.cpp PR #19928).
int pf_can_shift(void *handle) {
    return llama_memory_can_shift(llama_get_memory(((struct pf *) handle)->ctx)) ? 1 : 0;
}

// The context shift llama.cpp's server does when a slot's context is full: drop `n_discard`
// cells of sequence 0 after the first `n_keep` and move the cells after them back, for the
// `n_past` positions decoded so far. Called only when pf_can_shift said 1 (an engine that said
// 1 wrongly asserts here). 1 on success.
int pf_shift(void *handle, int n_keep, int n_discard, int n_past) {
    llama_memory_t mem = llama_get_memory(((struct pf *) handle)->ctx);
    if (!llama_memory_seq_rm(mem, 0, n_keep, n_keep + n_discard)) {
        return 0;
    }
    llama_memory_seq_add(mem, 0, n_keep + n_discard, n_past, -n_discard);
    return 1;
}

int pf_n_embd(void *handle) { return llama_model_n_embd(((struct pf *) handle)->model); }

// Decode `n` embedding rows (`n_embd` floats each) of sequence 0, the way a multimodal caller
// feeds an image (issue ggml-org/llama.cpp#28902). `pos_mode` 0 leaves `pos` NULL, which
// llama.h documents as "tracked automatically"; 1 fills the `pos` array llama_batch_init
// allocates (n entries, the documented size) with pos0..pos0+n-1. Logits for the last row.
int pf_decode_embd(void *handle, const float *embd, int n, int pos_mode, int pos0) {
    struct pf *h = handle;
    int n_embd = llama_model_n_embd(h->model);
    struct llama_batch batch = llama_batch_init(n, n_embd, 1);
    memcpy(batch.embd, embd, (size_t) n * (size_t) n_embd * sizeof(float));
    for (int i = 0; i < n; i++) {
        batch.pos[i] = pos0 + i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = (i == n - 1);
    }
    batch.n_tokens = n;
    llama_pos *own = batch.pos;
    if (pos_mode == 0) {
        batch.pos = NULL;
    }
    int rc = llama_decode(h->ctx, batch);
    batch.pos = own; // llama_batch_free frees what llama_batch_init allocated
    llama_batch_free(batch);
    return rc;
}

// The engine's own grammar sampler over this model's vocabulary (`root` is the start rule).
// NULL when llama.cpp refuses the grammar (it logs why on stderr).
void *pf_grammar_init(void *handle, const char *gbnf) {
    struct pf *h = handle;
    return llama_sampler_init_grammar(h->vocab, gbnf, "root");
}

// Greedy pick under the grammar from the last decode's logits: the grammar sets every token
// it does not allow to -inf (EOG only once the grammar accepts), then the best one left wins.
// Returns the token, or -1 when the grammar allows none.
int pf_grammar_pick(void *handle, void *smpl) {
    struct pf *h = handle;
    float *l = llama_get_logits_ith(h->ctx, -1);
    if (l == NULL || smpl == NULL) {
        return -1;
    }
    llama_token_data *cand = malloc((size_t) h->n_vocab * sizeof(llama_token_data));
    if (cand == NULL) {
        return -1;
    }
    for (int i = 0; i < h->n_vocab; i++) {
        cand[i].id = i;
        cand[i].logit = l[i];
        cand[i].p = 0.0f;
    }
    llama_token_data_array arr = {cand, (size_t) h->n_vocab, -1, false};
    llama_sampler_apply((struct llama_sampler *) smpl, &arr);
    int best = -1;
    float best_logit = 0.0f;
    for (size_t i = 0; i < arr.size; i++) {
        float x = arr.data[i].logit;
        if (x == -INFINITY || x != x) {
            continue;
        }
        if (best < 0 || x > best_logit) {
            best = arr.data[i].id;
            best_logit = x;
        }
    }
    free(cand);
    return best;
}

void pf_grammar_accept(void *smpl, int token) {
    llama_sampler_accept((struct llama_sampler *) smpl, token);
}

void pf_grammar_free(void *smpl) {
    if (smpl != NULL) {
        llama_sampler_free((struct llama_sampler *) smpl);
    }
}

// 1 when the token ends generation (EOS/EOT of this vocabulary).
int pf_is_eog(void *handle, int token) {
    return llama_vocab_is_eog(((struct pf *) handle)->vocab, token) ? 1 : 0;
}

// The token's text (no special rendering); returns the byte count, negative when `cap` is short.
int pf_token_piece(void *handle, int token, char *buf, int cap) {
    return llama_token_to_piece(((struct pf *) handle)->vocab, token, buf, cap, 0, false);
}

void pf_free(void *handle) {
    struct pf *h = handle;
    if (h == NULL) {
        return;
    }
    llama_free(h->ctx);
    llama_model_free(h->model);
    free(h);
}

// Test-only: die the way a broken engine dies, so the parent's crash reporting is exercised.
// A real invalid access, not raise(SIGSEGV): the Rust runtime's SIGSEGV handler returns from a
// raised signal (it only resets the handler), but a faulting store re-executes and kills. The
// address is a small constant, not NULL, so that no compiler turns the store into a trap.
void pf_crash_for_test(void) {
    volatile int *p = (volatile int *) (uintptr_t) 16;
    *p = 42;
}
