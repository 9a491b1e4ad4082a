"""Who may ask an agent for what: principals, their trust, and how a requester is resolved.

Identity is anchored on a platform uid (or the id the app authenticated), never on a display
name: a requester that only *says* it is the owner, by name, is an unverified sender.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from otel_safety.config import env_name, from_environment

PRINCIPALS_ENV = env_name("principals")
FILE_VERSION = 1
UID_TRUST = 2  # a principal anchored on a platform uid: read + limited write, unless set


class Role(StrEnum):
    OWNER = "owner"
    AGENT = "agent"
    NON_OWNER = "non_owner"


class Principal(BaseModel):
    """A person or agent the deployment knows, with the trust it grants them. Given a
    platform uid, it is verified with trust 2 unless `verified` or `trust` say otherwise;
    without one, `trust` must be given and `verified` is False."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    name: str | None = None
    role: Role = Role.NON_OWNER
    # strict: `"trust": true` or `"4"` in a file is a slip, not trust 1 or 4
    trust: int = Field(
        ge=0,
        le=4,
        strict=True,
        description="0 none, 1 read-only, 2 limited write, 3 all but destructive, 4 all",
    )
    verified: bool = Field(False, strict=True)
    uid: str | None = Field(default=None, description="platform id that anchors the identity")
    channel: str | None = None
    allowed_categories: list[str] | None = Field(
        default=None, description="narrows what the trust level allows; None = no narrowing"
    )

    @model_validator(mode="before")
    @classmethod
    def _uid_defaults(cls, data: Any) -> Any:
        """A uid the platform vouches for anchors the identity, so it stands for a verified
        sender; explicit values, even False or None, are kept as given."""
        if not isinstance(data, Mapping):
            return data
        if data.get("uid") in (None, ""):
            if "trust" not in data:
                raise ValueError("trust (0-4) is needed for a principal without a uid")
            return data
        return {"verified": True, "trust": UID_TRUST, **data}


class Requester(BaseModel):
    """Who asked, as the app or the telemetry states it."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    uid: str | None = None
    name: str | None = None
    channel: str | None = None

    @field_validator("id", "uid", "name", "channel", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return None if value in ("", None) else str(value)


class Identity(BaseModel):
    """A requester resolved against the directory."""

    model_config = ConfigDict(extra="forbid")

    label: str | None = Field(description="what the audit log shows as the requester")
    principal: Principal | None = None
    anonymous: bool = Field(False, description="no requester known: trust is not checked")
    spoofed: Principal | None = Field(None, description="principal whose name was claimed")
    trust: int = 4
    role: Role | None = None
    verified: bool = False


RequesterLike = str | Mapping[str, Any] | Requester | Principal | None


class PrincipalsError(ValueError):
    """The principals file cannot be used; the message names the file and the problem."""


def validation_problems(exc: ValidationError) -> str:
    """Pydantic's errors as one line a person can act on: each field and what is wrong."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors())


