/*
 * The pair table of tokenizer._accel.Merger, shared by _accel.c (which
 * builds it from Python strings and encodes with it) and _accel_gguf.c
 * (which builds it straight from a GGUF file's token and merge arrays).
 */
#ifndef TOKCHAT_ACCEL_MERGER_H
#define TOKCHAT_ACCEL_MERGER_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    uint64_t key; /* (left << 32) | right, +1 so 0 means empty */
    int32_t rank;
    int32_t merged;
} Slot;

typedef struct {
    PyObject_HEAD
    Slot *slots;
    uint64_t mask;
    int32_t byte_ids[256];
} Merger;

/* defined in _accel.c */
extern PyTypeObject MergerType;

static inline uint64_t merger_key(int32_t a, int32_t b) {
    return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
}

static inline Slot *merger_find_slot(Merger *m, uint64_t key) {
    uint64_t h = (key * 0x9E3779B97F4A7C15ULL) >> 17;
    for (uint64_t i = h & m->mask;; i = (i + 1) & m->mask) {
        if (m->slots[i].key == key || m->slots[i].key == 0) return &m->slots[i];
    }
}

/* defined in _accel_gguf.c: adds gguf_strings and merger_from_gguf to the module */
int accel_gguf_add(PyObject *module);

#endif
