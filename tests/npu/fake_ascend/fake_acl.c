/* TEST DOUBLE of AscendCL (libascendcl.so) for pypto's device tests. Not a device; never shipped.
 *
 * Implements the AscendCL entry points pypto.device binds (same names, signatures and error
 * codes) on the host: "device" memory is host memory with bookkeeping, streams are FIFO queues
 * run at aclrtSynchronizeStream, contexts are bound per thread like ACL's. The fake kernel
 * library (fake_conv_dx_kernel.c) enqueues its work through fake_acl_enqueue_kernel, which it
 * finds in the global symbol scope: so pypto must load this library with RTLD_GLOBAL first.
 *
 * Test hooks (exported): fake_acl_counter(name), fake_acl_reset_call_counts(),
 * fake_acl_device_span(ptr, bytes), fake_acl_enqueue_kernel(...), fake_acl_set_error(text).
 * Environment, read when the call happens:
 *   FAKE_ACL_FAIL_MALLOC=N / FAKE_ACL_FAIL_MEMCPY=N  fail the N-th call since the last reset
 *   FAKE_ACL_FAIL_SYNC=1      aclrtSynchronizeStream reports an AI Core exception
 *   FAKE_ACL_PREINIT=1        ACL counts as initialised by someone else (aclInit -> 100002)
 *   FAKE_ACL_DEVICE_COUNT=N   devices reported (default 1)
 *   FAKE_ACL_SOC=name         aclrtGetSocName (default Ascend910B3)
 *   FAKE_ACL_REPORT=path      at process exit, write the counters there as JSON
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int aclError;
enum {
    ACL_SUCCESS = 0,
    ACL_ERROR_UNINITIALIZE = 100001,
    ACL_ERROR_REPEAT_INITIALIZE = 100002,
    ACL_ERROR_REPEAT_FINALIZE = 100037,
    ACL_ERROR_RT_PARAM_INVALID = 107000,
    ACL_ERROR_RT_INVALID_DEVICEID = 107001,
    ACL_ERROR_RT_CONTEXT_NULL = 107002,
    ACL_ERROR_RT_MEMORY_ALLOCATION = 207001,
    ACL_ERROR_RT_AICORE_EXCEPTION = 507015,
    ACL_ERROR_RT_DRV_INTERNAL_ERROR = 507899,
};
enum { MEMCPY_H2H = 0, MEMCPY_H2D = 1, MEMCPY_D2H = 2, MEMCPY_D2D = 3 };

#define EXPORT __attribute__((visibility("default")))
#define GARBAGE 0xA5 /* device memory is not zeroed: fresh allocations hold this pattern */

typedef int (*kernel_run_fn)(void *arg, char *error, size_t error_size);

struct allocation { char *base; size_t size; };
struct operation { int is_kernel; char *dst; int value; size_t count; kernel_run_fn run; void *arg; };
struct stream { struct operation *ops; size_t n_ops, cap_ops; };
struct context { int device; };

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread char t_error[512];
static __thread int t_has_error;
static __thread struct context *t_context;

static struct context g_default_context;
static int g_initialized;
static struct allocation *g_allocs;
static size_t g_n_allocs, g_cap_allocs;
static void *g_live_ptrs[2][256]; /* [0] contexts, [1] streams */
static size_t g_n_live[2];
static long g_malloc_since_reset, g_memcpy_since_reset;

static struct {
    long init, finalize, set_device, reset_device, malloc, free, h2d, d2h, d2d, memset, launch,
        sync, kernel_runs, kernel_faults, contexts_created, streams_created;
} g_count;

/* ---- helpers -------------------------------------------------------------------------------- */
static aclError fail(aclError code, const char *text)
{
    snprintf(t_error, sizeof t_error, "fake AscendCL: %s", text);
    t_has_error = 1;
    return code;
}

static long env_long(const char *name)
{
    const char *value = getenv(name);
    return value && *value ? strtol(value, NULL, 10) : 0;
}

