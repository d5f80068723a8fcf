/* dline: a userspace delay line between two interfaces of one namespace.
 *
 *   dline --a IFACE_A --b IFACE_B --delay-ms D [--rate-mbit R] [--loss P]
 *         [--queue-bytes Q] [--jitter-us J] [--quantum-us U]
 *
 * Frames are read with AF_PACKET (PACKET_VNET_HDR, so 64 KiB offload frames
 * pass whole; PACKET_IGNORE_OUTGOING, so our own sends are not read back),
 * stamped with their release time and kept in an in-order byte ring per
 * direction, then released with sendmmsg when due.  One thread per direction.
 *
 * A frame's delay counts from the kernel's receive timestamp (SO_TIMESTAMPNS),
 * so a thread need not wake for every arrival: while frames are in flight it
 * sleeps until the next one is due, at most one wake-up per --quantum-us
 * (default 500), reading what arrived meanwhile in batches (recvmmsg).  A frame
 * thus leaves 0..U late, never early.  Each wake-up of a thread costs far more
 * CPU than moving a frame: waking for every arrival and every release took 60%
 * of this machine's 2 cores for two 500 Mbit/s lines.
 *
 * With --rate-mbit the line first models a bottleneck of that rate with a
 * drop-tail queue of --queue-bytes (default: rate x 2 x delay, at least
 * 256 KiB): a frame leaves the bottleneck when all frames before it have been
 * serialised, then travels --delay-ms.  --loss P (probability 0..1) drops
 * frames at random after the bottleneck; --jitter-us J adds a uniform random
 * 0..J us to the delay without reordering.  Prints "dline: ready" on stdout
 * once both sockets are open, and one stats line on stderr on exit
 * (SIGTERM/SIGINT), and another at every SIGUSR1 while it runs (the counters
 * since the start): per direction the frames forwarded, those dropped by the line
 * (queue and --loss), those the kernel dropped because the socket was full, and
 * those released more than LATE_NS after their due time, with the latest of them
 * since the previous stats line (the line itself fell behind: on a busy machine, a
 * stall of the lab and not of what runs through it).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <linux/if_packet.h>
#include <linux/virtio_net.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_FRAME (65536 + 256)
#define LATE_NS 2000000ull /* released later than this after its due time: late */
#define BATCH 64
#define HDR_BYTES sizeof(struct virtio_net_hdr)

struct rec {
	uint64_t due_ns;
	uint32_t len; /* bytes after this header; WRAP_MARK: go back to 0 */
	uint32_t pad;
};
#define WRAP_MARK 0xffffffffu

struct ring {
	uint8_t *buf;
	size_t cap, head, tail, count;
};

struct opts {
	const char *ifa, *ifb;
	double delay_ms, rate_mbit, loss, jitter_us, quantum_us;
	uint64_t queue_bytes;
};

/* One recvmmsg batch: the frames and their receive timestamps. */
struct batch {
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	uint8_t ctl[BATCH][CMSG_SPACE(sizeof(struct timespec))];
	uint8_t frames[BATCH][MAX_FRAME];
};

struct dir {
	const char *name;
	int in_fd, out_fd, stop_fd;
	struct ring ring;
	uint64_t bn_free_ns, last_due_ns;
	/* written by the direction's thread, read by the main one (relaxed atomics) */
	uint64_t fwd_frames, fwd_bytes, drop_frames, drop_bytes, late_frames, max_late_ns;
	unsigned long long socket_drops; /* main thread only: PACKET_STATISTICS resets */
	unsigned int seed;
	const struct opts *o;
	struct batch *in;
};