class Directory:
    """The deployment's principals. Empty means trust is not checked at all (only what the
    call does is judged), so a guard without a principals file never blocks a read."""

    def __init__(self, principals: Iterable[Principal] = (), unknown_trust: int = 1) -> None:
        self.principals: dict[str, Principal] = {}
        for principal in principals:
            self.add(principal)
        self.unknown_trust = unknown_trust

    def __len__(self) -> int:
        return len(self.principals)

    def add(self, principal: Principal, replace: bool = False) -> None:
        if principal.id in self.principals and not replace:
            raise PrincipalsError(f"principal {principal.id!r} already exists (use `set`)")
        holder = principal.uid and self._by_anchor(principal.uid)
        if holder and holder.id != principal.id:  # else whoever was listed first would win
            raise PrincipalsError(
                f"uid {principal.uid!r} of {principal.id!r} is already {holder.id!r}'s: "
                "a uid anchors one identity"
            )
        self.principals[principal.id] = principal

    def remove(self, principal_id: str) -> Principal:
        try:
            return self.principals.pop(principal_id)
        except KeyError:
            raise PrincipalsError(f"no principal {principal_id!r}") from None

    def resolve(self, requester: RequesterLike) -> Identity:
        """Map what the app or the trace says about the requester onto a principal."""
        if isinstance(requester, Principal):
            return _identity(requester)
        asked = _as_requester(requester)
        if asked is None or not self.principals:
            label = None if asked is None else (asked.uid or asked.id or asked.name)
            return Identity(label=label, anonymous=True)
        anchor = asked.uid or asked.id  # a stated uid is authoritative over an app id
        found = self._by_anchor(anchor) if anchor else None
        if found is not None:
            return _identity(found)
        claimed = asked.name or (asked.id if asked.uid is None else None)
        label = asked.uid or asked.id or asked.name
        spoofed = self._by_name(claimed) if claimed else None
        return Identity(
            label=label,
            spoofed=spoofed,
            trust=min(self.unknown_trust, spoofed.trust if spoofed else 4),
            role=Role.NON_OWNER,
            verified=False,
        )

    def _by_anchor(self, key: str) -> Principal | None:
        if key in self.principals:
            return self.principals[key]
        return next((p for p in self.principals.values() if p.uid and p.uid == key), None)

    def _by_name(self, name: str) -> Principal | None:
        wanted = _folded(name)
        return next(
            (p for p in self.principals.values() if p.name and _folded(p.name) == wanted), None
        )

    # --- the file -------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path, unknown_trust: int = 1) -> Directory:
        path = Path(path)
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise PrincipalsError(
                f"{path}: no such principals file (create one with `otel-safety principals "
                f"add --file {path} ...`)"
            ) from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PrincipalsError(f"{path}: cannot read the principals file: {exc}") from None
        if not isinstance(document, dict) or not isinstance(document.get("principals"), list):
            raise PrincipalsError(f'{path}: expected {{"version": 1, "principals": [...]}}')
        if document.get("version") != FILE_VERSION:
            raise PrincipalsError(f"{path}: version must be {FILE_VERSION}")
        directory = cls(unknown_trust=unknown_trust)
        for index, entry in enumerate(document["principals"]):
            try:
                directory.add(Principal.model_validate(entry))
            except ValidationError as exc:
                raise PrincipalsError(
                    f"{path}: principal #{index + 1}: {validation_problems(exc)}"
                ) from None
            except PrincipalsError as exc:
                raise PrincipalsError(f"{path}: principal #{index + 1}: {exc}") from None
        directory._check_categories(path)
        return directory

    def _check_categories(self, path: Path) -> None:
        """A misspelt category in `allowed_categories` would narrow a principal to nothing
        they ever ask for, silently."""
        narrowed = [p for p in self.principals.values() if p.allowed_categories]
        if not narrowed:
            return
        from otel_safety.guard.data import current_guard_data  # the categories in force

        known = set(current_guard_data().trust)
        for principal in narrowed:
            unknown = [c for c in principal.allowed_categories or () if c not in known]
            if unknown:
                raise PrincipalsError(
                    f"{path}: principal {principal.id!r}: unknown categories "
                    f"{', '.join(unknown)}; known: {', '.join(sorted(known))}"
                )

    @classmethod
    def from_env(cls) -> Directory:
        """The file the `principals` setting names (OTEL_SAFETY_PRINCIPALS), else none."""
        path = from_environment("principals")
        return cls.load(path) if path else cls()

    def save(self, path: str | Path) -> None:
        """Write atomically, so a crash mid-write never leaves half a file: into the file a
        symlink names (a mounted ConfigMap is one), keeping the file's permissions."""
        path = Path(os.path.realpath(path))
        document = {
            "version": FILE_VERSION,
            "principals": [
                p.model_dump(mode="json", exclude_none=True) for p in self.principals.values()
            ],
        }
        handle, temporary = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(document, out, indent=2)
            out.write("\n")
        try:
            os.chmod(temporary, stat.S_IMODE(path.stat().st_mode))
        except FileNotFoundError:  # a new file: as the umask leaves one (mkstemp's is 0600)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)


@contextlib.contextmanager
def editing(path: str | Path) -> Iterator[None]:
    """Hold the file for one read-change-write, so edits made at once all land (a lock file
    beside it: the file itself is replaced by each write)."""
    import fcntl  # POSIX; imported here so the guard itself loads anywhere

    real = Path(os.path.realpath(path))
    with open(real.with_name(f".{real.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _identity(principal: Principal) -> Identity:
    return Identity(
        label=principal.id,
        principal=principal,
        trust=principal.trust,
        role=principal.role,
        verified=principal.verified,
    )


def _as_requester(requester: RequesterLike) -> Requester | None:
    if requester is None or isinstance(requester, Requester):
        return requester
    if isinstance(requester, str):  # a blank one was given but names no one: unknown, so
        return Requester(id=requester) if requester.strip() else Requester()  # not trusted
    if isinstance(requester, Mapping):
        try:
            return Requester.model_validate(dict(requester))
        except ValidationError as exc:
            raise ValueError(f"requester: {exc.errors()[0]['msg']}: {dict(requester)!r}") from None
    raise TypeError(f"requester must be a str, a mapping or a Requester, not {type(requester)}")


def _folded(name: str) -> str:
    return " ".join(name.casefold().split())
