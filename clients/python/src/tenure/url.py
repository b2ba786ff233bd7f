"""``tenure://`` URLs, parsed once into a :class:`ClusterUrl`, and where a program finds its
cluster when nobody says (``$TENURE_BACKEND`` and the TLS and token variables): a port of
the Rust ``tenure::url`` and ``tenure::environment`` for the one backend this client speaks.

``tenure://HOST:PORT[,HOST:PORT...][?ca=FILE[&cert=FILE&key=FILE]][&token_file=FILE][&discover=BOOL]``

Query values are percent-decoded. Every parameter this client does not know is refused: a
misspelt ``ca`` would otherwise turn TLS off without a word.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from .errors import InvalidUrl, UnsupportedBackend

#: The cluster when neither the caller nor ``$TENURE_BACKEND`` names one: a local node.
DEFAULT_BACKEND = "tenure://127.0.0.1:8001"

_KNOWN = ("ca", "cert", "key", "token_file", "discover")


@dataclass(frozen=True)
class ClusterUrl:
    """A parsed ``tenure://`` URL."""

    #: Each node's client address, as it will be dialed (checked by :func:`node_addr`).
    addrs: Tuple[str, ...]
    #: ``ca=FILE``: TLS, with this CA certificate.
    ca: Optional[str] = None
    #: ``cert=FILE&key=FILE``: a client certificate and its key.
    identity: Optional[Tuple[str, str]] = None
    #: ``token_file=FILE``: a bearer token presented with every request.
    token_file: Optional[str] = None
    #: ``discover=true`` (the default): learn the other members from the cluster.
    discover: bool = True


def parse(url: str) -> ClusterUrl:
    """Parse a backend URL; :class:`InvalidUrl` for a malformed one,
    :class:`UnsupportedBackend` for a scheme other than ``tenure://``."""

    def bad(why: str) -> InvalidUrl:
        return InvalidUrl(url, why)

    scheme, sep, rest = url.partition(":")
    if not sep:
        raise bad("expected SCHEME:...")
    if scheme != "tenure":
        raise UnsupportedBackend(
            scheme,
            "the Python client speaks to a tenure cluster only (tenure://host:port,...); "
            "etcd, PostgreSQL, ZooKeeper and memory: backends are the Rust crate's",
        )
    if not rest.startswith("//"):
        raise bad("expected tenure://host:port,host:port")
    try:
        return _parse_cluster(rest[2:])
    except ValueError as e:
        raise bad(str(e)) from None


def _parse_cluster(rest: str) -> ClusterUrl:
    before_query, _, query = rest.partition("?")
    authority, slash, path = before_query.partition("/")
    if "@" in authority:
        raise ValueError(
            "tenure:// URLs carry no user or password (a client certificate or token_file "
            "identifies the client)"
        )
    if slash and path:
        raise ValueError("tenure:// URLs have no path after the hosts")
    hosts = [h for h in authority.split(",") if h]
    if not hosts:
        raise ValueError("no host:port given")
    addrs = tuple(node_addr(h) for h in hosts)
    params = _query(query)
    discover_text = params.pop("discover", None)
    if discover_text is None or discover_text == "true":
        discover = True
    elif discover_text == "false":
        discover = False
    else:
        raise ValueError(f'query parameter "discover" is {discover_text!r}; it is true or false')
    ca, cert, key, token_file = (params.pop(n, None) for n in ("ca", "cert", "key", "token_file"))
    if params:
        name = next(iter(params))
        raise ValueError(f'unknown query parameter "{name}" (known: {", ".join(_KNOWN)})')
    if (cert is None) != (key is None):
        raise ValueError("cert and key go together")
    identity = (cert, key) if cert is not None and key is not None else None
    if ca is None and identity is not None:
        raise ValueError("cert and key need ca (the cluster's CA certificate) too")
    return ClusterUrl(addrs, ca, identity, token_file, discover)


def _query(query: str) -> Dict[str, str]:
    params: Dict[str, str] = {}
    for pair in (p for p in query.split("&") if p):
        name, eq, value = pair.partition("=")
        if not eq:
            raise ValueError(f"query parameter {pair!r} has no value")
        name = decode(name, "a query parameter's name")
        value = decode(value, f'query parameter "{name}"')
        if not value:
            raise ValueError(f'query parameter "{name}" is empty')
        if name in params:
            raise ValueError(f'query parameter "{name}" is given twice')
        params[name] = value
    return params


