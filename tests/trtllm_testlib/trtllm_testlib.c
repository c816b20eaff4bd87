/*
 * trtllm_testlib.c: a scripted implementation of ffi/trtllm.h for tests.
 *
 * shepherd's TensorRT-LLM backend is tested everywhere against this library
 * (cargo feature `tensorrt-testlib`); the real executor is reached through
 * ffi/trtllm_shim.cpp instead. It behaves like the executor as seen through the
 * ABI: requests get ids, responses stream in chunks, max_tokens cuts a reply
 * with finish reason LENGTH, cancel ends a request with CANCELLED, responses
 * can be late (await times out) and requests can fail.
 *
 * What it does is read from `<engine_dir>/testlib.script` when the executor is
 * created, so tests running in parallel each drive their own executor. One
 * instruction per line; `#` starts a comment:
 *
 *   create_error MESSAGE     shp_trt_create fails with MESSAGE
 *   request                  starts the script of the next enqueued request
 *   enqueue_error MESSAGE    this request's enqueue fails with MESSAGE
 *   chunk T1 T2 ...          a streamed response with these token ids
 *   delay_ms N               the next response is ready N ms later
 *   wait_cancel              no response until shp_trt_cancel is called
 *   error MESSAGE            the request fails with MESSAGE (final)
 *   final REASON T1 ...      the final response; REASON is end_id,
 *                            stop_word, length, cancelled or other
 *
 * A request whose script ends without a final line gets a final END_ID
 * response with no tokens. Everything the library is asked to do is appended
 * to `<engine_dir>/testlib.log`, one line per call, so tests can check what
 * the backend sent (prompt tokens, max_tokens, end id, cancels).
 */

#define _POSIX_C_SOURCE 200809L

#include "../../ffi/trtllm.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_LINES 512
#define MAX_LINE 1024
#define MAX_REQUESTS 64
#define MAX_CHUNK 256
#define TOKENS_PER_BLOCK 16

static _Thread_local char last_error[MAX_LINE] = "";

typedef struct request {
    uint64_t id;
    int line;          /* next script line of this request */
    int end_line;      /* first line after this request's section */
    int max_tokens;
    int sent_tokens;
    int prompt_tokens;
    int cancelled;
    int finished;
    int waiting_cancel;
    double ready_at;   /* seconds (CLOCK_MONOTONIC) when the next response is ready */
} request;

struct shp_trt_executor {
    char log_path[MAX_LINE];
    char *lines[MAX_LINES];
    int n_lines;
    int next_section;  /* script line where the next request's section starts */
    request requests[MAX_REQUESTS];
    int n_requests;
    uint64_t next_id;
    int32_t tokens[MAX_CHUNK];
    uint64_t iterations;
    uint64_t reported_iterations;
    int kv_tokens;
};

static void set_error(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, args);
    va_end(args);
}

