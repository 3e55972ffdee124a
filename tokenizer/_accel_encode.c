/*
 * tokenizer._accel, part 5: a whole fragment split and merged in C, with a
 * piece cache of its own (see _accel.c for the module; tokenizer/loader.py
 * decides when this runs, and tokenizer/bpe.py holds the pure-Python twin).
 *
 *   PieceCache()
 *       piece bytes -> ids, kept across calls and shared by every call that
 *       passes it; clear() forgets everything (Tokenizer.clear_cache), len()
 *       counts the pieces.  Past CACHE_PIECES pieces it starts again empty.
 *
 *   encode_text(merger, text, mode, flags, cache, whole=None) -> list[int] | None
 *       The ids Merger.encode gives, piece after piece, for the pieces
 *       split(text, mode, flags) cuts, without a Python string per piece:
 *       the pieces are walked in the text's UTF-8 bytes, each distinct one
 *       merged once and kept in `cache`.  `whole` (ignore_merges): the
 *       vocabulary, text -> id; a piece that is a token is that one id
 *       (looked up once per distinct piece, in the byte map's characters).
 *       None when a piece needs Python (text with a lone surrogate, a byte
 *       without a token, a piece over MERGER_MAX_SCAN bytes): the caller
 *       then takes the per-piece path, which gives the same ids.
 *
 * Why: per piece, a Python string, a set entry, a dict entry and a list
 * extend cost about as much as merging it (multilingual text has few
 * repeated pieces), and they were half of a cold encode.
 */
#include <stdint.h>
#include <string.h>

#include "_accel_merger.h"
#include "_accel_split.h"

/* the cache starts again empty past this many pieces (the Python cache's CACHE_LIMIT is 200,000) */
#define CACHE_PIECES (1 << 18)
/* ... or past this many bytes of piece text or ids (offsets stay far below 2**32) */
#define CACHE_BYTES (1u << 27)

typedef struct {
    uint64_t hash; /* 0: empty */
    uint32_t text_off, text_len;
    uint32_t ids_off, ids_len;
} CacheSlot;

typedef struct {
    PyObject_HEAD
    CacheSlot *slots;
    uint64_t mask;
    Py_ssize_t used;
    unsigned char *text; /* the pieces' bytes, back to back */
    size_t text_used, text_cap;
    int32_t *ids; /* their ids, back to back */
    size_t ids_used, ids_cap;
} PieceCache;

/* a word at a time; never 0, so 0 marks an empty slot */
static inline uint64_t piece_hash(const unsigned char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n, w;
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
    h ^= h >> 29;
    h *= 0xC4CEB9FE1A85EC53ULL;
    h ^= h >> 32;
    return h | 1;
}

static void cache_reset(PieceCache *c) {
    if (c->slots) memset(c->slots, 0, (c->mask + 1) * sizeof(CacheSlot));
    c->used = 0;
    c->text_used = c->ids_used = 0;
}

/* the slot holding piece p (hash h), or the empty slot where it would go */
static inline CacheSlot *cache_slot(const PieceCache *c, const unsigned char *p, size_t n, uint64_t h) {
    for (uint64_t i = h & c->mask;; i = (i + 1) & c->mask) {
        CacheSlot *s = &c->slots[i];
        if (!s->hash) return s;
        if (s->hash == h && s->text_len == n && memcmp(c->text + s->text_off, p, n) == 0) return s;
    }
}

/* grow *buf (elements of `size` bytes) to hold `need`; 0, or -1 with MemoryError set */
static int reserve(void **buf, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 0;
    size_t cap2 = *cap ? *cap : 1024;
    while (cap2 < need) cap2 *= 2;
    void *grown = PyMem_Realloc(*buf, cap2 * size);
    if (!grown) {
        PyErr_NoMemory();
        return -1;
    }
    *buf = grown;
    *cap = cap2;
    return 0;
}

/* the table at twice its size (every slot's hash is kept, so no text is hashed again) */
static int cache_grow(PieceCache *c) {
    uint64_t cap = c->slots ? (c->mask + 1) * 2 : 4096;
    CacheSlot *slots = PyMem_Calloc(cap, sizeof(CacheSlot));
    if (!slots) {
        PyErr_NoMemory();
        return -1;
    }
    for (uint64_t i = 0; c->slots && i <= c->mask; i++) {
        if (!c->slots[i].hash) continue;
        uint64_t j = c->slots[i].hash & (cap - 1);
        while (slots[j].hash) j = (j + 1) & (cap - 1);
        slots[j] = c->slots[i];
    }
    PyMem_Free(c->slots);
    c->slots = slots;
    c->mask = cap - 1;
    return 0;
}