static int injected(const char *name, long call_index)
{
    long at = env_long(name);
    return at > 0 && at == call_index;
}

static int live_index(int kind, const void *handle)
{
    for (size_t i = 0; i < g_n_live[kind]; i++)
        if (g_live_ptrs[kind][i] == handle) return (int)i;
    return -1;
}

static void live_add(int kind, void *handle) { g_live_ptrs[kind][g_n_live[kind]++] = handle; }

static void live_remove(int kind, int index)
{
    g_live_ptrs[kind][index] = g_live_ptrs[kind][--g_n_live[kind]];
}

static aclError need_context(void)
{
    if (!g_initialized) return fail(ACL_ERROR_UNINITIALIZE, "aclInit has not been called");
    if (!t_context)
        return fail(ACL_ERROR_RT_CONTEXT_NULL, "no context is current in this thread "
                                               "(aclrtSetCurrentContext or aclrtSetDevice first)");
    return ACL_SUCCESS;
}

/* Caller holds g_lock. 1 when [p, p + n) lies inside one live allocation. */
static int span_is_device(const void *p, size_t n)
{
    const char *c = (const char *)p;
    for (size_t i = 0; i < g_n_allocs; i++)
        if (c >= g_allocs[i].base && c + n <= g_allocs[i].base + g_allocs[i].size) return 1;
    return 0;
}

static long device_count(void)
{
    const char *value = getenv("FAKE_ACL_DEVICE_COUNT");
    return value && *value ? strtol(value, NULL, 10) : 1;
}

/* ---- initialisation, devices, contexts ------------------------------------------------------ */
EXPORT aclError aclInit(const char *config_path)
{
    (void)config_path;
    pthread_mutex_lock(&g_lock);
    g_count.init++;
    static int preinit_checked;
    if (!preinit_checked) { /* another framework (torch_npu) initialised ACL before us */
        preinit_checked = 1;
        if (env_long("FAKE_ACL_PREINIT")) g_initialized = 1;
    }
    aclError ret = g_initialized ? fail(ACL_ERROR_REPEAT_INITIALIZE, "ACL is already initialized")
                                 : ACL_SUCCESS;
    g_initialized = 1;
    pthread_mutex_unlock(&g_lock);
    return ret;
}

EXPORT aclError aclFinalize(void)
{
    pthread_mutex_lock(&g_lock);
    g_count.finalize++;
    aclError ret = g_initialized ? ACL_SUCCESS : fail(ACL_ERROR_REPEAT_FINALIZE, "not initialized");
    g_initialized = 0;
    pthread_mutex_unlock(&g_lock);
    return ret;
}

EXPORT const char *aclGetRecentErrMsg(void)
{
    if (!t_has_error) return NULL;
    t_has_error = 0; /* ACL clears the message once read */
    return t_error;
}

EXPORT const char *aclrtGetSocName(void)
{
    const char *soc = getenv("FAKE_ACL_SOC");
    return soc && *soc ? soc : "Ascend910B3";
}

EXPORT aclError aclrtGetDeviceCount(uint32_t *count)
{
    if (!g_initialized) return fail(ACL_ERROR_UNINITIALIZE, "aclInit has not been called");
    *count = (uint32_t)device_count();
    return ACL_SUCCESS;
}

EXPORT aclError aclrtSetDevice(int32_t device)
{
    if (!g_initialized) return fail(ACL_ERROR_UNINITIALIZE, "aclInit has not been called");
    if (device < 0 || device >= device_count())
        return fail(ACL_ERROR_RT_INVALID_DEVICEID, "no such device");
    pthread_mutex_lock(&g_lock);
    g_count.set_device++;
    pthread_mutex_unlock(&g_lock);
    g_default_context.device = device;
    t_context = &g_default_context; /* binds the device's default context to this thread */
    return ACL_SUCCESS;
}

EXPORT aclError aclrtResetDevice(int32_t device)
{
    if (device < 0 || device >= device_count())
        return fail(ACL_ERROR_RT_INVALID_DEVICEID, "no such device");
    pthread_mutex_lock(&g_lock);
    g_count.reset_device++;
    pthread_mutex_unlock(&g_lock);
    if (t_context == &g_default_context) t_context = NULL;
    return ACL_SUCCESS;
}

