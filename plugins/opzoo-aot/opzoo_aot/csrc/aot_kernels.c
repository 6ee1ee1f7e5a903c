/* CPU kernels of the AOT residual (opzoo-aot), in float32 and float64.
 * Built on first use by opzoo_aot/cpu_kernels.py with the system C compiler; see the
 * implementation in aot_kernels_impl.h. */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define CHUNK 8192 /* elements of one stream per parallel task */
#define BLOCK 512  /* elements per inner block (a few KiB per stream, stays in L1) */
#define NMAX 16    /* the largest number of streams */

int aot_kernels_nmax(void) { return NMAX; }

#define real float
#define NAME(x) x##_f32
#define EXP expf
#define LOG logf
#include "aot_kernels_impl.h"
#undef real
#undef NAME
#undef EXP
#undef LOG

#define real double
#define NAME(x) x##_f64
#define EXP exp
#define LOG log
#include "aot_kernels_impl.h"
#undef real
#undef NAME
#undef EXP
#undef LOG

/* ---- a caching pool for the large outputs ------------------------------------------------
 * The stream passes write several freshly allocated buffers of the stream state's size per
 * sub-layer. From malloc, large buffers come as new pages from the kernel, zeroed on first touch;
 * at batch 8 that page faulting cost as much as the passes themselves. The pool keeps freed
 * buffers for reuse (like PyTorch's CUDA caching allocator) and hands them to PyTorch through
 * DLPack, whose deleter returns them here. */
typedef struct {
    int32_t device_type, device_id;
} DLDevice;
typedef struct {
    uint8_t code, bits;
    uint16_t lanes;
} DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

#define POOL_SLOTS 512
#define MAX_DIMS 8
static struct {
    void *ptr;
    size_t bytes;
} pool[POOL_SLOTS];
static int pool_count = 0;
static size_t pool_bytes = 0, pool_limit = (size_t)1 << 30;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct {
    DLManagedTensor managed;
    int64_t shape[MAX_DIMS];
    size_t bytes;
} PoolTensor;

static void pool_put(void *ptr, size_t bytes) {
    pthread_mutex_lock(&pool_lock);
    if (pool_count < POOL_SLOTS && pool_bytes + bytes <= pool_limit) {
        pool[pool_count].ptr = ptr;
        pool[pool_count].bytes = bytes;
        ++pool_count;
        pool_bytes += bytes;
        ptr = NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    free(ptr);
}

static void *pool_get(size_t bytes) {
    void *ptr = NULL;
    pthread_mutex_lock(&pool_lock);
    for (int i = pool_count - 1; i >= 0; --i)
        if (pool[i].bytes == bytes) {
            ptr = pool[i].ptr;
            pool[i] = pool[--pool_count];
            pool_bytes -= bytes;
            break;
        }
    pthread_mutex_unlock(&pool_lock);
    return ptr ? ptr : aligned_alloc(64, bytes);
}

static void pool_deleter(DLManagedTensor *self) {
    PoolTensor *t = (PoolTensor *)self->manager_ctx;
    pool_put(t->managed.dl_tensor.data, t->bytes);
    free(t);
}

/* A contiguous CPU float tensor of the given shape (bits 32 or 64) from the pool; NULL when out
 * of memory or ndim > MAX_DIMS. */
DLManagedTensor *aot_pool_tensor(int32_t ndim, const int64_t *shape, int32_t bits) {
    if (ndim < 0 || ndim > MAX_DIMS) return NULL;
    PoolTensor *t = (PoolTensor *)calloc(1, sizeof(PoolTensor));
    if (!t) return NULL;
    size_t numel = 1;
    for (int32_t i = 0; i < ndim; ++i) {
        t->shape[i] = shape[i];
        numel *= (size_t)shape[i];
    }
    t->bytes = (numel * (size_t)(bits / 8) + 63) / 64 * 64; /* aligned_alloc wants a multiple of 64 */
    if (t->bytes == 0) t->bytes = 64;
    void *data = pool_get(t->bytes);
    if (!data) {
        free(t);
        return NULL;
    }
    t->managed.dl_tensor.data = data;
    t->managed.dl_tensor.device.device_type = 1; /* kDLCPU */
    t->managed.dl_tensor.ndim = ndim;
    t->managed.dl_tensor.dtype.code = 2; /* kDLFloat */
    t->managed.dl_tensor.dtype.bits = (uint8_t)bits;
    t->managed.dl_tensor.dtype.lanes = 1;
    t->managed.dl_tensor.shape = t->shape;
    t->managed.dl_tensor.strides = NULL; /* compact, row-major */
    t->managed.manager_ctx = t;
    t->managed.deleter = pool_deleter;
    return &t->managed;
}

/* Frees every cached buffer; returns the bytes freed. */
size_t aot_pool_empty(void) {
    pthread_mutex_lock(&pool_lock);
    size_t freed = pool_bytes;
    for (int i = 0; i < pool_count; ++i) free(pool[i].ptr);
    pool_count = 0;
    pool_bytes = 0;
    pthread_mutex_unlock(&pool_lock);
    return freed;
}

size_t aot_pool_cached_bytes(void) {
    pthread_mutex_lock(&pool_lock);
    size_t bytes = pool_bytes;
    pthread_mutex_unlock(&pool_lock);
    return bytes;
}

void aot_pool_set_limit(size_t bytes) {
    pthread_mutex_lock(&pool_lock);
    pool_limit = bytes;
    pthread_mutex_unlock(&pool_lock);
}
