/*
 * tokenizer._accel, part 4: the merge-free models (see _accel.c for the module;
 * tokenizer/wordpiece.py, tokenizer/unigram.py and tokenizer/hf_merge_free.py
 * are the pure-Python twins that the tests compare with).
 *
 * WordPiece(vocab: dict[str, int], cont_prefix: str).match(word) -> list[int] | None
 *   Greedy longest match from the left over whole UTF-8 characters; the first
 *   piece is looked up as it is, later ones behind cont_prefix ("##" for HF,
 *   "" for llama.cpp, whose words already carry their leading U+2581).
 *   None when some position matches nothing (the caller emits [UNK]).
 *
 * Unigram(pieces, ids, scores, user_defined, charsmap, unk_id, unk_score,
 *         add_space_prefix, merge_spaces, escape).encode(text) -> list[int] | None
 *   llama.cpp's UGM session on the UTF-8 bytes: user-defined prefixes copied,
 *   the precompiled charsmap's longest match replaced (XOR-compressed double
 *   array), the whitespace rules, then the Viterbi pass with the unknown
 *   penalty and fused unknowns.  None when the text cannot be encoded as
 *   UTF-8 (lone surrogates): Python then runs its own version.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <stdint.h>
#include <string.h>

/* ---- a byte-string hash table (open addressing, FNV-1a) ---------------------------- */

typedef struct {
    uint64_t hash; /* 0 = empty */
    uint32_t off, len;
    int32_t id;     /* -1: only a prefix of some key */
    int32_t extra;  /* Unigram: index into scores; WordPiece: unused */
} Slot;

typedef struct {
    Slot *slots;
    uint64_t mask;
    char *arena;
    Py_ssize_t arena_len, arena_cap;
} Table;

#define FNV_SEED 1469598103934665603ULL
#define FNV_STEP(h, b) (((h) ^ (unsigned char)(b)) * 1099511628211ULL)

static Slot *table_find(Table *t, uint64_t h, const char *p, uint32_t n) {
    h |= 1;
    for (uint64_t i = (h >> 7) & t->mask;; i = (i + 1) & t->mask) {
        Slot *s = &t->slots[i];
        if (!s->hash || (s->hash == h && s->len == n && memcmp(t->arena + s->off, p, n) == 0)) return s;
    }
}

static uint64_t hash_of(const char *p, Py_ssize_t n) {
    uint64_t h = FNV_SEED;
    for (Py_ssize_t i = 0; i < n; i++) h = FNV_STEP(h, p[i]);
    return h;
}

