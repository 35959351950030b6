/*
 * json.h — one strict JSON reader (RFC 8259) for every JSON file f8 reads
 * from elsewhere: the safetensors header, Hugging Face's config.json, the
 * trainer's files. Internal (f8i_), pure host code, no ctx.
 *
 * Strict means: the text is valid UTF-8 (RFC 3629: no overlongs, surrogates
 * or code points past U+10FFFF, no byte-order mark); one value with only
 * whitespace (space, tab, CR, LF) around it; strings without raw control
 * bytes, with the escapes \" \\ \/ \b \f \n \r \t \uXXXX, a \u surrogate
 * only as a high-low pair; numbers in JSON's form (no leading zeros, '+',
 * NaN, Infinity or hex); arrays and objects nested at most max_depth deep;
 * no key twice in one object (compared after decoding escapes). Anything else
 * is an error naming the byte, line and column, never a guess.
 *
 * The result is a tree held in one allocation (free it with f8i_json_free):
 * an array or object's children are reached by child / next, an object's
 * member carries its key; lookups are by key (f8i_json_get).
 */
#ifndef F8_IO_JSON_H
#define F8_IO_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "f8.h"

/* Nesting the parser accepts when the caller gives max_depth <= 0: every
 * file f8 reads nests far less (a safetensors header 3, config.json 2-3). */
#define F8I_JSON_DEPTH 64

typedef enum f8i_json_kind {
    F8I_JSON_NULL,
    F8I_JSON_FALSE,
    F8I_JSON_TRUE,
    F8I_JSON_NUMBER,
    F8I_JSON_STRING,
    F8I_JSON_ARRAY,
    F8I_JSON_OBJECT,
} f8i_json_kind;

typedef struct f8i_json f8i_json;
struct f8i_json {
    f8i_json_kind kind;
    size_t offset;       /* the value's first byte in the text */
    const char *key;     /* an object's member: its key, decoded, NUL-terminated; else NULL */
    size_t key_len;      /* bytes of key (a \u0000 escape makes strlen(key) shorter) */
    size_t key_offset;   /* an object's member: its key's first byte in the text */
    const f8i_json *child; /* array / object: the first element or member; NULL when empty */
    const f8i_json *next;  /* the next element or member of the same parent; NULL for the last */
    size_t count;        /* array / object: elements or members */
    /* STRING: the decoded bytes, NUL-terminated (len of them; a \u0000 makes
     * strlen shorter). NUMBER: the literal as written (len bytes). */
    const char *str;
    size_t len;
    /* NUMBER: is_int when the literal has no fraction or exponent and fits
     * int64 (then i holds it exactly); num is the nearest double (±HUGE_VAL
     * past the range of double). */
    int is_int;
    int64_t i;
    double num;
};

/* Parse text[0, len). max_depth: arrays and objects nested deeper than
 * this are refused (<= 0: F8I_JSON_DEPTH). Returns F8_OK with *root set (free
 * it with f8i_json_free), F8_ERR_INVALID_ARGUMENT with the reason and its
 * place in err ("byte 12 (line 2, column 3): ..."), or F8_ERR_OUT_OF_MEMORY;
 * on error *root is NULL. */
f8_status f8i_json_parse(const char *text, size_t len, int max_depth, f8i_json **root, char *err, size_t err_size);
void f8i_json_free(f8i_json *root);

/* The member of object obj with this key (a C string: keys holding a NUL
 * are never found), or NULL when obj is not an object or has none. */
const f8i_json *f8i_json_get(const f8i_json *obj, const char *key);

/* The name of a kind ("null", "number", "object", ...), for messages. */
const char *f8i_json_kind_name(f8i_json_kind kind);

/* 1 when s[0, n) is valid UTF-8 (RFC 3629: no overlongs, surrogates or
 * code points past U+10FFFF). */
int f8i_utf8_valid(const unsigned char *s, size_t n);

#endif /* F8_IO_JSON_H */
