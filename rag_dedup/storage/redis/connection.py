"""Reaching a Redis server: URLs (and hiding their passwords), TLS hints, the eviction-policy check.

redis-py is an optional dependency (``pip install rag-dedup[redis]``); this is the one module that
imports it. Without it, :data:`redis_py` is None and :func:`require_redis` raises the pip hint.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
from typing import Any

from rag_dedup.errors import RedisConfigurationError, RedisUnavailable

try:  # optional dependency: pip install rag-dedup[redis]
    import redis as redis_py
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import ResponseError
    from redis.exceptions import TimeoutError as RedisTimeoutError
    from redis.exceptions import WatchError
except ImportError:  # pragma: no cover - exercised only without the extra
    redis_py = None
    RedisConnectionError = ConnectionError  # type: ignore[misc,assignment]
    ResponseError = RuntimeError  # type: ignore[misc,assignment]
    RedisTimeoutError = TimeoutError  # type: ignore[misc,assignment]
    WatchError = RuntimeError  # type: ignore[misc,assignment]

__all__ = ["CONNECTION_ERRORS", "LinearPacker", "check_url", "connect", "redact", "require_redis", "unavailable"]

#: What redis-py raises when the connection drops or a reply does not come in time.
CONNECTION_ERRORS = (RedisConnectionError, RedisTimeoutError)

_PASSWORD_PARAMETER = re.compile(r"(?i)([?&;]password=)[^&;]*")


def require_redis() -> None:
    """Raise the pip hint when redis-py is not installed."""
    if redis_py is None:
        raise ImportError("RedisStorage needs the redis package, which is not installed: pip install rag-dedup[redis]")


def redact(url: str) -> str:
    """The URL with its password hidden: ``redis://user:***@host:port/db``, ``...?password=***``.

    Works on the raw string, not on a parsed URL, so that a password holding ``#``, ``?``, ``/`` or ``@``
    (which a URL parser would cut at the wrong place) is hidden whole: everything from the end of the
    scheme to the last ``@`` counts as user information.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if "@" in rest:
        userinfo, _, host = rest.rpartition("@")
        rest = (userinfo.split(":", 1)[0] + ":***@" if ":" in userinfo else "***@") + host
    rest = _PASSWORD_PARAMETER.sub(r"\1***", rest)
    return f"{scheme}{sep}{rest}"


def check_url(url: object) -> None:
    """Refuse a URL that is not one, and what redis-py would misread silently: a ``#`` (a fragment) and
    a database that is not a number."""
    if not isinstance(url, str):
        raise TypeError(f"url must be a str like 'redis://localhost:6379/0', got {type(url).__name__}")
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(f"url {redact(url)!r} must start with redis://, rediss:// (TLS) or unix://")
    if "#" in url:
        raise ValueError(
            f"url {redact(url)!r} contains '#', where a URL ends and a fragment begins, so a password holding it "
            "would be cut there: write '#' as %23"
        )
    if url.startswith("unix://"):
        return
    try:
        path = urllib.parse.urlsplit(url).path
    except ValueError as exc:
        raise ValueError(f"url {redact(url)!r} is not a valid URL ({exc})") from None
    if path not in ("", "/") and not re.fullmatch(r"/[0-9]+", path):
        raise ValueError(
            f"url {redact(url)!r} names the database {path[1:]!r}: after the host comes a database number, "
            "such as redis://localhost:6379/0"
        )


def check_seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not value > 0:
        raise ValueError(f"{name} ({value}) must be a positive number of seconds")


def unavailable(url: str, exc: BaseException, what: str) -> RedisUnavailable:
    """The error for a connection lost while doing ``what`` (the URL shown without its password)."""
    return RedisUnavailable(f"lost the connection to Redis at {redact(url)} {what} ({exc})")


