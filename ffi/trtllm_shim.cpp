/*
 * trtllm_shim.cpp: ffi/trtllm.h over TensorRT-LLM's C++ executor API
 * (tensorrt_llm/executor/executor.h).
 *
 * Built by build.rs only with the cargo feature `tensorrt` and TRTLLM_ROOT set,
 * as C++17 with the _GLIBCXX_USE_CXX11_ABI of the installed libtensorrt_llm.so.
 * `make check-trtllm-shim` compiles it (-fsyntax-only, -Wall -Wextra -Werror)
 * against a release's vendored headers once ffi/vendor/tensorrt_llm holds them.
 * Every declaration used here was checked by hand against TensorRT-LLM's
 * executor.h, types.h and plugins/api/tllmPlugin.h; it has never run.
 * docs/tensorrt.md says exactly what was and was not verified.
 *
 * Release differences it steers around: SamplingConfig::setSeed, not the older
 * setRandomSeed (gone from current headers); FinishReason compared by value,
 * since kTIMED_OUT and kCANCELLED exist only in newer releases.
 *
 * Choices (reference: the original Shepherd's TensorRT backend):
 *   - ModelType::kDECODER_ONLY, in-flight batching, beam width 1;
 *   - KV cache block reuse on, so a conversation's prefix is not recomputed
 *     between turns; capacity scheduler GUARANTEED_NO_EVICT;
 *   - streaming requests that return only the new tokens of each step
 *     (returnAllGeneratedTokens = false), prompt excluded from the output;
 *   - every C++ exception is caught at the boundary and becomes a status plus
 *     the thread's last-error text: no exception crosses into Rust.
 */

#include "trtllm.h"

#include <tensorrt_llm/executor/executor.h>
#include <tensorrt_llm/plugins/api/tllmPlugin.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace tle = tensorrt_llm::executor;

namespace {

thread_local std::string last_error;

void set_error(std::string message) {
    last_error = std::move(message);
}

/* Runs `body`, turning any exception into SHP_TRT_ERROR and its message. */
template <typename Body>
shp_trt_status guarded(Body &&body) noexcept {
    try {
        last_error.clear();
        return body();
    } catch (std::exception const &e) {
        try {
            set_error(e.what());
        } catch (...) {
        }
        return SHP_TRT_ERROR;
    } catch (...) {
        try {
            set_error("unknown C++ exception in the TensorRT-LLM executor");
        } catch (...) {
        }
        return SHP_TRT_ERROR;
    }
}

std::once_flag plugins_once;

int32_t finish_code(tle::FinishReason reason, bool cancelled) {
    switch (static_cast<int>(reason)) {
    case static_cast<int>(tle::FinishReason::kEND_ID):
        return SHP_TRT_FINISH_END_ID;
    case static_cast<int>(tle::FinishReason::kSTOP_WORDS):
        return SHP_TRT_FINISH_STOP_WORD;
    case static_cast<int>(tle::FinishReason::kLENGTH):
        return SHP_TRT_FINISH_LENGTH;
    default:
        /* kCANCELLED and kTIMED_OUT exist only in newer releases; a request we
         * cancelled reports CANCELLED whatever the release calls it. */
        return cancelled ? SHP_TRT_FINISH_CANCELLED : SHP_TRT_FINISH_OTHER;
    }
}

tle::ExecutorConfig executor_config(shp_trt_options const &options) {
    tle::KvCacheConfig kv_cache(/*enableBlockReuse=*/options.disable_block_reuse == 0);
    if (options.kv_cache_free_gpu_memory_fraction > 0.0f) {
        kv_cache.setFreeGpuMemoryFraction(options.kv_cache_free_gpu_memory_fraction);
    }
    if (options.kv_cache_max_tokens > 0) {
        kv_cache.setMaxTokens(options.kv_cache_max_tokens);
    }
    tle::ExecutorConfig config(/*maxBeamWidth=*/1,
                               tle::SchedulerConfig(tle::CapacitySchedulerPolicy::kGUARANTEED_NO_EVICT),
                               kv_cache);
    if (options.iteration_stats_max > 0) {
        config.setIterStatsMaxIterations(options.iteration_stats_max);
    }
    return config;
}

tle::SamplingConfig sampling_config(shp_trt_request_options const &o) {
    tle::SamplingConfig sampling(/*beamWidth=*/1);
    if (o.top_k > 0) {
        sampling.setTopK(o.top_k);
    }
    if (o.top_p > 0.0f) {
        sampling.setTopP(o.top_p);
    }
    if (o.temperature >= 0.0f) {
        /* The executor wants temperature > 0; greedy is top_k = 1. */
        if (o.temperature == 0.0f) {
            sampling.setTopK(1);
        } else {
            sampling.setTemperature(o.temperature);
        }
    }
    if (o.has_seed) {
        sampling.setSeed(o.seed);
    }
    return sampling;
}

} // namespace