static int table_alloc(Table *t, Py_ssize_t entries, Py_ssize_t bytes) {
    uint64_t cap = 16;
    while (cap < (uint64_t)entries * 2 + 16) cap <<= 1;
    t->slots = PyMem_Calloc(cap, sizeof(Slot));
    t->arena = PyMem_Malloc(bytes + 1);
    t->arena_cap = bytes + 1;
    t->arena_len = 0;
    t->mask = cap - 1;
    if (!t->slots || !t->arena) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void table_free(Table *t) {
    PyMem_Free(t->slots);
    PyMem_Free(t->arena);
    t->slots = NULL;
    t->arena = NULL;
}

/* Insert key (and, with prefixes, every proper prefix ending on a byte or char boundary as a prefix-only entry). */
static Slot *table_put(Table *t, const char *p, uint32_t n, int32_t id, int32_t extra, int prefixes, int bytewise) {
    uint32_t off = (uint32_t)t->arena_len;
    memcpy(t->arena + off, p, n);
    t->arena_len += n;
    if (prefixes) {
        uint64_t h = FNV_SEED;
        for (uint32_t k = 1; k < n; k++) {
            h = FNV_STEP(h, p[k - 1]);
            if (!bytewise && ((unsigned char)p[k] & 0xC0) == 0x80) continue; /* not a char boundary */
            Slot *s = table_find(t, h, p, k);
            if (!s->hash) {
                s->hash = h | 1;
                s->off = off;
                s->len = k;
                s->id = -1;
            }
        }
    }
    Slot *s = table_find(t, hash_of(p, n), p, n);
    s->hash = hash_of(p, n) | 1;
    s->off = off;
    s->len = n;
    s->id = id;
    s->extra = extra;
    return s;
}

static inline int utf8_len(unsigned char c) {
    static const int lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

/* ---- WordPiece --------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Table t;
    char *cont;
    Py_ssize_t cont_len, max_len;
    char *buf;
    Py_ssize_t buf_cap;
} WordPiece;

static void WordPiece_dealloc(WordPiece *w) {
    table_free(&w->t);
    PyMem_Free(w->cont);
    PyMem_Free(w->buf);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static int WordPiece_init(WordPiece *w, PyObject *args, PyObject *kw) {
    PyObject *vocab;
    const char *cont;
    Py_ssize_t cont_len;
    if (!PyArg_ParseTuple(args, "O!s#", &PyDict_Type, &vocab, &cont, &cont_len)) return -1;
    Py_ssize_t pos = 0, total = 0, n = PyDict_Size(vocab);
    PyObject *key, *value;
    while (PyDict_Next(vocab, &pos, &key, &value)) {
        Py_ssize_t len;
        if (!PyUnicode_Check(key) || !PyLong_Check(value) || !PyUnicode_AsUTF8AndSize(key, &len)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "vocab must map str to int");
            return -1;
        }
        total += len;
    }
    table_free(&w->t);
    if (table_alloc(&w->t, n, total) < 0) return -1;
    w->max_len = 0;
    pos = 0;
    while (PyDict_Next(vocab, &pos, &key, &value)) {
        Py_ssize_t len;
        const char *p = PyUnicode_AsUTF8AndSize(key, &len);
        long id = PyLong_AsLong(value);
        if (id == -1 && PyErr_Occurred()) return -1;
        table_put(&w->t, p, (uint32_t)len, (int32_t)id, 0, 0, 0);
        if (len > w->max_len) w->max_len = len;
    }
    PyMem_Free(w->cont);
    w->cont = PyMem_Malloc(cont_len + 1);
    if (!w->cont) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(w->cont, cont, cont_len);
    w->cont_len = cont_len;
    return 0;
}

static PyObject *WordPiece_match(WordPiece *w, PyObject *arg) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(arg, &n);
    if (!s) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_ssize_t need = w->cont_len + w->max_len + 8;
    if (need > w->buf_cap) {
        PyMem_Free(w->buf);
        w->buf = PyMem_Malloc(need);
        w->buf_cap = need;
        if (!w->buf) {
            w->buf_cap = 0;
            return PyErr_NoMemory();
        }
    }
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t pre = i ? w->cont_len : 0;
        if (pre) memcpy(w->buf, w->cont, pre);
        Py_ssize_t limit = n - i < w->max_len ? n - i : w->max_len;
        /* candidate ends on char boundaries, longest first */
        Py_ssize_t j = i + limit;
        int found = 0;
        for (; j > i; j--) {
            if (j < n && ((unsigned char)s[j] & 0xC0) == 0x80) continue;
            Py_ssize_t len = pre + (j - i);
            if (len > w->max_len) continue;
            memcpy(w->buf + pre, s + i, j - i);
            Slot *slot = table_find(&w->t, hash_of(w->buf, len), w->buf, (uint32_t)len);
            if (slot->hash) {
                PyObject *id = PyLong_FromLong(slot->id);
                if (!id || PyList_Append(out, id) < 0) {
                    Py_XDECREF(id);
                    Py_DECREF(out);
                    return NULL;
                }
                Py_DECREF(id);
                i = j;
                found = 1;
                break;
            }
        }
        if (!found) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
    }
    return out;
}

static PyMethodDef WordPiece_methods[] = {
    {"match", (PyCFunction)WordPiece_match, METH_O, "match(word) -> list[int] | None"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject WordPieceType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tokenizer._accel.WordPiece",
    .tp_basicsize = sizeof(WordPiece),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)WordPiece_init,
    .tp_dealloc = (destructor)WordPiece_dealloc,
    .tp_methods = WordPiece_methods,
    .tp_doc = "Greedy longest-match WordPiece (see the part's comment).",
};

/* ---- Unigram ----------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Table pieces;   /* piece bytes -> id, extra = index into scores; all char-boundary prefixes */
    Table user;     /* user-defined tokens and all their byte prefixes */
    double *scores;
    uint32_t *xcda;
    Py_ssize_t xcda_size;
    char *repl;
    Py_ssize_t repl_size;
    int32_t unk_id;
    double unk_score;
    int add_space_prefix, merge_spaces, escape, has_user;
} Unigram;

