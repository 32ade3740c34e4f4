/* vmtrackd: loads the bpf tracker's programs (vmtrack.bpf.c) and serves its clients.
 *
 * Each vmtrack process that uses VMTRACK_TRACKER=bpf connects to the socket; the daemon takes
 * its identity from SO_PEERCRED, finds its address space, creates its two maps (ranges:
 * writable by the client; words: frozen, so the client maps them read-only), registers them
 * under the address space and passes them over SCM_RIGHTS. A client is let go when its
 * connection closes or its process exits: its words all change and its alive word drops
 * first, so it never trusts a registration the programs no longer watch.
 *
 * Programs, links and the maps of maps are pinned under VMTRACK_BPF_PINDIR: if the daemon
 * dies, tracking goes on; the next daemon lets every client of the old one go before it
 * serves. An orderly stop lets every client go and detaches. See doc/trackers.md. */
#define _GNU_SOURCE
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "vmtrack_bpf_abi.h"
#include "vmtrack.skel.h"

#define BPF_FS_MAGIC_NUMBER 0xcafe4a11
#define HELLO_TIMEOUT_S 2

struct options {
	const char *socket_path;
	const char *pin_dir;
	int max_clients;
	int max_per_user;
	bool check_only;
};

struct client {
	int sock; /* -1: slot free */
	int pidfd;
	uid_t uid;
	pid_t pid;
	bool served;
	int over_quota;  /* refuse with this errno once its hello is read */
	time_t deadline; /* for the hello */
	struct vmtrack_bpf_key key;
};

static struct options opt = {
	.socket_path = VMTRACK_BPF_SOCKET,
	.pin_dir = VMTRACK_BPF_PINDIR,
	.max_clients = 1024,
	.max_per_user = 64,
};
static volatile sig_atomic_t stop_signal;
static struct vmtrack_bpf *skel;
static struct client *clients;

