/* vmtrackd against hostile clients: malformed hellos, fds sent to it, silence, talk after
 * being served, quotas per user and per process, and a client writing nonsense into its
 * ranges map. Each gets a clear refusal (status and reason) or costs only that client; the
 * daemon keeps serving, and a well-behaved client's words are untouched.
 *   bpf_daemon_hostile QUOTA   (the daemon's --max-per-user; run as root, forks `nobody`s)
 * Needs vmtrackd (test/bpf/check-bpf.sh runs it in the guest); exit 77 without it. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../bpf/vmtrack_bpf_abi.h"

static int failures;

static void check(int ok, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	printf("%s: ", ok ? "ok" : "FAIL");
	vprintf(fmt, ap);
	putchar('\n');
	va_end(ap);
	failures += !ok;
}

static int connect_raw(void)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	struct timeval tv = {20, 0};
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", VMTRACK_BPF_SOCKET);
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) != 0) {
		if (s >= 0)
			close(s);
		return -1;
	}
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return s;
}

/* The reply to what was sent (fds, if any, into fds[2]); its status, or 1 if none came. */
static int read_reply(int s, struct vmtrack_bpf_reply *r, int fds[2])
{
	union {
		char b[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} c;
	struct iovec iov = {.iov_base = r, .iov_len = sizeof(*r)};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.b,
			   .msg_controllen = sizeof(c.b)};
	struct cmsghdr *h;
	ssize_t n;

	memset(r, 0, sizeof(*r));
	fds[0] = fds[1] = -1;
	n = recvmsg(s, &m, MSG_CMSG_CLOEXEC);
	if (n != (ssize_t)sizeof(*r))
		return 1;
	for (h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
		if (h->cmsg_type == SCM_RIGHTS && h->cmsg_len == CMSG_LEN(2 * sizeof(int)))
			memcpy(fds, CMSG_DATA(h), 2 * sizeof(int));
	r->why[sizeof(r->why) - 1] = 0;
	return r->status;
}

static const struct vmtrack_bpf_hello good = {VMTRACK_BPF_MAGIC, VMTRACK_BPF_ABI, 0, 0};

/* Connect, send len bytes of msg (with an fd if pass_fd), read the reply. */
static int exchange(const void *msg, size_t len, int pass_fd, struct vmtrack_bpf_reply *r,
		    int fds[2], int *sock)
{
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} c;
	struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	int s = connect_raw(), st;

	if (s < 0)
		return 2;
	if (pass_fd >= 0) {
		struct cmsghdr *h;

		memset(&c, 0, sizeof(c));
		m.msg_control = c.b;
		m.msg_controllen = sizeof(c.b);
		h = CMSG_FIRSTHDR(&m);
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(h), &pass_fd, sizeof(int));
	}
	/* a refusal at accept (quota) may come before the hello: its send may fail, the
	 * reply is there to read all the same */
	if (len)
		sendmsg(s, &m, MSG_NOSIGNAL);
	st = read_reply(s, r, fds);
	if (sock)
		*sock = s;
	else
		close(s);
	return st;
}

static void refused(const char *what, const void *msg, size_t len, int pass_fd, int want)
{
	struct vmtrack_bpf_reply r;
	int fds[2];
	int st = exchange(msg, len, pass_fd, &r, fds, NULL);

	check(st == -want && fds[0] < 0, "%s: refused with %d (want %d): %s", what, st, -want,
	      r.why);
}

struct served {
	int sock;
	struct vmtrack_bpf_ranges *ranges;
	const volatile struct vmtrack_bpf_words *words;
};

static int serve_me(struct served *sv)
{
	struct vmtrack_bpf_reply r;
	int fds[2], st = exchange(&good, sizeof(good), -1, &r, fds, &sv->sock);
	void *p;

	if (st != 0)
		return st;
	p = mmap(NULL, sizeof(*sv->ranges), PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	sv->ranges = p == MAP_FAILED ? NULL : p;
	/* the words: never writable, not now and not later */
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
	check(p == MAP_FAILED, "the words cannot be mapped writable (%s)", strerror(errno));
	p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fds[1], 0);
	sv->words = p == MAP_FAILED ? NULL : p;
	if (p != MAP_FAILED)
		check(mprotect(p, 4096, PROT_READ | PROT_WRITE) != 0,
		      "the words cannot be made writable (%s)", strerror(errno));
	close(fds[0]);
	close(fds[1]);
	return sv->ranges && sv->words ? 0 : 1;
}

static void malformed_hellos(void)
{
	struct vmtrack_bpf_hello h = good;
	char big[600];
	struct vmtrack_bpf_reply r;
	int fds[2], s;

	refused("short hello", &good, sizeof(good) - 1, -1, EPROTO);
	memset(big, 0, sizeof(big));
	refused("oversized hello", big, sizeof(big), -1, EPROTO);
	h.magic = 0xdeadbeef;
	refused("wrong magic", &h, sizeof(h), -1, EPROTO);
	h = good;
	h.abi = 99;
	refused("wrong ABI", &h, sizeof(h), -1, EPROTO);
	h = good;
	h.flags = 1;
	refused("unknown flags", &h, sizeof(h), -1, EPROTO);
	refused("a hello carrying an fd", &good, sizeof(good), 1, EPROTO);
	refused("no hello at all", &good, 0, -1, ETIMEDOUT);
	/* served, then talks again: let go */
	check(exchange(&good, sizeof(good), -1, &r, fds, &s) == 0, "a good hello is served");
	close(fds[0]);
	close(fds[1]);
	send(s, &good, sizeof(good), MSG_NOSIGNAL);
	check(read_reply(s, &r, fds) == -EPROTO, "talking after being served: refused (%s)",
	      r.why);
	close(s);
}