EXPORT aclError aclrtCreateContext(void **context, int32_t device)
{
    if (!g_initialized) return fail(ACL_ERROR_UNINITIALIZE, "aclInit has not been called");
    if (device < 0 || device >= device_count())
        return fail(ACL_ERROR_RT_INVALID_DEVICEID, "no such device");
    struct context *created = calloc(1, sizeof *created);
    created->device = device;
    pthread_mutex_lock(&g_lock);
    live_add(0, created);
    g_count.contexts_created++;
    pthread_mutex_unlock(&g_lock);
    *context = created;
    t_context = created; /* a new context becomes current in the creating thread */
    return ACL_SUCCESS;
}

EXPORT aclError aclrtDestroyContext(void *context)
{
    pthread_mutex_lock(&g_lock);
    int index = live_index(0, context);
    if (index >= 0) live_remove(0, index);
    pthread_mutex_unlock(&g_lock);
    if (index < 0) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtDestroyContext: unknown context");
    if (t_context == context) t_context = NULL;
    free(context);
    return ACL_SUCCESS;
}

EXPORT aclError aclrtSetCurrentContext(void *context)
{
    pthread_mutex_lock(&g_lock);
    int known = context == &g_default_context || live_index(0, context) >= 0;
    pthread_mutex_unlock(&g_lock);
    if (!known) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtSetCurrentContext: unknown context");
    t_context = context;
    return ACL_SUCCESS;
}

/* What another ACL user in the same thread (torch_npu) would see as its current context. */
EXPORT aclError aclrtGetCurrentContext(void **context)
{
    if (!context) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtGetCurrentContext: null");
    if (!t_context) return fail(ACL_ERROR_RT_CONTEXT_NULL, "no context is current in this thread");
    *context = t_context;
    return ACL_SUCCESS;
}

/* ---- streams -------------------------------------------------------------------------------- */
EXPORT aclError aclrtCreateStream(void **stream)
{
    aclError ret = need_context();
    if (ret) return ret;
    struct stream *created = calloc(1, sizeof *created);
    pthread_mutex_lock(&g_lock);
    live_add(1, created);
    g_count.streams_created++;
    pthread_mutex_unlock(&g_lock);
    *stream = created;
    return ACL_SUCCESS;
}

static void drop_operations(struct stream *s)
{
    for (size_t i = 0; i < s->n_ops; i++) free(s->ops[i].arg);
    s->n_ops = 0;
}

EXPORT aclError aclrtDestroyStream(void *stream)
{
    pthread_mutex_lock(&g_lock);
    int index = live_index(1, stream);
    if (index >= 0) live_remove(1, index);
    pthread_mutex_unlock(&g_lock);
    if (index < 0) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtDestroyStream: unknown stream");
    struct stream *s = stream;
    drop_operations(s);
    free(s->ops);
    free(s);
    return ACL_SUCCESS;
}

/* Caller holds g_lock. */
static aclError enqueue(void *stream, struct operation op)
{
    if (live_index(1, stream) < 0) {
        free(op.arg);
        return fail(ACL_ERROR_RT_PARAM_INVALID, "unknown stream");
    }
    struct stream *s = stream;
    if (s->n_ops == s->cap_ops) {
        s->cap_ops = s->cap_ops ? 2 * s->cap_ops : 8;
        s->ops = realloc(s->ops, s->cap_ops * sizeof *s->ops);
    }
    s->ops[s->n_ops++] = op;
    return ACL_SUCCESS;
}

