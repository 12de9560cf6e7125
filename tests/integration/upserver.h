/* A real qrs-entropy-server for integration tests ($QRS_ENTROPY_SERVER_BIN),
   started with the given flags, and the address it listens on; and a
   hostile EntropyService (upserver_hostile.c) that breaks the stream
   protocol or the entropy on purpose. */
#ifndef QRS_TEST_UPSERVER_H
#define QRS_TEST_UPSERVER_H

#include <sys/types.h>

struct upserver {
  pid_t pid;
  char addr[256];               /* as printed: unix:PATH or 127.0.0.1:PORT */
  char log[128];                /* its stderr */
};

/* Start it with --listen listen plus args (NULL-terminated) and wait until
   it prints its address (10 s).  Fails the test otherwise. */
void upserver_start(struct upserver *s, const char *listen, ...);
/* Same with an argv array (NULL-terminated) after --listen. */
void upserver_startv(struct upserver *s, const char *listen,
                     const char *const *args);
/* A CA (ca.pem), a server certificate for localhost / 127.0.0.1
   (srv.pem, srv.key) and a client certificate (cli.pem, cli.key) in dir,
   made with openssl.  Fails the test if openssl fails. */
void upserver_make_certs(const char *dir);

/* How the hostile server answers each EntropyRequest (GetEntropy and
   StreamEntropy; PurityService is UNIMPLEMENTED).  The replies carry
   fresh getrandom(2) bytes unless the mode says otherwise. */
enum upserver_hostile {
  UPSERVER_DUPLICATE,           /* the same reply twice */
  UPSERVER_EXTRA,               /* the reply, then another (other bytes)
                                   echoing the same sequence_id */
  UPSERVER_UNSENT,              /* the reply, then one echoing
                                   sequence_id + 1: a request not sent */
  UPSERVER_ZERO_ECHO,           /* one reply echoing sequence_id 0 */
  UPSERVER_CONSTANT,            /* one reply of zero bytes (a stuck
                                   device), echo correct */
};

/* Start the hostile server in a child process on listen (unix:PATH or
   127.0.0.1:0) and wait for its address.  It uses gRPC in the child:
   call it before this process calls grpc_init().  upserver_stop() ends
   it. */
void upserver_hostile_start(struct upserver *s, const char *listen,
                            enum upserver_hostile mode);

/* For the starters: fork the server's process, in which (returns 0) its
   stderr goes to a new s->log and *fd is the pipe to write its
   "listening on ADDRESS" line to; in this process (returns the pid) *fd
   is the pipe's end that upserver_await() reads (10 s) into s->addr. */
pid_t upserver_fork(struct upserver *s, int *fd);
void upserver_await(struct upserver *s, int fd);

/* SIGTERM (or SIGKILL when hard) and reap; returns the exit status. */
int upserver_stop(struct upserver *s, int hard);
/* Wait for it to exit on its own (timeout_ms); returns the status or -1. */
int upserver_wait(struct upserver *s, int timeout_ms);

#endif