static void count(uint64_t *counter, uint64_t n)
{
	__atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

static uint64_t counted(const uint64_t *counter)
{
	return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

/* A frame released `late` ns after its due time (0..quantum is the design). */
static void note_lateness(struct dir *d, uint64_t late)
{
	if (late <= LATE_NS)
		return;
	count(&d->late_frames, 1);
	if (late > counted(&d->max_late_ns))
		__atomic_store_n(&d->max_late_ns, late, __ATOMIC_RELAXED);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t align8(size_t n) { return (n + 7) & ~(size_t)7; }

/* Space for a record of `len` data bytes at the tail, or NULL if full. */
static struct rec *ring_alloc(struct ring *r, size_t len)
{
	size_t need = align8(sizeof(struct rec) + len);
	if (r->count == 0)
		r->head = r->tail = 0;
	if (r->count == 0 || r->tail > r->head) {
		if (r->cap - r->tail >= need)
			return (struct rec *)(r->buf + r->tail);
		if (r->count != 0 && need >= r->head)
			return NULL;
		if (r->count == 0 && need > r->cap)
			return NULL;
		if (r->cap - r->tail >= sizeof(struct rec))
			((struct rec *)(r->buf + r->tail))->len = WRAP_MARK;
		r->tail = 0;
		if (r->count == 0)
			r->head = 0;
		return (struct rec *)r->buf;
	}
	if (r->head - r->tail > need) /* tail < head, or tail == head while full */
		return (struct rec *)(r->buf + r->tail);
	return NULL;
}

static void ring_commit(struct ring *r, struct rec *x)
{
	r->tail = (size_t)((uint8_t *)x - r->buf) + align8(sizeof(struct rec) + x->len);
	r->count++;
}

static struct rec *ring_peek(struct ring *r, size_t *off)
{
	size_t h = r->head;
	if (r->count == 0)
		return NULL;
	if (r->cap - h < sizeof(struct rec) || ((struct rec *)(r->buf + h))->len == WRAP_MARK)
		h = 0;
	*off = h;
	return (struct rec *)(r->buf + h);
}

static void ring_pop(struct ring *r, size_t off, const struct rec *x)
{
	r->head = off + align8(sizeof(struct rec) + x->len);
	r->count--;
}

/* Bytes on the wire for a frame, counting the headers of every GSO segment. */
static uint64_t wire_bytes(const uint8_t *frame, size_t len)
{
	const struct virtio_net_hdr *h = (const struct virtio_net_hdr *)frame;
	size_t eth = len - HDR_BYTES;
	if (h->gso_type == VIRTIO_NET_HDR_GSO_NONE || h->gso_size == 0 || h->hdr_len == 0 ||
	    eth <= h->hdr_len)
		return eth;
	size_t segs = (eth - h->hdr_len + h->gso_size - 1) / h->gso_size;
	return eth + (segs - 1) * h->hdr_len;
}

/* Decide the fate of a frame received at `now` and queue it; 0 if dropped. */
static int admit(struct dir *d, const uint8_t *frame, size_t len, uint64_t now)
{
	const struct opts *o = d->o;
	uint64_t wire = wire_bytes(frame, len), departs = now;
	if (o->rate_mbit > 0) {
		uint64_t backlog_ns = d->bn_free_ns > now ? d->bn_free_ns - now : 0;
		double backlog = (double)backlog_ns * o->rate_mbit / 8000.0;
		if (backlog + (double)wire > (double)o->queue_bytes)
			return 0;
		departs = (d->bn_free_ns > now ? d->bn_free_ns : now) +
			  (uint64_t)((double)wire * 8000.0 / o->rate_mbit);
		d->bn_free_ns = departs;
	}
	if (o->loss > 0 && (double)rand_r(&d->seed) / RAND_MAX < o->loss)
		return 0;
	uint64_t due = departs + (uint64_t)(o->delay_ms * 1e6);
	if (o->jitter_us > 0)
		due += (uint64_t)((double)rand_r(&d->seed) / RAND_MAX * o->jitter_us * 1e3);
	if (due < d->last_due_ns)
		due = d->last_due_ns;
	struct rec *x = ring_alloc(&d->ring, len);
	if (x == NULL)
		return 0;
	x->due_ns = due;
	x->len = (uint32_t)len;
	memcpy(x + 1, frame, len);
	ring_commit(&d->ring, x);
	d->last_due_ns = due;
	return 1;
}

static uint64_t ts_ns(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec;
}

/* The receive time of a message on CLOCK_MONOTONIC, from its SCM_TIMESTAMPNS
 * (CLOCK_REALTIME; `real_minus_mono` converts), or `fallback` without one. */
static uint64_t arrival_ns(struct msghdr *m, int64_t real_minus_mono, uint64_t fallback)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c != NULL; c = CMSG_NXTHDR(m, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
			struct timespec ts;
			memcpy(&ts, CMSG_DATA(c), sizeof(ts));
			uint64_t at = ts_ns(&ts) - (uint64_t)real_minus_mono;
			return at < fallback ? at : fallback;
		}
	}
	return fallback;
}

/* Read one batch without waiting; returns the number of messages (0 if none). */
static unsigned int receive_batch(struct dir *d)
{
	struct batch *b = d->in;
	for (unsigned int i = 0; i < BATCH; i++) {
		b->iov[i] = (struct iovec){.iov_base = b->frames[i], .iov_len = MAX_FRAME};
		b->msgs[i].msg_hdr = (struct msghdr){.msg_iov = &b->iov[i], .msg_iovlen = 1,
						     .msg_control = b->ctl[i],
						     .msg_controllen = sizeof(b->ctl[i])};
	}
	int n = recvmmsg(d->in_fd, b->msgs, BATCH, MSG_DONTWAIT, NULL);
	return n < 0 ? 0 : (unsigned int)n; /* EAGAIN, or a pending error (ENETDOWN) cleared */
}

/* Queue everything that arrived since the last call, each frame from its own
 * receive time. */
static void receive_all(struct dir *d)
{
	struct timespec real, mono;
	clock_gettime(CLOCK_REALTIME, &real);
	clock_gettime(CLOCK_MONOTONIC, &mono);
	int64_t offset = (int64_t)(ts_ns(&real) - ts_ns(&mono));
	uint64_t now = ts_ns(&mono);
	unsigned int n, batches = 0;
	do { /* bounded, so that releases are not held up by a flood */
		n = receive_batch(d);
		for (unsigned int i = 0; i < n; i++) {
			struct msghdr *m = &d->in->msgs[i].msg_hdr;
			size_t len = d->in->msgs[i].msg_len;
			if (len <= HDR_BYTES || (m->msg_flags & MSG_TRUNC)) {
				count(&d->drop_frames, 1);
				continue;
			}
			if (!admit(d, d->in->frames[i], len, arrival_ns(m, offset, now))) {
				count(&d->drop_frames, 1);
				count(&d->drop_bytes, (uint64_t)len - HDR_BYTES);
			}
		}
	} while (n == BATCH && ++batches < 8);
}

/* Send every due frame; returns the due time of the next one, or 0. */
static uint64_t release_due(struct dir *d)
{
	for (;;) {
		struct mmsghdr msgs[BATCH];
		struct iovec iov[BATCH];
		size_t offs[BATCH];
		struct rec *recs[BATCH];
		size_t n = 0, off;
		uint64_t now = now_ns();
		struct ring shadow = d->ring;
		struct rec *x;
		while (n < BATCH && (x = ring_peek(&shadow, &off)) != NULL && x->due_ns <= now) {
			iov[n] = (struct iovec){.iov_base = x + 1, .iov_len = x->len};
			msgs[n] = (struct mmsghdr){.msg_hdr = {.msg_iov = &iov[n], .msg_iovlen = 1}};
			offs[n] = off;
			recs[n] = x;
			ring_pop(&shadow, off, x);
			n++;
		}
		if (n > 0) {
			int sent = sendmmsg(d->out_fd, msgs, (unsigned int)n, 0);
			size_t ok = sent < 0 ? 0 : (size_t)sent;
			for (size_t i = 0; i < n; i++) {
				uint64_t bytes = recs[i]->len - HDR_BYTES;
				if (i < ok) {
					count(&d->fwd_frames, 1);
					count(&d->fwd_bytes, bytes);
					note_lateness(d, now - recs[i]->due_ns);
				} else if (i == ok) { /* the one that failed: drop it */
					count(&d->drop_frames, 1);
					count(&d->drop_bytes, bytes);
				} else {
					break;
				}
				ring_pop(&d->ring, offs[i], recs[i]);
			}
			continue;
		}
		x = ring_peek(&d->ring, &off);
		return x == NULL ? 0 : x->due_ns;
	}
}

/* How long to sleep, in ns, with `next` the due time of the first frame in
 * the ring (0: empty, wait for an arrival, up to a second).  At most one
 * wake-up per quantum; at least one per MAX_SLEEP_NS while frames are in
 * flight, so arrivals do not pile up in the socket. */
#define MAX_SLEEP_NS 2000000ull
static uint64_t sleep_ns(const struct dir *d, uint64_t next, uint64_t now)
{
	if (next == 0)
		return 1000000000ull;
	uint64_t wake = next, earliest = now + (uint64_t)(d->o->quantum_us * 1e3);
	if (wake < earliest)
		wake = earliest;
	if (wake > now + MAX_SLEEP_NS)
		wake = now + MAX_SLEEP_NS;
	return wake - now;
}

static void *run_dir(void *arg)
{
	struct dir *d = arg;
	struct sched_param sp = {.sched_priority = 50};
	int err = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
	if (err != 0)
		fprintf(stderr, "dline: %s: SCHED_FIFO refused (%s), continuing\n", d->name,
			strerror(err));
	for (;;) {
		receive_all(d);
		uint64_t next = release_due(d), wait = sleep_ns(d, next, now_ns());
		struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000ull),
				      .tv_nsec = (long)(wait % 1000000000ull)};
		/* frames in flight: wake on the clock only; none: on the next arrival */
		struct pollfd fds[2] = {{.fd = d->stop_fd, .events = POLLIN},
					{.fd = d->in_fd, .events = POLLIN}};
		if (ppoll(fds, next == 0 ? 2 : 1, &ts, NULL) < 0 && errno != EINTR)
			break;
		if (fds[0].revents)
			break;
	}
	return NULL;
}