EXPORT aclError aclrtSynchronizeStream(void *stream)
{
    aclError ret = need_context();
    if (ret) return ret;
    pthread_mutex_lock(&g_lock);
    g_count.sync++;
    if (live_index(1, stream) < 0) {
        pthread_mutex_unlock(&g_lock);
        return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtSynchronizeStream: unknown stream");
    }
    struct stream *s = stream;
    if (env_long("FAKE_ACL_FAIL_SYNC")) {
        drop_operations(s);
        pthread_mutex_unlock(&g_lock);
        return fail(ACL_ERROR_RT_AICORE_EXCEPTION,
                    "AI Core exception while running the stream (injected by FAKE_ACL_FAIL_SYNC)");
    }
    char fault[400] = "";
    for (size_t i = 0; i < s->n_ops && !fault[0]; i++) {
        struct operation *op = &s->ops[i];
        if (!op->is_kernel) {
            memset(op->dst, op->value, op->count);
        } else {
            g_count.kernel_runs++;
            if (op->run(op->arg, fault, sizeof fault)) g_count.kernel_faults++;
        }
    }
    drop_operations(s);
    pthread_mutex_unlock(&g_lock);
    if (fault[0]) return fail(ACL_ERROR_RT_AICORE_EXCEPTION, fault);
    return ACL_SUCCESS;
}

/* ---- memory --------------------------------------------------------------------------------- */
EXPORT aclError aclrtMalloc(void **pointer, size_t size, int policy)
{
    (void)policy;
    aclError ret = need_context();
    if (ret) return ret;
    pthread_mutex_lock(&g_lock);
    g_count.malloc++;
    long index = ++g_malloc_since_reset;
    pthread_mutex_unlock(&g_lock);
    if (injected("FAKE_ACL_FAIL_MALLOC", index))
        return fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "out of device memory (injected by FAKE_ACL_FAIL_MALLOC)");
    if (size == 0) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMalloc of 0 bytes");
    char *base = malloc(size);
    if (!base) return fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "host malloc failed");
    memset(base, GARBAGE, size);
    pthread_mutex_lock(&g_lock);
    if (g_n_allocs == g_cap_allocs) {
        g_cap_allocs = g_cap_allocs ? 2 * g_cap_allocs : 16;
        g_allocs = realloc(g_allocs, g_cap_allocs * sizeof *g_allocs);
    }
    g_allocs[g_n_allocs++] = (struct allocation){base, size};
    pthread_mutex_unlock(&g_lock);
    *pointer = base;
    return ACL_SUCCESS;
}

EXPORT aclError aclrtFree(void *pointer)
{
    aclError ret = need_context();
    if (ret) return ret;
    pthread_mutex_lock(&g_lock);
    size_t i = 0;
    while (i < g_n_allocs && g_allocs[i].base != pointer) i++;
    if (i == g_n_allocs) {
        pthread_mutex_unlock(&g_lock);
        return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtFree of a pointer that is not a live allocation");
    }
    g_allocs[i] = g_allocs[--g_n_allocs];
    g_count.free++;
    pthread_mutex_unlock(&g_lock);
    free(pointer);
    return ACL_SUCCESS;
}

EXPORT aclError aclrtMemcpy(void *dst, size_t dest_max, const void *src, size_t count, int kind)
{
    aclError ret = need_context();
    if (ret) return ret;
    pthread_mutex_lock(&g_lock);
    long index = ++g_memcpy_since_reset;
    int dst_ok = kind == MEMCPY_H2D || kind == MEMCPY_D2D ? span_is_device(dst, count) : 1;
    int src_ok = kind == MEMCPY_D2H || kind == MEMCPY_D2D ? span_is_device(src, count) : 1;
    if (kind == MEMCPY_H2D) g_count.h2d++;
    if (kind == MEMCPY_D2H) g_count.d2h++;
    if (kind == MEMCPY_D2D) g_count.d2d++;
    pthread_mutex_unlock(&g_lock);
    if (injected("FAKE_ACL_FAIL_MEMCPY", index))
        return fail(ACL_ERROR_RT_DRV_INTERNAL_ERROR, "copy engine error (injected by FAKE_ACL_FAIL_MEMCPY)");
    if (kind < MEMCPY_H2H || kind > MEMCPY_D2D) return fail(ACL_ERROR_RT_PARAM_INVALID, "bad memcpy kind");
    if (count > dest_max) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemcpy: count > destMax");
    if (!dst_ok || !src_ok)
        return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemcpy: device range outside a live allocation");
    memcpy(dst, src, count);
    return ACL_SUCCESS;
}

