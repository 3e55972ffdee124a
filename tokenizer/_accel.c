/*
 * tokenizer._accel: optional C speed-ups for tokchat's byte-level BPE.
 *
 * Two things, each with a pure-Python twin that gives identical results
 * (tokenizer/pretokenize.py and tokenizer/bpe.py; the tests run both):
 *
 *   split(text, mode, flags) -> list[str]
 *       The pre-tokenizer regexes of llama.cpp's hot types, hand-compiled:
 *       gpt2, llama3 (digits in threes), qwen2 (single digits), qwen35
 *       (marks join letters) and starcoder (digits isolated first).
 *       `flags` is a 0x110000-byte table: 1 letter, 2 number, 4 mark,
 *       8 whitespace, built in Python from llama.cpp's Unicode classes (or
 *       from plain `regex` classes for tokenizer.json, with MODE_FOLD_LONG_S
 *       for its case-insensitive contractions).
 *
 *   SPMMerger(tokens, scores).encode(fragment) -> list[int] | None
 *       SentencePiece-style merging (highest score first, leftmost on
 *       ties) over a whole fragment, with <0xXX> byte fallback.
 *
 *   Merger(merges, vocab, first_wins).encode(piece) -> list[int] | None
 *       Rank-based BPE on token ids: a pair table (left id, right id) ->
 *       (rank, merged id); lowest rank first, leftmost on ties.  Returns
 *       None when it cannot decide exactly (a byte without a token, a piece
 *       too long for the quadratic scan), and Python takes over.
 *       (_accel_gguf.c's merger_from_gguf builds the same table straight
 *       from a GGUF file's raw arrays, without a Python string per token.)
 *
 *   encode_text(merger, text, mode, flags, cache, whole) (in _accel_encode.c)
 *       split() and Merger.encode() over a whole fragment, without a Python
 *       string per piece, each distinct piece merged once into a C cache.
 *
 * No Python objects are kept beyond the pair table; nothing here allocates
 * per character except the output list.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_accel_merger.h"
#include "_accel_split.h"

enum { F_L = 1, F_N = 2, F_M = 4, F_WS = 8 };

static inline Py_UCS4 cp(const Text *t, Py_ssize_t i) {
    return i < t->n ? PyUnicode_READ(t->kind, t->data, i) : (Py_UCS4)-1;
}

static inline int fl(const Text *t, Py_ssize_t i) {
    if (i >= t->n) return 0;
    Py_UCS4 c = PyUnicode_READ(t->kind, t->data, i);
    return c < 0x110000 ? t->flags[c] : 0;
}

/* "other": in range and neither whitespace, letter nor number (nor mark when marks join letters) */
static inline int is_other(const Text *t, Py_ssize_t i, int letter_mask) {
    return i < t->n && !(fl(t, i) & (F_WS | F_N | letter_mask));
}

