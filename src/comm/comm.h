/*
 * comm.h — what a communicator is inside f8: a rank of a group, on one ctx,
 * with a transport that moves the bytes (comm_cpu.c: in-process ranks;
 * nccl.c: NCCL). The public calls (comm.c) check their arguments once and
 * issue one COLLECTIVE work op; both backends' entries for that op call the
 * transport, so collectives are recorded and replayed like any other op.
 */
#ifndef F8_COMM_COMM_H
#define F8_COMM_COMM_H

#include "core/f8i.h"

typedef struct f8i_comm_transport {
    const char *name;
    /* Run one collective (arguments already checked, rank's own view). */
    f8_status (*run)(f8_comm *comm, const f8i_collective_args *a);
    /* Leave the group and free the transport state. */
    void (*destroy)(f8_comm *comm);
} f8i_comm_transport;

struct f8_comm {
    f8_ctx *ctx;
    int rank, size;
    const f8i_comm_transport *tr;
    void *state; /* the transport's */
    int async;   /* f8_comm_set_async */
};

/* NCCL (nccl.c in a CUDA build, no_nccl.c otherwise): fill c->tr and
 * c->state for rank c->rank of c->size. */
f8_status f8i_comm_nccl_init(f8_comm *c, const f8_comm_id *id);

#endif /* F8_COMM_COMM_H */
