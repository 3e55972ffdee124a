/*
 * The hand-compiled pre-tokenizer of _accel.c, shared with _accel_encode.c
 * (which splits and merges a whole fragment without a Python string per piece).
 */
#ifndef TOKCHAT_ACCEL_SPLIT_H
#define TOKCHAT_ACCEL_SPLIT_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

enum { MODE_GPT2 = 0, MODE_LLAMA3 = 1, MODE_QWEN2 = 2, MODE_QWEN35 = 3, MODE_STARCODER = 4 };
/* or-ed into the mode for Hugging Face's "(?i:'s|...)": U+017F LONG S also matches 's' */
enum { MODE_FOLD_LONG_S = 0x100 };

/* a str's code points and the 0x110000-byte class table (1 letter, 2 number, 4 mark, 8 whitespace) */
typedef struct {
    int kind;
    const void *data;
    Py_ssize_t n;
    const unsigned char *flags;
} Text;

/* the length in code points of the piece starting at i (always >= 1); mode without MODE_FOLD_LONG_S */
Py_ssize_t accel_next_piece(const Text *t, Py_ssize_t i, int mode, int fold_long_s);

#endif
