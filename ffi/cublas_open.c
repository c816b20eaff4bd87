/*
 * cuBLAS opened at run time, for `make CUDA=1 static CUDA_CUBLAS=dlopen`: the cuBLAS
 * functions llama.cpp's CUDA backend calls, forwarded to the GPU box's own
 * libcublas.so.13 or libcublas.so.12, opened at the first call.
 *
 * Static cuBLAS is what makes `make CUDA=1 static` large (its GPU code is several
 * hundred MB even pruned to one architecture: docs/INSTALL.md), while every GPU box
 * with a CUDA toolkit or PyTorch already has a libcublas.so. The Makefile hands
 * llama-cpp-sys-2 empty archives under the static cuBLAS names it links, and build.rs
 * links this file in their place, so the binary carries llama.cpp's kernels and
 * cudart only, needs no libcublas at start (nothing of CUDA is NEEDED), and runs on
 * the CPU where there is no GPU, as the other builds do.
 *
 * Which library: $SHEPHERD_CUBLAS when set (a path or a file name), else
 * libcublas.so.13, then libcublas.so.12, through the dynamic loader's ordinary search
 * (LD_LIBRARY_PATH, ld.so.cache). The functions below have the same signatures in
 * cuBLAS 12 and 13. Without a library each call answers
 * CUBLAS_STATUS_NOT_INITIALIZED, after one message on stderr naming what was tried;
 * llama.cpp then stops with its own cuBLAS error.
 *
 * `nm -u` on libggml-cuda.a lists what llama.cpp needs; the link fails with an
 * undefined `cublas...` symbol if a newer llama.cpp calls one more.
 */
#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static void *library;
static const char *library_name;
static pthread_once_t library_once = PTHREAD_ONCE_INIT;

static void open_library(void) {
    const char *chosen = getenv("SHEPHERD_CUBLAS");
    const char *names[] = {chosen && *chosen ? chosen : NULL, "libcublas.so.13", "libcublas.so.12"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!names[i]) {
            continue;
        }
        library = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (library) {
            library_name = names[i];
            return;
        }
        if (i == 0) {
            break; /* $SHEPHERD_CUBLAS names the one to use: no fallback */
        }
    }
}

/* Said once, at the first cuBLAS call that finds no library (not when `--version`
 * only asks which library there is). */
static pthread_once_t missing_once = PTHREAD_ONCE_INIT;

static void say_missing(void) {
    const char *chosen = getenv("SHEPHERD_CUBLAS");
    fprintf(stderr,
            "shepherd: no cuBLAS library found (tried %s): install the CUDA runtime's cuBLAS "
            "(libcublas.so.13 or .12) or put its directory on LD_LIBRARY_PATH\n",
            chosen && *chosen ? chosen : "libcublas.so.13, libcublas.so.12");
}

static void *library_symbol(const char *name) {
    pthread_once(&library_once, open_library);
    if (!library) {
        pthread_once(&missing_once, say_missing);
        return NULL;
    }
    return dlsym(library, name);
}

/* The file name of the cuBLAS library in use, opening it if need be; NULL when none
 * could be opened (`shepherd --version` reports it). */
const char *shepherd_cublas_library(void) {
    pthread_once(&library_once, open_library);
    return library ? library_name : NULL;
}

/* cublas_v2.h maps some names to versioned symbols (cublasCreate -> cublasCreate_v2);
 * the definition and the lookup both use the mapped name. */
#define NAME_OF(fn) #fn
#define SYMBOL(fn) NAME_OF(fn)

#define FORWARD(fn, params, args)                                                      \
    cublasStatus_t CUBLASWINAPI fn params {                                            \
        cublasStatus_t(CUBLASWINAPI * real) params =                                   \
            (cublasStatus_t(CUBLASWINAPI *) params)library_symbol(SYMBOL(fn));         \
        return real ? real args : CUBLAS_STATUS_NOT_INITIALIZED;                       \
    }

FORWARD(cublasCreate, (cublasHandle_t * handle), (handle))
FORWARD(cublasDestroy, (cublasHandle_t handle), (handle))
FORWARD(cublasSetStream, (cublasHandle_t handle, cudaStream_t stream), (handle, stream))
FORWARD(cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode), (handle, mode))
FORWARD(cublasSetWorkspace, (cublasHandle_t handle, void *workspace, size_t bytes),
        (handle, workspace, bytes))
FORWARD(cublasLoggerConfigure,
        (int log_on, int to_stdout, int to_stderr, const char *file_name),
        (log_on, to_stdout, to_stderr, file_name))
FORWARD(cublasGemmEx,
        (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
         int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
         cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
         cublasComputeType_t compute, cublasGemmAlgo_t algo),
        (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype,
         ldc, compute, algo))
FORWARD(cublasGemmBatchedEx,
        (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
         int k, const void *alpha, const void *const A[], cudaDataType Atype, int lda,
         const void *const B[], cudaDataType Btype, int ldb, const void *beta, void *const C[],
         cudaDataType Ctype, int ldc, int batch, cublasComputeType_t compute,
         cublasGemmAlgo_t algo),
        (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype,
         ldc, batch, compute, algo))
FORWARD(cublasGemmStridedBatchedEx,
        (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
         int k, const void *alpha, const void *A, cudaDataType Atype, int lda, long long strideA,
         const void *B, cudaDataType Btype, int ldb, long long strideB, const void *beta, void *C,
         cudaDataType Ctype, int ldc, long long strideC, int batch, cublasComputeType_t compute,
         cublasGemmAlgo_t algo),
        (handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB,
         beta, C, Ctype, ldc, strideC, batch, compute, algo))
FORWARD(cublasSgemm,
        (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
         int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
         const float *beta, float *C, int ldc),
        (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))
FORWARD(cublasSgemmBatched,
        (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
         int k, const float *alpha, const float *const A[], int lda, const float *const B[],
         int ldb, const float *beta, float *const C[], int ldc, int batch),
        (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, batch))
FORWARD(cublasSgemmStridedBatched,
        (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
         int k, const float *alpha, const float *A, int lda, long long strideA, const float *B,
         int ldb, long long strideB, const float *beta, float *C, int ldc, long long strideC,
         int batch),
        (handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
         strideC, batch))
FORWARD(cublasStrsmBatched,
        (cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo,
         cublasOperation_t trans, cublasDiagType_t diag, int m, int n, const float *alpha,
         const float *const A[], int lda, float *const B[], int ldb, int batch),
        (handle, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb, batch))

/* Not a status: a fixed text without a library. */
const char *CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
    const char *(CUBLASWINAPI * real)(cublasStatus_t) =
        (const char *(CUBLASWINAPI *)(cublasStatus_t))library_symbol("cublasGetStatusString");
    return real ? real(status) : "cuBLAS library not found";
}
