//go:build ignore

// (The constraint above keeps the go tool, which builds with CGO_ENABLED=0, away from
// this C file, which sits in benchmarks/ort's Go package; make bin/ortprof builds it.)

/* ortprof.c: ONNX Runtime's per-node profile, for lining up layers against IDK_PROFILE=2.
 *
 * onnxruntime-node 1.20.1 (bench.js) takes no profiling option (its binding reads only the
 * thread, graph and memory options), so this program loads the libonnxruntime.so that
 * onnxruntime-node ships and calls its C API directly, with bench.js's session options
 * (CPU execution provider, THREADS intra-op threads, one inter-op thread, sequential
 * execution, all graph optimisations) and its seeded uniform input, warms up twice, runs for
 * SECONDS and prints one JSON line (min_ms, p50_ms, runs). With PREFIX set, ORT writes its
 * profile (a Chrome trace, PREFIX_<date>.json, one "<node>_kernel_time" event a node a run)
 * when the session is released; benchmarks/ort/lineup.py sets it beside IDK_PROFILE=2.
 *
 * usage: ortprof LIBONNXRUNTIME.so MODEL.onnx BATCH SIZE THREADS SECONDS [PREFIX]
 * (SIZE: the image side, 224, or 299 for inception_v3; the input is "input", the output
 * "output", as benchmarks/ort/export.py names them. SIZE "idsL", e.g. ids128: a text model's
 * two int64 inputs "ids" and "mask", BATCH x L, all 1s, as bench.js feeds them.)
 *
 * Build: make bin/ortprof. No header of ORT is needed: OrtApi is a table of function
 * pointers that ORT only appends to, and the entries used are called by their index in
 * onnxruntime_c_api.h's struct OrtApi (the same in every release since 1.x). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void *status_t; /* OrtStatus*: NULL is success */
typedef struct {
    void **(*get_api)(uint32_t version);
    const char *(*version)(void);
} api_base_t;

enum { /* indices into struct OrtApi */
    GET_ERROR_MESSAGE = 2,
    CREATE_ENV = 3,
    CREATE_SESSION = 7,
    RUN = 9,
    CREATE_SESSION_OPTIONS = 10,
    SET_EXECUTION_MODE = 13,
    ENABLE_PROFILING = 14,
    SET_GRAPH_OPTIMIZATION_LEVEL = 23,
    SET_INTRA_OP_THREADS = 24,
    SET_INTER_OP_THREADS = 25,
    CREATE_TENSOR_WITH_DATA = 49,
    CREATE_CPU_MEMORY_INFO = 69,
    RELEASE_SESSION = 95,
    RELEASE_VALUE = 96,
};

static void **api;