/* keep piece p -> ids; 0, or -1 with MemoryError set */
static int cache_add(PieceCache *c, const unsigned char *p, size_t n, uint64_t h, const int32_t *ids, size_t k) {
    if (c->used >= CACHE_PIECES || c->text_used + n > CACHE_BYTES || (c->ids_used + k) * 4 > CACHE_BYTES)
        cache_reset(c);
    if ((!c->slots || (uint64_t)(c->used + 1) * 2 > c->mask + 1) && cache_grow(c) < 0) return -1;
    if (reserve((void **)&c->text, &c->text_cap, c->text_used + n, 1) < 0 ||
        reserve((void **)&c->ids, &c->ids_cap, c->ids_used + k, sizeof(int32_t)) < 0)
        return -1;
    CacheSlot *s = cache_slot(c, p, n, h);
    s->hash = h;
    s->text_off = (uint32_t)c->text_used;
    s->text_len = (uint32_t)n;
    s->ids_off = (uint32_t)c->ids_used;
    s->ids_len = (uint32_t)k;
    memcpy(c->text + c->text_used, p, n);
    memcpy(c->ids + c->ids_used, ids, k * sizeof(int32_t));
    c->text_used += n;
    c->ids_used += k;
    c->used++;
    return 0;
}

static PyObject *PieceCache_clear(PieceCache *c, PyObject *unused) {
    cache_reset(c);
    Py_RETURN_NONE;
}

static Py_ssize_t PieceCache_len(PieceCache *c) { return c->used; }

static void PieceCache_dealloc(PieceCache *c) {
    PyMem_Free(c->slots);
    PyMem_Free(c->text);
    PyMem_Free(c->ids);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyMethodDef PieceCache_methods[] = {
    {"clear", (PyCFunction)PieceCache_clear, METH_NOARGS, "forget every piece"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods PieceCache_sequence = {.sq_length = (lenfunc)PieceCache_len};

static PyTypeObject PieceCacheType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tokenizer._accel.PieceCache",
    .tp_basicsize = sizeof(PieceCache),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)PieceCache_dealloc,
    .tp_methods = PieceCache_methods,
    .tp_as_sequence = &PieceCache_sequence,
    .tp_doc = "piece bytes -> ids for encode_text (see the module docstring)",
};

/* UTF-8 length of code points [i, i + len) of t (the text has no lone surrogates) */
static inline Py_ssize_t utf8_length(const Text *t, Py_ssize_t i, Py_ssize_t len) {
    Py_ssize_t n = 0;
    for (Py_ssize_t j = i; j < i + len; j++) {
        Py_UCS4 c = PyUnicode_READ(t->kind, t->data, j);
        n += 1 + (c >= 0x80) + (c >= 0x800) + (c >= 0x10000);
    }
    return n;
}

/* the id of the token spelled as piece's bytes in the byte map (whole: text -> id): 1 found, 0 not,
 * -1 error set */
static int whole_token(const Merger *m, PyObject *whole, const unsigned char *piece, Py_ssize_t n, int32_t *id) {
    Py_UCS4 most = 0;
    for (Py_ssize_t i = 0; i < n; i++) most = m->byte_chars[piece[i]] > most ? m->byte_chars[piece[i]] : most;
    PyObject *key = PyUnicode_New(n, most); /* the narrowest kind, as Python's own strings */
    if (!key) return -1;
    int kind = PyUnicode_KIND(key);
    void *data = PyUnicode_DATA(key);
    for (Py_ssize_t i = 0; i < n; i++) PyUnicode_WRITE(kind, data, i, m->byte_chars[piece[i]]);
    PyObject *value = PyDict_GetItemWithError(whole, key);
    Py_DECREF(key);
    if (!value) return PyErr_Occurred() ? -1 : 0;
    long v = PyLong_AsLong(value);
    if (v == -1 && PyErr_Occurred()) return -1;
    *id = (int32_t)v;
    return 1;
}

/* the ids of text, into *out (*count of them); 1 done, 0 Python must decide, -1 error set */
static int encode_into(Merger *m, PieceCache *cache, PyObject *text, int mode, int fold_long_s,
                       const unsigned char *flags, PyObject *whole, int32_t **out, size_t *count, size_t *cap) {
    Py_ssize_t nbytes;
    const unsigned char *utf8 = (const unsigned char *)PyUnicode_AsUTF8AndSize(text, &nbytes);
    if (!utf8) {
        PyErr_Clear(); /* lone surrogates: the Python path handles them */
        return 0;
    }
    Text t = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text), flags};
    int ascii = PyUnicode_IS_ASCII(text);
    int32_t merged[MERGER_MAX_SCAN];
    Py_ssize_t at = 0; /* the piece's first byte */
    for (Py_ssize_t i = 0; i < t.n;) {
        Py_ssize_t len = accel_next_piece(&t, i, mode, fold_long_s);
        Py_ssize_t n = ascii ? len : utf8_length(&t, i, len);
        const unsigned char *piece = utf8 + at;
        i += len;
        at += n;
        const int32_t *ids = merged;
        Py_ssize_t k;
        if (n == 1) { /* one byte: its token, no pair to merge */
            if ((merged[0] = m->byte_ids[piece[0]]) < 0) return 0;
            k = 1;
        } else {
            uint64_t h = piece_hash(piece, (size_t)n);
            CacheSlot *s = cache->slots ? cache_slot(cache, piece, (size_t)n, h) : NULL;
            if (s && s->hash) {
                ids = cache->ids + s->ids_off;
                k = s->ids_len;
            } else {
                int found = whole ? whole_token(m, whole, piece, n, merged) : 0;
                if (found < 0) return -1;
                if ((k = found ? 1 : merger_merge(m, piece, n, merged)) < 0) return 0;
                if (cache_add(cache, piece, (size_t)n, h, merged, (size_t)k) < 0) return -1;
            }
        }
        if (reserve((void **)out, cap, *count + (size_t)k, sizeof(int32_t)) < 0) return -1;
        memcpy(*out + *count, ids, (size_t)k * sizeof(int32_t));
        *count += (size_t)k;
    }
    return 1;
}

