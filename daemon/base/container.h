/* The structure that embeds a member, from a pointer to that member: how
   a callback that gets an embedded handle or operation (a struct gb_op, a
   struct reg_owner) finds its owner. */
#ifndef QRSD_CONTAINER_H
#define QRSD_CONTAINER_H

#include <stddef.h>

#define CONTAINER_OF(ptr, type, member) \
  ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

#endif