def decode(text: str, what: str) -> str:
    """Percent-decode ``text``; the result must be UTF-8."""
    out = bytearray()
    i = 0
    raw = text.encode("utf-8")
    while i < len(raw):
        if raw[i] == ord("%"):
            digits = raw[i + 1 : i + 3]
            if len(digits) != 2 or not all(chr(b) in "0123456789abcdefABCDEF" for b in digits):
                raise ValueError(f"{what} has a '%' not followed by two hex digits")
            out.append(int(digits, 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{what} is not UTF-8 once percent-decoded") from None


_LABEL = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")


def node_addr(addr: str) -> str:
    """Check one node address (of a URL, a ``not-leader`` hint or a member list):
    ``HOST:PORT``, the host an IP address (``[...]`` around IPv6) or a DNS name. Returns the
    address as it will be dialed (a name lowercased); ``ValueError`` says what is wrong."""
    socket_addr = _socket_addr(addr)
    if socket_addr is not None:
        if socket_addr == 0:
            raise ValueError(f"{addr!r} has port 0")
        return addr
    host, colon, port = addr.rpartition(":")
    if not colon:
        raise ValueError(f"{addr!r} is not HOST:PORT (no port)")
    if not (port.isascii() and port.isdigit() and 0 < int(port) <= 65535):
        raise ValueError(f"{addr!r} has no valid port (1 to 65535)")
    if ":" in host or host.startswith("["):
        raise ValueError(
            f"{addr!r} is not HOST:PORT (an IPv6 address goes in brackets: [ADDR]:PORT)"
        )
    name = host[:-1] if host.endswith(".") else host
    if (
        not name
        or len(name) > 253
        or not name.isascii()
        or not all(_LABEL.match(label) for label in name.split("."))
    ):
        raise ValueError(
            f"{addr!r}: the host must be an IP address or a name of letters, digits, '-', "
            "'_' and '.'"
        )
    if all(c.isdigit() or c == "." for c in name):
        raise ValueError(f"{addr!r}: {host!r} is not a valid IP address")
    return f"{name.lower()}:{port}"


def _socket_addr(addr: str) -> Optional[int]:
    """The port of ``addr`` if it is an IP socket address (``1.2.3.4:80``, ``[::1]:80``),
    else ``None``."""
    if addr.startswith("["):
        host, sep, port = addr[1:].partition("]:")
        version = 6
    else:
        host, sep, port = addr.rpartition(":")
        version = 4
    if not sep or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        return None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if ip.version != version:
        return None
    return int(port)


def backend_url(
    given: Optional[str] = None,
    *,
    ca: Optional[str] = None,
    cert: Optional[str] = None,
    key: Optional[str] = None,
    token_file: Optional[str] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> str:
    """``given``, else ``$TENURE_BACKEND``, else :data:`DEFAULT_BACKEND`; a ``tenure://`` URL
    without a query gets its TLS files and token from the arguments, else from
    ``$TENURE_CA``, ``$TENURE_CERT``, ``$TENURE_KEY`` and ``$TENURE_TOKEN_FILE``. A URL
    with a query of its own is taken as it is."""
    env = os.environ if environ is None else environ

    def env_nonempty(name: str) -> Optional[str]:
        value = env.get(name)
        return value if value else None

    url = given or env_nonempty("TENURE_BACKEND") or DEFAULT_BACKEND
    if not url.startswith("tenure://") or "?" in url:
        return url
    explicit = {"TENURE_CA": ca, "TENURE_CERT": cert, "TENURE_KEY": key, "TENURE_TOKEN_FILE": token_file}
    params: List[str] = []
    for param, var in (
        ("ca", "TENURE_CA"),
        ("cert", "TENURE_CERT"),
        ("key", "TENURE_KEY"),
        ("token_file", "TENURE_TOKEN_FILE"),
    ):
        value = explicit[var] or env_nonempty(var)
        if value:
            params.append(f"{param}={value}")
    return url + ("?" + "&".join(params) if params else "")

