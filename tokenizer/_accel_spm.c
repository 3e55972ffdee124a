/*
 * tokenizer._accel, part 2: SentencePiece-style merging (see _accel.c for
 * the module and tokenizer/spm.py for the pure-Python twin).
 *
 * SPMMerger(tokens, scores).encode(fragment) -> list[int] | None
 *   The fragment (spaces already turned into U+2581) starts as one symbol
 *   per UTF-8 character; the adjacent pair whose concatenation is a token
 *   with the highest score merges first, the leftmost on ties, as in
 *   llama.cpp.  Leftover symbols that are not tokens become <0xXX> byte
 *   tokens; None when a byte has no token (Python then raises its error).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>


typedef struct {
    uint64_t hash; /* 0 = empty */
    Py_ssize_t off, len;
    int32_t id;
    double score;
} Entry;

typedef struct {
    PyObject_HEAD
    char *arena;
    Entry *table;
    uint64_t mask;
    int32_t byte_ids[256];
} SPMMerger;

typedef struct {
    double score;
    Py_ssize_t left, right, size;
} Bigram;

static uint64_t hash_bytes(const char *p, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h | 1;
}

static Entry *spm_find(SPMMerger *m, const char *p, Py_ssize_t n) {
    uint64_t h = hash_bytes(p, n);
    for (uint64_t i = (h >> 7) & m->mask;; i = (i + 1) & m->mask) {
        Entry *e = &m->table[i];
        if (!e->hash || (e->hash == h && e->len == n && memcmp(m->arena + e->off, p, n) == 0)) return e;
    }
}

static void SPMMerger_dealloc(SPMMerger *m) {
    PyMem_Free(m->arena);
    PyMem_Free(m->table);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

/* SPMMerger(tokens: list[str], scores: list[float]); a repeated text maps to its last id */
static int SPMMerger_init(SPMMerger *m, PyObject *args, PyObject *kw) {
    PyObject *tokens, *scores;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &tokens, &PyList_Type, &scores)) return -1;
    Py_ssize_t n = PyList_GET_SIZE(tokens), total = 0;
    if (PyList_GET_SIZE(scores) < n) {
        PyErr_SetString(PyExc_ValueError, "fewer scores than tokens");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        if (!PyUnicode_Check(PyList_GET_ITEM(tokens, i)) || !PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(tokens, i), &len))
            return -1;
        total += len;
    }
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2 + 16) cap <<= 1;
    PyMem_Free(m->arena);
    PyMem_Free(m->table);
    m->arena = PyMem_Malloc(total + 1);
    m->table = PyMem_Calloc(cap, sizeof(Entry));
    if (!m->arena || !m->table) {
        PyErr_NoMemory();
        return -1;
    }
    m->mask = cap - 1;
    Py_ssize_t off = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        const char *p = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(tokens, i), &len);
        double score = PyFloat_AsDouble(PyList_GET_ITEM(scores, i));
        if (score == -1.0 && PyErr_Occurred()) return -1;
        memcpy(m->arena + off, p, len);
        Entry *e = spm_find(m, m->arena + off, len);
        e->hash = hash_bytes(p, len);
        e->off = off;
        e->len = len;
        e->id = (int32_t)i;
        e->score = score;
        off += len;
    }
    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof(hex), "<0x%02X>", b);
        Entry *e = spm_find(m, hex, 6);
        if (!e->hash && b < 0x80) {
            char c = (char)b;
            e = spm_find(m, &c, 1);
        }
        m->byte_ids[b] = e->hash ? e->id : -1;
    }
    return 0;
}

