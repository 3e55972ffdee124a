/* backends._pick: the greedy pick over llama.cpp's logits, without NumPy in the engine's process.
 *
 *   argmax_f32(address, n) -> int
 *       The first id of the highest of the n float32 values at `address` (a
 *       llama_get_logits_ith pointer), compared as llama.cpp's greedy sampler
 *       compares them: a value wins only when it is greater than the best so
 *       far, so a NaN never wins unless it comes first.
 *
 * Why C: NumPy's argmax did this in 20 us a step, but importing NumPy cost
 * the engine process 46 ms and 15 MiB of a 1.1 s one-shot reply; a Python
 * loop over Qwen's 151,936 logits takes milliseconds, and llama.cpp's own
 * greedy sampler first copies the whole vocabulary into a candidate array
 * (250 to 340 us a step).  The address is trusted: it comes from llama.cpp.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define BLOCK 64

/* the highest of a block of BLOCK values: eight running maxima, independent lanes the compiler turns into
 * vector max instructions */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
/* one copy per vector width, the widest the CPU has chosen at load time (GCC's function multiversioning) */
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static float block_max(const float *x) {
    float lane[8];
    for (int k = 0; k < 8; k++) lane[k] = x[k];
    for (int i = 8; i < BLOCK; i += 8)
        for (int k = 0; k < 8; k++) lane[k] = x[i + k] > lane[k] ? x[i + k] : lane[k];
    float top = lane[0];
    for (int k = 1; k < 8; k++) top = lane[k] > top ? lane[k] : top;
    return top;
}

/* The first index of the highest value: the index llama.cpp's one-pass "greater than the best so far" scan
 * ends on.  The blocks' maxima find the value and the block it first appears in (a scalar compare-and-keep
 * per value took 190 us for 151,936 logits, the blocks 35 us, NumPy's argmax 10 to 20); that block is then
 * scanned for it.  A NaN never compares greater, so it is skipped, except as the first value, which
 * llama.cpp's scan keeps. */
static Py_ssize_t first_max(const float *x, Py_ssize_t n) {
    float top = x[0];
    if (top != top) return 0;
    Py_ssize_t from = 0, i = 0; /* the block where top was first seen */
    for (; i + BLOCK <= n; i += BLOCK) {
        float m = block_max(x + i);
        if (m > top) {
            top = m;
            from = i;
        }
    }
    for (Py_ssize_t j = i; j < n; j++)
        if (x[j] > top) {
            top = x[j];
            from = j;
        }
    for (Py_ssize_t j = from; j < n; j++)
        if (x[j] == top) return j;
    return 0; /* not reached: top is one of the values */
}

static PyObject *py_argmax_f32(PyObject *self, PyObject *args) {
    unsigned long long address;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "Kn", &address, &n)) return NULL;
    if (address == 0 || n <= 0) {
        PyErr_SetString(PyExc_ValueError, "argmax_f32 needs a non-null address and at least one value");
        return NULL;
    }
    const float *x = (const float *)(uintptr_t)address;
    Py_ssize_t best = 0;
    Py_BEGIN_ALLOW_THREADS
    best = first_max(x, n);
    Py_END_ALLOW_THREADS
    return PyLong_FromSsize_t(best);
}

static PyMethodDef methods[] = {
    {"argmax_f32", py_argmax_f32, METH_VARARGS, "argmax_f32(address, n) -> the first id of the highest float32"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pick", NULL, -1, methods};

PyMODINIT_FUNC PyInit__pick(void) { return PyModule_Create(&module); }