static void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("vmtrackd: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* The daemon will not run: say why on stderr and where `vmtrack info` reads it. */
static int refuse(const char *fmt, ...)
{
	char why[400];
	va_list ap;
	FILE *f;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	say("not started: %s", why);
	mkdir(VMTRACK_BPF_RUNDIR, 0755);
	f = fopen(VMTRACK_BPF_WHYFILE, "w");
	if (f) {
		fprintf(f, "%s\n", why);
		fclose(f);
	}
	return 1;
}

/* ---- which programs this kernel takes (its BTF) ---- */

struct hooks {
	bool zap7;   /* __zap_vma_range, else unmap_page_range */
	bool move7;  /* move_page_tables(struct pagetable_move_control *) */
};

/* The struct a FUNC's parameter n points to, or NULL. */
static const char *param_struct(const struct btf *btf, int func_id, unsigned int n, int *nparams)
{
	const struct btf_type *f = btf__type_by_id(btf, func_id);
	const struct btf_type *proto = f ? btf__type_by_id(btf, f->type) : NULL;
	const struct btf_param *p;
	const struct btf_type *t;

	*nparams = proto && btf_is_func_proto(proto) ? btf_vlen(proto) : -1;
	if (*nparams <= (int)n)
		return NULL;
	p = btf_params(proto) + n;
	t = btf__type_by_id(btf, p->type);
	while (t && (btf_is_mod(t) || btf_is_typedef(t)))
		t = btf__type_by_id(btf, t->type);
	if (!t || !btf_is_ptr(t))
		return NULL;
	t = btf__type_by_id(btf, t->type);
	while (t && (btf_is_mod(t) || btf_is_typedef(t)))
		t = btf__type_by_id(btf, t->type);
	return t && btf_is_struct(t) ? btf__name_by_offset(btf, t->name_off) : NULL;
}

static bool func_takes_vma(const struct btf *btf, const char *name, unsigned int n, int min_params)
{
	int id = btf__find_by_name_kind(btf, name, BTF_KIND_FUNC), np;
	const char *s;

	if (id < 0)
		return false;
	s = param_struct(btf, id, n, &np);
	return np >= min_params && s && strcmp(s, "vm_area_struct") == 0;
}

static int choose_hooks(struct hooks *h)
{
	struct btf *btf;
	const char *s;
	int id, np;

	if (access("/sys/kernel/btf/vmlinux", R_OK) != 0)
		return refuse("kernel without BTF (/sys/kernel/btf/vmlinux: %s): the programs "
			      "need CONFIG_DEBUG_INFO_BTF", strerror(errno));
	btf = btf__load_vmlinux_btf();
	if (!btf)
		return refuse("cannot read the kernel's BTF: %s", strerror(errno));
	if (func_takes_vma(btf, "unmap_page_range", 1, 4))
		h->zap7 = false;
	else if (func_takes_vma(btf, "__zap_vma_range", 1, 4))
		h->zap7 = true;
	else {
		btf__free(btf);
		return refuse("kernel without a known zap function (neither unmap_page_range nor "
			      "__zap_vma_range taking (tlb, vma, start, end) in its BTF)");
	}
	id = btf__find_by_name_kind(btf, "move_page_tables", BTF_KIND_FUNC);
	s = id < 0 ? NULL : param_struct(btf, id, 0, &np);
	if (s && strcmp(s, "vm_area_struct") == 0 && np >= 5)
		h->move7 = false;
	else if (s && strcmp(s, "pagetable_move_control") == 0 && np == 1)
		h->move7 = true;
	else {
		btf__free(btf);
		return refuse("kernel without a known move_page_tables (%s in its BTF): mremap "
			      "would go unseen", id < 0 ? "missing" : "unknown arguments");
	}
	if (!func_takes_vma(btf, "ptep_clear_flush", 0, 3)) {
		btf__free(btf);
		return refuse("kernel without ptep_clear_flush(vma, address, ptep) in its BTF: a "
			      "copy on write after fork would go unseen");
	}
	btf__free(btf);
	return 0;
}

/* ---- loading, pinning, letting clients go ---- */

static int client_map(const char *name, __u32 value_size)
{
	LIBBPF_OPTS(bpf_map_create_opts, o, .map_flags = BPF_F_MMAPABLE);

	return bpf_map_create(BPF_MAP_TYPE_ARRAY, name, sizeof(__u32), value_size, 1, &o);
}

static bool is_bpffs(const char *dir)
{
	struct statfs fs;

	return statfs(dir, &fs) == 0 && (unsigned long)fs.f_type == BPF_FS_MAGIC_NUMBER;
}

static int mount_bpffs(void)
{
	if (is_bpffs("/sys/fs/bpf"))
		return 0;
	mkdir("/sys/fs/bpf", 0700);
	if (mount("bpffs", "/sys/fs/bpf", "bpf", 0, "mode=0700") != 0)
		return refuse("/sys/fs/bpf is no bpf file system and mounting one failed: %s",
			      strerror(errno));
	return 0;
}

static bool kernel_older_than(int major, int minor)
{
	struct utsname u;
	int ma = 0, mi = 0;

	return uname(&u) == 0 && sscanf(u.release, "%d.%d", &ma, &mi) == 2 &&
	       (ma < major || (ma == major && mi < minor));
}

static int load_programs(const struct hooks *h)
{
	LIBBPF_OPTS(bpf_object_open_opts, oo, .pin_root_path = opt.pin_dir);
	int tr, tw, err;

	if (mkdir(opt.pin_dir, 0700) != 0 && errno != EEXIST)
		return refuse("cannot make %s: %s", opt.pin_dir, strerror(errno));
	skel = vmtrack_bpf__open_opts(&oo);
	if (!skel)
		return refuse("cannot open the BPF object: %s", strerror(errno));
	bpf_program__set_autoload(skel->progs.zap_enter, !h->zap7);
	bpf_program__set_autoload(skel->progs.zap_exit, !h->zap7);
	bpf_program__set_autoload(skel->progs.zap7_enter, h->zap7);
	bpf_program__set_autoload(skel->progs.zap7_exit, h->zap7);
	bpf_program__set_autoload(skel->progs.move_enter, !h->move7);
	bpf_program__set_autoload(skel->progs.move_exit, !h->move7);
	bpf_program__set_autoload(skel->progs.move7_enter, h->move7);
	bpf_program__set_autoload(skel->progs.move7_exit, h->move7);
	tr = client_map("vmt_ranges_t", sizeof(struct vmtrack_bpf_ranges));
	tw = client_map("vmt_words_t", sizeof(struct vmtrack_bpf_words));
	if (tr < 0 || tw < 0)
		return refuse("cannot create a BPF map (%s): not root, or BPF disabled",
			      strerror(errno));
	bpf_map__set_inner_map_fd(skel->maps.ranges_of, tr);
	bpf_map__set_inner_map_fd(skel->maps.words_of, tw);
	err = vmtrack_bpf__load(skel);
	close(tr);
	close(tw);
	if (err && kernel_older_than(5, 12))
		return refuse("the kernel refused the programs (%s): they need Linux 5.12 or newer "
			      "(BPF functions with pointer arguments)", strerror(-err));
	if (err)
		return refuse("the kernel refused the programs (%s; libbpf's messages above)",
			      strerror(-err));
	return 0;
}

static void release_client(const struct vmtrack_bpf_key *key)
{
	__u64 args[2] = {key->mm, key->idx};
	LIBBPF_OPTS(bpf_test_run_opts, o, .ctx_in = args, .ctx_size_in = sizeof(args));
	int mfd = bpf_map__fd(skel->maps.mm_clients);
	__u32 mask;

	if (bpf_prog_test_run_opts(bpf_program__fd(skel->progs.release_client), &o) != 0)
		say("cannot release a client's words: %s", strerror(errno));
	bpf_map_delete_elem(bpf_map__fd(skel->maps.ranges_of), key);
	bpf_map_delete_elem(bpf_map__fd(skel->maps.words_of), key);
	if (bpf_map_lookup_elem(mfd, &key->mm, &mask) == 0) {
		mask &= ~(1u << key->idx);
		if (mask)
			bpf_map_update_elem(mfd, &key->mm, &mask, BPF_ANY);
		else
			bpf_map_delete_elem(mfd, &key->mm);
	}
}

/* Every client still registered (the previous daemon's, or ours at stop). */
static int release_all(void)
{
	int fd = bpf_map__fd(skel->maps.ranges_of);
	struct vmtrack_bpf_key key, next;
	int n = 0;

	while (bpf_map_get_next_key(fd, NULL, &next) == 0) {
		key = next;
		release_client(&key);
		if (bpf_map_lookup_elem(fd, &key, &(__u32){0}) == 0)
			break; /* cannot delete: do not loop for ever */
		n++;
	}
	return n;
}

static int attach_and_pin(void)
{
	struct bpf_program *p;
	char path[PATH_MAX];

	bpf_object__for_each_program(p, skel->obj) {
		const char *name = bpf_program__name(p);
		struct bpf_link *l;

		if (!bpf_program__autoload(p) || p == skel->progs.release_client ||
		    p == skel->progs.find_mm)
			continue;
		l = bpf_program__attach(p);
		if (!l)
			return refuse("cannot attach %s (%s): a hook this kernel lacks", name,
				      strerror(errno));
		snprintf(path, sizeof(path), "%s/link_%s", opt.pin_dir, name);
		unlink(path); /* a previous daemon's link: detached once unpinned */
		if (bpf_link__pin(l, path) != 0)
			return refuse("cannot pin %s: %s", path, strerror(errno));
	}
	return 0;
}

static void unpin_links(void)
{
	struct bpf_program *p;
	char path[PATH_MAX];

	bpf_object__for_each_program(p, skel->obj) {
		snprintf(path, sizeof(path), "%s/link_%s", opt.pin_dir, bpf_program__name(p));
		unlink(path);
	}
}

/* The address space of process pid (0 if it has none, or is gone). */
static __u64 mm_of(pid_t pid)
{
	struct bpf_link *l;
	char buf[64];
	int fd;

	skel->bss->target_tgid = pid;
	skel->bss->found_mm = 0;
	l = bpf_program__attach_iter(skel->progs.find_mm, NULL);
	if (!l)
		return 0;
	fd = bpf_iter_create(bpf_link__fd(l));
	if (fd >= 0) {
		while (read(fd, buf, sizeof(buf)) > 0)
			;
		close(fd);
	}
	bpf_link__destroy(l);
	return skel->bss->found_mm;
}

/* ---- the socket ---- */

static int listen_socket(void)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	char tmp[sizeof(a.sun_path)];
	int s;

	if (strlen(opt.socket_path) + 5 >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	snprintf(tmp, sizeof(tmp), "%s.new", opt.socket_path);
	strcpy(a.sun_path, tmp);
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return -errno;
	unlink(tmp);
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 || chmod(tmp, 0666) != 0 ||
	    listen(s, 64) != 0 || rename(tmp, opt.socket_path) != 0) {
		int e = errno;

		close(s);
		unlink(tmp);
		return -e;
	}
	return s;
}

