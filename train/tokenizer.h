/*
 * tokenizer.h — decoding GPT-2 token ids to text with llm.c's tokenizer file
 * (gpt2_tokenizer.bin): a header of 256 little-endian uint32 (magic
 * 20240328, version 1 or 2, vocab size, and in version 2 the end-of-text
 * id; version 1 means 50256), then per token id in order one length byte
 * (1..255) and that many bytes of the token's text.
 */
#ifndef F8_TRAIN_TOKENIZER_H
#define F8_TRAIN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct tokenizer tokenizer;

/* Returns 0, or -1 with the reason in err (a missing file, a bad magic or
 * version, a token of length 0, a file shorter or longer than its tokens, a
 * version-2 end-of-text id outside the vocabulary). Allocates no more than
 * the file's size, whatever its header says. */
int tokenizer_load(const char *path, tokenizer **tok, char *err, size_t err_size);
void tokenizer_destroy(tokenizer *tok);
int64_t tokenizer_vocab(const tokenizer *tok);
int32_t tokenizer_eot(const tokenizer *tok);
/* The bytes of token id ([0, vocab)), *len of them (not NUL-terminated);
 * NULL for an id outside the vocabulary. Owned by tok. */
const char *tokenizer_decode(const tokenizer *tok, int32_t id, size_t *len);

#endif /* F8_TRAIN_TOKENIZER_H */
