/* qrsctl hash-key: the SHA-256 of an api key read from standard input,
   in hex, for a qrsd key file (grpc_compat.api_keys).  The key is the
   first line of the input (a final newline and CR are not part of it,
   as a grpc upstream's api_key_file reads it); it is never echoed, and
   its buffer is wiped before exit. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "ctl.h"

#define MAX_KEY 4096                /* as qrsd's APIKEY_MAX_LEN */

int
cmd_hash_key(struct ctl *ctl, const struct command *cmd, int argc,
             char **argv)
{
  char buf[MAX_KEY + 2];
  uint8_t h[32];
  char hex[2 * sizeof(h) + 1];
  unsigned hl = sizeof(h), i;
  size_t n = 0;
  ssize_t r;
  int rc = EXIT_ERROR;
  const struct cli_opt opts[] = { CTL_COMMON_OPTS(ctl) };

  r = ctl_parse_options(cmd, opts, argc, argv);
  if (r >= 0)
    return (int)r;
  if (optind < argc) {
    fprintf(stderr, "qrsctl: hash-key: takes no arguments (the key comes "
            "on standard input)\n");
    ctl_command_usage_error(cmd);
    return EXIT_ERROR;
  }
  if (isatty(STDIN_FILENO))
    fprintf(stderr, "qrsctl: hash-key: reading the key from standard "
            "input (it is not echoed back)\n");
  while (n < sizeof(buf) && (r = read(STDIN_FILENO, buf + n,
                                      sizeof(buf) - n)) > 0) {
    n += (size_t)r;
    if (memchr(buf, '\n', n))
      break;
  }
  if (r < 0) {
    perror("qrsctl: hash-key: standard input");
    goto out;
  }
  n = strcspn(buf, "\r\n") < n ? strcspn(buf, "\r\n") : n;
  if (n == 0 || n > MAX_KEY) {
    fprintf(stderr, "qrsctl: hash-key: the key must be 1 .. %d bytes on "
            "one line\n", MAX_KEY);
    goto out;
  }
  if (EVP_Digest(buf, n, h, &hl, EVP_sha256(), NULL) != 1) {
    fprintf(stderr, "qrsctl: hash-key: SHA-256 failed\n");
    goto out;
  }
  for (i = 0; i < hl; i++)
    snprintf(hex + 2 * i, 3, "%02x", h[i]);
  if (ctl->json)
    printf("{\"sha256\":\"%s\"}\n", hex);     /* hex: nothing to escape */
  else
    printf("%s\n", hex);
  rc = fflush(stdout) == 0 ? 0 : EXIT_ERROR;
out:
  OPENSSL_cleanse(buf, sizeof(buf));
  return rc;
}