static void reply(int sock, int status, const char *why, int ranges_fd, int words_fd)
{
	struct vmtrack_bpf_reply r = {
		.magic = VMTRACK_BPF_MAGIC, .abi = VMTRACK_BPF_ABI, .status = status,
		.slots = VMTRACK_BPF_SLOTS,
		.ranges_bytes = sizeof(struct vmtrack_bpf_ranges),
		.words_bytes = sizeof(struct vmtrack_bpf_words),
	};
	struct iovec iov = {.iov_base = &r, .iov_len = sizeof(r)};
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} c;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};

	if (why)
		snprintf(r.why, sizeof(r.why), "%s", why);
	if (status == 0) {
		struct cmsghdr *h;
		int fds[2] = {ranges_fd, words_fd};

		memset(&c, 0, sizeof(c));
		m.msg_control = c.buf;
		m.msg_controllen = sizeof(c.buf);
		h = CMSG_FIRSTHDR(&m);
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN(sizeof(fds));
		memcpy(CMSG_DATA(h), fds, sizeof(fds));
	}
	if (sendmsg(sock, &m, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && status == 0)
		say("cannot answer pid's hello: %s", strerror(errno));
}

static int users_clients(uid_t uid)
{
	int i, n = 0;

	for (i = 0; i < opt.max_clients; i++)
		n += clients[i].sock >= 0 && clients[i].uid == uid;
	return n;
}

