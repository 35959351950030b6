/*
 * corpus.h — the trainer's embedded default data: an English-like byte corpus
 * the program generates itself from a seed (no download, no file).
 *
 * The corpus is one document a line, mixing tasks that a small GPT can learn
 * at several levels, so its loss falls well below the unigram entropy:
 *   - stories from a small probabilistic grammar: subject-verb agreement
 *     across prepositional phrases and relative clauses ("The fox near the
 *     trees that chase a bird sleeps."), a/an before vowels, tense kept over a
 *     line, he/she and his/her agreeing with a named subject;
 *   - facts about a small "world" drawn once from the seed (each person's
 *     city, pet, colour, number, friend), stated and asked again and again:
 *     memorisation ("Q: where does Alice live? A: Oslo.");
 *   - arithmetic ("47+38=85", "61-17=44", "7*8=56");
 *   - counting ("count by 3: 12 15 18 21", "count down: 9 8 7", number words);
 *   - copying and reversing letter strings ("reverse: kqzm -> mzqk");
 *   - nested brackets ("brackets: ([]{()})"): the closers follow a stack;
 *   - key-value recall in context ("recall: k=3 q=7 m=1 ? q=7");
 *   - sorting digits ("sort: 5 2 9 1 -> 1 2 5 9").
 * Every byte is printable ASCII or '\n'; vocabulary 256 (byte-level).
 *
 * Entropies are in nats (divide by ln 2 for bits).
 */
#ifndef F8_TRAIN_CORPUS_H
#define F8_TRAIN_CORPUS_H

#include <stddef.h>
#include <stdint.h>

#include "f8.h"

/* Fill buf[0, n) with the corpus of `seed`. Deterministic on every platform
 * (integer arithmetic only): the same seed gives the same bytes, and the bytes
 * for n are a prefix of the bytes for any larger n (the last line is cut where
 * n ends). n == 0 writes nothing. Cannot fail. */
void corpus_generate(uint64_t seed, uint8_t *buf, size_t n);

/* Plug-in estimate of the conditional entropy, in nats per byte,
 *   H(X_t | X_{t-order} .. X_{t-1}) = -sum p(ctx, x) ln p(x | ctx)
 * over the n - order positions of buf that have a full context; order 0 is
 * the unigram entropy. The estimate is biased low when there are few samples
 * per context (high orders on short buffers). [out] *nats (0 when there are no
 * positions). Errors: F8_ERR_INVALID_ARGUMENT for order outside [0, 7] or a
 * NULL pointer (buf may be NULL when n == 0); F8_ERR_OUT_OF_MEMORY (order 1
 * counts in a 512 KiB table; orders >= 2 sort 8 * n bytes of keys). */
f8_status corpus_entropy(const uint8_t *buf, size_t n, int order, double *nats);

/* Unigram entropy of buf in nats per byte (order 0 above); 0 for n == 0.
 * Cannot fail. */
double corpus_unigram_entropy(const uint8_t *buf, size_t n);

/* One line naming the corpus's parts, for the trainer's banner. Static. */
const char *corpus_describe(void);

/* The name of the world's person i (its people are the same for every seed;
 * their facts are not), or NULL past the last. */
const char *corpus_person(int i);

#endif /* F8_TRAIN_CORPUS_H */
