"""The server's identity store: users, service tokens and login sessions in one SQLite file per environment.

    store = IdentityStore(identity_path(loaded.workspace))
    store.add_user("alice", "s3cret")            # argon2 hash (pwdlib), never the password
    token, info = store.create_token("alice")   # 'dsf_<id>_<secret>', shown once; only its argon2 hash is kept
    store.authenticate(token) -> "alice" | None
    store.login("alice", "s3cret") -> (session token, expires_at); 5 failures per user per minute -> LoginThrottled

The file sits beside the state (`<state_path>/identity-<env>.sqlite`, not in git). The ROLES of a user are not
here: they come from the project's `binding.<user>` records as deployed (dsflow/core/access.py).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import overload

from dsflow.errors import DsflowError

TOKEN_PREFIX = "dsf"
MAX_FAILURES = 5
"""Failed logins per user name within FAILURE_WINDOW seconds before login answers 429."""
FAILURE_WINDOW = 60.0
SESSION_SECONDS = 12 * 3600
"""How long a login session token lives."""
USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")

SCHEMA = """
CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, password_hash TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (id TEXT PRIMARY KEY, user TEXT NOT NULL, name TEXT NOT NULL DEFAULT '',
  kind TEXT NOT NULL, hash TEXT NOT NULL, created REAL NOT NULL, expires REAL, last_used REAL,
  revoked INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS login_failures (user TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS login_failures_user ON login_failures (user, at);
"""


@dataclass(frozen=True)
class TokenInfo:
    """A token as listed: never its secret."""

    id: str
    user: str
    name: str
    kind: str
    created: str
    expires: str | None
    last_used: str | None
    revoked: bool


class LoginThrottled(Exception):
    """Too many failed logins for one user name: try again after `retry_after` seconds."""

    def __init__(self, retry_after: int):
        super().__init__(f"retry after {retry_after} s")
        self.retry_after = retry_after


def identity_path(workspace) -> Path:
    """`<state_path>/identity-<env>.sqlite` of a dsflow.engine.workspace.Workspace."""
    return Path(workspace.state_dir) / f"identity-{workspace.environment}.sqlite"


def _hasher():
    from pwdlib import PasswordHash

    return PasswordHash.recommended()


@overload
def _iso(epoch: float) -> str: ...


@overload
def _iso(epoch: None) -> None: ...


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")


def parse_token(token: str) -> tuple[str, str] | None:
    """(id, secret) of a 'dsf_<id>_<secret>' token, None if it has another shape."""
    prefix, _, rest = token.partition("_")
    token_id, _, secret = rest.partition("_")
    if prefix != TOKEN_PREFIX or not re.fullmatch(r"[0-9a-f]{12}", token_id) or len(secret) < 20:
        return None
    return token_id, secret


class IdentityStore:
    """Users, tokens and failed logins in one SQLite file; each call opens its own connection (thread-safe)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._hash = _hasher()
        self._verified: dict[str, str] = {}  # token id -> sha256 of a token already verified (saves argon2 work)
        self._lock = threading.Lock()
        with self._db() as db:
            db.executescript(SCHEMA)
        self.path.chmod(0o600)

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30)
        try:
            with db:
                yield db
        finally:
            db.close()

    def add_user(self, name: str, password: str) -> None:
        if not USER_NAME.match(name or ""):
            raise DsflowError("DSF-E320", f"'{name}' is not a valid user name",
                              hint="use 1 to 64 letters, digits, '_', '.', '@' or '-', starting with a letter or digit")
        if not password:
            raise DsflowError("DSF-E324", f"no password given for user '{name}'",
                              hint="pipe it on stdin or name an environment variable with --password-env VAR")
        try:
            with self._db() as db:
                db.execute("INSERT INTO users VALUES (?, ?, ?)", (name, self._hash.hash(password), time.time()))
        except sqlite3.IntegrityError:
            raise DsflowError("DSF-E321", f"user '{name}' already exists",
                              hint="remove it first with 'dsflow users remove NAME'") from None

    def users(self) -> list[dict[str, str | None]]:
        with self._db() as db:
            rows = db.execute("SELECT name, created FROM users ORDER BY name").fetchall()
        return [{"name": name, "created": _iso(created)} for name, created in rows]

    def remove_user(self, name: str) -> None:
        """The user and every token it holds."""
        with self._db() as db:
            if db.execute("DELETE FROM users WHERE name = ?", (name,)).rowcount == 0:
                raise DsflowError("DSF-E322", f"no user '{name}'", hint="see 'dsflow users list'")
            db.execute("DELETE FROM tokens WHERE user = ?", (name,))
        with self._lock:
            self._verified.clear()

    def _require_user(self, name: str) -> None:
        with self._db() as db:
            if db.execute("SELECT 1 FROM users WHERE name = ?", (name,)).fetchone() is None:
                raise DsflowError("DSF-E322", f"no user '{name}'", hint="add it with 'dsflow users add NAME'")

    def create_token(self, user: str, name: str = "", kind: str = "service",
                     lifetime: float | None = None) -> tuple[str, TokenInfo]:
        """A new token for `user`: the token text (to show once) and what is listed of it."""
        self._require_user(user)
        token_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        token = f"{TOKEN_PREFIX}_{token_id}_{secret}"
        now = time.time()
        expires = now + lifetime if lifetime else None
        with self._db() as db:
            db.execute("INSERT INTO tokens (id, user, name, kind, hash, created, expires) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (token_id, user, name, kind, self._hash.hash(secret), now, expires))
        return token, TokenInfo(token_id, user, name, kind, _iso(now), _iso(expires), None, False)

    def tokens(self, user: str | None = None, kind: str | None = "service") -> list[TokenInfo]:
        query = "SELECT id, user, name, kind, created, expires, last_used, revoked FROM tokens WHERE 1 = 1"
        args: list[str] = []
        if user:
            query, args = query + " AND user = ?", [*args, user]
        if kind:
            query, args = query + " AND kind = ?", [*args, kind]
        with self._db() as db:
            rows = db.execute(query + " ORDER BY created", args).fetchall()
        return [TokenInfo(i, u, n, k, _iso(c), _iso(e), _iso(last), bool(r)) for i, u, n, k, c, e, last, r in rows]

    def revoke(self, token_id: str) -> None:
        with self._db() as db:
            if db.execute("UPDATE tokens SET revoked = 1 WHERE id = ?", (token_id,)).rowcount == 0:
                raise DsflowError("DSF-E323", f"no token '{token_id}'", hint="see 'dsflow tokens list'")
        with self._lock:
            self._verified.pop(token_id, None)

    def authenticate(self, token: str) -> str | None:
        """The user a valid, unrevoked, unexpired token belongs to; None otherwise."""
        parsed = parse_token(token or "")
        if parsed is None:
            return None
        token_id, secret = parsed
        with self._db() as db:
            row = db.execute("SELECT user, hash, expires, revoked, last_used FROM tokens WHERE id = ?",
                             (token_id,)).fetchone()
        if row is None or row[3] or (row[2] is not None and row[2] < time.time()):
            return None
        user, stored, _, _, last_used = row
        digest = hashlib.sha256(secret.encode()).hexdigest()
        with self._lock:
            known = self._verified.get(token_id) == digest
        if not known:
            if not self._hash.verify(secret, stored):
                return None
            with self._lock:
                self._verified[token_id] = digest
        if last_used is None or time.time() - last_used > 60:
            with self._db() as db:
                db.execute("UPDATE tokens SET last_used = ? WHERE id = ?", (time.time(), token_id))
        return user

    def login(self, user: str, password: str) -> tuple[str, str]:
        """A session token and when it expires; LoginThrottled after MAX_FAILURES failures in FAILURE_WINDOW,
        DSF-E326 for a wrong user name or password (the same answer for both)."""
        now = time.time()
        with self._db() as db:
            db.execute("DELETE FROM login_failures WHERE at < ?", (now - FAILURE_WINDOW,))
            db.execute("DELETE FROM tokens WHERE kind = 'session' AND expires < ?", (now,))
            failures = [at for (at,) in db.execute("SELECT at FROM login_failures WHERE user = ? ORDER BY at",
                                                   (user,))]
            row = db.execute("SELECT password_hash FROM users WHERE name = ?", (user,)).fetchone()
        if len(failures) >= MAX_FAILURES:
            raise LoginThrottled(max(1, int(failures[0] + FAILURE_WINDOW - now) + 1))
        ok = self._hash.verify(password, row[0]) if row else self._hash.verify(password, self._dummy())
        if not (ok and row):
            with self._db() as db:
                db.execute("INSERT INTO login_failures VALUES (?, ?)", (user, now))
            raise DsflowError("DSF-E326", "wrong user name or password",
                              hint=f"after {MAX_FAILURES} failures in {int(FAILURE_WINDOW)} s, login is refused "
                                   "for a while (429)")
        token, info = self.create_token(user, "login", kind="session", lifetime=SESSION_SECONDS)
        return token, info.expires or ""

    def _dummy(self) -> str:
        """A hash to verify against for an unknown user, so its answer takes as long as a known user's."""
        if not hasattr(self, "_dummy_hash"):
            self._dummy_hash = self._hash.hash(secrets.token_hex(8))
        return self._dummy_hash