struct shp_trt_executor {
    std::unique_ptr<tle::Executor> executor;
    /* Responses received from the executor but not yet handed out, per request. */
    std::unordered_map<tle::IdType, std::deque<tle::Response>> pending;
    std::unordered_set<tle::IdType> live;
    std::unordered_set<tle::IdType> cancelled;
    /* The tokens of the response last handed out (ownership rule 3). */
    std::vector<int32_t> tokens;
    std::mutex mutex;
};

extern "C" {

int32_t shp_trt_abi_version(void) {
    return SHP_TRT_ABI_VERSION;
}

shp_trt_status shp_trt_create(const char *engine_dir, const shp_trt_options *options,
                              shp_trt_executor **out) {
    if (!out) {
        set_error("out is NULL");
        return SHP_TRT_INVALID;
    }
    *out = nullptr;
    if (!engine_dir) {
        set_error("engine_dir is NULL");
        return SHP_TRT_INVALID;
    }
    return guarded([&] {
        std::call_once(plugins_once, [] { initTrtLlmPlugins(); });
        shp_trt_options defaults{};
        auto config = executor_config(options ? *options : defaults);
        auto handle = std::make_unique<shp_trt_executor>();
        handle->executor = std::make_unique<tle::Executor>(std::filesystem::path(engine_dir),
                                                           tle::ModelType::kDECODER_ONLY, config);
        if (!handle->executor->canEnqueueRequests()) {
            /* Multi-GPU engines need the MPI leader rank; shepherd runs as one process. */
            set_error("this process cannot enqueue requests (not the MPI leader rank)");
            return SHP_TRT_ERROR;
        }
        *out = handle.release();
        return SHP_TRT_OK;
    });
}

shp_trt_status shp_trt_enqueue(shp_trt_executor *executor, const int32_t *tokens, size_t n_tokens,
                               const shp_trt_request_options *options, uint64_t *request_id) {
    if (!executor || !options || !request_id || !tokens || n_tokens == 0 || options->max_tokens <= 0) {
        set_error("enqueue: NULL argument, empty prompt or max_tokens <= 0");
        return SHP_TRT_INVALID;
    }
    return guarded([&] {
        tle::VecTokens input(tokens, tokens + n_tokens);
        tle::OutputConfig output;
        output.excludeInputFromOutput = true;
        std::optional<tle::SizeType32> end_id;
        if (options->end_id >= 0) {
            end_id = options->end_id;
        }
        std::optional<tle::SizeType32> pad_id = end_id;
        if (options->pad_id >= 0) {
            pad_id = options->pad_id;
        }
        tle::Request request(std::move(input), options->max_tokens, options->streaming != 0,
                             sampling_config(*options), output, end_id, pad_id);
        if (options->stop_token_ids && options->n_stop_token_ids > 0) {
            std::list<tle::VecTokens> stop_words;
            for (size_t i = 0; i < options->n_stop_token_ids; i++) {
                stop_words.push_back(tle::VecTokens{options->stop_token_ids[i]});
            }
            request.setStopWords(stop_words);
        }
        request.setReturnAllGeneratedTokens(false);
        std::lock_guard<std::mutex> lock(executor->mutex);
        tle::IdType id = executor->executor->enqueueRequest(request);
        executor->live.insert(id);
        *request_id = id;
        return SHP_TRT_OK;
    });
}

shp_trt_status shp_trt_await(shp_trt_executor *executor, uint64_t request_id, uint32_t timeout_ms,
                             shp_trt_response *out) {
    if (!executor || !out) {
        set_error("await: NULL argument");
        return SHP_TRT_INVALID;
    }
    return guarded([&] {
        std::lock_guard<std::mutex> lock(executor->mutex);
        if (executor->live.count(request_id) == 0) {
            set_error("await: request " + std::to_string(request_id) + " is unknown or finished");
            return SHP_TRT_INVALID;
        }
        auto &queue = executor->pending[request_id];
        if (queue.empty()) {
            auto responses = executor->executor->awaitResponses(request_id, std::chrono::milliseconds(timeout_ms));
            for (auto &response : responses) {
                queue.push_back(std::move(response));
            }
        }
        if (queue.empty()) {
            return SHP_TRT_TIMEOUT;
        }
        tle::Response response = std::move(queue.front());
        queue.pop_front();
        *out = shp_trt_response{};
        out->request_id = request_id;
        bool cancelled = executor->cancelled.count(request_id) != 0;
        auto finished = [&] {
            executor->live.erase(request_id);
            executor->cancelled.erase(request_id);
            executor->pending.erase(request_id);
        };
        if (response.hasError()) {
            set_error(response.getErrorMsg());
            finished();
            return SHP_TRT_ERROR;
        }
        tle::Result const &result = response.getResult();
        executor->tokens.clear();
        if (!result.outputTokenIds.empty()) {
            auto const &beam = result.outputTokenIds.front();
            executor->tokens.assign(beam.begin(), beam.end());
        }
        out->tokens = executor->tokens.data();
        out->n_tokens = executor->tokens.size();
        out->is_final = result.isFinal ? 1 : 0;
        if (result.isFinal) {
            auto reason = result.finishReasons.empty() ? tle::FinishReason::kNOT_FINISHED
                                                       : result.finishReasons.front();
            out->finish_reason = finish_code(reason, cancelled);
            finished();
        }
        return SHP_TRT_OK;
    });
}

shp_trt_status shp_trt_cancel(shp_trt_executor *executor, uint64_t request_id) {
    if (!executor) {
        set_error("cancel: NULL executor");
        return SHP_TRT_INVALID;
    }
    return guarded([&] {
        std::lock_guard<std::mutex> lock(executor->mutex);
        if (executor->live.count(request_id) == 0) {
            return SHP_TRT_OK;
        }
        executor->cancelled.insert(request_id);
        executor->executor->cancelRequest(request_id);
        return SHP_TRT_OK;
    });
}

shp_trt_status shp_trt_iteration_stats(shp_trt_executor *executor, shp_trt_iter_stats *out) {
    if (!executor || !out) {
        set_error("iteration_stats: NULL argument");
        return SHP_TRT_INVALID;
    }
    return guarded([&] {
        std::lock_guard<std::mutex> lock(executor->mutex);
        auto stats = executor->executor->getLatestIterationStats();
        if (stats.empty()) {
            return SHP_TRT_EMPTY;
        }
        tle::IterationStats const &latest = stats.back();
        *out = shp_trt_iter_stats{};
        out->iteration = latest.iter;
        out->iteration_latency_ms = latest.iterLatencyMS;
        out->active_requests = latest.numActiveRequests;
        out->queued_requests = latest.numQueuedRequests;
        out->kv_max_blocks = -1;
        out->kv_used_blocks = -1;
        out->kv_tokens_per_block = -1;
        out->kv_reused_blocks = -1;
        if (latest.kvCacheStats) {
            out->kv_max_blocks = latest.kvCacheStats->maxNumBlocks;
            out->kv_used_blocks = latest.kvCacheStats->usedNumBlocks;
            out->kv_tokens_per_block = latest.kvCacheStats->tokensPerBlock;
            out->kv_reused_blocks = latest.kvCacheStats->reusedBlocks;
        }
        out->gpu_memory_bytes = latest.gpuMemUsage;
        return SHP_TRT_OK;
    });
}

void shp_trt_destroy(shp_trt_executor *executor) {
    if (!executor) {
        return;
    }
    guarded([&] {
        if (executor->executor) {
            for (auto id : executor->live) {
                executor->executor->cancelRequest(id);
            }
            executor->executor->shutdown();
        }
        return SHP_TRT_OK;
    });
    /* Destruction itself must not throw out of a C function either. */
    try {
        delete executor;
    } catch (...) {
    }
}

const char *shp_trt_last_error(void) {
    return last_error.c_str();
}

} /* extern "C" */
