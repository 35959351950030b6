/*
 * no_nccl.c — the NCCL entry points of a build without CUDA (the Makefile
 * links this file instead of nccl.c): they report that NCCL is absent.
 */
#include <stdio.h>

#include "comm/comm.h"

f8_status f8_comm_id_create(f8_comm_id *id, char *error, size_t error_size)
{
    if (!id) {
        if (error && error_size) snprintf(error, error_size, "f8_comm_id_create: id is NULL");
        return F8_ERR_INVALID_ARGUMENT;
    }
    if (error && error_size) snprintf(error, error_size, "f8_comm_id_create: this build of f8 has no NCCL (CUDA=0)");
    return F8_ERR_NO_DEVICE;
}

f8_status f8i_comm_nccl_init(f8_comm *c, const f8_comm_id *id)
{
    (void)id;
    return f8i_error(c->ctx, F8_ERR_NO_DEVICE, "f8_comm_create_nccl: this build of f8 has no NCCL (CUDA=0)");
}
