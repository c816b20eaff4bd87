/*
 * libcuda.a for `make CUDA=1`: the few CUDA driver API functions llama.cpp's CUDA
 * backend calls directly (its VMM memory pool and the device query behind it),
 * forwarded to the NVIDIA driver's libcuda.so.1, opened at the first call.
 *
 * llama-cpp-sys-2 links `-lcuda`; against the toolkit's stub that records libcuda.so.1
 * as NEEDED, and a binary that needs it does not even start where no NVIDIA driver
 * is installed. The Makefile puts this archive first on the library path instead,
 * so a CUDA build starts everywhere: cudart opens the driver itself when present,
 * finds no device otherwise, and llama.cpp runs on the CPU (shepherd says so).
 * Without the driver each function answers CUDA_ERROR_NO_DEVICE; llama.cpp calls
 * none of them before it found a device.
 *
 * `nm -u` on libggml-cuda.a lists what llama.cpp needs; `make CUDA=1` fails to
 * link with an undefined `cu...` symbol if a newer llama.cpp calls one more.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>

static void *driver;
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;

static void open_driver(void) {
    driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
}

static void *driver_symbol(const char *name) {
    pthread_once(&driver_once, open_driver);
    return driver ? dlsym(driver, name) : NULL;
}

/* cuda.h maps some names to versioned symbols (cuFoo -> cuFoo_v2); the
 * definition and the lookup both use the mapped name. */
#define NAME_OF(fn) #fn
#define SYMBOL(fn) NAME_OF(fn)

/* Looked up at every call (no cache to race on): llama.cpp makes these calls only
 * when its memory pool grows or a call failed. */
#define FORWARD(fn, params, args)                                                      \
    CUresult CUDAAPI fn params {                                                       \
        CUresult(CUDAAPI * real) params =                                              \
            (CUresult(CUDAAPI *) params)driver_symbol(SYMBOL(fn));                     \
        return real ? real args : CUDA_ERROR_NO_DEVICE;                                \
    }

FORWARD(cuGetErrorString, (CUresult error, const char **text), (error, text))
FORWARD(cuDeviceGet, (CUdevice * device, int ordinal), (device, ordinal))
FORWARD(cuDeviceGetAttribute, (int *value, CUdevice_attribute attribute, CUdevice device),
        (value, attribute, device))
FORWARD(cuMemGetAllocationGranularity,
        (size_t * granularity, const CUmemAllocationProp *prop,
         CUmemAllocationGranularity_flags option),
        (granularity, prop, option))
FORWARD(cuMemCreate,
        (CUmemGenericAllocationHandle * handle, size_t size, const CUmemAllocationProp *prop,
         unsigned long long flags),
        (handle, size, prop, flags))
FORWARD(cuMemRelease, (CUmemGenericAllocationHandle handle), (handle))
FORWARD(cuMemAddressReserve,
        (CUdeviceptr * ptr, size_t size, size_t alignment, CUdeviceptr addr,
         unsigned long long flags),
        (ptr, size, alignment, addr, flags))
FORWARD(cuMemAddressFree, (CUdeviceptr ptr, size_t size), (ptr, size))
FORWARD(cuMemMap,
        (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
         unsigned long long flags),
        (ptr, size, offset, handle, flags))
FORWARD(cuMemUnmap, (CUdeviceptr ptr, size_t size), (ptr, size))
FORWARD(cuMemSetAccess,
        (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count),
        (ptr, size, desc, count))
