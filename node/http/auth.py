"""Who may call the node's HTTP API: the bearer token, and the Origin/Host checks.

Three checks, made by `node.http.api`'s middleware before routing, in this order (the
node's syntactic path check, 400 for hostile paths, runs between 2 and 3):

1. **Host** (DNS rebinding): the ``Host`` header must be an IP literal, ``localhost``
   (or a ``*.localhost`` name), the HTTP bind host, or a name configured with
   ``http.allowed_hosts`` (``"*"`` turns the check off, e.g. behind a reverse proxy
   that sets its own ``Host``). A web page on ``evil.example`` whose name was rebound to
   127.0.0.1 reaches the node with ``Host: evil.example:8080`` and is refused. This
   applies to every route, reads too: a rebound page could otherwise read the API.
2. **Origin** (cross-site requests): a request with an ``Origin`` header other than the
   node's own (``http://`` + the accepted Host), or ``Origin: null``, or one a browser
   marks ``Sec-Fetch-Site: cross-site``/``same-site``, is refused, on every route.
   Non-browser clients (kamu, curl, odf) send no ``Origin`` and are not affected.
3. **Bearer token** (state-changing requests): every method other than GET, HEAD and
   OPTIONS (uploads, push, push ingest, attestation posts, follow/unfollow, and any
   route added later) needs ``Authorization: Bearer <token>``. The token is
   `secrets.token_urlsafe` (256 bits), created at the first ``odf node run`` in
   ``.odf/p2p/http-token`` (mode 0600, next to the node's libp2p identity) and compared
   in constant time. The CLI reads it from there when it talks to its own node;
   ``odf push --token-file F``/``--token T``/``$ODF_NODE_TOKEN`` for other nodes.

Refusals are one-line JSON errors (``{"error": ...}``): 403 for Host/Origin, 401 with a
``WWW-Authenticate: Bearer`` challenge for a missing or wrong token. The handler never
runs, so nothing is read from the body and nothing changes on disk.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
import secrets
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fbs.errors import ExitCategory
from node.errors import NodeError
from storage.errors import StorageError
from storage.fsutil import create_file_durably, ensure_dir, open_for_read

__all__ = [
    "READ_METHODS",
    "TOKEN_ENV",
    "TOKEN_FILE",
    "TOKEN_FILE_MODE",
    "AccessPolicy",
    "TokenFileError",
    "bearer_headers",
    "load_or_create_token",
    "read_token",
    "read_token_file",
    "token_path",
]

#: The token file, relative to the workspace root (``.odf/``).
TOKEN_FILE: Final = "p2p/http-token"
#: Permission bits of the token file (group/other bits make it unusable).
TOKEN_FILE_MODE: Final = 0o600
#: Environment variable `odf push` reads a token from.
TOKEN_ENV: Final = "ODF_NODE_TOKEN"
#: Methods that change nothing and need no token.
READ_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
#: Largest token file read.
MAX_TOKEN_FILE_BYTES: Final = 1024
#: Random bytes in a new token (43 base64url characters).
TOKEN_BYTES: Final = 32
_TOKEN_RE: Final = re.compile(r"[A-Za-z0-9_\-.~+/]{16,512}=*")
_LABEL: Final = r"[a-z0-9_](?:[a-z0-9_\-]{0,61}[a-z0-9_])?"
_HOST_NAME_RE: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_BROWSER_CROSS: Final = frozenset({"cross-site", "same-site"})


class TokenFileError(NodeError):
    """The token file is unsafe (symlink, not ours, readable by others) or malformed."""

    exit_category = ExitCategory.INVALID


# -- the token file ----------------------------------------------------------------------


def token_path(ws_root: Path) -> Path:
    """Where the HTTP token of the workspace at ``ws_root`` (``.odf/``) lives."""
    return Path(ws_root) / TOKEN_FILE


def _valid_token(text: str) -> bool:
    return _TOKEN_RE.fullmatch(text) is not None


def read_token_file(path: Path) -> str | None:
    """The token stored at ``path``, or ``None`` when there is no file.

    Raises:
        TokenFileError: a symlink or non-regular file, a file other users can read or
            that another user owns, too large, or not a token.
    """
    path = Path(path)
    try:
        f = open_for_read(path)
    except FileNotFoundError:
        return None
    except (OSError, StorageError) as e:
        raise TokenFileError(f"cannot open token file {path}: {e}") from None
    with f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise TokenFileError(f"token file {path} is not a regular file")
        if st.st_mode & 0o077:
            raise TokenFileError(
                f"token file {path} is accessible by others (mode {st.st_mode & 0o777:o});"
                " run chmod 600"
            )
        if st.st_uid != os.geteuid():
            raise TokenFileError(f"token file {path} belongs to another user")
        data = f.read(MAX_TOKEN_FILE_BYTES + 1)
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError:
        text = ""
    if len(data) > MAX_TOKEN_FILE_BYTES or not _valid_token(text):
        raise TokenFileError(f"token file {path} does not hold a token")
    return text


def read_token(ws_root: Path) -> str | None:
    """The workspace's HTTP token, or ``None`` if no node has created one yet.

    Raises:
        TokenFileError: see `read_token_file`.
    """
    return read_token_file(token_path(ws_root))


def load_or_create_token(ws_root: Path) -> str:
    """The workspace's HTTP token, created (0600, durably, atomically) if missing.

    Two processes creating it at once end up with the same token: the file appears
    whole and is never replaced (`storage.fsutil.create_file_durably`), so the loser
    reads the winner's.

    Raises:
        TokenFileError: an unsafe or malformed existing file.
        OSError: the file cannot be written.
    """
    path = token_path(ws_root)
    existing = read_token_file(path)
    if existing is not None:
        return existing
    ensure_dir(path.parent)
    fresh = (secrets.token_urlsafe(TOKEN_BYTES) + "\n").encode("ascii")
    create_file_durably(path, fresh, mode=TOKEN_FILE_MODE)
    token = read_token_file(path)
    if token is None:  # pragma: no cover - removed between link and read
        raise TokenFileError(f"token file {path} vanished while being created")
    return token


def bearer_headers(token: str | None) -> dict[str, str]:
    """``{"Authorization": "Bearer <token>"}``, or ``{}`` without a token."""
    return {"Authorization": f"Bearer {token}"} if token else {}


# -- the checks ----------------------------------------------------------------------------


def _split_host(value: str) -> str | None:
    """The host part of a ``Host`` header value (lowercase, no port), ``None`` if malformed."""
    value = value.strip().lower()
    if not value:
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1 :]
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return None
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            return None
        return name
    name, sep, port = value.rpartition(":")
    if not sep:
        name = value
    elif not port.isdigit():
        return None
    name = name.rstrip(".")
    try:
        ipaddress.IPv4Address(name)
        return name
    except ValueError:
        pass
    return name if _HOST_NAME_RE.fullmatch(name) else None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """The checks of the module docstring for one node.

    Attributes:
        token: the bearer token state-changing requests must carry.
        allowed_hosts: host names accepted in ``Host`` besides IP literals and
            ``localhost`` (lowercase, no port); ``"*"`` accepts any.
    """

    token: str
    allowed_hosts: frozenset[str] = frozenset()

    @classmethod
    def create(cls, token: str, allowed_hosts: Iterable[str] = ()) -> AccessPolicy:
        """A policy; host names are normalized (lowercase, brackets and port removed)."""
        if not _valid_token(token):
            raise TokenFileError("the HTTP API token is not a valid token")
        names = set()
        for h in allowed_hosts:
            if h.strip() == "*":
                names.add("*")
                continue
            name = _split_host(h)
            if name is not None and name not in ("0.0.0.0", "::"):
                names.add(name)
        return cls(token, frozenset(names))

    def host_allowed(self, host_header: str | None) -> bool:
        """Whether ``Host`` names this node (not a rebound foreign name)."""
        if host_header is None:
            return True  # HTTP/1.0 without Host: not a browser
        if "*" in self.allowed_hosts:
            return True
        name = _split_host(host_header)
        if name is None:
            return False
        if _is_ip(name) or name == "localhost" or name.endswith(".localhost"):
            return True
        return name in self.allowed_hosts

    def refusal(self, method: str, headers: Mapping[str, str]) -> tuple[int, str] | None:
        """Why a request is refused (status, one-line message), or ``None`` to let it in.

        Host and Origin first (403 even with a valid token, `browser_refusal`), then the
        token for any method that is not a read (401, `token_refusal`).
        """
        return self.browser_refusal(headers) or self.token_refusal(method, headers)

    def browser_refusal(self, headers: Mapping[str, str]) -> tuple[int, str] | None:
        """403 for a foreign ``Host`` (DNS rebinding) or ``Origin`` (cross-site), any method."""
        host = headers.get("Host")
        if not self.host_allowed(host):
            return 403, "unexpected Host header (DNS rebinding?): use the node's address"
        origin = headers.get("Origin")
        if origin is not None:
            own = {f"{scheme}://{(host or '').strip().lower()}" for scheme in ("http", "https")}
            if host is None or origin.strip().lower().rstrip("/") not in own:
                return 403, "cross-origin requests are refused"
        if headers.get("Sec-Fetch-Site", "").strip().lower() in _BROWSER_CROSS:
            return 403, "cross-site requests are refused"
        return None

    def token_refusal(self, method: str, headers: Mapping[str, str]) -> tuple[int, str] | None:
        """401 for a state-changing ``method`` without the right bearer token."""
        if method.upper() in READ_METHODS:
            return None
        auth = headers.get("Authorization")
        if auth is None:
            return 401, "authentication required: Authorization: Bearer <token>"
        scheme, _, given = auth.strip().partition(" ")
        if scheme.lower() != "bearer" or not self.token_matches(given.strip()):
            return 401, "invalid token"
        return None

    def token_matches(self, given: str) -> bool:
        """Constant-time comparison (of SHA-256 digests: equal lengths whatever is sent)."""
        a = hashlib.sha256(given.encode("utf-8", "surrogateescape")).digest()
        b = hashlib.sha256(self.token.encode("ascii")).digest()
        return hmac.compare_digest(a, b)
