/*
 * trtllm.h: shepherd's own small C ABI over the TensorRT-LLM executor.
 *
 * Why a C ABI of our own: TensorRT-LLM's C++ executor API cannot be bound from
 * Rust directly (templates, std::optional, exceptions), and its libraries are
 * only present on NVIDIA boxes. shepherd's Rust side talks to this header only;
 * two libraries implement it:
 *   - ffi/trtllm_shim.cpp over tensorrt_llm::executor (cargo feature `tensorrt`,
 *     built where TensorRT-LLM is installed, TRTLLM_ROOT set);
 *   - tests/trtllm_testlib/trtllm_testlib.c, a scripted stand-in used by the
 *     tests (cargo feature `tensorrt-testlib`).
 *
 * Model: one executor per engine directory. A request is a prompt of token ids;
 * its output arrives as a stream of responses, each carrying the tokens that are
 * new since the previous response, the last one marked final.
 *
 * Threads: every function may be called from any thread, but shepherd calls all
 * of them for one executor from one thread (the backend's generation thread).
 * The last-error text is per thread.
 *
 * Errors: no C++ exception ever crosses this boundary. Every function that can
 * fail returns an shp_trt_status; on SHP_TRT_ERROR (and SHP_TRT_INVALID) the
 * reason is available from shp_trt_last_error() on the same thread.
 *
 * OWNERSHIP RULES
 *   1. shp_trt_create() gives the caller one executor handle. The caller owns it
 *      and must release it with shp_trt_destroy() exactly once; after that the
 *      pointer is dangling. shp_trt_destroy(NULL) does nothing.
 *   2. All pointers passed IN (engine_dir, options, token arrays, request
 *      options) are borrowed for the duration of the call only; the library
 *      copies what it keeps.
 *   3. shp_trt_response.tokens points into memory owned by the executor. It is
 *      valid until the next shp_trt_await() or shp_trt_destroy() on that same
 *      executor, whichever comes first. The caller copies what it keeps and
 *      never frees it.
 *   4. shp_trt_last_error() returns a NUL-terminated string owned by the
 *      library (thread-local storage). It is valid until the next call into
 *      this library on the same thread. Never freed by the caller. It is ""
 *      when there is no error to report, never NULL.
 *   5. Output structs (shp_trt_response, shp_trt_iter_stats) are written
 *      by the library into caller-owned memory; they hold no owned pointers
 *      except as described in rule 3.
 */

#ifndef SHEPHERD_TRTLLM_H
#define SHEPHERD_TRTLLM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct layout or a function signature changes. */
#define SHP_TRT_ABI_VERSION 1

/* Opaque executor handle. */
typedef struct shp_trt_executor shp_trt_executor;

typedef enum shp_trt_status {
    SHP_TRT_OK = 0,
    /* The operation failed; see shp_trt_last_error(). For shp_trt_await this
     * means the request ended with an error: it is finished. */
    SHP_TRT_ERROR = 1,
    /* shp_trt_await: no response arrived within the timeout (not an error). */
    SHP_TRT_TIMEOUT = 2,
    /* An argument was invalid (NULL handle, unknown request id, ...). */
    SHP_TRT_INVALID = 3,
    /* shp_trt_iteration_stats: no iteration has run since the last call. */
    SHP_TRT_EMPTY = 4
} shp_trt_status;

typedef enum shp_trt_finish {
    SHP_TRT_FINISH_NONE = 0,      /* not finished (a streamed, non-final response) */
    SHP_TRT_FINISH_END_ID = 1,    /* the end (eos) token was generated */
    SHP_TRT_FINISH_STOP_WORD = 2, /* a stop word given to the executor matched */
    SHP_TRT_FINISH_LENGTH = 3,    /* max_tokens reached */
    SHP_TRT_FINISH_CANCELLED = 4, /* shp_trt_cancel() was called */
    SHP_TRT_FINISH_OTHER = 5      /* any other reason the executor reports */
} shp_trt_finish;