static void heap_push(Bigram *h, Py_ssize_t *n, Bigram b) {
    Py_ssize_t i = (*n)++;
    while (i > 0) {
        Py_ssize_t p = (i - 1) / 2;
        /* parent must come first: higher score, then lower left index */
        if (h[p].score > b.score || (h[p].score == b.score && h[p].left <= b.left)) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = b;
}

static Bigram heap_pop(Bigram *h, Py_ssize_t *n) {
    Bigram top = h[0], last = h[--(*n)];
    Py_ssize_t i = 0;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && (h[c + 1].score > h[c].score || (h[c + 1].score == h[c].score && h[c + 1].left < h[c].left)))
            c++;
        if (last.score > h[c].score || (last.score == h[c].score && last.left <= h[c].left)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

/* encode(text: str) -> list[int] | None; text already has ▁ for spaces */
static PyObject *SPMMerger_encode(SPMMerger *m, PyObject *text) {
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "encode() takes a str");
        return NULL;
    }
    Py_ssize_t nb;
    const char *s = PyUnicode_AsUTF8AndSize(text, &nb);
    if (!s) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (nb == 0) return PyList_New(0);
    /* symbols: start offset, byte length (0 = merged away), prev, next */
    Py_ssize_t *start = PyMem_Malloc(nb * sizeof(Py_ssize_t)), *len = PyMem_Malloc(nb * sizeof(Py_ssize_t));
    Py_ssize_t *prev = PyMem_Malloc(nb * sizeof(Py_ssize_t)), *next = PyMem_Malloc(nb * sizeof(Py_ssize_t));
    Bigram *heap = PyMem_Malloc((3 * nb + 4) * sizeof(Bigram));
    PyObject *out = NULL;
    if (!start || !len || !prev || !next || !heap) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t n = 0, hn = 0;
    for (Py_ssize_t off = 0; off < nb; n++) {
        unsigned char lead = (unsigned char)s[off];
        Py_ssize_t w = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
        if (w > nb - off) w = nb - off;
        start[n] = off;
        len[n] = w;
        prev[n] = n - 1;
        off += w;
        next[n] = off == nb ? -1 : n + 1;
    }
    for (Py_ssize_t i = 0; i + 1 < n; i++) {
        Entry *e = spm_find(m, s + start[i], len[i] + len[i + 1]);
        if (e->hash) heap_push(heap, &hn, (Bigram){e->score, i, i + 1, len[i] + len[i + 1]});
    }
    while (hn > 0) {
        Bigram b = heap_pop(heap, &hn);
        if (!len[b.left] || !len[b.right] || len[b.left] + len[b.right] != b.size) continue;
        len[b.left] += len[b.right];
        len[b.right] = 0;
        next[b.left] = next[b.right];
        if (next[b.right] >= 0) prev[next[b.right]] = b.left;
        Py_ssize_t pairs[2][2] = {{prev[b.left], b.left}, {b.left, next[b.left]}};
        for (int k = 0; k < 2; k++) {
            Py_ssize_t l = pairs[k][0], r = pairs[k][1];
            if (l < 0 || r < 0) continue;
            Entry *e = spm_find(m, s + start[l], len[l] + len[r]);
            if (e->hash) {
                if (hn >= 3 * nb + 4) goto done; /* cannot happen: at most n + 2 merges pushes */
                heap_push(heap, &hn, (Bigram){e->score, l, r, len[l] + len[r]});
            }
        }
    }
    out = PyList_New(0);
    for (Py_ssize_t i = 0; out && i >= 0; i = next[i]) {
        Entry *e = spm_find(m, s + start[i], len[i]);
        int32_t ids[4];
        Py_ssize_t k = 0;
        if (e->hash) {
            ids[k++] = e->id;
        } else {
            for (Py_ssize_t j = 0; j < len[i]; j++) {
                int32_t id = m->byte_ids[(unsigned char)s[start[i] + j]];
                if (id < 0) { /* no byte token: let Python raise its error */
                    Py_CLEAR(out);
                    PyMem_Free(start), PyMem_Free(len), PyMem_Free(prev), PyMem_Free(next), PyMem_Free(heap);
                    Py_RETURN_NONE;
                }
                ids[k++] = id;
            }
        }
        for (Py_ssize_t j = 0; out && j < k; j++) {
            PyObject *v = PyLong_FromLong(ids[j]);
            if (!v || PyList_Append(out, v) < 0) Py_CLEAR(out);
            Py_XDECREF(v);
        }
    }
done:
    PyMem_Free(start);
    PyMem_Free(len);
    PyMem_Free(prev);
    PyMem_Free(next);
    PyMem_Free(heap);
    return out;
}

static PyMethodDef SPMMerger_methods[] = {
    {"encode", (PyCFunction)SPMMerger_encode, METH_O, "ids for one escaped fragment, or None"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject SPMMergerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tokenizer._accel.SPMMerger",
    .tp_basicsize = sizeof(SPMMerger),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)SPMMerger_init,
    .tp_dealloc = (destructor)SPMMerger_dealloc,
    .tp_methods = SPMMerger_methods,
    .tp_doc = "Score-driven SentencePiece-style BPE (see tokenizer/spm.py).",
};

