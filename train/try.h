/*
 * try.h — the trainer's one error macro: TRY(call) returns the call's
 * f8_status from the enclosing function when it is not F8_OK. (The library
 * itself spells the check out at each call.)
 */
#ifndef F8_TRAIN_TRY_H
#define F8_TRAIN_TRY_H

#include "f8.h"

#define TRY(call)                                                                                                      \
    do {                                                                                                               \
        f8_status try_st_ = (call);                                                                                    \
        if (try_st_ != F8_OK) return try_st_;                                                                          \
    } while (0)

#endif
