/* A real qrs-entropy-server for integration tests ($QRS_ENTROPY_SERVER_BIN),
   started with the given flags, and the address it listens on. */
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

/* SIGTERM (or SIGKILL when hard) and reap; returns the exit status. */
int upserver_stop(struct upserver *s, int hard);
/* Wait for it to exit on its own (timeout_ms); returns the status or -1. */
int upserver_wait(struct upserver *s, int timeout_ms);

#endif
