/*
 * tokenizer.c — llm.c's GPT-2 tokenizer file, decoding only (tokenizer.h).
 * The whole table is one allocation: the token bytes back to back, with an
 * offset per id.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

struct tokenizer {
    int64_t vocab;
    int32_t eot;
    uint32_t *offset; /* (vocab + 1) into text */
    char *text;
};

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int tokenizer_load(const char *path, tokenizer **out, char *err, size_t n)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, n, "cannot open tokenizer '%s'", path);
        return -1;
    }
    unsigned char h[1024];
    tokenizer *t = NULL;
    const char *why = NULL;
    if (fread(h, 1, sizeof h, f) != sizeof h) why = "shorter than its 1024-byte header";
    else if (le32(h) != 20240328u) why = "not an llm.c tokenizer file (magic is not 20240328)";
    else if (le32(h + 4) != 1 && le32(h + 4) != 2) why = "version is not 1 or 2";
    else if (le32(h + 8) == 0 || le32(h + 8) > (1u << 24)) why = "vocabulary size out of range";
    /* the rest of the file bounds the table: one length byte and 1..255
     * bytes per token, nothing after the last (a hostile vocabulary size
     * allocates nothing) */
    long end = !why && fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    const int64_t v = le32(h + 8), rest = end - 1024;
    if (!why && (end < 0 || fseek(f, 1024, SEEK_SET) != 0)) why = "cannot be read to its end";
    else if (!why && rest < 2 * v) why = "shorter than its vocabulary size says (2 bytes or more per token)";
    if (!why) {
        t = (tokenizer *)calloc(1, sizeof *t);
        if (t) t->offset = (uint32_t *)malloc((size_t)(v + 1) * 4), t->text = (char *)malloc((size_t)(rest - v));
        if (!t || !t->offset || !t->text) why = "out of memory";
        for (int64_t i = 0; !why && i < v; i++) {
            unsigned char len;
            if (i == 0) t->offset[0] = 0;
            if (fread(&len, 1, 1, f) != 1 || len == 0) why = "a token has no bytes or the file ends early";
            else if ((int64_t)t->offset[i] + len > rest - v) why = "the file ends inside a token";
            else if (fread(t->text + t->offset[i], 1, len, f) != len) why = "the file ends inside a token";
            else t->offset[i + 1] = t->offset[i] + len;
        }
        if (!why && (int64_t)t->offset[v] + v != rest) why = "bytes follow the last token (not a tokenizer file)";
        if (!why) {
            t->vocab = v;
            t->eot = le32(h + 4) == 2 ? (int32_t)le32(h + 12) : 50256;
            if (le32(h + 4) == 2 && le32(h + 12) >= (uint32_t)v) why = "the end-of-text id is outside the vocabulary";
        }
    }
    fclose(f);
    if (why) {
        snprintf(err, n, "tokenizer '%s': %s", path, why);
        tokenizer_destroy(t);
        return -1;
    }
    *out = t;
    return 0;
}

void tokenizer_destroy(tokenizer *t)
{
    if (!t) return;
    free(t->offset);
    free(t->text);
    free(t);
}

int64_t tokenizer_vocab(const tokenizer *t) { return t->vocab; }
int32_t tokenizer_eot(const tokenizer *t) { return t->eot; }

const char *tokenizer_decode(const tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->vocab) return NULL;
    *len = t->offset[id + 1] - t->offset[id];
    return t->text + t->offset[id];
}
