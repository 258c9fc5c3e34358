/*
 * LD_PRELOAD shim: every socket of a JVM the platform starts stays on loopback,
 * on the node's own address when the platform gives it one.
 *
 * bind(): RocketMQ's HA acceptor (DefaultHAService) binds the wildcard address
 * with no setting to change it; this rewrites INADDR_ANY -> the node's address
 * (RMQCHAOS_NODE_ADDR, default 127.0.0.1) and in6addr_any -> ::1, so nothing we
 * start is reachable from off-host.
 *
 * connect(): with RMQCHAOS_NODE_ADDR set, an unbound IPv4 socket connecting to
 * 127.0.0.0/8 is first bound to the node's address (port 0), so every link
 * between two nodes is an address pair a network rule can name. The kernel would
 * otherwise pick 127.0.0.1 as the source of every loopback connection.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);
typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

static struct in_addr node_addr;
static int node_addr_set = -1; /* -1: not read yet; 0: unset (127.0.0.1); 1: set */

static void read_node_addr(void) {
    if (node_addr_set >= 0) return;
    const char *s = getenv("RMQCHAOS_NODE_ADDR");
    node_addr.s_addr = htonl(INADDR_LOOPBACK);
    node_addr_set = 0;
    /* only a loopback address is ever taken: anything else keeps 127.0.0.1 */
    if (s && inet_pton(AF_INET, s, &node_addr) == 1 && (ntohl(node_addr.s_addr) >> 24) == 127) {
        node_addr_set = 1;
    } else {
        node_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
}

static bind_fn real_bind_fn(void) {
    static bind_fn real_bind;
    if (!real_bind) real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    return real_bind;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    bind_fn real_bind = real_bind_fn();
    read_node_addr();
    if (addr && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in in4;
        memcpy(&in4, addr, sizeof in4);
        if (in4.sin_addr.s_addr == htonl(INADDR_ANY)) {
            in4.sin_addr = node_addr;
            return real_bind(fd, (const struct sockaddr *)&in4, sizeof in4);
        }
    } else if (addr && addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6;
        memcpy(&in6, addr, sizeof in6);
        if (memcmp(&in6.sin6_addr, &in6addr_any, sizeof in6addr_any) == 0) {
            in6.sin6_addr = in6addr_loopback;
            return real_bind(fd, (const struct sockaddr *)&in6, sizeof in6);
        }
    }
    return real_bind(fd, addr, len);
}

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    static connect_fn real_connect;
    if (!real_connect) real_connect = (connect_fn)dlsym(RTLD_NEXT, "connect");
    read_node_addr();
    if (node_addr_set == 1 && addr && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *to = (const struct sockaddr_in *)addr;
        struct sockaddr_in self;
        socklen_t slen = sizeof self;
        if ((ntohl(to->sin_addr.s_addr) >> 24) == 127 && getsockname(fd, (struct sockaddr *)&self, &slen) == 0
            && self.sin_family == AF_INET && self.sin_port == 0 && self.sin_addr.s_addr == htonl(INADDR_ANY)) {
            struct sockaddr_in src;
            memset(&src, 0, sizeof src);
            src.sin_family = AF_INET;
            src.sin_addr = node_addr;
            /* a failed bind leaves the socket as it was: the connect goes on from the kernel's choice */
            real_bind_fn()(fd, (const struct sockaddr *)&src, sizeof src);
        }
    }
    return real_connect(fd, addr, len);
}