static int open_sock(const char *ifname)
{
	int ifindex = (int)if_nametoindex(ifname), one = 1, rcvbuf = 64 << 20;
	if (ifindex == 0) {
		fprintf(stderr, "dline: no interface %s: %s\n", ifname, strerror(errno));
		return -1;
	}
	int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
	if (fd < 0) {
		fprintf(stderr, "dline: AF_PACKET socket: %s\n", strerror(errno));
		return -1;
	}
	struct packet_mreq mr = {.mr_ifindex = ifindex, .mr_type = PACKET_MR_PROMISC};
	struct sockaddr_ll sll = {.sll_family = AF_PACKET,
				  .sll_protocol = htons(ETH_P_ALL),
				  .sll_ifindex = ifindex};
	if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one)) < 0 ||
	    setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) < 0 ||
	    setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof(mr)) < 0 ||
	    bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0) {
		fprintf(stderr, "dline: setting up %s: %s\n", ifname, strerror(errno));
		close(fd);
		return -1;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &rcvbuf, sizeof(rcvbuf)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &rcvbuf, sizeof(rcvbuf));
	return fd;
}

static void usage(void)
{
	fprintf(stderr, "usage: dline --a IFACE_A --b IFACE_B --delay-ms D [--rate-mbit R] "
			"[--loss P] [--queue-bytes Q] [--jitter-us J] [--quantum-us U]\n");
	exit(2);
}

