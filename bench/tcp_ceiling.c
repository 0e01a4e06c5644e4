/* bench/tcp_ceiling.c - what raw TCP moves between the two hosts of
 * bench/multihost.sh with nothing but the kernel in the way: the ceiling an
 * all-reduce across them is judged against.
 *
 *   bench_tcp_ceiling recv PORT STREAMS
 *       accept STREAMS connections and drain them (on one host)
 *   bench_tcp_ceiling send HOST PORT STREAMS BYTES [--both]
 *       send BYTES over each of STREAMS connections (on the other host);
 *       with --both the receiver sends BYTES back on every stream at the
 *       same time, as an all-reduce's exchanges do
 *
 * `send` prints one JSON line: streams, both_ways, bytes per stream,
 * seconds (from the first byte sent until every receiver has confirmed its
 * last byte) and gbps = GB/s in one direction summed over the streams.
 * Sockets keep the kernel's default buffers (autotuning), as Open MPI's TCP
 * transport does (btl_tcp_sndbuf / btl_tcp_rcvbuf 0); every read and write
 * moves up to 4 MiB, so what is timed is the kernel's copies and TCP stack.
 * One thread per stream and direction. Exit status 2 on bad arguments. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK ((size_t)4 << 20)
#define MAX_STREAMS 16

typedef struct {
    int fd;
    size_t bytes;
    int ok;
} stream_t;

static pthread_barrier_t start;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int write_all(int fd, const char *b, size_t n) {
    while (n) {
        ssize_t k = write(fd, b, n);
        if (k <= 0) return -1;
        b += k, n -= (size_t)k;
    }
    return 0;
}

static int read_all(int fd, char *b, size_t n) {
    while (n) {
        ssize_t k = read(fd, b, n);
        if (k <= 0) return -1;
        b += k, n -= (size_t)k;
    }
    return 0;
}

static void *pump(void *arg) {
    stream_t *s = arg;
    char *buf = malloc(CHUNK);
    s->ok = buf != NULL;
    if (buf) memset(buf, 1, CHUNK);
    for (size_t left = s->bytes; s->ok && left;) {
        size_t n = left < CHUNK ? left : CHUNK;
        s->ok = write_all(s->fd, buf, n) == 0;
        left -= n;
    }
    free(buf);
    return NULL;
}

static void *drain(void *arg) {
    stream_t *s = arg;
    char *buf = malloc(CHUNK);
    s->ok = buf != NULL;
    for (size_t left = s->bytes; s->ok && left;) {
        size_t n = left < CHUNK ? left : CHUNK;
        s->ok = read_all(s->fd, buf, n) == 0;
        left -= n;
    }
    free(buf);
    return NULL;
}

/* One connection on the receiving side: header "BYTES both", then drain
 * (and pump back), then confirm with one byte. */
static void *serve(void *arg) {
    stream_t *s = arg;
    char hdr[24] = {0};
    s->ok = read_all(s->fd, hdr, 17) == 0;
    if (!s->ok) return NULL;
    s->bytes = strtoull(hdr, NULL, 10);
    stream_t back = {s->fd, s->bytes, 1};
    pthread_t t;
    int both = hdr[16] == 'b';
    if (both) pthread_create(&t, NULL, pump, &back);
    drain(s);
    if (both) pthread_join(t, NULL);
    s->ok = s->ok && back.ok && write_all(s->fd, "k", 1) == 0;
    close(s->fd);
    return NULL;
}

static int recv_main(int port, int streams) {
    int srv = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (bind(srv, (struct sockaddr *)&a, sizeof a) || listen(srv, streams)) {
        perror("tcp_ceiling: bind/listen");
        return 1;
    }
    stream_t s[MAX_STREAMS];
    pthread_t t[MAX_STREAMS];
    for (int i = 0; i < streams; i++) {
        s[i].fd = accept(srv, NULL, NULL);
        if (s[i].fd < 0) {
            perror("tcp_ceiling: accept");
            return 1;
        }
        pthread_create(&t[i], NULL, serve, &s[i]);
    }
    int ok = 1;
    for (int i = 0; i < streams; i++) {
        pthread_join(t[i], NULL);
        ok &= s[i].ok;
    }
    close(srv);
    return ok ? 0 : 1;
}

typedef struct {
    stream_t s;
    int both;
    double t0, t1;
} client_t;

static void *client(void *arg) {
    client_t *c = arg;
    char hdr[24];
    snprintf(hdr, sizeof hdr, "%016zu%c", c->s.bytes, c->both ? 'b' : '-');
    c->s.ok = write_all(c->s.fd, hdr, 17) == 0;
    pthread_barrier_wait(&start);
    c->t0 = now_s();
    stream_t in = {c->s.fd, c->s.bytes, 1};
    pthread_t t;
    if (c->both) pthread_create(&t, NULL, drain, &in);
    if (c->s.ok) pump(&c->s);
    if (c->both) pthread_join(t, NULL);
    char k = 0;
    c->s.ok = c->s.ok && in.ok && read_all(c->s.fd, &k, 1) == 0 && k == 'k';
    c->t1 = now_s();
    close(c->s.fd);
    return NULL;
}

static int send_main(const char *host, int port, int streams, size_t bytes, int both) {
    client_t c[MAX_STREAMS];
    pthread_t t[MAX_STREAMS];
    pthread_barrier_init(&start, NULL, (unsigned)streams);
    for (int i = 0; i < streams; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        if (inet_pton(AF_INET, host, &a.sin_addr) != 1 ||
            connect(fd, (struct sockaddr *)&a, sizeof a)) {
            fprintf(stderr, "tcp_ceiling: cannot connect to %s:%d\n", host, port);
            return 1;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c[i] = (client_t){{fd, bytes, 1}, both, 0, 0};
    }
    for (int i = 0; i < streams; i++)
        pthread_create(&t[i], NULL, client, &c[i]);
    double t0 = 1e300, t1 = 0;
    int ok = 1;
    for (int i = 0; i < streams; i++) {
        pthread_join(t[i], NULL);
        ok &= c[i].s.ok;
        t0 = c[i].t0 < t0 ? c[i].t0 : t0;
        t1 = c[i].t1 > t1 ? c[i].t1 : t1;
    }
    printf("{\"streams\": %d, \"both_ways\": %s, \"bytes_per_stream\": %zu, \"seconds\": %.4f, "
           "\"gbps\": %.4f, \"ok\": %s}\n",
           streams, both ? "true" : "false", bytes, t1 - t0,
           (double)streams * (double)bytes / (t1 - t0) / 1e9, ok ? "true" : "false");
    return ok ? 0 : 1;
}

static int usage(void) {
    fprintf(stderr,
            "usage: bench_tcp_ceiling recv PORT STREAMS\n"
            "       bench_tcp_ceiling send HOST PORT STREAMS BYTES [--both]\n"
            "(STREAMS 1..%d, BYTES > 0)\n",
            MAX_STREAMS);
    return 2;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "recv")) {
        int port = atoi(argv[2]), streams = atoi(argv[3]);
        if (port <= 0 || streams < 1 || streams > MAX_STREAMS) return usage();
        return recv_main(port, streams);
    }
    if (argc >= 6 && !strcmp(argv[1], "send")) {
        int port = atoi(argv[3]), streams = atoi(argv[4]);
        size_t bytes = strtoull(argv[5], NULL, 10);
        if (port <= 0 || streams < 1 || streams > MAX_STREAMS || bytes == 0) return usage();
        return send_main(argv[2], port, streams, bytes, argc >= 7 && !strcmp(argv[6], "--both"));
    }
    return usage();
}