/* Executor options. Zero means "the library's default" for every field. */
typedef struct shp_trt_options {
    /* Fraction of free GPU memory for the KV cache, (0, 1]; 0: default (0.9). */
    float kv_cache_free_gpu_memory_fraction;
    /* Upper bound on tokens held in the KV cache; 0: no bound beyond memory. */
    int32_t kv_cache_max_tokens;
    /* 1: disable KV cache block reuse (on by default: a conversation's prefix
     * is reused between turns). */
    int32_t disable_block_reuse;
    /* Iterations of statistics kept for shp_trt_iteration_stats; 0: 1000. */
    int32_t iteration_stats_max;
} shp_trt_options;

/* Per-request settings. Negative (or zero where noted) means "default". */
typedef struct shp_trt_request_options {
    int32_t max_tokens;   /* tokens to generate at most; must be > 0 */
    float temperature;    /* < 0: default */
    float top_p;          /* <= 0: default */
    int32_t top_k;        /* <= 0: default */
    int32_t has_seed;     /* 1: use seed */
    uint64_t seed;
    int32_t end_id;       /* the eos token id; < 0: none */
    int32_t pad_id;       /* < 0: same as end_id */
    int32_t streaming;    /* 1: a response per decoding step; 0: one final response */
    /* Further single-token stop words (end-of-turn tokens besides end_id);
     * borrowed for the call (rule 2). NULL when n_stop_token_ids is 0. */
    const int32_t *stop_token_ids;
    size_t n_stop_token_ids;
} shp_trt_request_options;

/* One response of a request. */
typedef struct shp_trt_response {
    uint64_t request_id;
    /* Tokens generated since the previous response (rule 3 above). */
    const int32_t *tokens;
    size_t n_tokens;
    /* 1 on the last response of the request. */
    int32_t is_final;
    /* An shp_trt_finish value; SHP_TRT_FINISH_NONE unless is_final. */
    int32_t finish_reason;
} shp_trt_response;

/* The latest iteration's statistics. -1 where the executor reported none. */
typedef struct shp_trt_iter_stats {
    uint64_t iteration;
    double iteration_latency_ms;
    int32_t active_requests;
    int32_t queued_requests;
    int32_t kv_max_blocks;
    int32_t kv_used_blocks;
    int32_t kv_tokens_per_block;
    int32_t kv_reused_blocks;
    uint64_t gpu_memory_bytes;
} shp_trt_iter_stats;

/* SHP_TRT_ABI_VERSION of the library actually linked. */
int32_t shp_trt_abi_version(void);

/* Loads the engine in `engine_dir` (trtllm-build output) as a decoder-only
 * model and starts the executor. `options` may be NULL. On success stores the
 * new handle in *out (rule 1). On failure *out is NULL. */
shp_trt_status shp_trt_create(const char *engine_dir, const shp_trt_options *options,
                              shp_trt_executor **out);

/* Enqueues a request of `n_tokens` prompt tokens. Stores its id in *request_id. */
shp_trt_status shp_trt_enqueue(shp_trt_executor *executor, const int32_t *tokens,
                               size_t n_tokens, const shp_trt_request_options *options,
                               uint64_t *request_id);

/* Waits at most `timeout_ms` milliseconds (0: do not wait) for the next
 * response of `request_id` and writes it to *out. SHP_TRT_TIMEOUT when none
 * arrived; SHP_TRT_ERROR when the request failed (it is then finished).
 * Calling it again after the final response is SHP_TRT_INVALID. */
shp_trt_status shp_trt_await(shp_trt_executor *executor, uint64_t request_id,
                             uint32_t timeout_ms, shp_trt_response *out);

/* Asks the executor to stop `request_id`. Responses keep arriving until a
 * final one (finish reason SHP_TRT_FINISH_CANCELLED, or whatever had already
 * finished it). Cancelling a finished or unknown request is not an error. */
shp_trt_status shp_trt_cancel(shp_trt_executor *executor, uint64_t request_id);

/* The most recent iteration's statistics; SHP_TRT_EMPTY when none ran since
 * the last call. */
shp_trt_status shp_trt_iteration_stats(shp_trt_executor *executor,
                                       shp_trt_iter_stats *out);

/* Shuts the executor down (cancelling what still runs) and frees it. */
void shp_trt_destroy(shp_trt_executor *executor);

/* The calling thread's last error text (rule 4). */
const char *shp_trt_last_error(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHEPHERD_TRTLLM_H */