static double number(const char *s, const char *what, double lo, double hi)
{
	char *end;
	double v = strtod(s, &end);
	if (*s == '\0' || *end != '\0' || !(v >= lo && v <= hi)) {
		fprintf(stderr, "dline: --%s must be a number in [%g, %g], got '%s'\n", what, lo, hi, s);
		exit(2);
	}
	return v;
}

static void parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
	    {"a", required_argument, 0, 'a'},	     {"b", required_argument, 0, 'b'},
	    {"delay-ms", required_argument, 0, 'd'}, {"rate-mbit", required_argument, 0, 'r'},
	    {"loss", required_argument, 0, 'l'},     {"queue-bytes", required_argument, 0, 'q'},
	    {"jitter-us", required_argument, 0, 'j'}, {"quantum-us", required_argument, 0, 'u'},
	    {0, 0, 0, 0}};
	int c, have_delay = 0;
	o->quantum_us = 500;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'a': o->ifa = optarg; break;
		case 'b': o->ifb = optarg; break;
		case 'd': o->delay_ms = number(optarg, "delay-ms", 0, 60000); have_delay = 1; break;
		case 'r': o->rate_mbit = number(optarg, "rate-mbit", 0, 1e6); break;
		case 'l': o->loss = number(optarg, "loss", 0, 1); break;
		case 'q': o->queue_bytes = (uint64_t)number(optarg, "queue-bytes", 0, 1e12); break;
		case 'j': o->jitter_us = number(optarg, "jitter-us", 0, 6e7); break;
		case 'u': o->quantum_us = number(optarg, "quantum-us", 0, 1e5); break;
		default: usage();
		}
	}
	if (optind != argc || o->ifa == NULL || o->ifb == NULL || !have_delay)
		usage();
	if (o->rate_mbit > 0 && o->queue_bytes == 0) {
		double bdp = o->rate_mbit * 1e6 / 8 * 2 * o->delay_ms / 1e3;
		o->queue_bytes = bdp > 262144 ? (uint64_t)bdp : 262144;
	}
}

/* Ring bytes: everything in flight over the delay at the rate (10 Gbit/s if none;
 * beyond that the ring fills and frames are dropped, and counted). */