EXPORT aclError aclrtMemsetAsync(void *pointer, size_t max_count, int32_t value, size_t count, void *stream)
{
    aclError ret = need_context();
    if (ret) return ret;
    if (count > max_count) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemsetAsync: count > maxCount");
    pthread_mutex_lock(&g_lock);
    g_count.memset++;
    if (!span_is_device(pointer, count)) {
        pthread_mutex_unlock(&g_lock);
        return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemsetAsync: range outside a live allocation");
    }
    ret = enqueue(stream, (struct operation){0, pointer, value, count, NULL, NULL});
    pthread_mutex_unlock(&g_lock);
    return ret;
}

/* ---- hooks for the fake kernel library and the tests ----------------------------------------- */
EXPORT void fake_acl_set_error(const char *text) { fail(0, text); }

/* Called by the fake kernel at run time (inside aclrtSynchronizeStream, g_lock held). */
EXPORT int fake_acl_device_span(const void *pointer, size_t bytes) { return span_is_device(pointer, bytes); }

EXPORT aclError fake_acl_enqueue_kernel(void *stream, kernel_run_fn run, void *arg)
{
    aclError ret = need_context();
    if (ret) {
        free(arg);
        return ret;
    }
    pthread_mutex_lock(&g_lock);
    g_count.launch++;
    ret = enqueue(stream, (struct operation){1, NULL, 0, 0, run, arg});
    pthread_mutex_unlock(&g_lock);
    return ret;
}

EXPORT void fake_acl_reset_call_counts(void)
{
    pthread_mutex_lock(&g_lock);
    g_malloc_since_reset = g_memcpy_since_reset = 0;
    pthread_mutex_unlock(&g_lock);
}

EXPORT long fake_acl_counter(const char *name)
{
    pthread_mutex_lock(&g_lock);
    long live_bytes = 0;
    for (size_t i = 0; i < g_n_allocs; i++) live_bytes += (long)g_allocs[i].size;
    struct { const char *name; long value; } table[] = {
        {"init", g_count.init}, {"finalize", g_count.finalize}, {"set_device", g_count.set_device},
        {"reset_device", g_count.reset_device}, {"malloc", g_count.malloc}, {"free", g_count.free},
        {"h2d", g_count.h2d}, {"d2h", g_count.d2h}, {"d2d", g_count.d2d}, {"memset", g_count.memset},
        {"launch", g_count.launch}, {"sync", g_count.sync}, {"kernel_runs", g_count.kernel_runs},
        {"kernel_faults", g_count.kernel_faults}, {"contexts_created", g_count.contexts_created},
        {"streams_created", g_count.streams_created}, {"live_allocations", (long)g_n_allocs},
        {"live_bytes", live_bytes}, {"live_contexts", (long)g_n_live[0]},
        {"live_streams", (long)g_n_live[1]}, {"initialized", g_initialized},
    };
    long value = -1;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].name, name) == 0) value = table[i].value;
    pthread_mutex_unlock(&g_lock);
    return value;
}

__attribute__((destructor)) static void write_report(void)
{
    const char *path = getenv("FAKE_ACL_REPORT");
    if (!path || !*path) return;
    FILE *out = fopen(path, "w");
    if (!out) return;
    const char *names[] = {"init", "finalize", "set_device", "reset_device", "malloc", "free",
                           "h2d", "d2h", "memset", "launch", "sync", "kernel_runs",
                           "kernel_faults", "contexts_created", "streams_created",
                           "live_allocations", "live_bytes", "live_contexts", "live_streams",
                           "initialized"};
    fputc('{', out);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        fprintf(out, "%s\"%s\": %ld", i ? ", " : "", names[i], fake_acl_counter(names[i]));
    fputs("}\n", out);
    fclose(out);
}
