"""Alert webhooks that cannot reach inside the platform.

The destination is resolved at delivery (not when the URL was saved), and refused unless every
address it resolves to is public: loopback, private, link-local, multicast, reserved and
unspecified addresses are refused, for IPv4 and IPv6 alike, including IPv4 addresses embedded
in IPv6 (mapped ``::ffff:a.b.c.d``, NAT64, 6to4, Teredo). The connection then goes to the
address that was checked (a second lookup could answer differently), with the host name kept
for the ``Host`` header and TLS. Redirects are never followed. Hosts named in
``LASER_SLO_WEBHOOK_ALLOWED_HOSTS`` (set by platform staff) skip the address check.

What the tenant sees is ``Delivery.status``: ``delivered: HTTP 204``, ``failed: HTTP 500`` or
``failed: <one of REASONS>``: never an exception's text, which would make the webhook a scanner
of the platform's network.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import urllib3
from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

INVALID_URL = "invalid URL"
NOT_RESOLVED = "host name not resolved"
REFUSED = "destination not allowed (private or reserved address)"
REDIRECT = "redirect not followed"
TIMEOUT = "timed out"
CONNECTION = "connection failed"
TLS = "TLS error"
REASONS = (INVALID_URL, NOT_RESOLVED, REFUSED, REDIRECT, TIMEOUT, CONNECTION, TLS)

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")


class Refused(Exception):
    """The destination may not be called; ``reason`` is one of ``REASONS``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Destination:
    scheme: str
    host: str  # as written in the URL (the Host header and TLS name)
    port: int
    address: str  # the checked address the connection goes to
    target: str  # path and query
    host_header: str


@dataclass(frozen=True, slots=True)
class Delivery:
    delivered: bool
    status: str  # what the tenant reads
    retry: bool  # worth another attempt (timeouts, connection errors, 5xx, 429)


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64 or ip in _NAT64_LOCAL:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    return ip.teredo[1] if ip.teredo is not None else None


def is_public(ip: IPAddress) -> bool:
    """True when ``ip`` (and any IPv4 address inside it) is a public unicast address."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_v4(ip)
        if inner is not None and not is_public(inner):
            return False
    blocked = (ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast
               or ip.is_reserved or ip.is_unspecified)
    if isinstance(ip, ipaddress.IPv6Address):
        blocked = blocked or ip.is_site_local
    return ip.is_global and not blocked


def allowed_hosts() -> set[str]:
    return {h.strip().lower().strip("[]") for h in settings.LASER_SLO_WEBHOOK_ALLOWED_HOSTS
            if h.strip()}


def resolve(url: str) -> Destination:
    """Check ``url`` and resolve its host now; raises ``Refused``."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise Refused(INVALID_URL) from None
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        raise Refused(INVALID_URL)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError):
        raise Refused(NOT_RESOLVED) from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(info[4][0].split("%")[0])
                                   for info in infos))
    if not addresses:
        raise Refused(NOT_RESOLVED)
    # Every address must be public: a name answering with a public and a private address
    # would otherwise let the connection pick the private one.
    if host not in allowed_hosts() and not all(is_public(ip) for ip in addresses):
        raise Refused(REFUSED)
    target = parts.path or "/"
    if parts.query:
        target += f"?{parts.query}"
    return Destination(scheme=parts.scheme, host=host, port=port, address=str(addresses[0]),
                       target=target, host_header=parts.netloc.rpartition("@")[2])


def _pool(dest: Destination, timeout: float) -> urllib3.HTTPConnectionPool:
    limits = urllib3.Timeout(connect=timeout, read=timeout)
    if dest.scheme == "https":
        return urllib3.HTTPSConnectionPool(
            dest.address, dest.port, timeout=limits, retries=False, cert_reqs="CERT_REQUIRED",
            server_hostname=dest.host, assert_hostname=dest.host,
        )
    return urllib3.HTTPConnectionPool(dest.address, dest.port, timeout=limits, retries=False)


def post(url: str, payload: dict, *, timeout: float | None = None) -> Delivery:
    """POST ``payload`` as JSON to ``url`` if it is allowed; never raises for network faults."""
    timeout = settings.LASER_SLO_WEBHOOK_TIMEOUT_S if timeout is None else timeout
    try:
        dest = resolve(url)
    except Refused as refused:
        return Delivery(False, f"failed: {refused.reason}", retry=refused.reason == NOT_RESOLVED)
    headers = {"Host": dest.host_header, "Content-Type": "application/json",
               "User-Agent": "laser-slo-webhook"}
    try:
        with _pool(dest, timeout) as pool:
            response = pool.urlopen("POST", dest.target, body=json.dumps(payload).encode(),
                                    headers=headers, redirect=False, retries=False,
                                    assert_same_host=False)
    except urllib3.exceptions.NewConnectionError:  # a subclass of the timeout error
        return Delivery(False, f"failed: {CONNECTION}", retry=True)
    except urllib3.exceptions.TimeoutError:
        return Delivery(False, f"failed: {TIMEOUT}", retry=True)
    except urllib3.exceptions.SSLError:
        return Delivery(False, f"failed: {TLS}", retry=False)
    except (urllib3.exceptions.HTTPError, OSError):
        return Delivery(False, f"failed: {CONNECTION}", retry=True)
    return _judge(response.status)


def _judge(code: int) -> Delivery:
    if 200 <= code < 300:
        return Delivery(True, f"delivered: HTTP {code}", retry=False)
    if 300 <= code < 400:
        return Delivery(False, f"failed: {REDIRECT} (HTTP {code})", retry=False)
    return Delivery(False, f"failed: HTTP {code}", retry=code >= 500 or code == 429)