/* encode_text(merger, text, mode, flags, cache, whole=None) -> list[int] | None */
static PyObject *py_encode_text(PyObject *self, PyObject *args) {
    PyObject *merger, *text, *cache, *whole = Py_None;
    int mode;
    Py_buffer flags;
    if (!PyArg_ParseTuple(args, "O!Uiy*O!|O", &MergerType, &merger, &text, &mode, &flags, &PieceCacheType, &cache,
                          &whole))
        return NULL;
    int fold_long_s = (mode & MODE_FOLD_LONG_S) != 0;
    mode &= ~MODE_FOLD_LONG_S;
    const char *bad = flags.len < 0x110000 || mode < 0 || mode > MODE_STARCODER ? "bad mode or flag table"
                      : whole != Py_None && !PyDict_Check(whole) ? "whole must be a dict or None"
                      : whole != Py_None && !((Merger *)merger)->byte_chars_ok ? "the merger has no byte map"
                      : NULL;
    if (bad) {
        PyBuffer_Release(&flags);
        PyErr_Format(PyExc_ValueError, "encode_text: %s", bad);
        return NULL;
    }
    int32_t *ids = NULL;
    size_t count = 0, cap = 0;
    int done = encode_into((Merger *)merger, (PieceCache *)cache, text, mode, fold_long_s, flags.buf,
                           whole == Py_None ? NULL : whole, &ids, &count, &cap);
    PyBuffer_Release(&flags);
    PyObject *out = NULL;
    if (done > 0 && (out = PyList_New((Py_ssize_t)count))) {
        for (size_t i = 0; i < count; i++) {
            PyObject *v = PyLong_FromLong(ids[i]);
            if (!v) {
                Py_CLEAR(out);
                break;
            }
            PyList_SET_ITEM(out, (Py_ssize_t)i, v);
        }
    } else if (done == 0) {
        Py_INCREF(Py_None);
        out = Py_None;
    }
    PyMem_Free(ids);
    return out;
}

static PyMethodDef encode_methods[] = {
    {"encode_text", py_encode_text, METH_VARARGS,
     "encode_text(merger, text, mode, flags, cache, whole=None) -> list[int] | None: split and merge in C"},
    {NULL, NULL, 0, NULL},
};

int accel_encode_add(PyObject *module) {
    if (PyType_Ready(&PieceCacheType) < 0) return -1;
    Py_INCREF(&PieceCacheType);
    if (PyModule_AddObject(module, "PieceCache", (PyObject *)&PieceCacheType) < 0) {
        Py_DECREF(&PieceCacheType);
        return -1;
    }
    return PyModule_AddFunctions(module, encode_methods);
}
