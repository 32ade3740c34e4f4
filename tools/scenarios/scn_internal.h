/* Helpers shared by the scenario library's files (not part of the provider interface). */
#ifndef VMTRACK_TEST_SCN_INTERNAL_H
#define VMTRACK_TEST_SCN_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct io_uring;

/* Deterministic bytes from a seed, and whether a buffer holds exactly them. */
void scn_fill(void *buf, size_t len, uint64_t seed);
int  scn_matches(const void *buf, size_t len, uint64_t seed);
/* An unlinked temporary file (in $TMPDIR or /tmp): fd or negative errno. */
int  scn_tmpfile(void);
/* One WRITE_FIXED of [buf, buf+len) with fixed-buffer `index` at `off`, waited for:
 * 0 or a negative errno (short write: -EIO). */
int  scn_write_fixed(struct io_uring *ring, int fd, const void *buf, size_t len, int index,
                     off_t off);
int  scn_read_back(int fd, void *buf, size_t len, off_t off);
#endif
