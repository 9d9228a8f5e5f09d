"""Kafka's ``PasswordEncoder``: how a dynamic broker config of type password is stored in ZooKeeper.

The value is encrypted with a key derived from ``password.encoder.secret`` (PBKDF2 with a fresh
256-byte salt) and written as Kafka's CSV map, so Kafka's brokers and pyklog's read each other's::

    keyFactoryAlgorithm:PBKDF2WithHmacSHA512,cipherAlgorithm:AES/CBC/PKCS5Padding,keyLength:128,
    salt:<base64>,iterations:4096,encryptedPassword:<base64>,passwordLength:<n>,initializationVector:<base64>

(one line; ``AES/GCM/NoPadding`` adds ``authenticationTagLength:128``).  Without a secret Kafka
refuses to store a password dynamically ("Password encoder secret not configured"); so does
:func:`encoder_from_props`'s caller.  Errors never contain the secret or the password.

Thread-safe (no state besides the immutable settings).
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Mapping

from pyklog.broker.errors import ConfigError

_KEY_FACTORIES = {"PBKDF2WithHmacSHA512": "sha512", "PBKDF2WithHmacSHA1": "sha1", "PBKDF2WithHmacSHA256": "sha256"}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class PasswordEncoder:
    """Encrypts and decrypts password configs as Kafka's ``EncryptingPasswordEncoder``.  ``repr``
    never shows the secret."""

    def __init__(
        self,
        secret: str,
        key_factory_algorithm: str | None = None,
        cipher_algorithm: str = "AES/CBC/PKCS5Padding",
        key_length: int = 128,
        iterations: int = 4096,
    ):
        if cipher_algorithm not in ("AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"):
            raise ConfigError(
                f"password.encoder.cipher.algorithm: pyklog supports AES/CBC/PKCS5Padding and "
                f"AES/GCM/NoPadding, read {cipher_algorithm!r}"
            )
        if key_length not in (128, 192, 256):
            raise ConfigError(f"password.encoder.key.length: expected 128, 192 or 256, read {key_length}")
        kf = key_factory_algorithm or "PBKDF2WithHmacSHA512"
        if kf not in _KEY_FACTORIES:
            raise ConfigError(
                f"password.encoder.keyfactory.algorithm: expected one of {', '.join(_KEY_FACTORIES)}, read {kf!r}"
            )
        self._secret = secret
        self.key_factory_algorithm = kf
        self.cipher_algorithm = cipher_algorithm
        self.key_length = key_length
        self.iterations = iterations

    def __repr__(self) -> str:
        return f"PasswordEncoder(cipher={self.cipher_algorithm}, key_length={self.key_length}, secret=[hidden])"

    def _key(self, kf: str, salt: bytes, iterations: int, key_length: int) -> bytes:
        return hashlib.pbkdf2_hmac(_KEY_FACTORIES[kf], self._secret.encode("utf-8"), salt, iterations, key_length // 8)

    def encode(self, password: str) -> str:
        from cryptography.hazmat.primitives import padding
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        salt = os.urandom(256)
        key = self._key(self.key_factory_algorithm, salt, self.iterations, self.key_length)
        data = password.encode("utf-8")
        fields = {
            "keyFactoryAlgorithm": self.key_factory_algorithm,
            "cipherAlgorithm": self.cipher_algorithm,
            "keyLength": str(self.key_length),
            "salt": _b64(salt),
            "iterations": str(self.iterations),
        }
        if self.cipher_algorithm == "AES/GCM/NoPadding":
            iv = os.urandom(12)
            encrypted = AESGCM(key).encrypt(iv, data, None)
            extra = {"authenticationTagLength": "128", "initializationVector": _b64(iv)}
        else:
            iv = os.urandom(16)
            padder = padding.PKCS7(128).padder()
            enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
            encrypted = enc.update(padder.update(data) + padder.finalize()) + enc.finalize()
            extra = {"initializationVector": _b64(iv)}
        fields.update(encryptedPassword=_b64(encrypted), passwordLength=str(len(password)), **extra)
        return ",".join(f"{k}:{v}" for k, v in fields.items())

    def decode(self, encoded: str) -> str:
        """The password of an encoded value; ConfigError ("Password could not be decoded") if the
        value is malformed or was encoded with another secret."""
        from cryptography.hazmat.primitives import padding
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        try:
            params = dict(p.split(":", 1) for p in encoded.split(",") if p)
            salt = base64.b64decode(params["salt"])
            key = self._key(params["keyFactoryAlgorithm"], salt, int(params["iterations"]), int(params["keyLength"]))
            iv = base64.b64decode(params["initializationVector"])
            encrypted = base64.b64decode(params["encryptedPassword"])
            if params["cipherAlgorithm"] == "AES/GCM/NoPadding":
                data = AESGCM(key).decrypt(iv, encrypted, None)
            else:
                dec = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
                unpadder = padding.PKCS7(128).unpadder()
                data = unpadder.update(dec.update(encrypted) + dec.finalize()) + unpadder.finalize()
            password = data.decode("utf-8")
        except Exception:  # noqa: BLE001 - any failure is the same answer, without details that could leak
            raise ConfigError("Password could not be decoded") from None
        if len(password) != int(params["passwordLength"]):
            raise ConfigError("Password could not be decoded, sanity check of length failed")
        return password


def encoder_from_props(props: Mapping[str, str], old: bool = False) -> PasswordEncoder | None:
    """The encoder of a broker's ``password.encoder.*`` settings (``old``: with
    ``password.encoder.old.secret``), or None if that secret is not set."""
    secret = props.get("password.encoder.old.secret" if old else "password.encoder.secret")
    if not secret:
        return None
    try:
        key_length = int(props.get("password.encoder.key.length", "128"))
        iterations = int(props.get("password.encoder.iterations", "4096"))
    except ValueError:
        raise ConfigError("password.encoder.key.length and password.encoder.iterations must be integers") from None
    return PasswordEncoder(
        secret,
        props.get("password.encoder.keyfactory.algorithm") or None,
        props.get("password.encoder.cipher.algorithm", "AES/CBC/PKCS5Padding"),
        key_length,
        iterations,
    )


__all__ = ["PasswordEncoder", "encoder_from_props"]