static void check(status_t st, const char *what) {
    if (!st) return;
    fprintf(stderr, "ortprof: %s: %s\n", what, ((const char *(*)(status_t))api[GET_ERROR_MESSAGE])(st));
    exit(1);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: ortprof LIBONNXRUNTIME.so MODEL.onnx BATCH SIZE THREADS SECONDS [PREFIX]\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "ortprof: %s\n", dlerror());
        return 1;
    }
    const api_base_t *(*get_base)(void) = (const api_base_t *(*)(void))dlsym(lib, "OrtGetApiBase");
    if (!get_base) {
        fprintf(stderr, "ortprof: no OrtGetApiBase in %s\n", argv[1]);
        return 1;
    }
    api = get_base()->get_api(20); /* ORT_API_VERSION 20: ORT 1.20 */
    if (!api) {
        fprintf(stderr, "ortprof: ORT %s has no API version 20\n", get_base()->version());
        return 1;
    }
    int text = argv[4][0] == 'i';
    int batch = atoi(argv[3]), size = atoi(argv[4] + (text ? 3 : 0)), threads = atoi(argv[5]);
    double seconds = atof(argv[6]);
    const char *prefix = argc > 7 ? argv[7] : NULL;
    void *env, *opt, *sess, *mem, *in[2];
    check(((status_t(*)(int, const char *, void **))api[CREATE_ENV])(3, "ortprof", &env), "CreateEnv");
    check(((status_t(*)(void **))api[CREATE_SESSION_OPTIONS])(&opt), "CreateSessionOptions");
    check(((status_t(*)(void *, int))api[SET_EXECUTION_MODE])(opt, 0), "SetSessionExecutionMode");
    if (prefix) check(((status_t(*)(void *, const char *))api[ENABLE_PROFILING])(opt, prefix), "EnableProfiling");
    check(((status_t(*)(void *, int))api[SET_GRAPH_OPTIMIZATION_LEVEL])(opt, 99), "SetSessionGraphOptimizationLevel");
    check(((status_t(*)(void *, int))api[SET_INTRA_OP_THREADS])(opt, threads), "SetIntraOpNumThreads");
    check(((status_t(*)(void *, int))api[SET_INTER_OP_THREADS])(opt, 1), "SetInterOpNumThreads");
    check(((status_t(*)(void *, const char *, void *, void **))api[CREATE_SESSION])(env, argv[2], opt, &sess),
          "CreateSession");
    check(((status_t(*)(int, int, void **))api[CREATE_CPU_MEMORY_INFO])(1, 0, &mem), "CreateCpuMemoryInfo");
    size_t n = text ? (size_t)batch * (size_t)size : (size_t)batch * 3 * (size_t)size * (size_t)size;
    float *data = malloc(n * sizeof *data);
    int64_t *ids = malloc(n * sizeof *ids);
    if (!data || !ids) return 1;
    uint32_t s = 0x9e3779b9u; /* bench.js's xorshift */
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        data[i] = (float)(s / 4294967296.0);
        ids[i] = 1;
    }
    status_t (*tensor)(void *, void *, size_t, const int64_t *, size_t, int, void **) =
        (status_t(*)(void *, void *, size_t, const int64_t *, size_t, int, void **))api[CREATE_TENSOR_WITH_DATA];
    int64_t shape[4] = {batch, 3, size, size}, tshape[2] = {batch, size};
    if (text) {
        for (int i = 0; i < 2; i++)
            check(tensor(mem, ids, n * sizeof *ids, tshape, 2, 7 /* int64 */, &in[i]), "CreateTensorWithDataAsOrtValue");
    } else {
        check(tensor(mem, data, n * sizeof *data, shape, 4, 1 /* float */, &in[0]), "CreateTensorWithDataAsOrtValue");
    }
    const char *img_names[1] = {"input"}, *text_names[2] = {"ids", "mask"}, *out_names[1] = {"output"};
    const char *const *in_names = text ? text_names : img_names;
    size_t nin = text ? 2 : 1;
    status_t (*run)(void *, void *, const char *const *, void *const *, size_t, const char *const *, size_t, void **) =
        (status_t(*)(void *, void *, const char *const *, void *const *, size_t, const char *const *, size_t, void **))api[RUN];
    size_t cap = 1024, runs = 0;
    double *lat = malloc(cap * sizeof *lat);
    double start = now_ms();
    for (int warm = 2; warm >= 0;) {
        double t0 = now_ms();
        void *out = NULL;
        check(run(sess, NULL, in_names, in, nin, out_names, 1, &out), "Run");
        double ms = now_ms() - t0;
        ((void (*)(void *))api[RELEASE_VALUE])(out);
        if (warm > 0) {
            if (--warm == 0) start = now_ms();
            continue;
        }
        if (runs == cap && !(lat = realloc(lat, (cap *= 2) * sizeof *lat))) return 1;
        lat[runs++] = ms;
        if (now_ms() - start >= seconds * 1e3 && runs >= 3) break;
    }
    qsort(lat, runs, sizeof *lat, cmp);
    printf("{\"min_ms\":%.3f,\"p50_ms\":%.3f,\"runs\":%zu,\"batch\":%d,\"threads\":%d}\n", lat[0], lat[runs / 2], runs,
           batch, threads);
    ((void (*)(void *))api[RELEASE_SESSION])(sess); /* writes the profile */
    for (size_t i = 0; i < nin; i++) ((void (*)(void *))api[RELEASE_VALUE])(in[i]);
    free(lat);
    free(data);
    free(ids);
    return 0;
}