static Py_ssize_t contraction(const Text *t, Py_ssize_t i, int any_case, int fold_long_s) {
    if (cp(t, i) != '\'' || i + 1 >= t->n) return 0;
    Py_UCS4 a = cp(t, i + 1), b = i + 2 < t->n ? cp(t, i + 2) : 0;
    if (any_case) {
        if (a < 128) a = (Py_UCS4)Py_TOLOWER((int)a);
        if (b && b < 128) b = (Py_UCS4)Py_TOLOWER((int)b);
    }
    if (fold_long_s && a == 0x17F) a = 's'; /* (?i:'s) under Unicode simple case folding */
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* length of the piece starting at i (always >= 1) */
Py_ssize_t accel_next_piece(const Text *t, Py_ssize_t i, int mode, int fold_long_s) {
    Py_ssize_t n = t->n, j;
    Py_UCS4 c = cp(t, i);
    int f = fl(t, i);
    int letters = mode == MODE_QWEN35 ? (F_L | F_M) : F_L;
    int llama_like = mode == MODE_LLAMA3 || mode == MODE_QWEN2 || mode == MODE_QWEN35;

    if (mode == MODE_STARCODER && (f & F_N)) return 1;
    if ((j = contraction(t, i, llama_like, fold_long_s))) return j;
    if (llama_like) {
        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (f & letters) {
            for (j = i + 1; fl(t, j) & letters; j++) {}
            return j - i;
        }
        if (c != '\r' && c != '\n' && !(f & F_N) && (fl(t, i + 1) & letters)) {
            for (j = i + 2; fl(t, j) & letters; j++) {}
            return j - i;
        }
        /* \p{N}{1,K} */
        if (f & F_N) {
            Py_ssize_t k = mode == MODE_LLAMA3 ? 3 : 1;
            for (j = i + 1; j < i + k && (fl(t, j) & F_N); j++) {}
            return j - i;
        }
        /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
        j = i + (c == ' ');
        if (is_other(t, j, letters)) {
            for (j++; is_other(t, j, letters); j++) {}
            while (j < n && (cp(t, j) == '\r' || cp(t, j) == '\n')) j++;
            return j - i;
        }
        /* \s*[\r\n]+ */
        Py_ssize_t last_nl = -1;
        for (j = i; fl(t, j) & F_WS; j++) {
            Py_UCS4 w = cp(t, j);
            if (w == '\r' || w == '\n') last_nl = j;
        }
        if (last_nl >= 0) return last_nl + 1 - i;
    } else {
        /*  ?\p{L}+ and  ?\p{N}+ (gpt2 only; starcoder never sees a digit here) */
        Py_ssize_t s = i + (c == ' ');
        int fs = fl(t, s);
        int classes[2] = {F_L, mode == MODE_GPT2 ? F_N : 0};
        for (int k = 0; k < 2; k++) {
            if (classes[k] && (fs & classes[k])) {
                for (j = s + 1; fl(t, j) & classes[k]; j++) {}
                return j - i;
            }
        }
        /*  ?[^\s\p{L}\p{N}]+ */
        if (is_other(t, s, F_L)) {
            for (j = s + 1; is_other(t, j, F_L); j++) {}
            return j - i;
        }
    }
    /* \s+(?!\S) | \s+   (starcoder: a digit ends a whitespace run like the end of text) */
    for (j = i; fl(t, j) & F_WS; j++) {}
    if (j == i) return 1; /* cannot happen: every character is L, N, M, whitespace or other */
    if (j < n && j - i > 1 && !(mode == MODE_STARCODER && (fl(t, j) & F_N))) return j - 1 - i;
    return j - i;
}

static PyObject *py_split(PyObject *self, PyObject *args) {
    PyObject *text;
    int mode;
    Py_buffer flags;
    if (!PyArg_ParseTuple(args, "Uiy*", &text, &mode, &flags)) return NULL;
    int fold_long_s = (mode & MODE_FOLD_LONG_S) != 0;
    mode &= ~MODE_FOLD_LONG_S;
    if (flags.len < 0x110000 || mode < 0 || mode > MODE_STARCODER) {
        PyBuffer_Release(&flags);
        PyErr_SetString(PyExc_ValueError, "split: bad mode or flag table");
        return NULL;
    }
    Text t = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text), flags.buf};
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out && i < t.n;) {
        Py_ssize_t len = accel_next_piece(&t, i, mode, fold_long_s);
        PyObject *piece = PyUnicode_Substring(text, i, i + len);
        if (!piece || PyList_Append(out, piece) < 0) {
            Py_XDECREF(piece);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(piece);
        i += len;
    }
    PyBuffer_Release(&flags);
    return out;
}

/* ---- BPE merger ---------------------------------------------------------- */

/* Slot, Merger and the slot lookup live in _accel_merger.h (shared with _accel_gguf.c) */
#define NO_RANK UINT32_MAX

/* the rank of the pair (a, b), NO_RANK when no merge joins them; *merged: the id they merge into */
static inline uint32_t pair_rank(Merger *m, int32_t a, int32_t b, int32_t *merged) {
    Slot *s = merger_find_slot(m, merger_key(a, b));
    if (!s->key) return NO_RANK;
    *merged = s->merged;
    return (uint32_t)s->rank;
}