static size_t ring_bytes(const struct opts *o)
{
	double rate = o->rate_mbit > 0 ? o->rate_mbit : 10000;
	double late = (o->jitter_us + o->quantum_us) / 1e6 + MAX_SLEEP_NS / 1e9;
	double bytes = rate * 1e6 / 8 * (o->delay_ms / 1e3 + late + 0.010);
	if (o->rate_mbit > 0)
		bytes += (double)o->queue_bytes;
	bytes *= 1.25;
	return (size_t)bytes + 4 * (size_t)MAX_FRAME;
}

static struct dir *new_dir(const char *name, int in_fd, int out_fd, int stop_fd,
			   const struct opts *o)
{
	struct dir *d = calloc(1, sizeof(*d));
	size_t cap = align8(ring_bytes(o));
	void *buf = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *in = mmap(NULL, sizeof(struct batch), PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (d == NULL || buf == MAP_FAILED || in == MAP_FAILED) {
		fprintf(stderr, "dline: cannot allocate a %zu byte ring: %s\n", cap, strerror(errno));
		exit(1);
	}
	*d = (struct dir){.name = name, .in_fd = in_fd, .out_fd = out_fd, .stop_fd = stop_fd,
			  .ring = {.buf = buf, .cap = cap}, .o = o, .in = in,
			  .seed = (unsigned int)now_ns() ^ (unsigned int)in_fd};
	return d;
}

/* Frames the kernel dropped before this direction read them: its socket was full
 * (the thread was late). Reading resets the kernel's counter: added up here. */
static unsigned long long socket_drops(struct dir *d)
{
	struct tpacket_stats st = {0};
	socklen_t len = sizeof(st);
	if (getsockopt(d->in_fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0)
		d->socket_drops += st.tp_drops;
	return d->socket_drops;
}

static void print_stats(struct dir *d)
{
	fprintf(stderr,
		"%s fwd_frames=%llu fwd_bytes=%llu drop_frames=%llu drop_bytes=%llu "
		"socket_drops=%llu late_frames=%llu max_late_us=%llu",
		d->name, (unsigned long long)counted(&d->fwd_frames),
		(unsigned long long)counted(&d->fwd_bytes),
		(unsigned long long)counted(&d->drop_frames),
		(unsigned long long)counted(&d->drop_bytes), socket_drops(d),
		(unsigned long long)counted(&d->late_frames),
		(unsigned long long)(__atomic_exchange_n(&d->max_late_ns, 0, __ATOMIC_RELAXED) / 1000));
}

static void print_all(struct dir *ab, struct dir *ba)
{
	fprintf(stderr, "dline: stats ");
	print_stats(ab);
	fprintf(stderr, "; ");
	print_stats(ba);
	fprintf(stderr, "\n");
}

int main(int argc, char **argv)
{
	struct opts o = {0};
	parse(argc, argv, &o);
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0)
		fprintf(stderr, "dline: mlockall refused (%s), continuing\n", strerror(errno));
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	int fa = open_sock(o.ifa), fb = open_sock(o.ifb), stop = eventfd(0, 0);
	if (fa < 0 || fb < 0 || stop < 0)
		return 1;
	struct dir *ab = new_dir("a->b", fa, fb, stop, &o), *ba = new_dir("b->a", fb, fa, stop, &o);
	pthread_t ta, tb;
	if (pthread_create(&ta, NULL, run_dir, ab) != 0 || pthread_create(&tb, NULL, run_dir, ba) != 0) {
		fprintf(stderr, "dline: cannot start threads\n");
		return 1;
	}
	printf("dline: ready %s<->%s delay=%gms rate=%gMbit queue=%llu loss=%g jitter=%gus "
	       "quantum=%gus\n",
	       o.ifa, o.ifb, o.delay_ms, o.rate_mbit, (unsigned long long)o.queue_bytes, o.loss,
	       o.jitter_us, o.quantum_us);
	fflush(stdout);
	int sig;
	while (sigwait(&sigs, &sig) == 0 && sig == SIGUSR1)
		print_all(ab, ba); /* the counters so far; the line runs on */
	uint64_t one = 1;
	if (write(stop, &one, sizeof(one)) != sizeof(one))
		fprintf(stderr, "dline: cannot signal the threads: %s\n", strerror(errno));
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	print_all(ab, ba);
	return 0;
}