/* One process, more caches than the daemon gives one address space. */
static void per_process_limit(void)
{
	struct served sv[VMTRACK_BPF_PER_MM];
	struct vmtrack_bpf_reply r;
	int i, ok = 1, fds[2];

	for (i = 0; i < VMTRACK_BPF_PER_MM; i++)
		ok &= serve_me(&sv[i]) == 0;
	check(ok, "%d caches of one process served", VMTRACK_BPF_PER_MM);
	check(exchange(&good, sizeof(good), -1, &r, fds, NULL) == -EMFILE,
	      "one more is refused: %s", r.why);
	for (i = 0; i < VMTRACK_BPF_PER_MM; i++)
		close(sv[i].sock);
}

/* As nobody: quota+1 processes each ask; one is refused with EDQUOT. */
static void per_user_quota(int quota)
{
	int go[2], res[2], i, refusedn = 0, served = 0;
	pid_t pids[64];
	char c;

	if (quota + 1 > 64 || pipe(go) || pipe(res))
		return;
	for (i = 0; i <= quota; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			struct served sv;
			int st;

			close(go[1]);

			if (setgid(65534) || setuid(65534))
				_exit(3);
			st = serve_me(&sv);
			c = st == 0 ? 's' : st == -EDQUOT ? 'q' : 'e';
			if (write(res[1], &c, 1) != 1)
				_exit(4);
			if (read(go[0], &c, 1) < 0) /* hold the connection until told */
				_exit(5);
			_exit(0);
		}
	}
	for (i = 0; i <= quota; i++) {
		if (read(res[0], &c, 1) != 1)
			break;
		served += c == 's';
		refusedn += c == 'q';
	}
	close(go[1]);
	for (i = 0; i <= quota; i++)
		waitpid(pids[i], NULL, 0);
	check(served == quota && refusedn == 1,
	      "user nobody: %d served, %d refused with EDQUOT (quota %d)", served, refusedn, quota);
}

/* A client writes nonsense into its ranges: only its own words move. */
static void hostile_ranges(void)
{
	struct served bad, good_client;
	char *a = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint32_t before;
	int i;

	if (serve_me(&bad) || serve_me(&good_client)) {
		check(0, "two clients served");
		return;
	}
	/* the good one watches a and nothing touches a */
	good_client.ranges->slot[0].start = (uintptr_t)a;
	good_client.ranges->slot[0].end = (uintptr_t)a + 4 * 4096;
	__atomic_store_n(&good_client.ranges->used, 1, __ATOMIC_SEQ_CST);
	before = good_client.words->gen[0];
	/* the bad one: a used count far past its slots, inverted and all-covering slots */
	for (i = 0; i < VMTRACK_BPF_SLOTS; i++) {
		bad.ranges->slot[i].start = i % 2 ? 0 : UINT64_MAX;
		bad.ranges->slot[i].end = i % 2 ? UINT64_MAX : 0;
	}
	__atomic_store_n(&bad.ranges->used, UINT32_MAX, __ATOMIC_SEQ_CST);
	for (i = 0; i < 50; i++) {
		void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		*(volatile char *)p = 1;
		munmap(p, 4096);
	}
	check(bad.words->gen[1] >= 50 && bad.words->gen[0] == 0,
	      "the hostile client's all-covering slot moved (%u), its inverted one did not (%u)",
	      bad.words->gen[1], bad.words->gen[0]);
	check(good_client.words->gen[0] == before && good_client.words->alive == 1,
	      "the other client's word did not move (%u -> %u)", before,
	      good_client.words->gen[0]);
	close(bad.sock);
	close(good_client.sock);
	munmap(a, 4 * 4096);
}

int main(int argc, char **argv)
{
	int quota = argc > 1 ? atoi(argv[1]) : 0;
	struct served sv;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (access(VMTRACK_BPF_SOCKET, F_OK) != 0) {
		printf("SKIP: bpf_daemon_hostile: no vmtrackd (%s)\n", VMTRACK_BPF_SOCKET);
		return 77;
	}
	malformed_hellos();
	sleep(2); /* the daemon lets the connections closed above go */
	per_process_limit();
	sleep(2);
	if (quota > 0 && getuid() == 0)
		per_user_quota(quota);
	else
		printf("per-user quota: not checked (give the daemon's quota, run as root)\n");
	hostile_ranges();
	check(serve_me(&sv) == 0, "the daemon still serves after all that");
	printf("%s: bpf_daemon_hostile (%d failures)\n", failures ? "FAIL" : "PASS", failures);
	return failures ? 1 : 0;
}