static void Unigram_dealloc(Unigram *u) {
    table_free(&u->pieces);
    table_free(&u->user);
    PyMem_Free(u->scores);
    PyMem_Free(u->xcda);
    PyMem_Free(u->repl);
    Py_TYPE(u)->tp_free((PyObject *)u);
}

static int Unigram_init(Unigram *u, PyObject *args, PyObject *kw) {
    PyObject *texts, *ids, *scores, *user, *charsmap;
    if (!PyArg_ParseTuple(args, "O!O!O!O!Oidppp", &PyList_Type, &texts, &PyList_Type, &ids, &PyList_Type, &scores,
                          &PyList_Type, &user, &charsmap, &u->unk_id, &u->unk_score, &u->add_space_prefix,
                          &u->merge_spaces, &u->escape))
        return -1;
    Py_ssize_t n = PyList_GET_SIZE(texts), total = 0, entries = 0;
    if (PyList_GET_SIZE(ids) != n || PyList_GET_SIZE(scores) != n) {
        PyErr_SetString(PyExc_ValueError, "pieces, ids and scores differ in length");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        if (!PyUnicode_Check(PyList_GET_ITEM(texts, i)) || !PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(texts, i), &len))
            return -1;
        total += len;
        entries += len;
    }
    table_free(&u->pieces);
    table_free(&u->user);
    PyMem_Free(u->scores);
    u->scores = PyMem_Malloc(sizeof(double) * (n + 1));
    if (!u->scores || table_alloc(&u->pieces, entries, total) < 0) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        const char *p = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(texts, i), &len);
        long id = PyLong_AsLong(PyList_GET_ITEM(ids, i));
        double score = PyFloat_AsDouble(PyList_GET_ITEM(scores, i));
        if (PyErr_Occurred()) return -1;
        u->scores[i] = score;
        if (len > 0) table_put(&u->pieces, p, (uint32_t)len, (int32_t)id, (int32_t)i, 1, 0);
    }
    Py_ssize_t un = PyList_GET_SIZE(user), utotal = 0;
    for (Py_ssize_t i = 0; i < un; i++) {
        Py_ssize_t len;
        if (!PyUnicode_Check(PyList_GET_ITEM(user, i)) || !PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(user, i), &len))
            return -1;
        utotal += len;
    }
    if (table_alloc(&u->user, utotal + 1, utotal) < 0) return -1;
    for (Py_ssize_t i = 0; i < un; i++) {
        Py_ssize_t len;
        const char *p = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(user, i), &len);
        if (len > 0) table_put(&u->user, p, (uint32_t)len, 0, 0, 1, 1);
    }
    u->has_user = un > 0;
    PyMem_Free(u->xcda);
    PyMem_Free(u->repl);
    u->xcda = NULL;
    u->repl = NULL;
    u->xcda_size = u->repl_size = 0;
    if (charsmap != Py_None) {
        char *data;
        Py_ssize_t size;
        if (PyBytes_AsStringAndSize(charsmap, &data, &size) < 0) return -1;
        uint32_t blob;
        if (size < 4) goto bad;
        memcpy(&blob, data, 4);
        if ((Py_ssize_t)blob + 4 >= size || blob % 4) goto bad;
        u->xcda_size = blob / 4;
        u->xcda = PyMem_Malloc(blob ? blob : 1);
        u->repl_size = size - 4 - blob;
        u->repl = PyMem_Malloc(u->repl_size);
        if (!u->xcda || !u->repl) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(u->xcda, data + 4, blob);
        memcpy(u->repl, data + 4 + blob, u->repl_size);
        /* replacements are copied as bytes here but decoded (surrogateescape) by the Python twin:
         * with invalid UTF-8 the two would differ, so such a charsmap is left to Python
         * (found by tests/fuzz, reproducer crashes/gguf/charsmap-replacement-not-utf8) */
        PyObject *text = PyUnicode_DecodeUTF8(u->repl, u->repl_size, "strict");
        if (!text) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "precompiled_charsmap replacements are not valid UTF-8");
            return -1;
        }
        Py_DECREF(text);
    }
    return 0;
bad:
    PyErr_SetString(PyExc_ValueError, "bad precompiled_charsmap");
    return -1;
}

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