static void drop(struct client *c)
{
	char b[64];
	int i;

	if (c->served)
		release_client(&c->key);
	/* closing with unread data would make the client's next read ECONNRESET, before the
	 * reply it has yet to read; a client that keeps sending would hold the daemon here for
	 * ever, so at most what a well-behaved one can have queued */
	for (i = 0; i < 64 && recv(c->sock, b, sizeof(b), MSG_DONTWAIT) > 0; i++)
		;
	close(c->sock);
	if (c->pidfd >= 0)
		close(c->pidfd);
	memset(c, 0, sizeof(*c));
	c->sock = -1;
	c->pidfd = -1;
}

/* Refuse c's request with errno e and a reason, and let it go. */
static void refuse_client(struct client *c, int e, const char *why)
{
	say("pid %d (uid %u) refused: %s", (int)c->pid, (unsigned)c->uid, why);
	reply(c->sock, -e, why, -1, -1);
	drop(c);
}

static void accept_client(int lsock)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	struct client *c = NULL;
	int s, i;

	s = accept4(lsock, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (s < 0)
		return;
	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
		close(s);
		return;
	}
	for (i = 0; i < opt.max_clients && !c; i++)
		if (clients[i].sock < 0)
			c = &clients[i];
	if (!c) {
		struct client tmp = {.sock = s, .pidfd = -1, .pid = cr.pid, .uid = cr.uid};

		refuse_client(&tmp, EUSERS, "the daemon serves its maximum of clients (--max-clients)");
		return;
	}
	c->sock = s;
	c->pidfd = -1;
	c->uid = cr.uid;
	c->pid = cr.pid;
	c->deadline = time(NULL) + HELLO_TIMEOUT_S;
	if (users_clients(cr.uid) > opt.max_per_user)
		c->over_quota = EDQUOT; /* answered after its hello, which it may be sending */
}