def connect(
    url: str, *, connect_timeout: float, socket_timeout: float | None, allow_eviction: bool, options: dict[str, Any]
) -> Any:
    """A client of the server at ``url``, after one PING (and the eviction-policy check, 2 round trips).

    Its commands are packed by :class:`LinearPacker` (unless ``options`` name a ``command_packer``),
    with or without hiredis; replies are parsed by redis-py's parser (hiredis's when it is installed,
    or whatever ``parser_class`` the options give).

    Raises:
        RedisUnavailable: The server cannot be reached or refused the credentials (the message names
            the URL without its password, and the likely fix).
        RedisConfigurationError: The server may evict keys, and ``allow_eviction`` is False; or it refused
            the connection's setup (a database number it does not have).
        ValueError: redis-py cannot use the URL (a port, database or query parameter it cannot read).
    """
    require_redis()
    try:
        client = redis_py.Redis.from_url(url, socket_connect_timeout=connect_timeout, socket_timeout=socket_timeout, **options)
    except (ValueError, TypeError) as exc:  # a port, a db or a query parameter redis-py cannot take
        raise ValueError(f"url {redact(url)!r} is not a Redis URL redis-py can use: {exc}") from None
    pool = client.connection_pool
    if "command_packer" not in pool.connection_kwargs:
        # Before the first connection is made (connections take their packer when they are created).
        pool.connection_kwargs["command_packer"] = LinearPacker(pool.get_encoder().encode)
    try:
        client.ping()
    except redis_py.exceptions.AuthenticationError as exc:
        client.close()
        raise RedisUnavailable(
            f"Redis at {redact(url)} refused the credentials of the URL ({exc}); put the password in the "
            "URL as redis://:PASSWORD@host:port/db (or redis://USER:PASSWORD@... for an ACL user)"
        ) from exc
    except TypeError as exc:  # a query parameter of the URL that redis-py's connection does not take
        client.close()
        raise ValueError(f"url {redact(url)!r} is not a Redis URL redis-py can use: {exc}") from None
    except redis_py.exceptions.ResponseError as exc:  # the connection's setup: SELECT of a database it lacks
        client.close()
        raise RedisConfigurationError(
            f"Redis at {redact(url)} refused to open the connection the URL describes ({exc}); a server has "
            "databases 0 to 15 unless its 'databases' setting says more"
        ) from None
    except (*CONNECTION_ERRORS, OSError) as exc:
        client.close()
        if "certificate" in str(exc).lower() or "ssl" in str(exc).lower():
            hint = "for rediss://, the server's certificate must verify: add ?ssl_ca_certs=/path/to/ca.pem to the URL"
        elif url.lower().startswith("rediss://") and "timeout" in str(exc).lower():
            # redis-py reports a TCP connect and a TLS handshake that time out alike. A server without
            # TLS on that port reads the handshake as the start of a command and waits for the rest.
            hint = ("either the host does not answer on that port (a firewall, a wrong host), or the port is "
                    "plain Redis: rediss:// speaks TLS, and a port without TLS never answers its handshake "
                    "(for a plain server use redis://, for TLS the port of its tls-port setting)")
        elif url.lower().startswith("redis://") and any(m in str(exc).lower() for m in ("reset by peer", "closed by server")):
            hint = ("the server closed the connection without a reply, as a TLS port does to a client without TLS: "
                    "if it serves TLS, use rediss:// (with ?ssl_ca_certs=/path/to/ca.pem for a private CA)")
        else:
            hint = "is redis-server running there? (apt-get install redis-server; redis-server --port 6379)"
        raise RedisUnavailable(f"cannot reach Redis at {redact(url)} ({exc}); {hint}") from exc
    if not allow_eviction:
        _check_eviction_policy(client, url)
    return client


class LinearPacker:
    """redis-py's pure-Python command packer, in time linear in the command's size.

    redis-py's own (``PythonRespSerializer``, used without hiredis) appends each argument to a buffer
    of up to 6 KB that it copies whole every time: a command of many short arguments (an HSET of
    thousands of fields, a script call over thousands of keys, which a batch's commit is made of)
    costs a copy of kilobytes per argument. This one writes each argument once and joins them at the
    end; the bytes sent are the same (the RESP array of the encoded arguments, a first argument with
    spaces split as redis-py splits it). It is used with hiredis installed too: redis-py's hiredis packer
    (``HiredisRespSerializer``) looks at every argument in Python before hiredis packs them, and took
    1,027 us for a command of 5,000 arguments of 12 bytes where this takes 862 (25 against 20 us at
    100 arguments; the same at 3), and ``bench_redis.py`` measured 85 us of CPU a chunk against 87.
    """

    def __init__(self, encode: Callable[[Any], bytes]) -> None:
        self.encode = encode

    def pack(self, *args: Any) -> list[bytes]:
        if isinstance(args[0], str):
            args = tuple(args[0].encode().split()) + args[1:]
        elif b" " in args[0]:
            args = tuple(args[0].split()) + args[1:]
        encode = self.encode
        raws = [a if type(a) is bytes else encode(a) for a in args]  # most arguments are bytes already
        return [b"".join([b"*%d\r\n" % len(raws), *(b"$%d\r\n%b\r\n" % (len(r), r) for r in raws)])]


def _check_eviction_policy(client: Any, url: str) -> None:
    """Refuse a server that may evict keys (``maxmemory-policy`` other than ``noeviction``)."""
    try:
        section = client.info("memory")
    except CONNECTION_ERRORS as exc:
        client.close()
        raise unavailable(url, exc, "while reading its configuration") from exc
    policy = section.get("maxmemory_policy") if isinstance(section, dict) else None
    if policy != "noeviction":
        client.close()
        raise RedisConfigurationError(
            f"Redis at {redact(url)} has maxmemory-policy {policy!r}: when memory runs short it evicts "
            "keys, and an index with evicted keys answers wrongly without an error. Run the server with "
            "maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, or in redis.conf), or "
            "pass allow_eviction=True to accept the risk"
        )