static int buf_put(Buf *b, const char *p, Py_ssize_t n) {
    if (b->len + n > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n) cap *= 2;
        char *q = PyMem_Realloc(b->p, cap);
        if (!q) return -1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

static inline uint32_t xcda_base(const uint32_t *a, uint32_t i) {
    uint32_t v = a[i];
    return (v >> 10) << ((v & (1U << 9)) >> 6);
}

/* llama.cpp's normalize_prefix: returns bytes consumed, the replacement in out and out_len.
 * CHARSMAP_OUT_OF_ARRAY / CHARSMAP_UNTERMINATED: a bad charsmap (the messages are unigram.py's) */
#define CHARSMAP_OUT_OF_ARRAY (-1)
#define CHARSMAP_UNTERMINATED (-2)
static Py_ssize_t normalize_prefix(Unigram *u, const char *s, Py_ssize_t n, Py_ssize_t at, const char **out,
                                   Py_ssize_t *out_len) {
    if (u->has_user) { /* the longest walk along user-defined tokens, complete or not */
        uint64_t h = FNV_SEED;
        Py_ssize_t best = 0;
        for (Py_ssize_t k = at; k < n; k++) {
            h = FNV_STEP(h, s[k]);
            if (!table_find(&u->user, h, s + at, (uint32_t)(k - at + 1))->hash) break;
            /* whole characters only, as the Python twin walks them: a character that merely shares its
             * first bytes with a user-defined token still reaches the charsmap (seen reviewing the C for
             * tests/fuzz; reproducer crashes/gguf/user-token-prefix-inside-a-character) */
            if (k + 1 >= n || ((unsigned char)s[k + 1] & 0xC0) != 0x80) best = k - at + 1;
        }
        if (best > 0) {
            *out = s + at;
            *out_len = best;
            return best;
        }
    }
    Py_ssize_t longest = 0;
    uint32_t repl_off = 0;
    if (u->xcda_size > 0) {
        uint32_t node = xcda_base(u->xcda, 0);
        for (Py_ssize_t k = at; k < n; k++) {
            unsigned char c = (unsigned char)s[k];
            if (c == 0) break;
            node ^= c;
            if ((Py_ssize_t)node >= u->xcda_size) return CHARSMAP_OUT_OF_ARRAY;
            uint32_t v = u->xcda[node];
            if ((v & ((1U << 31) | 0xFF)) != c) break;
            int leaf = (v >> 8) & 1;
            node ^= xcda_base(u->xcda, node);
            if ((Py_ssize_t)node >= u->xcda_size) return CHARSMAP_OUT_OF_ARRAY;
            /* a key ending inside a UTF-8 character never matches: the Python twin walks whole
             * characters, and real charsmaps hold whole-character keys only (llama.cpp would cut the
             * character; found by tests/fuzz, reproducer crashes/gguf/charsmap-key-inside-a-character) */
            if (leaf && (k + 1 >= n || ((unsigned char)s[k + 1] & 0xC0) != 0x80)) {
                longest = k - at + 1;
                repl_off = u->xcda[node] & ((1U << 31) - 1);
            }
        }
    }
    if (longest > 0) {
        if ((Py_ssize_t)repl_off >= u->repl_size) return CHARSMAP_UNTERMINATED;
        const char *r = u->repl + repl_off;
        Py_ssize_t max = u->repl_size - repl_off, len = 0;
        while (len < max && r[len]) len++;
        if (len == max) return CHARSMAP_UNTERMINATED;
        *out = r;
        *out_len = len;
        return longest;
    }
    /* one (valid) UTF-8 character, unchanged: Python strings encode to valid UTF-8 */
    Py_ssize_t len = utf8_len((unsigned char)s[at]);
    if (len > n - at) len = n - at;
    *out = s + at;
    *out_len = len;
    return len;
}

typedef struct {
    int32_t id;
    Py_ssize_t from;
    double score;
} Best;

static PyObject *Unigram_encode(Unigram *u, PyObject *arg) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(arg, &n);
    if (!s) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    static const char ESC[] = "\xe2\x96\x81";
    const char *space = u->escape ? ESC : " ";
    Py_ssize_t space_len = u->escape ? 3 : 1;
    Buf norm = {NULL, 0, 0};
    int prepended = 0, in_word = 0;
    for (Py_ssize_t at = 0; at < n;) {
        const char *r;
        Py_ssize_t rl;
        Py_ssize_t used = normalize_prefix(u, s, n, at, &r, &rl);
        if (used < 0) {
            PyMem_Free(norm.p);
            PyErr_SetString(PyExc_ValueError, used == CHARSMAP_UNTERMINATED
                                                  ? "unterminated string in precompiled_charsmap"
                                                  : "precompiled_charsmap walks out of its double array");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < rl; i++) {
            char c = r[i];
            if (c != ' ') {
                if (!in_word) {
                    in_word = 1;
                    if ((u->add_space_prefix && !prepended) || u->merge_spaces) {
                        if (buf_put(&norm, space, space_len) < 0) goto nomem;
                        prepended = 1;
                    }
                }
                if (buf_put(&norm, &c, 1) < 0) goto nomem;
            } else {
                in_word = 0;
                if (!u->merge_spaces && buf_put(&norm, space, space_len) < 0) goto nomem;
            }
        }
        at += used;
    }
    PyObject *out = PyList_New(0);
    Py_ssize_t len = norm.len;
    if (!out || len == 0) {
        PyMem_Free(norm.p);
        return out;
    }
    Best *best = PyMem_Malloc(sizeof(Best) * (len + 1));
    if (!best) {
        Py_DECREF(out);
        goto nomem;
    }
    for (Py_ssize_t i = 0; i <= len; i++) {
        best[i].id = u->unk_id;
        best[i].from = 0;
        best[i].score = -DBL_MAX;
    }
    best[0].score = 0;
    const char *t = norm.p;
    for (Py_ssize_t at = 0; at < len;) {
        Py_ssize_t cp = utf8_len((unsigned char)t[at]);
        if (cp > len - at) cp = len - at;
        int single = 0;
        double here = best[at].score;
        uint64_t h = FNV_SEED;
        for (Py_ssize_t k = at; k < len; k++) {
            h = FNV_STEP(h, t[k]);
            if (k + 1 < len && ((unsigned char)t[k + 1] & 0xC0) == 0x80) continue; /* mid-character */
            Slot *slot = table_find(&u->pieces, h, t + at, (uint32_t)(k + 1 - at));
            if (!slot->hash) break; /* no piece starts this way */
            if (slot->id < 0) continue;
            if (k + 1 - at == cp) single = 1;
            double cand = here + u->scores[slot->extra];
            if (cand > best[k + 1].score) {
                best[k + 1].id = slot->id;
                best[k + 1].from = at;
                best[k + 1].score = cand;
            }
        }
        if (!single) {
            double cand = here + u->unk_score;
            if (cand > best[at + cp].score) {
                best[at + cp].id = u->unk_id;
                best[at + cp].from = at;
                best[at + cp].score = cand;
            }
        }
        at += cp;
    }
    int prev_unk = 0;
    for (Py_ssize_t pos = len;;) {
        int is_unk = best[pos].id == u->unk_id;
        if (!(prev_unk && is_unk)) {
            PyObject *id = PyLong_FromLong(best[pos].id);
            if (!id || PyList_Append(out, id) < 0) {
                Py_XDECREF(id);
                Py_DECREF(out);
                PyMem_Free(best);
                PyMem_Free(norm.p);
                return NULL;
            }
            Py_DECREF(id);
        }
        if (best[pos].from == 0) break;
        prev_unk = is_unk;
        pos = best[pos].from;
    }
    PyMem_Free(best);
    PyMem_Free(norm.p);
    if (PyList_Reverse(out) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
nomem:
    PyMem_Free(norm.p);
    return PyErr_NoMemory();
}

static PyMethodDef Unigram_methods[] = {
    {"encode", (PyCFunction)Unigram_encode, METH_O, "encode(text) -> list[int] | None"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject UnigramType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tokenizer._accel.Unigram",
    .tp_basicsize = sizeof(Unigram),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Unigram_init,
    .tp_dealloc = (destructor)Unigram_dealloc,
    .tp_methods = Unigram_methods,
    .tp_doc = "llama.cpp's Unigram (UGM) session (see the part's comment).",
};

int accel_merge_free_add(PyObject *module) {
    if (PyType_Ready(&WordPieceType) < 0 || PyType_Ready(&UnigramType) < 0) return -1;
    Py_INCREF(&WordPieceType);
    Py_INCREF(&UnigramType);
    if (PyModule_AddObject(module, "WordPiece", (PyObject *)&WordPieceType) < 0) return -1;
    if (PyModule_AddObject(module, "Unigram", (PyObject *)&UnigramType) < 0) return -1;
    return 0;
}
