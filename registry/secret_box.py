"""Provider secrets at rest: Fernet (AES-128-CBC + HMAC-SHA256, the `cryptography`
package's authenticated recipe), one owner of the key and of the ciphertext format.

The key: PROVIDER_SECRETS_KEY (kernel.conf: a setting, then the environment) when set,
a comma-separated list of Fernet keys (`Fernet.generate_key()`), the first encrypting and
all decrypting (MultiFernet: rotate by putting a new key first); else one key derived from
Django's SECRET_KEY with HKDF-SHA256 (salt and info below), so a deployment that keeps its
SECRET_KEY keeps reading its secrets and one that changes it must set PROVIDER_SECRETS_KEY
to the old derivation first (docs/llm-endpoints.md, "Provider secrets")."""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

from registry import conf as registry_conf

HKDF_SALT = b"modelplane provider secrets"
HKDF_INFO = b"fernet key v1"


class SecretUnreadable(Exception):
    """A ciphertext no configured key opens (the key changed, or the row was edited)."""


def derived_key(secret_key: str) -> bytes:
    """The Fernet key derived from a Django SECRET_KEY."""
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=HKDF_SALT, info=HKDF_INFO).derive(secret_key.encode())
    return base64.urlsafe_b64encode(raw)


def _box() -> MultiFernet:
    configured = [k.strip() for k in str(registry_conf.get("PROVIDER_SECRETS_KEY")).split(",") if k.strip()]
    keys = configured or [derived_key(settings.SECRET_KEY)]
    return MultiFernet([Fernet(k) for k in keys])


def seal(value: str) -> str:
    return _box().encrypt(value.encode()).decode("ascii")


def open_sealed(ciphertext: str) -> str:
    try:
        return _box().decrypt(ciphertext.encode("ascii")).decode()
    except (InvalidToken, ValueError) as exc:
        raise SecretUnreadable("the secret cannot be decrypted with the configured key(s)") from exc