Py_ssize_t merger_merge(Merger *m, const unsigned char *bytes, Py_ssize_t n, int32_t *sym) {
    if (n > MERGER_MAX_SCAN) return -1;
    /* rank[i]: rank of (sym[i], sym[i+1]) (NO_RANK: none); merged[i]: the id that pair makes */
    uint32_t rank[MERGER_MAX_SCAN];
    int32_t merged[MERGER_MAX_SCAN];
    for (Py_ssize_t i = 0; i < n; i++) {
        sym[i] = m->byte_ids[bytes[i]];
        if (sym[i] < 0) return -1;
    }
    for (Py_ssize_t i = 0; i + 1 < n; i++) rank[i] = pair_rank(m, sym[i], sym[i + 1], &merged[i]);
    while (n > 1) {
        /* the lowest rank, then its leftmost place: two simple loops (the first vectorizes) beat
         * one loop that tracks both, whose branch the CPU mispredicts */
        uint32_t low = NO_RANK;
        for (Py_ssize_t i = 0; i + 1 < n; i++) low = rank[i] < low ? rank[i] : low;
        if (low == NO_RANK) break; /* nothing else can be merged */
        Py_ssize_t best = 0;
        while (rank[best] != low) best++;
        sym[best] = merged[best];
        memmove(&sym[best + 1], &sym[best + 2], (n - best - 2) * sizeof(int32_t));
        memmove(&rank[best], &rank[best + 1], (n - best - 2) * sizeof(uint32_t));
        memmove(&merged[best], &merged[best + 1], (n - best - 2) * sizeof(int32_t));
        n--;
        if (best > 0) rank[best - 1] = pair_rank(m, sym[best - 1], sym[best], &merged[best - 1]);
        if (best + 1 < n) rank[best] = pair_rank(m, sym[best], sym[best + 1], &merged[best]);
    }
    return n;
}

static void Merger_dealloc(Merger *m) {
    PyMem_Free(m->slots);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static int lookup_id(PyObject *vocab, PyObject *text, int32_t *out) {
    PyObject *v = PyDict_GetItemWithError(vocab, text);
    if (!v) return PyErr_Occurred() ? -1 : 0;
    long id = PyLong_AsLong(v);
    if (id == -1 && PyErr_Occurred()) return -1;
    *out = (int32_t)id;
    return 1;
}

void merger_keep_byte_chars(Merger *m, PyObject *byte_chars) {
    m->byte_chars_ok = 1;
    for (int b = 0; b < 256; b++) {
        PyObject *c = PyList_GET_ITEM(byte_chars, b);
        if (!PyUnicode_Check(c) || PyUnicode_GET_LENGTH(c) != 1) {
            m->byte_chars_ok = 0;
            return;
        }
        m->byte_chars[b] = PyUnicode_READ_CHAR(c, 0);
    }
}

/* Merger(merges: list[str], vocab: dict[str, int], byte_chars: list[str], first_wins: bool) */
static int Merger_init(Merger *m, PyObject *args, PyObject *kw) {
    PyObject *merges, *vocab, *byte_chars;
    int first_wins;
    if (!PyArg_ParseTuple(args, "O!O!O!p", &PyList_Type, &merges, &PyDict_Type, &vocab, &PyList_Type,
                          &byte_chars, &first_wins))
        return -1;
    if (PyList_GET_SIZE(byte_chars) != 256) {
        PyErr_SetString(PyExc_ValueError, "byte_chars must hold 256 strings");
        return -1;
    }
    for (int b = 0; b < 256; b++) {
        int32_t id = -1;
        if (lookup_id(vocab, PyList_GET_ITEM(byte_chars, b), &id) < 0) return -1;
        m->byte_ids[b] = id;
    }
    merger_keep_byte_chars(m, byte_chars);
    Py_ssize_t n = PyList_GET_SIZE(merges);
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2 + 16) cap <<= 1;
    PyMem_Free(m->slots);
    m->slots = PyMem_Calloc(cap, sizeof(Slot));
    if (!m->slots) {
        PyErr_NoMemory();
        return -1;
    }
    m->mask = cap - 1;
    PyObject *space = PyUnicode_FromString(" ");
    for (Py_ssize_t r = 0; r < n; r++) {
        PyObject *merge = PyList_GET_ITEM(merges, r);
        if (!PyUnicode_Check(merge)) continue;
        Py_ssize_t cut = PyUnicode_Find(merge, space, 0, PyUnicode_GET_LENGTH(merge), 1);
        if (cut <= 0) continue; /* no space, or a leading one: never applicable to byte-level symbols */
        PyObject *a = PyUnicode_Substring(merge, 0, cut);
        PyObject *b = PyUnicode_Substring(merge, cut + 1, PyUnicode_GET_LENGTH(merge));
        PyObject *ab = (a && b) ? PyUnicode_Concat(a, b) : NULL;
        int32_t ia = -1, ib = -1, iab = -1;
        int ok = ab ? 1 : -1;
        if (ok > 0) ok = lookup_id(vocab, a, &ia);
        if (ok > 0) ok = lookup_id(vocab, b, &ib);
        if (ok > 0) ok = lookup_id(vocab, ab, &iab);
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(ab);
        if (ok < 0) {
            Py_DECREF(space);
            return -1;
        }
        if (ok == 0) {
            /* a merge whose parts or result is not a token: ids cannot express it exactly */
            Py_DECREF(space);
            PyErr_SetString(PyExc_ValueError, "merges name strings that are not tokens");
            return -1;
        }
        Slot *s = merger_find_slot(m, merger_key(ia, ib));
        if (s->key && first_wins) continue;
        s->key = merger_key(ia, ib);
        s->rank = (int32_t)r;
        s->merged = iab;
    }
    Py_DECREF(space);
    return 0;
}

