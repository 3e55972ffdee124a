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
    /* the code point standing for each byte in the vocabulary's text (GPT-2's byte map), for the
     * whole-piece lookup of ignore_merges; byte_chars_ok is 0 when they were not single characters */
    Py_UCS4 byte_chars[256];
    int byte_chars_ok;
} Merger;

/* defined in _accel.c */
extern PyTypeObject MergerType;

static inline uint64_t merger_key(int32_t a, int32_t b) {
    return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
}

/* the slot to start probing at: the product's high half folded into its low half, so that every
 * bit of both ids reaches the masked bits (a plain shift of the product let only 4 bits of the left
 * id through, and pairs with one right id then shared a handful of slots: probe chains hundreds long) */
static inline uint64_t merger_hash(uint64_t key) {
    uint64_t h = key * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 32);
}

static inline Slot *merger_find_slot(Merger *m, uint64_t key) {
    for (uint64_t i = merger_hash(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->slots[i].key == key || m->slots[i].key == 0) return &m->slots[i];
    }
}

/* pieces longer than this (in bytes) are left to Python */
#define MERGER_MAX_SCAN 1024

/* defined in _accel.c: rank-based BPE over one piece's UTF-8 bytes, the ids into sym (room for n);
 * their count, or -1 when Python must decide (a byte without a token, more than MERGER_MAX_SCAN bytes) */
Py_ssize_t merger_merge(Merger *m, const unsigned char *bytes, Py_ssize_t n, int32_t *sym);

/* defined in _accel.c: keep byte_chars (256 one-character strings) in m->byte_chars */
void merger_keep_byte_chars(Merger *m, PyObject *byte_chars);

/* defined in _accel_gguf.c: adds gguf_strings and merger_from_gguf to the module */
int accel_gguf_add(PyObject *module);

#endif