static double now_secs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_secs(double secs) {
    if (secs <= 0) {
        return;
    }
    struct timespec ts;
    ts.tv_sec = (time_t)secs;
    ts.tv_nsec = (long)((secs - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static void log_line(shp_trt_executor *ex, const char *fmt, ...) {
    FILE *f = fopen(ex->log_path, "a");
    if (!f) {
        return;
    }
    va_list args;
    va_start(args, fmt);
    vfprintf(f, fmt, args);
    va_end(args);
    fputc('\n', f);
    fclose(f);
}

static int starts_with(const char *line, const char *word) {
    size_t n = strlen(word);
    return strncmp(line, word, n) == 0 && (line[n] == '\0' || line[n] == ' ');
}

/* The text after the instruction word, "" when there is none. */
static const char *argument(const char *line) {
    const char *space = strchr(line, ' ');
    return space ? space + 1 : "";
}

static int read_script(shp_trt_executor *ex, const char *engine_dir) {
    char path[MAX_LINE];
    snprintf(path, sizeof path, "%s/testlib.script", engine_dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        set_error("testlib: cannot open %s", path);
        return 0;
    }
    char buf[MAX_LINE];
    while (fgets(buf, sizeof buf, f) && ex->n_lines < MAX_LINES) {
        buf[strcspn(buf, "\r\n")] = '\0';
        char *text = buf;
        while (*text == ' ' || *text == '\t') {
            text++;
        }
        if (*text == '\0' || *text == '#') {
            continue;
        }
        ex->lines[ex->n_lines++] = strdup(text);
    }
    fclose(f);
    return 1;
}

static void free_executor(shp_trt_executor *ex) {
    for (int i = 0; i < ex->n_lines; i++) {
        free(ex->lines[i]);
    }
    free(ex);
}

int32_t shp_trt_abi_version(void) { return SHP_TRT_ABI_VERSION; }

shp_trt_status shp_trt_create(const char *engine_dir, const shp_trt_options *options,
                              shp_trt_executor **out) {
    last_error[0] = '\0';
    if (!out) {
        set_error("testlib: out is NULL");
        return SHP_TRT_INVALID;
    }
    *out = NULL;
    if (!engine_dir) {
        set_error("testlib: engine_dir is NULL");
        return SHP_TRT_INVALID;
    }
    shp_trt_executor *ex = calloc(1, sizeof *ex);
    if (!ex) {
        set_error("testlib: out of memory");
        return SHP_TRT_ERROR;
    }
    snprintf(ex->log_path, sizeof ex->log_path, "%s/testlib.log", engine_dir);
    ex->next_id = 1;
    if (!read_script(ex, engine_dir)) {
        free_executor(ex);
        return SHP_TRT_ERROR;
    }
    log_line(ex, "create block_reuse=%d", options ? !options->disable_block_reuse : 1);
    for (int i = 0; i < ex->n_lines && !starts_with(ex->lines[i], "request"); i++) {
        if (starts_with(ex->lines[i], "create_error")) {
            set_error("%s", argument(ex->lines[i]));
            free_executor(ex);
            return SHP_TRT_ERROR;
        }
    }
    *out = ex;
    return SHP_TRT_OK;
}

/* Finds the script section for the next request: [start, end). */
static int next_section(shp_trt_executor *ex, int *start, int *end) {
    int i = ex->next_section;
    while (i < ex->n_lines && !starts_with(ex->lines[i], "request")) {
        i++;
    }
    if (i >= ex->n_lines) {
        return 0;
    }
    *start = i + 1;
    int j = *start;
    while (j < ex->n_lines && !starts_with(ex->lines[j], "request")) {
        j++;
    }
    *end = j;
    ex->next_section = j;
    return 1;
}

static void log_enqueue(shp_trt_executor *ex, uint64_t id, const int32_t *tokens, size_t n,
                        const shp_trt_request_options *o) {
    FILE *f = fopen(ex->log_path, "a");
    if (!f) {
        return;
    }
    fprintf(f, "enqueue id=%llu n_tokens=%zu max_tokens=%d end_id=%d streaming=%d temperature=%g tokens=",
            (unsigned long long)id, n, o->max_tokens, o->end_id, o->streaming, (double)o->temperature);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, i ? ",%d" : "%d", tokens[i]);
    }
    fprintf(f, " stop_token_ids=");
    for (size_t i = 0; i < o->n_stop_token_ids; i++) {
        fprintf(f, i ? ",%d" : "%d", o->stop_token_ids[i]);
    }
    fputc('\n', f);
    fclose(f);
}

shp_trt_status shp_trt_enqueue(shp_trt_executor *ex, const int32_t *tokens, size_t n_tokens,
                               const shp_trt_request_options *options, uint64_t *request_id) {
    last_error[0] = '\0';
    if (!ex || !options || !request_id || (!tokens && n_tokens > 0)) {
        set_error("testlib: NULL argument to enqueue");
        return SHP_TRT_INVALID;
    }
    if (n_tokens == 0 || options->max_tokens <= 0) {
        set_error("testlib: empty prompt or max_tokens <= 0");
        return SHP_TRT_INVALID;
    }
    if (ex->n_requests >= MAX_REQUESTS) {
        set_error("testlib: too many requests");
        return SHP_TRT_ERROR;
    }
    int start, end;
    if (!next_section(ex, &start, &end)) {
        set_error("testlib: the script has no `request` section left");
        return SHP_TRT_ERROR;
    }
    uint64_t id = ex->next_id++;
    log_enqueue(ex, id, tokens, n_tokens, options);
    if (start < end && starts_with(ex->lines[start], "enqueue_error")) {
        set_error("%s", argument(ex->lines[start]));
        return SHP_TRT_ERROR;
    }
    request *r = &ex->requests[ex->n_requests++];
    memset(r, 0, sizeof *r);
    r->id = id;
    r->line = start;
    r->end_line = end;
    r->max_tokens = options->max_tokens;
    r->prompt_tokens = (int)n_tokens;
    r->ready_at = now_secs();
    *request_id = id;
    return SHP_TRT_OK;
}

static request *find_request(shp_trt_executor *ex, uint64_t id) {
    for (int i = 0; i < ex->n_requests; i++) {
        if (ex->requests[i].id == id) {
            return &ex->requests[i];
        }
    }
    return NULL;
}

static int parse_finish(const char *word) {
    static const char *names[] = {"none", "end_id", "stop_word", "length", "cancelled", "other"};
    for (int i = 0; i < 6; i++) {
        if (strcmp(word, names[i]) == 0) {
            return i;
        }
    }
    return SHP_TRT_FINISH_OTHER;
}

/* Parses token ids from `text` into ex->tokens, cut at the request's max_tokens. */
static size_t parse_tokens(shp_trt_executor *ex, request *r, const char *text, int *cut) {
    size_t n = 0;
    char *endp;
    *cut = 0;
    for (;;) {
        long value = strtol(text, &endp, 10);
        if (endp == text) {
            break;
        }
        text = endp;
        if (r->sent_tokens >= r->max_tokens) {
            *cut = 1;
            break;
        }
        if (n < MAX_CHUNK) {
            ex->tokens[n++] = (int32_t)value;
            r->sent_tokens++;
        }
    }
    if (r->sent_tokens >= r->max_tokens) {
        *cut = 1;
    }
    return n;
}

static shp_trt_status finish(request *r, shp_trt_response *out, int reason) {
    r->finished = 1;
    out->is_final = 1;
    out->finish_reason = reason;
    return SHP_TRT_OK;
}

/* Runs the request's script up to its next response. */
static shp_trt_status step(shp_trt_executor *ex, request *r, shp_trt_response *out) {
    while (r->line < r->end_line) {
        const char *line = ex->lines[r->line++];
        if (starts_with(line, "chunk") || starts_with(line, "final")) {
            int is_final = starts_with(line, "final");
            const char *rest = argument(line);
            int reason = SHP_TRT_FINISH_END_ID;
            if (is_final) {
                char word[32] = "";
                sscanf(rest, "%31s", word);
                reason = parse_finish(word);
                rest += strlen(word);
            }
            int cut;
            out->n_tokens = parse_tokens(ex, r, rest, &cut);
            out->tokens = ex->tokens;
            ex->kv_tokens = r->prompt_tokens + r->sent_tokens;
            ex->iterations++;
            if (cut) {
                return finish(r, out, SHP_TRT_FINISH_LENGTH);
            }
            return is_final ? finish(r, out, reason) : SHP_TRT_OK;
        }
        if (starts_with(line, "delay_ms")) {
            r->ready_at = now_secs() + atof(argument(line)) / 1000.0;
            return SHP_TRT_TIMEOUT;
        }
        if (starts_with(line, "wait_cancel")) {
            r->waiting_cancel = 1;
            return SHP_TRT_TIMEOUT;
        }
        if (starts_with(line, "error")) {
            r->finished = 1;
            set_error("%s", argument(line));
            return SHP_TRT_ERROR;
        }
    }
    return finish(r, out, SHP_TRT_FINISH_END_ID);
}

shp_trt_status shp_trt_await(shp_trt_executor *ex, uint64_t request_id, uint32_t timeout_ms,
                             shp_trt_response *out) {
    last_error[0] = '\0';
    if (!ex || !out) {
        set_error("testlib: NULL argument to await");
        return SHP_TRT_INVALID;
    }
    request *r = find_request(ex, request_id);
    if (!r || r->finished) {
        set_error("testlib: request %llu is unknown or finished", (unsigned long long)request_id);
        return SHP_TRT_INVALID;
    }
    memset(out, 0, sizeof *out);
    out->request_id = request_id;
    out->tokens = ex->tokens;
    double deadline = now_secs() + timeout_ms / 1000.0;
    for (;;) {
        if (r->cancelled) {
            ex->iterations++;
            return finish(r, out, SHP_TRT_FINISH_CANCELLED);
        }
        double now = now_secs();
        if (r->waiting_cancel || r->ready_at > now) {
            double until = r->waiting_cancel ? deadline : (r->ready_at < deadline ? r->ready_at : deadline);
            if (until <= now) {
                return SHP_TRT_TIMEOUT;
            }
            sleep_secs(until - now);
            if (r->waiting_cancel || now_secs() < r->ready_at) {
                return r->cancelled ? finish(r, out, SHP_TRT_FINISH_CANCELLED) : SHP_TRT_TIMEOUT;
            }
        }
        shp_trt_status status = step(ex, r, out);
        if (status != SHP_TRT_TIMEOUT) {
            return status;
        }
    }
}

shp_trt_status shp_trt_cancel(shp_trt_executor *ex, uint64_t request_id) {
    last_error[0] = '\0';
    if (!ex) {
        set_error("testlib: NULL executor");
        return SHP_TRT_INVALID;
    }
    log_line(ex, "cancel id=%llu", (unsigned long long)request_id);
    request *r = find_request(ex, request_id);
    if (r && !r->finished) {
        r->cancelled = 1;
    }
    return SHP_TRT_OK;
}

shp_trt_status shp_trt_iteration_stats(shp_trt_executor *ex, shp_trt_iter_stats *out) {
    last_error[0] = '\0';
    if (!ex || !out) {
        set_error("testlib: NULL argument to iteration_stats");
        return SHP_TRT_INVALID;
    }
    if (ex->iterations == ex->reported_iterations) {
        return SHP_TRT_EMPTY;
    }
    ex->reported_iterations = ex->iterations;
    memset(out, 0, sizeof *out);
    out->iteration = ex->iterations;
    out->iteration_latency_ms = -1;
    out->active_requests = 0;
    out->queued_requests = 0;
    out->kv_max_blocks = 1024;
    out->kv_used_blocks = (ex->kv_tokens + TOKENS_PER_BLOCK - 1) / TOKENS_PER_BLOCK;
    out->kv_tokens_per_block = TOKENS_PER_BLOCK;
    out->kv_reused_blocks = 0;
    out->gpu_memory_bytes = 0;
    return SHP_TRT_OK;
}

void shp_trt_destroy(shp_trt_executor *ex) {
    if (!ex) {
        return;
    }
    log_line(ex, "destroy");
    free_executor(ex);
}

const char *shp_trt_last_error(void) { return last_error; }
