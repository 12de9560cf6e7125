/* A client of qrsd as the log and the draw journal name it: its
   connection number, and its pid and uid when the socket told us
   (SO_PEERCRED).  name is the text log lines begin with, "conn 3" or
   "conn 3 (pid 42, uid 1000)"; the pid and uid are kept as numbers for the
   journal fields (CLIENT_PID=, CLIENT_UID=) and the draw journal. */
#ifndef QRSD_BASE_PEER_H
#define QRSD_BASE_PEER_H

#include <stdio.h>
#include <sys/types.h>

struct peer {
  unsigned long long conn;
  int has_cred;                 /* pid and uid known; else both 0 */
  pid_t pid;
  uid_t uid;
  char name[64];                /* fits "conn <2^64-1> (pid <int>, uid
                                   <2^32-1>)" */
};

/* A peer known by its connection number only. */
static inline void
peer_init(struct peer *p, unsigned long long conn)
{
  p->conn = conn;
  p->has_cred = 0;
  p->pid = 0;
  p->uid = 0;
  snprintf(p->name, sizeof(p->name), "conn %llu", conn);
}

/* The socket told us p's pid and uid. */
static inline void
peer_set_cred(struct peer *p, pid_t pid, uid_t uid)
{
  p->has_cred = 1;
  p->pid = pid;
  p->uid = uid;
  snprintf(p->name, sizeof(p->name), "conn %llu (pid %d, uid %u)", p->conn,
           (int)pid, (unsigned)uid);
}

#endif