/* Read the hello; any fds sent along are closed. 0, or a refusal given to the client. */
static int read_hello(struct client *c)
{
	struct vmtrack_bpf_hello h;
	char buf[512];
	union {
		char b[CMSG_SPACE(16 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
			   .msg_controllen = sizeof(ctl.b)};
	struct cmsghdr *cm;
	bool had_fds = false;
	ssize_t n;

	n = recvmsg(c->sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 1;
	for (cm = CMSG_FIRSTHDR(&m); n >= 0 && cm; cm = CMSG_NXTHDR(&m, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			int *fd = (int *)CMSG_DATA(cm);
			size_t k, nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			for (k = 0; k < nfd; k++)
				close(fd[k]);
			had_fds = true;
		}
	if (n <= 0) {
		drop(c);
		return -1;
	}
	if (had_fds || (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		refuse_client(c, EPROTO, "a hello carries no file descriptors and fits 512 bytes");
		return -1;
	}
	if ((size_t)n != sizeof(h)) {
		refuse_client(c, EPROTO, "hello of the wrong size");
		return -1;
	}
	memcpy(&h, buf, sizeof(h));
	if (h.magic != VMTRACK_BPF_MAGIC || h.flags || h.reserved) {
		refuse_client(c, EPROTO, "not a vmtrack hello (magic, flags)");
		return -1;
	}
	if (h.abi != VMTRACK_BPF_ABI) {
		refuse_client(c, EPROTO, "ABI mismatch: this daemon speaks ABI 1");
		return -1;
	}
	return 0;
}

/* Maps for c, registered under its address space, and handed over. */
static void serve(struct client *c)
{
	struct vmtrack_bpf_words w = {.alive = 1, .magic = VMTRACK_BPF_MAGIC,
				      .abi = VMTRACK_BPF_ABI};
	struct vmtrack_bpf_ranges r = {.abi = VMTRACK_BPF_ABI};
	int mfd = bpf_map__fd(skel->maps.mm_clients);
	int rfd = -1, wfd = -1, k;
	__u32 zero = 0, mask = 0;
	__u64 mm;

	c->pidfd = (int)syscall(SYS_pidfd_open, c->pid, 0);
	mm = c->pidfd >= 0 ? mm_of(c->pid) : 0;
	if (!mm) {
		refuse_client(c, ESRCH, "cannot find the address space of the peer");
		return;
	}
	bpf_map_lookup_elem(mfd, &mm, &mask);
	for (k = 0; k < VMTRACK_BPF_PER_MM && (mask & (1u << k)); k++)
		;
	if (k == VMTRACK_BPF_PER_MM) {
		refuse_client(c, EMFILE, "this process has its maximum of caches on the daemon (8)");
		return;
	}
	rfd = client_map("vmt_ranges", sizeof(r));
	wfd = client_map("vmt_words", sizeof(w));
	c->key = (struct vmtrack_bpf_key){.mm = mm, .idx = (__u32)k};
	if (rfd < 0 || wfd < 0 || bpf_map_update_elem(rfd, &zero, &r, BPF_ANY) ||
	    bpf_map_update_elem(wfd, &zero, &w, BPF_ANY) || bpf_map_freeze(wfd) ||
	    bpf_map_update_elem(bpf_map__fd(skel->maps.ranges_of), &c->key, &rfd, BPF_NOEXIST) ||
	    bpf_map_update_elem(bpf_map__fd(skel->maps.words_of), &c->key, &wfd, BPF_NOEXIST)) {
		char why[120];

		snprintf(why, sizeof(why), "cannot make the client's maps: %s", strerror(errno));
		c->served = true; /* undo what was registered */
		refuse_client(c, ENOMEM, why);
	} else {
		mask |= 1u << k;
		bpf_map_update_elem(mfd, &mm, &mask, BPF_ANY);
		c->served = true;
		reply(c->sock, 0, NULL, rfd, wfd);
	}
	if (rfd >= 0)
		close(rfd);
	if (wfd >= 0)
		close(wfd);
}

static void on_client_event(struct client *c, short sock_ev, short pid_ev)
{
	if (pid_ev) {
		drop(c); /* the process exited (its socket may live on elsewhere) */
		return;
	}
	if (!sock_ev)
		return;
	if (c->served) {
		char b[64];

		if (recv(c->sock, b, sizeof(b), MSG_DONTWAIT) > 0)
			refuse_client(c, EPROTO, "a served client sends nothing more");
		else
			drop(c); /* hung up */
		return;
	}
	if (read_hello(c) != 0)
		return;
	if (c->over_quota)
		refuse_client(c, c->over_quota, "this user has its maximum of clients (--max-per-user)");
	else
		serve(c);
}

static void on_signal(int sig)
{
	stop_signal = sig;
}

/* Poll only the slots in use: poll() refuses more fds than RLIMIT_NOFILE. */
static int run(int lsock)
{
	struct pollfd *p = calloc(2 * (size_t)opt.max_clients + 1, sizeof(*p));
	int *who = calloc((size_t)opt.max_clients, sizeof(*who));
	int i, n;

	if (!p || !who) {
		free(p);
		free(who);
		return 1;
	}
	while (!stop_signal) {
		time_t now = time(NULL);

		p[0] = (struct pollfd){.fd = lsock, .events = POLLIN};
		for (i = 0, n = 0; i < opt.max_clients; i++) {
			struct client *c = &clients[i];

			if (c->sock >= 0 && !c->served && now > c->deadline)
				refuse_client(c, ETIMEDOUT, "no hello within 2 s");
			if (c->sock < 0)
				continue;
			who[n] = i;
			p[1 + 2 * n] = (struct pollfd){.fd = c->sock, .events = POLLIN};
			p[2 + 2 * n] = (struct pollfd){.fd = c->pidfd, .events = POLLIN};
			n++;
		}
		if (poll(p, 2 * (nfds_t)n + 1, 1000) < 0) {
			if (errno == EINTR)
				continue;
			say("poll: %s", strerror(errno));
			break;
		}
		for (i = 0; i < n; i++) {
			struct client *c = &clients[who[i]];

			on_client_event(c, p[1 + 2 * i].revents,
					c->pidfd >= 0 ? p[2 + 2 * i].revents : 0);
		}
		if (p[0].revents & POLLIN)
			accept_client(lsock);
	}
	free(p);
	free(who);
	return 0;
}

/* Two fds per client (socket, pidfd) and the maps' while being made. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 2 * (rlim_t)opt.max_clients + 16) {
		opt.max_clients = (int)((rl.rlim_cur - 16) / 2);
		say("at most %d clients (RLIMIT_NOFILE %llu)", opt.max_clients,
		    (unsigned long long)rl.rlim_cur);
	}
}

static void usage(FILE *f)
{
	fprintf(f, "usage: vmtrackd [--check] [--socket PATH] [--max-clients N] [--max-per-user N]\n"
		   "Loads the bpf tracker's programs and serves vmtrack processes that use\n"
		   "VMTRACK_TRACKER=bpf (doc/trackers.md). Runs in the foreground until SIGTERM.\n"
		   "--check: only say whether this kernel has every hook (exit 0) or not (1).\n");
}

static int parse(int argc, char **argv)
{
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		char *end;
		long v;

		if (!strcmp(a, "--check")) {
			opt.check_only = true;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		}
		if (i + 1 >= argc)
			goto bad;
		if (!strcmp(a, "--socket")) {
			opt.socket_path = argv[++i];
			continue;
		}
		v = strtol(argv[i + 1], &end, 10);
		if (*end || v < 1 || v > 65536)
			goto bad;
		if (!strcmp(a, "--max-clients"))
			opt.max_clients = (int)v;
		else if (!strcmp(a, "--max-per-user"))
			opt.max_per_user = (int)v;
		else
			goto bad;
		i++;
	}
	return 0;
bad:
	usage(stderr);
	return -1;
}

int main(int argc, char **argv)
{
	struct hooks h = {false, false};
	int lock, lsock, i, n;

	if (parse(argc, argv))
		return 2;
	if (choose_hooks(&h))
		return 1;
	if (opt.check_only) {
		printf("vmtrackd: this kernel has every hook (%s, move_page_tables %s, "
		       "ptep_clear_flush)\n", h.zap7 ? "__zap_vma_range" : "unmap_page_range",
		       h.move7 ? "(pagetable_move_control)" : "(vma, ...)");
		return 0;
	}
	mkdir(VMTRACK_BPF_RUNDIR, 0755);
	lock = open(VMTRACK_BPF_RUNDIR "/vmtrackd.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB) != 0) {
		/* not written where clients read why no daemon serves them: one does */
		say("not started: another vmtrackd runs (" VMTRACK_BPF_RUNDIR "/vmtrackd.lock)");
		return 1;
	}
	if (mount_bpffs() || load_programs(&h))
		return 1;
	n = release_all();
	if (n)
		say("let %d client(s) of a previous daemon go", n);
	if (attach_and_pin()) {
		unpin_links();
		return 1;
	}
	raise_fd_limit();
	clients = calloc((size_t)opt.max_clients, sizeof(*clients));
	if (!clients)
		return refuse("out of memory");
	for (i = 0; i < opt.max_clients; i++)
		clients[i].sock = clients[i].pidfd = -1;
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	lsock = listen_socket();
	if (lsock < 0) {
		unpin_links();
		return refuse("cannot listen on %s: %s", opt.socket_path, strerror(-lsock));
	}
	unlink(VMTRACK_BPF_WHYFILE);
	say("serving on %s (%s, move_page_tables%s, ptep_clear_flush; up to %d clients, %d per "
	    "user)", opt.socket_path, h.zap7 ? "__zap_vma_range" : "unmap_page_range",
	    h.move7 ? " (7.x)" : "", opt.max_clients, opt.max_per_user);
	run(lsock);
	unlink(opt.socket_path);
	close(lsock);
	for (i = 0; i < opt.max_clients; i++)
		if (clients[i].sock >= 0)
			drop(&clients[i]);
	release_all();
	unpin_links();
	bpf_object__unpin_maps(skel->obj, NULL);
	vmtrack_bpf__destroy(skel);
	say("stopped (signal %d): every client was let go", (int)stop_signal);
	return 0;
}
