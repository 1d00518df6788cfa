/*
 * This session's peer, for pg_gatekeeper.citus_peers (src/peer.rs): the
 * address PostgreSQL accepted the connection from. Port is opaque to the
 * Rust bindings, and the address families are the platform's, so the
 * reading is here.
 */
#include "postgres.h"

#include <sys/socket.h>
#include <netinet/in.h>

#include "libpq/libpq-be.h"
#include "miscadmin.h"

/*
 * The peer's kind: 0 no client connection (a background worker), 1 a
 * Unix-domain socket, 4 IPv4 (the address in addr[0..4], network order),
 * 6 IPv6 (addr[0..16]), 2 any other family.
 */
int
gk_peer_address(unsigned char *addr)
{
	const struct sockaddr_storage *ss;

	if (MyProcPort == NULL)
		return 0;
	ss = &MyProcPort->raddr.addr;
	switch (ss->ss_family)
	{
		case AF_UNIX:
			return 1;
		case AF_INET:
			memcpy(addr, &((const struct sockaddr_in *) ss)->sin_addr.s_addr, 4);
			return 4;
		case AF_INET6:
			memcpy(addr, ((const struct sockaddr_in6 *) ss)->sin6_addr.s6_addr, 16);
			return 6;
		default:
			return 2;
	}
}