/* encode(piece: str) -> list[int] | None */
static PyObject *Merger_encode(Merger *m, PyObject *piece) {
    if (!PyUnicode_Check(piece)) {
        PyErr_SetString(PyExc_TypeError, "encode() takes a str");
        return NULL;
    }
    Py_ssize_t nbytes;
    const char *utf8 = PyUnicode_AsUTF8AndSize(piece, &nbytes);
    if (!utf8) {
        PyErr_Clear(); /* lone surrogates: the Python path handles them */
        Py_RETURN_NONE;
    }
    int32_t sym[MERGER_MAX_SCAN];
    Py_ssize_t n = merger_merge(m, (const unsigned char *)utf8, nbytes, sym);
    if (n < 0) Py_RETURN_NONE;
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *v = PyLong_FromLong(sym[i]);
        if (!v) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, v);
    }
    return out;
}

static PyMethodDef Merger_methods[] = {
    {"encode", (PyCFunction)Merger_encode, METH_O, "ids for one piece, or None when Python must decide"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject MergerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tokenizer._accel.Merger",
    .tp_basicsize = sizeof(Merger),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Merger_init,
    .tp_dealloc = (destructor)Merger_dealloc,
    .tp_methods = Merger_methods,
    .tp_doc = "Rank-based BPE over token ids (see module docstring).",
};


/* defined in _accel_spm.c; WordPiece and Unigram in _accel_merge_free.c */
extern PyTypeObject SPMMergerType;
extern int accel_merge_free_add(PyObject *module);
/* defined in _accel_encode.c: PieceCache and encode_text */
extern int accel_encode_add(PyObject *module);

static PyMethodDef module_methods[] = {
    {"split", py_split, METH_VARARGS, "split(text, mode, flags) -> list[str]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tokenizer._accel", "Optional C speed-ups for tokchat's BPE.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__accel(void) {
    if (PyType_Ready(&MergerType) < 0 || PyType_Ready(&SPMMergerType) < 0) return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (!mod) return NULL;
    Py_INCREF(&MergerType);
    Py_INCREF(&SPMMergerType);
    if (PyModule_AddObject(mod, "Merger", (PyObject *)&MergerType) < 0 ||
        PyModule_AddObject(mod, "SPMMerger", (PyObject *)&SPMMergerType) < 0 || accel_gguf_add(mod) < 0 ||
        accel_merge_free_add(mod) < 0 || accel_encode_add(mod) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
